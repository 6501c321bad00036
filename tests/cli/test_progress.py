"""Progress of the long reads: the library reports through a callback (sensible totals, never backwards,
ending at the total); the CLI draws it on stderr only when stderr is a terminal, never with ``--json``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from kcompact.cli import render
from kcompact.cli.main import cli
from kcompact.inspect.dirty_ratio import dirty_ratio_report
from kcompact.inspect.keys import keys_report
from kcompact.inspect.last_clean import last_clean_report
from kcompact.repair.repair import RepairOptions, repair_partition
from kcompact.segment.partition import open_partition
from kcompact.segment.progress import REPORT_EVERY_BYTES
from tests.builders import BASE_TS, PartitionBuilder

NOW = BASE_TS + 10_000
COMPACT = {"cleanup.policy": "compact"}
Calls = list[tuple[str, int, int]]


@pytest.fixture(scope="module")
def big_log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """orders-0 of about 3 MiB in 3 segments (several progress steps), and a small other-0."""
    log_dir = tmp_path_factory.mktemp("progress") / "logdir"
    b = PartitionBuilder("orders", 0)
    for i in range(3000):
        if i and i % 1000 == 0:
            b.roll()
        b.batch([(f"k{i % 50}".encode(), bytes(1000))])
    b.roll().batch([(b"last", b"v")])
    b.write(log_dir)
    PartitionBuilder("other", 0).batch([(b"k", b"v")]).roll().batch([(b"k", b"v")]).write(log_dir)
    return log_dir


def stages(calls: Calls) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for what, done, total in calls:
        out.setdefault(what, []).append((done, total))
    return out


def assert_sensible(reports: list[tuple[int, int]], total: int) -> None:
    """Every report has the same total; done never goes back, and the last one is the total."""
    assert {t for _d, t in reports} == {total}
    dones = [d for d, _t in reports]
    assert dones == sorted(dones) and dones[-1] == total
    assert len(dones) >= total // REPORT_EVERY_BYTES  # along the way, not only at the end


def test_keys_reports_each_of_its_reads(big_log_dir: Path) -> None:
    part = big_log_dir / "orders-0"
    size = open_partition(part).size_in_bytes
    assert size > 3 * REPORT_EVERY_BYTES
    calls: Calls = []
    keys_report(part, cli_overrides=COMPACT, now_ms=NOW, progress=lambda *c: calls.append(c))
    by_stage = stages(calls)
    assert list(by_stage) == ["orders-0 (dry-run clean)", "orders-0 (key map)", "orders-0 (key census)"]
    assert_sensible(by_stage.pop("orders-0 (dry-run clean)"), 2 * size)  # two passes at most, as clean counts
    for reports in by_stage.values():
        assert_sensible(reports, size)


def test_last_clean_reports_its_walk(big_log_dir: Path) -> None:
    part = big_log_dir / "orders-0"
    calls: Calls = []
    last_clean_report(part, cli_overrides=COMPACT, now_ms=NOW, progress=lambda *c: calls.append(c))
    by_stage = stages(calls)
    assert list(by_stage) == ["orders-0 (batches)"]
    assert_sensible(by_stage["orders-0 (batches)"], open_partition(part).size_in_bytes)


def test_repair_dry_run_reports_its_check(big_log_dir: Path) -> None:
    part = big_log_dir / "orders-0"
    calls: Calls = []
    repair_partition(part, RepairOptions(dry_run=True), lambda *c: calls.append(c))
    by_stage = stages(calls)
    assert list(by_stage) == ["orders-0 (checking)"]
    assert_sensible(by_stage["orders-0 (checking)"], open_partition(part).size_in_bytes)


def test_a_real_repair_reports_the_check_and_the_check_again(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    b = PartitionBuilder("orders", 0)
    for i in range(1200):
        b.batch([(f"k{i}".encode(), bytes(1000))])
    part = b.roll().batch([(b"k", b"v")]).write(log_dir)
    next(part.glob("*.index")).write_bytes(b"\xff" * 8)  # an entry past the segment: repair rebuilds it
    calls: Calls = []
    result = repair_partition(part, RepairOptions(backup_dir=tmp_path / "backup"), lambda *c: calls.append(c))
    assert result.actions
    by_stage = stages(calls)
    assert list(by_stage) == ["orders-0 (checking)", "orders-0 (checking again)"]
    for reports in by_stage.values():
        assert_sensible(reports, open_partition(part).size_in_bytes)


def test_dirty_ratio_counts_the_partitions_it_has_read(big_log_dir: Path) -> None:
    calls: Calls = []
    dirty_ratio_report([big_log_dir], cli_overrides=COMPACT, now_ms=NOW, progress=lambda *c: calls.append(c))
    assert calls == [("partitions", 1, 2), ("partitions", 2, 2)]


# --- the CLI ------------------------------------------------------------------------------------------


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Console:
    """stderr as a terminal (what the user watching a long read has)."""
    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    monkeypatch.setattr(render, "err_console", lambda: console)
    monkeypatch.setattr(render, "may_be_terminal", lambda stream: True)
    return console


COMMANDS = {
    "inspect keys": (["inspect", "keys"], "orders-0", "reading orders-0 (key census)"),
    "inspect last-clean": (["inspect", "last-clean"], "orders-0", "reading orders-0 (batches)"),
    "repair --dry-run": (["repair", "--dry-run"], "orders-0", "reading orders-0 (checking)"),
    "inspect dirty-ratio": (["inspect", "dirty-ratio"], "", "reading partitions"),
}


@pytest.mark.parametrize("command", COMMANDS)
def test_the_cli_draws_progress_on_a_terminal_and_never_with_json(
    big_log_dir: Path, terminal: Console, command: str
) -> None:
    argv, target, shown = COMMANDS[command]
    path = str(big_log_dir / target) if target else str(big_log_dir)
    extra = [] if argv[0] == "repair" else ["--now-ms", str(NOW), "--config", "cleanup.policy=compact"]
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    result = runner.invoke(cli, [*argv, path, *extra])
    assert result.exit_code == 0, result.output
    drawn = terminal.file.getvalue()  # type: ignore[attr-defined]
    assert shown in drawn
    assert shown not in result.stdout and shown not in result.stderr  # the bar is not part of the report

    terminal.file = io.StringIO()
    as_json = runner.invoke(cli, [*argv, path, *extra, "--json"])
    assert as_json.exit_code == 0, as_json.output
    json.loads(as_json.stdout)
    assert terminal.file.getvalue() == ""


def test_no_progress_when_stderr_is_not_a_terminal(big_log_dir: Path) -> None:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    result = runner.invoke(cli, ["inspect", "keys", str(big_log_dir / "orders-0"), "--now-ms", str(NOW),
                                 "--config", "cleanup.policy=compact"])
    assert result.exit_code == 0, result.output
    assert "reading" not in result.stderr
