"""A cause that belongs to the log dir is said once; warnings that repeat on every partition are counted;
empty partitions are counted, not listed; ``clean .`` inside a partition directory; the dirty-ratio table
at 80 columns breaks a partition name only between its words."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from tests.builders import BASE_TS, PartitionBuilder
from tests.cli.test_dump_cli import broker_running
from tests.unprivileged import run_kcompact

NOW = BASE_TS + 1_000
COMPACT = ("--config", "cleanup.policy=compact")
PARTITIONS = 5
EMPTY = 3
HW_SUMMARY = (f"kcompact: warning: no replication-offset-checkpoint entry for {PARTITIONS + EMPTY} partitions: "
              "high watermark taken as the log end (a broker would clean nothing in them until they are replicated)")


def run(*args: str | Path | int, env: dict[str, str] | None = None) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None,
                                                   **(env or {})})
    return runner.invoke(cli, [str(arg) for arg in args], prog_name="kcompact")


def make_log_dir(where: Path, *, high_watermarks: bool = True) -> Path:
    """PARTITIONS partitions with duplicates to clean, and EMPTY partitions holding no record."""
    log_dir = where / "logdir"
    for number in range(PARTITIONS):
        b = PartitionBuilder("orders", number)
        for i in range(4):
            b.batch([(f"k{i % 2}".encode(), b"v")])
        b.roll().batch([(b"k", b"v")])
        b.write(log_dir, high_watermark="log-end" if high_watermarks else None)
    for number in range(EMPTY):
        PartitionBuilder("idle", number).write(log_dir, high_watermark=0 if high_watermarks else None)
    return log_dir


def files_of(log_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(log_dir)): p.read_bytes() for p in sorted(log_dir.rglob("*")) if p.is_file()}


# --- a cause of the log dir: one line, one JSON error object ---------------------------------------------


@pytest.mark.parametrize("command", [["clean"], ["clean", "--dry-run"], ["inspect", "dirty-ratio"]])
def test_a_damaged_cleaner_checkpoint_is_one_error_pointing_to_repair(tmp_path: Path, command: list[str]) -> None:
    log_dir = make_log_dir(tmp_path)
    checkpoint = log_dir / "cleaner-offset-checkpoint"
    checkpoint.write_bytes(b"0\nnot a count\n")
    before = files_of(log_dir)
    result = run(*command, log_dir, "--now-ms", NOW, *COMPACT)
    assert result.exit_code == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()[-1:]
    assert [e for e in result.stderr.splitlines() if e.startswith("kcompact: error:")] == [line]
    assert line.startswith(f"kcompact: error: {checkpoint} at position 2: ")
    assert "`kcompact repair` on one of its partition directories rewrites it" in line
    assert files_of(log_dir) == before

    as_json = run(*command, log_dir, "--now-ms", NOW, *COMPACT, "--json")
    assert as_json.exit_code == 2
    error = json.loads(as_json.stdout)["error"]  # one object, not a row per partition
    assert (error["kind"], error["path"], error["position"]) == ("CorruptCheckpointError", str(checkpoint), 2)


@pytest.mark.parametrize("name", ["replication-offset-checkpoint", "log-start-offset-checkpoint"])
def test_a_damaged_high_watermark_or_log_start_checkpoint_is_one_error(tmp_path: Path, name: str) -> None:
    log_dir = make_log_dir(tmp_path)
    (log_dir / name).write_bytes(b"garbage\n")
    result = run("clean", log_dir, "--now-ms", NOW, *COMPACT)
    assert result.exit_code == 2
    errors = [e for e in result.stderr.splitlines() if e.startswith("kcompact: error:")]
    assert len(errors) == 1 and f"{log_dir / name} at position 0: " in errors[0], result.stderr




def test_a_broker_holding_the_log_dir_is_one_refusal(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path)
    with broker_running(log_dir):
        before = files_of(log_dir)
        result = run("clean", log_dir, "--now-ms", NOW, *COMPACT)
        as_json = run("clean", log_dir, "--now-ms", NOW, *COMPACT, "--json")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        f"kcompact: error: {log_dir / '.lock'} is held by a running Kafka broker; stop it or work on a copy")
    assert sum(line.startswith("kcompact: error:") for line in result.stderr.splitlines()) == 1
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["error"]["kind"] == "RefusedError"
    assert files_of(log_dir) == before


def test_a_read_only_log_dir_is_one_refusal(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path)
    (log_dir / ".lock").touch()  # as a stopped broker leaves it: only the lock files kcompact adds fail
    before = files_of(log_dir)
    log_dir.chmod(0o555)
    try:
        done = run_kcompact("clean", str(log_dir), "--now-ms", str(NOW), *COMPACT, "--json")
    finally:
        log_dir.chmod(0o755)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"kcompact: error: {log_dir}: cannot write (Permission denied)\n"
    assert json.loads(done.stdout)["error"]["path"] == str(log_dir)
    assert files_of(log_dir) == before


# --- warnings said once, empty partitions counted ---------------------------------------------------------


def test_a_missing_high_watermark_is_counted_once_and_empty_partitions_are_counted(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, high_watermarks=False)
    result = run("clean", log_dir, "--dry-run", "--now-ms", NOW, *COMPACT)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "high watermark" in line]
    assert warnings == [HW_SUMMARY]
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith("idle-")]
    assert f"{EMPTY} empty partitions (no records): nothing to clean" in lines
    assert lines[-1].startswith(f"would clean {PARTITIONS} partitions, {EMPTY} have nothing to clean, ")

    report = json.loads(run("clean", log_dir, "--dry-run", "--now-ms", NOW, *COMPACT, "--json").stdout)
    assert len(report["results"]) == PARTITIONS + EMPTY  # every row kept, with its own warning
    assert all(any(w.startswith("no high watermark") for w in row["warnings"]) for row in report["results"])
    notes = [n for n in report["notes"] if "replication-offset-checkpoint entry" in n]
    assert notes == [warnings[0].removeprefix("kcompact: warning: ")]


def test_dirty_ratio_counts_the_missing_high_watermarks_and_the_empty_partitions(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, high_watermarks=False)
    result = run("inspect", "dirty-ratio", log_dir, "--now-ms", NOW, *COMPACT)
    assert result.exit_code == 0, result.output
    assert [line for line in result.stderr.splitlines() if "high watermark" in line] == [HW_SUMMARY]
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith("idle-")]  # no detail line per empty partition
    assert f"{EMPTY} empty partitions (no records): nothing to clean" in lines


def test_one_partition_keeps_its_own_high_watermark_warning(tmp_path: Path) -> None:
    part = make_log_dir(tmp_path, high_watermarks=False) / "orders-0"
    result = run("clean", part, "--dry-run", "--now-ms", NOW, *COMPACT)
    assert result.exit_code == 0, result.output
    assert "kcompact: warning: orders-0: no high watermark in replication-offset-checkpoint: using the log " \
           "end offset 5" in result.stderr


# --- `clean .`, and the dirty-ratio table at 80 columns ---------------------------------------------------


@pytest.mark.parametrize("command", [["clean", "--dry-run"], ["inspect", "dirty-ratio"], ["inspect", "keys"],
                                     ["inspect", "last-clean"], ["repair", "--dry-run"]])
def test_a_command_given_dot_inside_a_partition_dir_works_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    part = make_log_dir(tmp_path) / "orders-1"
    monkeypatch.chdir(part)
    extra = [] if command[0] == "repair" else ["--now-ms", str(NOW), *COMPACT]
    dot = run(*command, ".", *extra, "--json")
    named = run(*command, str(part), *extra, "--json")
    assert dot.exit_code == named.exit_code == 0, dot.output
    assert without_timings(dot.stdout, part) == without_timings(named.stdout, part)


def without_timings(stdout: str, part: Path) -> str:
    return re.sub(r'"elapsed_s": [0-9.e-]+', "", stdout.replace(str(part), "orders-1"))


def test_clean_dot_cleans_the_partition_and_its_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log_dir = make_log_dir(tmp_path)
    monkeypatch.chdir(log_dir / "orders-1")
    result = run("clean", ".", "--now-ms", NOW, *COMPACT)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("orders-1: cleaned dirty section [0, 4)")
    from kcompact.segment.checkpoint import read_offset_checkpoint

    assert read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint") == {("orders", 1): 4}
    assert not (log_dir / "orders-1" / "cleaner-offset-checkpoint").exists()


def test_dirty_ratio_table_breaks_a_partition_name_only_after_a_separator(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    for topic in ("payments.eu-west-1.settlements-v2", "orders"):
        b = PartitionBuilder(topic, 11)
        for _ in range(4):
            b.batch([(b"k", b"v")])
        b.roll().batch([(b"k", b"v")]).write(log_dir)
    result = run("inspect", "dirty-ratio", log_dir, "--now-ms", NOW, *COMPACT, env={"TTY_COMPATIBLE": "1"})
    assert result.exit_code == 0, result.output
    lines = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout).splitlines()
    assert max(len(line) for line in lines) <= 80
    pieces = [line.split("│")[2].strip() for line in lines if line.startswith("│")]
    pieces = [piece for piece in pieces if piece]
    assert pieces == ["orders-11", "payments.eu-", "west-1.", "settlements-v2-", "11"]


# --- spark clean: the same plan refusal, the same counted warning -----------------------------------------


def test_spark_clean_plan_refuses_a_log_dir_a_broker_holds_once(tmp_path: Path) -> None:
    from kcompact.cleaner.round.options import CleanOptions
    from kcompact.config.sources import ConfigSources
    from kcompact.errors import RefusedError
    from kcompact.spark.plan import plan_spark_clean

    log_dir = make_log_dir(tmp_path)
    sources = ConfigSources({"cleanup.policy": "compact"})
    with broker_running(log_dir), pytest.raises(RefusedError, match="held by a running Kafka broker"):
        plan_spark_clean([log_dir], sources, options=CleanOptions(now_ms=NOW))
    with broker_running(log_dir):  # a dry run writes nothing: planned as usual
        plan = plan_spark_clean([log_dir], sources, options=CleanOptions(now_ms=NOW, dry_run=True))
    assert len(plan.tasks) == PARTITIONS + EMPTY


def test_spark_clean_report_counts_a_missing_high_watermark_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``spark clean``'s rendering (fed the serial results, as its tasks return them; no Spark needed)."""
    from kcompact.cleaner.logdir.run import clean_path
    from kcompact.cleaner.round.options import CleanOptions
    from kcompact.cli.spark_cmds import render_spark_clean
    from kcompact.spark.clean_job import SparkCleanRun
    from kcompact.spark.rows import clean_row

    log_dir = make_log_dir(tmp_path, high_watermarks=False)
    serial = clean_path(log_dir, cli_overrides={"cleanup.policy": "compact"},
                        options=CleanOptions(now_ms=NOW, dry_run=True))
    run_ = SparkCleanRun([clean_row(r.partition_dir, r) for r in serial.results], None)  # type: ignore[arg-type]
    render_spark_clean(run_, 0.0, as_json=False)
    text = capsys.readouterr()
    assert [line for line in text.err.splitlines() if "high watermark" in line] == [HW_SUMMARY]
    render_spark_clean(run_, 0.0, as_json=True)
    report = json.loads(capsys.readouterr().out)
    assert HW_SUMMARY.removeprefix("kcompact: warning: ") in report["notes"]
    assert all(row["warnings"] for row in report["partitions"])


def test_transactions_counts_the_missing_high_watermarks_once_and_says_nothing_of_cleaning(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, high_watermarks=False)
    result = run("inspect", "transactions", log_dir, "--now-ms", NOW)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        (f"kcompact: warning: no replication-offset-checkpoint entry for {PARTITIONS + EMPTY} partitions: high "
        "watermark taken as the log end (their last stable offsets are taken no higher than that)")]
    one = run("inspect", "transactions", log_dir / "orders-0", "--now-ms", NOW)
    assert one.stderr.splitlines() == [
        ("kcompact: warning: orders-0: no high watermark in replication-offset-checkpoint: using the log end "
        "offset 5 as the high watermark (the last stable offset is taken no higher)")]


def test_dirty_ratio_names_the_partition_of_a_warning(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, high_watermarks=False)
    result = run("inspect", "dirty-ratio", log_dir / "orders-0", "--now-ms", NOW, *COMPACT)
    assert [line for line in result.stderr.splitlines() if "high watermark" in line] == [
        ("kcompact: warning: orders-0: no high watermark in replication-offset-checkpoint: using the log end "
        "offset 5 (a broker would start from the log start and clean nothing until replicated)")]


@pytest.mark.parametrize("command", [["inspect", "transactions"], ["inspect", "dirty-ratio"]])
def test_the_kraft_metadata_log_has_no_high_watermark_warning(command: list[str]) -> None:
    # KRaft keeps its metadata log's high watermark out of replication-offset-checkpoint: nothing is missing
    from tests.conftest import real_fixture

    result = run(*command, real_fixture("kraft37-cleaned-logdir"), "--now-ms", NOW)
    assert "high watermark" not in result.stderr


def active_only_log_dir(where: Path) -> Path:
    """Four partitions whose records are all in their active segment, and EMPTY empty ones."""
    log_dir = where / "logdir"
    for number in range(4):
        PartitionBuilder("orders", number).batch([(b"k", b"v")]).write(log_dir, high_watermark="log-end")
    for number in range(EMPTY):
        PartitionBuilder("idle", number).write(log_dir, high_watermark=0)
    return log_dir


ACTIVE_ONLY = ("4 partitions (orders-0, orders-1, orders-2 and 1 more): data only in the active segment, which "
               "is never cleaned; --roll cleans it (--json: each one's detail)")


def test_clean_says_once_that_the_data_is_only_in_active_segments(tmp_path: Path) -> None:
    log_dir = active_only_log_dir(tmp_path)
    result = run("clean", log_dir, "--dry-run", "--now-ms", NOW, *COMPACT)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        ACTIVE_ONLY, f"{EMPTY} empty partitions (no records): nothing to clean",
        "a clean now would give back 0 B of .log files; with --roll 0 B (4 partitions with records in the "
        "active segment, which only a roll makes cleanable)",
        "would clean 0 partitions, 7 have nothing to clean, 0 would be skipped, 0 failed; would read 0 B, "
        "would write 0 B (dry run: nothing changed)"]


def test_dirty_ratio_counts_empty_partitions_instead_of_listing_them_and_says_active_only_once(
    tmp_path: Path
) -> None:
    log_dir = active_only_log_dir(tmp_path)
    result = run("inspect", "dirty-ratio", log_dir, "--now-ms", NOW, *COMPACT)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert not [line for line in lines if "idle-" in line]  # counted, not a row each
    assert [line for line in lines if line.startswith("│")] == [
        line for line in lines if line.startswith("│") and "orders-" in line]
    assert len([line for line in lines if line.startswith("│")]) == 4
    assert not [line for line in lines if line.startswith("orders-")]  # no paragraph each
    assert lines[-3:] == [ACTIVE_ONLY, lines[-2], f"{EMPTY} empty partitions (no records): nothing to clean"]
    assert lines[-2].startswith("active-segment: ")
