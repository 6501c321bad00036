"""``kcompact clean --config log.cleaner.dedupe.buffer.size=N`` bounds the round as
``--dedupe-buffer-size N`` does (it was accepted and ignored)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.log.offset_map.test_dedupe_buffer_config import KEYS, NOW, build


def end_offset(tmp_path: Path, name: str, *args: str) -> int:
    part = build(tmp_path / name / "logdir")
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    result = runner.invoke(cli, ["clean", str(part), "--now-ms", str(NOW), "--json",
                                 "--config", "cleanup.policy=compact", *args])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["results"]
    return int(row["end_offset"])


def test_config_dedupe_buffer_size_bounds_the_round(tmp_path: Path) -> None:
    unbounded = end_offset(tmp_path, "unbounded")
    by_option = end_offset(tmp_path, "option", "--dedupe-buffer-size", "240")
    by_config = end_offset(tmp_path, "config", "--config", "log.cleaner.dedupe.buffer.size=240")
    both = end_offset(tmp_path, "both", "--config", "log.cleaner.dedupe.buffer.size=240",
                      "--dedupe-buffer-size", str(2**20))
    assert unbounded == both == 2 * KEYS
    assert by_config == by_option < unbounded


def test_help_says_which_wins() -> None:
    result = CliRunner(env={"COLUMNS": "100"}).invoke(cli, ["clean", "--help"])
    text = " ".join(result.stdout.split())
    assert "--config log.cleaner.dedupe.buffer.size=BYTES does the same (this option wins)" in text
