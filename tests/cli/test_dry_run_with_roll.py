"""A dry run of a stopped broker's log dir, whose data waits in active segments that no clean touches, says what
a clean gives back now and what ``clean --roll`` would give back; the clean with ``--roll`` then frees exactly
that."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from tests.conftest import copy_tree_writable, real_fixture

NOW = 1_769_800_000_000


def run(*args: str | Path | int) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "200", "KCOMPACT_SERVER_PROPERTIES": None})
    return runner.invoke(cli, [str(arg) for arg in args], prog_name="kcompact")


def log_bytes(log_dir: Path) -> int:
    return sum(p.stat().st_size for p in log_dir.glob("*/*.log"))


def test_a_dry_run_says_what_a_clean_gives_back_now_and_with_roll(tmp_path: Path) -> None:
    """kraft37 (a real broker's log dir): __consumer_offsets-31 and -44 hold their dirty records in the active
    segment."""
    log_dir = copy_tree_writable(real_fixture("kraft37-cleaned-logdir"), tmp_path / "logdir")
    dry = run("clean", log_dir, "--dry-run", "--now-ms", NOW)
    assert dry.exit_code == 0, dry.output
    assert ("a clean now would give back 0 B of .log files; with --roll 996 B (2 partitions with records in the "
            "active segment, which only a roll makes cleanable)") in dry.stdout.splitlines()
    as_json = json.loads(run("clean", log_dir, "--dry-run", "--now-ms", NOW, "--json").stdout)
    assert as_json["gives_back_with_roll"] == 996
    rehearsed = run("clean", log_dir, "--dry-run", "--roll", "--now-ms", NOW)
    assert "with --roll" not in rehearsed.stdout  # already rolled: nothing more to say
    before = log_bytes(log_dir)
    assert run("clean", log_dir, "--roll", "--now-ms", NOW).exit_code == 0
    assert before - log_bytes(log_dir) == 996


def test_a_partition_named_alone_says_it_too(tmp_path: Path) -> None:
    log_dir = copy_tree_writable(real_fixture("kraft37-cleaned-logdir"), tmp_path / "logdir")
    dry = run("clean", log_dir / "__consumer_offsets-31", "--dry-run", "--now-ms", NOW)
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines()[-1] == (
        "a clean now would give back 0 B of .log files; with --roll 732 B (1 partition with records in the active "
        "segment, which only a roll makes cleanable)")
