"""``spark clean`` against the serial ``kcompact clean``: the same bytes, failures alone, one clock.

The serial reference is :func:`kcompact.cleaner.logdir.run.clean_path` run on each path in turn over one
copy of the source; ``spark_clean`` runs over another copy; every file of both trees must be equal
(kcompact's own empty lock files aside), cleaner-offset-checkpoint included.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kcompact.cleaner.logdir.report_row import (
    STATUS_BUG,
    STATUS_CLEANED,
    STATUS_FAILED,
    STATUS_WOULD_CLEAN,
)
from kcompact.cleaner.logdir.run import clean_path, settle_checkpoint_order
from kcompact.cleaner.round.options import CleanOptions
from kcompact.config.sources import ConfigSources
from kcompact.errors import KcompactError, RefusedError
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from kcompact.spark import clean_job
from kcompact.spark.clean_job import run_clean_task, spark_clean
from kcompact.spark.plan import plan_spark_clean
from kcompact.spark.rows import CLEAN_COLUMNS
from tests.spark.fakes import FakeContext, FakeSession
from tests.spark.logdirs import (
    COMPACT,
    NOW,
    build_log_dir,
    build_partition,
    flip_crc_of_a_kept_batch,
    tree_digest,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def make_source(root: Path) -> tuple[Path, Path]:
    """Log dir A: five partitions (orders-1 corrupt), a checkpoint with a line for orders-2 and a
    foreign one; log dir B: two partitions, of which only users-0 is named on the command line."""
    log_a = build_log_dir(root / "a", 5)
    flip_crc_of_a_kept_batch(log_a / "orders-1")
    write_offset_checkpoint(log_a / "cleaner-offset-checkpoint", {("gone", 9): 77, ("orders", 2): 0})
    log_b = build_log_dir(root / "b", 2, topics=("users",))
    return log_a, log_b / "users-0"


def copy_source(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize(("task_bytes", "tasks"), [(None, range(2, 6)), (1, [6]), (10**9, [2])],
                         ids=["auto-packed", "one-task-per-partition", "one-task-a-core"])
def test_spark_clean_is_byte_identical_to_serial_clean_and_a_corrupt_partition_fails_alone(
    spark: SparkSession, tmp_path: Path, shipped_packs: list[list[int]], task_bytes: int | None,
    tasks: range | list[int],
) -> None:
    make_source(tmp_path / "src")
    serial, distributed = copy_source(tmp_path / "src", tmp_path / "serial"), copy_source(
        tmp_path / "src", tmp_path / "spark")
    options = CleanOptions(now_ms=NOW)
    failures = []
    for path in (serial / "a", serial / "b" / "users-0"):
        failures += clean_path(path, cli_overrides=COMPACT, options=options).failures

    run = spark_clean(spark, [distributed / "a", distributed / "b" / "users-0"], cli_overrides=COMPACT,
                      options=options, task_bytes=task_bytes)

    assert len(shipped_packs) in tasks and sorted(i for pack in shipped_packs for i in pack) == list(range(6))
    assert tree_digest(serial) == tree_digest(distributed)
    rows = {str(Path(r["partition_dir"]).relative_to(distributed)): r for r in run.as_dicts()}
    assert [(name, r["status"]) for name, r in rows.items()] == [  # cleaning order, path after path
        ("a/orders-0", STATUS_CLEANED), ("a/orders-1", STATUS_FAILED), ("a/orders-2", STATUS_CLEANED),
        ("a/users-0", STATUS_CLEANED), ("a/users-1", STATUS_CLEANED), ("b/users-0", STATUS_CLEANED)]
    assert [f.error.replace(str(serial), "") for f in failures] == [
        rows["a/orders-1"]["error"].replace(str(distributed), "")]
    assert "fails its CRC" in rows["a/orders-1"]["error"]
    untouched = tree_digest(tmp_path / "src" / "a" / "orders-1")
    assert tree_digest(distributed / "a" / "orders-1") == untouched
    assert {r["now_ms"] for r in rows.values()} == {NOW}
    assert run.frame.count() == 6 and run.frame.columns[:4] == ["partition_dir", "topic", "partition", "status"]


def test_new_checkpoint_lines_are_appended_in_cleaning_order(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 6, topics=("t",))
    run = spark_clean(spark, [log_dir], cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW))

    entries = read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint")
    assert list(entries) == [("t", p) for p in range(6)]  # equal dirty ratios: by name
    assert all(r["status"] == STATUS_CLEANED for r in run.as_dicts())


def test_settle_checkpoint_order_moves_only_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    write_offset_checkpoint(path, {("c", 0): 3, ("old", 1): 5, ("a", 0): 1, ("other", 0): 8, ("b", 0): 2})

    changed = settle_checkpoint_order(tmp_path, [("old", 1)], [("a", 0), ("b", 0), ("c", 0)])

    assert changed
    assert path.read_text() == "0\n5\nold 1 5\na 0 1\nb 0 2\nc 0 3\nother 0 8\n"
    assert not settle_checkpoint_order(tmp_path, [("old", 1)], [("a", 0), ("b", 0), ("c", 0)])


def test_concurrent_tasks_on_one_log_dir_lose_no_checkpoint_entry(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    target = str(log_dir / "cleaner-offset-checkpoint")

    def hammer(task: int) -> int:
        from kcompact.segment.checkpoint import update_offset_checkpoint

        for i in range(40):
            update_offset_checkpoint(target, {(f"t{task}", i): task * 1000 + i})
        return task

    done = spark.sparkContext.parallelize(range(6), 6).map(hammer).collect()

    entries = read_offset_checkpoint(target)
    assert done == list(range(6))
    assert entries == {(f"t{t}", i): t * 1000 + i for t in range(6) for i in range(40)}


def test_dry_run_writes_nothing_and_every_task_uses_the_drivers_clock(
    spark: SparkSession, tmp_path: Path
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 3)
    before = tree_digest(log_dir)

    run = spark_clean(spark, [log_dir], cli_overrides=COMPACT, options=CleanOptions(dry_run=True))

    assert tree_digest(log_dir) == before
    rows = run.as_dicts()
    assert [r["status"] for r in rows] == [STATUS_WOULD_CLEAN] * 3
    assert len({r["now_ms"] for r in rows}) == 1 and rows[0]["now_ms"] == run.now_ms


def test_a_refused_partition_dir_is_a_failure_of_the_plan_not_of_the_run(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    metadata = tmp_path / "logs" / "__cluster_metadata-0"
    metadata.mkdir()

    plan = plan_spark_clean([metadata, log_dir / "orders-0"], ConfigSources(COMPACT), options=CleanOptions(now_ms=NOW))

    assert [Path(t.partition_dir).name for t in plan.tasks] == ["orders-0"]
    assert [Path(f.partition_dir).name for f in plan.failures] == ["__cluster_metadata-0"]
    assert "KRaft's own log" in plan.failures[0].error


def test_a_partition_named_twice_is_cleaned_once(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    plan = plan_spark_clean([log_dir / "orders-0", log_dir], ConfigSources(COMPACT), options=CleanOptions(now_ms=NOW))
    assert [Path(t.partition_dir).name for t in plan.tasks] == ["orders-0", "users-0"]


def test_an_unexpected_exception_in_a_task_is_a_bug_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = build_partition(tmp_path / "logs", "orders", 0)
    task = plan_spark_clean([part], ConfigSources(COMPACT), options=CleanOptions(now_ms=NOW)).tasks[0]

    def broken(*args: object, **kwargs: object) -> object:
        raise ValueError("a bug")

    monkeypatch.setattr(clean_job, "clean_partition", broken)
    row = dict(zip([name for name, _ in CLEAN_COLUMNS], run_clean_task(task), strict=True))

    assert row["status"] == STATUS_BUG and row["topic"] == "orders"
    assert "Traceback" in row["error"] and "ValueError: a bug" in row["error"]


def test_a_bug_in_one_partition_of_a_packed_task_leaves_the_others_to_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 3)
    tasks = plan_spark_clean([log_dir], ConfigSources(COMPACT), options=CleanOptions(now_ms=NOW)).tasks
    from kcompact.cleaner.workers.bound_clean import clean_partition as real_clean


    def broken_for_the_first(path: str, *args: object, **kwargs: object) -> object:
        if path == tasks[0].partition_dir:
            raise ValueError("a bug")
        return real_clean(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(clean_job, "clean_partition", broken_for_the_first)
    rows = clean_job.run_clean_tasks([(7, tasks[0]), (8, tasks[1]), (9, tasks[2])])

    names = [name for name, _ in CLEAN_COLUMNS]
    statuses = [(index, dict(zip(names, row, strict=True))["status"]) for index, row in rows]
    assert statuses == [(7, STATUS_BUG), (8, STATUS_CLEANED), (9, STATUS_CLEANED)]


def test_map_budget_sends_partitions_over_it_to_the_distributed_map(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "src", 2)
    serial, distributed = copy_source(log_dir, tmp_path / "serial"), copy_source(log_dir, tmp_path / "spark")
    clean_path(serial, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW))

    run = spark_clean(spark, [distributed], cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW),
                      map_budget_bytes=1)

    assert [(r["status"], r["distributed_map"]) for r in run.as_dicts()] == [(STATUS_CLEANED, True)] * 2
    assert tree_digest(serial) == tree_digest(distributed)


def test_spark_clean_refuses_speculation_before_touching_anything(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    before = tree_digest(log_dir)
    speculating = FakeSession(FakeContext(2, spark_speculation="true"))

    with pytest.raises(RefusedError, match="spark clean: spark.speculation; expected false"):
        spark_clean(speculating, [log_dir], cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW))  # type: ignore[arg-type]

    assert tree_digest(log_dir) == before


def test_partitions_not_known_to_be_compacted_are_skipped_rows_as_in_the_serial_clean(
    spark: SparkSession, tmp_path: Path
) -> None:
    """No metadata log says these topics are compacted: each partition is a "skipped" row with the
    serial clean's reason and stays as it was; --assume-compact cleans them as the serial clean does."""
    log_dir = build_log_dir(tmp_path / "src", 2)
    before = tree_digest(log_dir)
    run = spark_clean(spark, [log_dir], cli_overrides={}, options=CleanOptions(now_ms=NOW))
    serial = clean_path(copy_source(log_dir, tmp_path / "serial"), cli_overrides={},
                        options=CleanOptions(now_ms=NOW))
    rows = run.as_dicts()
    assert [(r["status"], r["topic"], r["partition"]) for r in rows] == [
        ("skipped", "orders", 0), ("skipped", "users", 0)]
    assert [r["skipped_reason"] for r in rows] == [skip.reason for skip in serial.skipped]
    assert tree_digest(log_dir) == before
    assumed = spark_clean(spark, [log_dir], cli_overrides={}, options=CleanOptions(now_ms=NOW),
                          assume_compact=True)
    clean_path(tmp_path / "serial", cli_overrides={}, options=CleanOptions(now_ms=NOW), assume_compact=True)
    assert {r["status"] for r in assumed.as_dicts()} == {STATUS_CLEANED}
    assert tree_digest(log_dir) == tree_digest(tmp_path / "serial")


def test_a_directory_without_partitions_is_refused_by_the_plan(tmp_path: Path) -> None:
    build_log_dir(tmp_path / "logs", 1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(KcompactError, match=r"^no partition directories found under .*empty \(expected"):
        plan_spark_clean([tmp_path / "logs", tmp_path / "empty"], ConfigSources({}), options=CleanOptions(now_ms=NOW))


@pytest.mark.parametrize("map_budget", [None, 1], ids=["tasks", "distributed-map"])
def test_spark_clean_with_roll_leaves_a_failing_partition_unrolled(
    spark: SparkSession, tmp_path: Path, map_budget: int | None
) -> None:
    from tests.cleaner.disk.test_crash_recovery import NOW as ROLL_NOW
    from tests.cleaner.disk.test_crash_recovery import OVERRIDES
    from tests.cleaner.disk.test_crash_recovery import build_partition as build_rollable
    from tests.cleaner.disk.test_roll import ACTIVE_BASE, overstate_record_count, rollable_partition

    bad = rollable_partition(tmp_path / "logs")
    build_rollable(tmp_path / "other").rename(tmp_path / "logs" / "orders-1")
    overstate_record_count(sorted(bad.glob("*.log"))[2])
    before = tree_digest(bad)

    run = spark_clean(spark, [tmp_path / "logs"], cli_overrides=OVERRIDES,
                      options=CleanOptions(now_ms=ROLL_NOW, roll=True), map_budget_bytes=map_budget)

    statuses = {Path(r["partition_dir"]).name: r["status"] for r in run.as_dicts()}
    assert statuses == {"orders-0": STATUS_FAILED, "orders-1": STATUS_CLEANED}
    assert tree_digest(bad) == before  # no rolled segment, the active segment's indexes as they were
    rolled = tmp_path / "logs" / "orders-1" / f"{ACTIVE_BASE + 1:020d}.log"
    assert rolled.exists() and rolled.stat().st_size == 0
