"""``--now-ms`` is a Java long of ms since the epoch: every command that takes it refuses a negative
value or one beyond 2^63 - 1 with exit 2 and one line, before anything is read or written."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.cli.test_help import COMMANDS
from tests.conftest import PROJECT_FIXTURES

TAKING_NOW_MS = [path for path, command in COMMANDS if any(p.name == "now_ms" for p in command.params)]


def digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_the_commands_taking_now_ms_are_known() -> None:
    assert {" ".join(path) for path in TAKING_NOW_MS} >= {
        "clean", "inspect dirty-ratio", "inspect keys", "inspect last-clean", "repair", "spark clean",
        "spark inspect dirty-ratio"}


@pytest.mark.parametrize("value", ["-1", str(2**63), str(2**64 + 5)])
@pytest.mark.parametrize("path", TAKING_NOW_MS, ids=[" ".join(p) for p in TAKING_NOW_MS])
def test_an_out_of_range_now_ms_is_refused(path: tuple[str, ...], value: str, tmp_path: Path) -> None:
    log_dir = Path(shutil.copytree(PROJECT_FIXTURES / "sample-logdir", tmp_path / "logdir"))
    before = digest(log_dir)
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80"})
    result = runner.invoke(cli, [*path, str(log_dir / "orders-0"), f"--now-ms={value}",
                                 "--config", "cleanup.policy=compact"])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines()[-1] == (
        f"Error: Invalid value for '--now-ms': a time in ms since the epoch; expected "
        f"0..9223372036854775807, found {value}")
    assert digest(log_dir) == before


def test_the_largest_java_long_is_a_valid_clock() -> None:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80"})
    result = runner.invoke(cli, ["inspect", "dirty-ratio", str(PROJECT_FIXTURES / "sample-logdir"),
                                 f"--now-ms={2**63 - 1}", "--json", "--config", "cleanup.policy=compact"])
    assert result.exit_code == 0, result.output
