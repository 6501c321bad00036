"""``spark clean`` plans in Spark tasks: the driver opens no file of a partition, and ``host:/path`` log dirs
make their tasks prefer that host.

Which files the driver process opens is counted with a Python audit hook (``sys.addaudithook``: every
``open``, whatever opens it); the executors' Python workers are other processes, which it does not see.
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kcompact.cleaner.logdir.report_row import STATUS_CLEANED
from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.spark import clean_job
from kcompact.spark.clean_job import spark_clean
from kcompact.spark.locality import Located, locate, located_rdd
from kcompact.spark.plan import plan_spark_clean
from tests.spark.logdirs import COMPACT, NOW, build_log_dir, tree_digest
from tests.spark.scheduler_view import preferred_hosts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_OPENED: list[list[str]] = []  # the lists of the active recordings (an audit hook cannot be removed)


def _record_opens(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _OPENED and isinstance(args[0], (str, bytes, Path)):
        for opened in _OPENED:
            opened.append(str(args[0]))


@contextmanager
def driver_opens() -> Iterator[list[str]]:
    """Every path this process opens inside the block."""
    if not getattr(sys, "_kcompact_test_audit", False):
        sys.addaudithook(_record_opens)
        sys._kcompact_test_audit = True  # type: ignore[attr-defined]
    opened: list[str] = []
    _OPENED.append(opened)
    try:
        yield opened
    finally:
        _OPENED.remove(opened)


def in_partitions(opened: list[str], log_dir: Path) -> list[str]:
    """The opened paths that are files of the log dir's partitions (not the log dir's own files)."""
    return sorted({p for p in opened if Path(p).parent.parent == log_dir})


def copies(src: Path, root: Path) -> tuple[Path, Path]:
    return shutil.copytree(src, root / "serial" / src.name), shutil.copytree(src, root / "spark" / src.name)


@pytest.mark.parametrize("map_budget", [None, 1], ids=["tasks", "distributed-map"])
def test_the_driver_opens_no_partition_file_to_plan_and_the_bytes_are_the_serial_cleans(
    spark: SparkSession, tmp_path: Path, map_budget: int | None
) -> None:
    """Order, eligibility, the keyless sample and ``--map-budget``'s choice are read by tasks; so is a
    distributed map's output self-check: the driver opens no segment, index or snapshot to plan, and
    no ``.cleaned`` file (the distributed map's driver still plans its round: it opens sources, no output)."""
    serial, driven = copies(build_log_dir(tmp_path / "src", 4), tmp_path)
    clean_path(serial, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW))

    with driver_opens() as opened:
        run = spark_clean(spark, [driven], cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW),
                          map_budget_bytes=map_budget)

    assert {r["status"] for r in run.as_dicts()} == {STATUS_CLEANED}
    assert [r["distributed_map"] for r in run.as_dicts()] == [map_budget is not None] * 4
    if map_budget is None:
        assert in_partitions(opened, driven) == []
    else:
        assert [p for p in in_partitions(opened, driven) if ".cleaned" in p] == []
    assert tree_digest(serial) == tree_digest(driven)


def test_host_paths_are_cleaned_by_tasks_preferring_that_host(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``host:/log/dir``: every job of the run (survey, probes, cleans) ships its tasks with that
    preferred host, and the result is the serial clean's (local mode runs them anyway once Spark's
    locality wait is over)."""
    serial, driven = copies(build_log_dir(tmp_path / "src", 3), tmp_path)
    clean_path(serial, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW))
    host = spark.sparkContext.getConf().get("spark.driver.host") or socket.gethostname()  # local mode's executor
    seen: list[list[list[str]]] = []

    def recording(context: Any, items: Any, hosts: Any) -> Any:
        rdd = located_rdd(context, items, hosts)
        seen.append(preferred_hosts(rdd))
        return rdd

    monkeypatch.setattr(clean_job, "located_rdd", recording)
    run = spark_clean(spark, [f"{host}:{driven}"], cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW))

    assert {r["status"] for r in run.as_dicts()} == {STATUS_CLEANED}
    assert len(seen) == 4  # the survey, the probes, the cleans, the checkpoint's settling (on its host)
    assert all(prefs == [host] for job in seen for prefs in job)
    assert tree_digest(serial) == tree_digest(driven)


def test_parallelize_has_no_preferred_host_and_a_located_rdd_has_its_hosts(spark: SparkSession) -> None:
    context = spark.sparkContext
    plain = located_rdd(context, [1, 2], [None, None])
    located = located_rdd(context, [[1, 2], [3], [4]], ["broker-1", None, "broker-2"])

    assert preferred_hosts(plain) == [[], []]
    assert preferred_hosts(located) == [["broker-1"], [], ["broker-2"]]
    assert located.map(sum).collect() == [3, 3, 4]


def test_a_host_path_is_host_and_path_and_anything_else_is_a_plain_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ab:" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)

    def plain(path: str) -> Path:
        return Path("/cwd", path)

    assert locate("broker-1.example.com:/var/lib/kafka", plain) == Located("broker-1.example.com", "/var/lib/kafka")
    assert str(locate("10.0.0.7:/data/kafka-logs", plain)) == "10.0.0.7:/data/kafka-logs"
    assert locate("/data/kafka-logs", plain) == Located(None, "/data/kafka-logs")
    assert locate("broker-1:relative/dir", plain) == Located(None, "/cwd/broker-1:relative/dir")
    assert locate("file:///data", plain).host is None
    assert locate("ab:/b", plain) == Located(None, "/cwd/ab:/b")  # a directory "ab:" is here: a plain path
    assert locate("ac:/b", plain) == Located("ac", "/b")  # none "ac:" is


def test_a_partition_over_the_map_budget_starts_before_the_small_ones_finish(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The distributed map's partitions are driven while the fan-out job of the others runs, not after it."""
    serial, driven = copies(build_log_dir(tmp_path / "src", 4), tmp_path)
    clean_path(serial, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW))
    big = "orders-0"
    real_plan, real_fan_out, real_on_driver = plan_spark_clean, clean_job._fan_out, clean_job._clean_on_driver
    events: list[str] = []

    def plan(*args: Any, **kwargs: Any) -> Any:  # the budget chose every partition: keep the big one's choice only
        found = real_plan(*args, **kwargs)
        found.tasks[:] = [dataclasses.replace(t, distributed_map=Path(t.partition_dir).name == big)
                          for t in found.tasks]
        return found

    def fan_out(*args: Any, **kwargs: Any) -> Any:
        found = real_fan_out(*args, **kwargs)
        events.append("small ones finished")
        return found

    def on_driver(*args: Any) -> Any:
        events.append("big one started")
        return real_on_driver(*args)

    monkeypatch.setattr(clean_job, "plan_spark_clean", plan)
    monkeypatch.setattr(clean_job, "_fan_out", fan_out)
    monkeypatch.setattr(clean_job, "_clean_on_driver", on_driver)
    run = spark_clean(spark, [driven], cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW), map_budget_bytes=1)

    assert [(Path(r["partition_dir"]).name, r["distributed_map"]) for r in run.as_dicts()
            if r["distributed_map"]] == [(big, True)]
    assert events == ["big one started", "small ones finished"]
    assert tree_digest(serial) == tree_digest(driven)
