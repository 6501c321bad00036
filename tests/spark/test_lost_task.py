"""``kcompact spark clean`` whose Python worker dies (SIGKILL) half-way through one partition's swap: the
partitions that finished are reported, the lost one is named, one error line, exit 2, no lock file left,
and the next run settles the lost partition (byte for byte as a serial clean)."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner, Result

from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cli.main import cli
from kcompact.errors import KcompactError
from kcompact.segment.checkpoint import read_offset_checkpoint
from kcompact.spark import clean_job, distributed_round, plan
from tests.spark.logdirs import COMPACT, NOW, build_log_dir, tree_digest
from tests.spark.test_lost_report_export import CRASHED, dying

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

VICTIM = "users-0"


def spark_clean(log_dir: Path | str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["spark", "clean", str(log_dir), "--master", "local[2]", "--config",
                                    "cleanup.policy=compact", "--now-ms", str(NOW), *args],
                              env={"COLUMNS": "80"}, catch_exceptions=False, prog_name="kcompact")


def kill_python_worker_in(monkeypatch: pytest.MonkeyPatch, victim: Path, others: int) -> None:
    """The test hook: the Spark task holding ``victim`` waits until the ``others`` partitions have been
    cleaned and their tasks reported, then its Python worker SIGKILLs itself right after renaming the
    victim's first output file to ``.swap`` (its partition lock held). The wrapper is a closure, so
    Spark ships it by value to the Python workers, where kcompact itself is unpatched."""
    victim_dir, checkpoint = str(victim), str(victim.parent / "cleaner-offset-checkpoint")

    def killing(packed: Any) -> Any:
        import os
        import signal
        import time

        from kcompact.cleaner.disk import swap
        from kcompact.segment.checkpoint import read_offset_checkpoint as read
        from kcompact.spark.clean_job import run_clean_tasks

        if any(task.partition_dir == victim_dir for _index, task in packed):
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and (not os.path.exists(checkpoint) or len(read(checkpoint)) < others):
                time.sleep(0.05)
            time.sleep(2)  # their tasks' results reach the driver
            rename = swap._rename

            def dying_rename(src: Path, dst: Path) -> None:
                rename(src, dst)
                if dst.name.endswith(".swap") and dst.parent.name == os.path.basename(victim_dir):
                    os.kill(os.getpid(), signal.SIGKILL)

            swap._rename = dying_rename
            try:
                return run_clean_tasks(packed)
            finally:
                swap._rename = rename  # not reached when killed; a reused worker must not keep it
        return run_clean_tasks(packed)

    monkeypatch.setattr(clean_job, "run_clean_tasks", killing)


def test_a_lost_task_reports_what_finished_and_the_next_run_settles_the_rest(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 4)  # orders-0, orders-1, users-0, users-1
    serial = Path(shutil.copytree(log_dir, tmp_path / "serial"))
    clean_path(serial, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW))
    kill_python_worker_in(monkeypatch, log_dir / VICTIM, others=3)

    result = spark_clean(log_dir, "--task-bytes", "1", "--json")  # a task per partition

    assert result.exit_code == 2, result.output
    report = json.loads(result.stdout)
    statuses = {Path(row["partition_dir"]).name: row["status"] for row in report["partitions"]}
    assert statuses == {"orders-0": "cleaned", "orders-1": "cleaned", "users-0": "failed", "users-1": "cleaned"}
    (lost,) = [row for row in report["partitions"] if row["status"] == "failed"]
    assert lost["error"] == (f"{log_dir / VICTIM}: not reported: its Spark task was lost (Python worker "
                             "exited unexpectedly (crashed))")
    assert report["not_finished"] == [str(log_dir / VICTIM)]
    assert result.stderr.strip().splitlines() == [
        ("kcompact: error: the Spark job failed: Python worker exited unexpectedly (crashed); 1 of 4 "
         "partitions not finished (users-0), the others as reported; nothing is lost (segments are swapped "
         "in crash-safely): spark clean again settles the rest")]
    assert sorted(read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint")) == [
        ("orders", 0), ("orders", 1), ("users", 1)]
    assert sorted(p.name for p in log_dir.iterdir() if p.name.startswith(".kcompact-")) == []
    assert any(p.suffix == ".swap" for p in (log_dir / VICTIM).iterdir())  # killed mid-swap

    monkeypatch.undo()
    again = spark_clean(log_dir, "--json")

    assert again.exit_code == 0, again.output
    rows = {Path(row["partition_dir"]).name: row for row in json.loads(again.stdout)["partitions"]}
    assert rows[VICTIM]["status"] == "cleaned" and rows[VICTIM]["recovery_actions"]
    checkpoint = "cleaner-offset-checkpoint"  # the same entries; users-0's line last, as cleaned last
    assert read_offset_checkpoint(log_dir / checkpoint) == read_offset_checkpoint(serial / checkpoint)
    assert {name: digest for name, digest in tree_digest(log_dir).items() if name != checkpoint} == {
        name: digest for name, digest in tree_digest(serial).items() if name != checkpoint}


def kill_python_worker_in_distributed_map(monkeypatch: pytest.MonkeyPatch, victim: Path) -> None:
    """The test hook: each scan task of ``victim``'s distributed map SIGKILLs its Python worker; the other
    partitions' scan tasks run as usual (a closure: Spark ships it by value)."""
    victim_dir = str(victim)

    def scanning(plan_bc: Any, digest_tasks: int, task: Any) -> Any:
        import os
        import signal

        from kcompact.spark.distributed_round import scan_segment

        if str(plan_bc.value.partition_dir) == victim_dir:
            os.kill(os.getpid(), signal.SIGKILL)
        return scan_segment(plan_bc, digest_tasks, task)

    monkeypatch.setattr(distributed_round, "scan_segment", scanning)


def test_a_lost_task_of_a_distributed_map_fails_its_partition_alone_and_unchanged(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)  # orders-0, users-0: both over --map-budget
    victim = log_dir / VICTIM
    before = tree_digest(victim)
    kill_python_worker_in_distributed_map(monkeypatch, victim)

    result = spark_clean(log_dir, "--map-budget", "1", "--json")

    assert result.exit_code == 2, result.output
    for text in ("Traceback", "Py4JJavaError", "\tat org.apache"):
        assert text not in result.stdout + result.stderr
    rows = {Path(row["partition_dir"]).name: row for row in json.loads(result.stdout)["partitions"]}
    assert {name: (row["status"], row["distributed_map"]) for name, row in rows.items()} == {
        "orders-0": ("cleaned", True), VICTIM: ("failed", True)}
    assert rows[VICTIM]["error"] == (f"{victim}: its distributed map's Spark job failed: Python worker exited "
                                     "unexpectedly (crashed); nothing was swapped in (the partition is as it was): "
                                     "spark clean again cleans it")
    assert tree_digest(victim) == before
    assert sorted(read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint")) == [("orders", 0)]


def test_a_bug_in_a_planning_task_keeps_its_traceback_and_changes_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    before = tree_digest(log_dir)

    def buggy_probe(*_: Any) -> Any:
        raise ZeroDivisionError("a bug in the probe")

    monkeypatch.setattr(plan, "probe_partition", buggy_probe)

    with pytest.raises(Exception, match="ZeroDivisionError: a bug in the probe") as raised:  # exit 1, traceback
        spark_clean(log_dir, "--json")

    assert not isinstance(raised.value, KcompactError)
    assert tree_digest(log_dir) == before


def test_a_lost_checkpoint_ordering_task_of_a_host_path_is_a_note_after_the_clean(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    host = spark.sparkContext.getConf().get("spark.driver.host") or socket.gethostname()
    monkeypatch.setattr(clean_job, "_settle_away", dying)

    result = spark_clean(f"{host}:{log_dir}", "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [row["status"] for row in report["partitions"]] == ["cleaned", "cleaned"]
    assert (f"spark clean: the checkpoint-ordering job failed: {CRASHED}; the partitions are cleaned as reported; "
            f"the new lines of {host}:{log_dir}/cleaner-offset-checkpoint stay in the order the tasks finished (the "
            "same entries)") in report["notes"]
    assert sorted(read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint")) == [("orders", 0), ("users", 0)]


def test_a_lost_write_task_of_the_output_leaves_no_output_and_the_rows_printed(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    out = tmp_path / "stats.parquet"
    frame = clean_job.SparkCleanRun.frame

    def dying_frame(run: clean_job.SparkCleanRun) -> Any:  # the write's task dies on the rows it writes
        from pyspark.sql import functions as F
        from pyspark.sql.types import IntegerType

        def dying_at(partition: int) -> int:
            dying()
            return partition

        rows = frame.__get__(run)
        return rows.withColumn("partition", F.udf(dying_at, IntegerType(), useArrow=False)("partition"))

    monkeypatch.setattr(clean_job.SparkCleanRun, "frame", property(dying_frame))

    result = spark_clean(log_dir, "--output", str(out), "--json")

    assert result.exit_code == 2, result.output
    line = (f"spark clean: the write job failed: {CRASHED}; nothing was written ({out} does not exist): the "
            "partitions are cleaned all the same (their rows are above)")
    assert result.stderr.strip().splitlines() == [f"kcompact: error: {line}"]
    report = json.loads(result.stdout)
    assert [row["status"] for row in report["partitions"]] == ["cleaned", "cleaned"]  # the clean is done
    assert report["output_error"] == line
    assert not out.exists()
