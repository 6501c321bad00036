"""A partition directory's name is whatever a file name may be: the terminal shows a bidi override or an
escape sequence in it escaped (``kcompact.text.visible``), in error lines and in tables alike, so a name
cannot make a message read as something else."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.builders import PartitionBuilder

HOSTILE = [
    pytest.param("payments\u202e0-stekcit", "payments\\u202e0-stekcit", id="right-to-left-override"),
    pytest.param("a\u2066b\u2069c", "a\\u2066b\\u2069c", id="isolates"),
    pytest.param("logs\x1b[2J", "logs\\x1b[2J", id="escape-sequence"),
]


def hostile_log_dir(tmp_path: Path, topic: str) -> Path:
    log_dir = tmp_path / "logs"
    PartitionBuilder(topic, 0).batch([(b"k", b"v1")]).roll().batch([(b"k", b"v2")]).write(log_dir)
    return log_dir


@pytest.mark.parametrize("topic, shown", HOSTILE)
def test_an_error_line_shows_the_name_escaped(tmp_path: Path, topic: str, shown: str) -> None:
    part = hostile_log_dir(tmp_path, topic) / f"{topic}-0"
    done = CliRunner().invoke(cli, ["clean", str(part)], catch_exceptions=False)
    assert done.exit_code == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"kcompact: error: {tmp_path / 'logs'}/{shown}-0: cleanup.policy is not known")
    assert topic not in done.stderr and line.isprintable()


@pytest.mark.parametrize("topic, shown", HOSTILE)
def test_a_table_shows_the_name_escaped(tmp_path: Path, topic: str, shown: str) -> None:
    log_dir = hostile_log_dir(tmp_path, topic)
    done = CliRunner(env={"COLUMNS": "200"}).invoke(
        cli, ["inspect", "dirty-ratio", str(log_dir), "--config", "cleanup.policy=compact"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert shown in done.stdout and topic not in done.stdout
    assert all(line.isprintable() for line in done.stdout.splitlines())
