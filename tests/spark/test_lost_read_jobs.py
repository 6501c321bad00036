"""``kcompact spark inspect dirty-ratio``, ``spark inspect replicas`` and ``spark export``'s ``HOST:/path``
listing whose Spark job fails under them: a task's Python worker SIGKILLed (as ``test_lost_report_export`` kills
``spark report``'s), or the driver's JVM killed. Each is one error line naming the command, the job and why,
exit 2, no Spark traceback; ``--json`` prints the JSON error object; the log dirs are unchanged and no
``--output`` is made."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kcompact.spark import export, inspect_job, replicas_job
from tests.spark.logdirs import NOW, build_log_dir, tree_digest
from tests.spark.test_lost_report_export import (
    CRASHED,
    assert_jvm_gone_line,
    assert_one_line,
    dying,
    kcompact,
    run_with_dying_jvm,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RATIO_ARGS = ("--now-ms", str(NOW), "--config", "cleanup.policy=compact", "--json")
RATIO_READ_ONLY = "nothing was changed (spark inspect dirty-ratio only reads)"
REPLICAS_READ_ONLY = "nothing was changed (spark inspect replicas only reads): run it again"


def executor_host(spark: SparkSession) -> str:
    """The host local mode's executor registers with (the driver's): a ``host:/path`` read there."""
    return spark.sparkContext.getConf().get("spark.driver.host") or socket.gethostname()


def test_spark_export_whose_listing_task_on_a_host_is_lost_writes_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    before = tree_digest(log_dir)
    out = tmp_path / "records.parquet"
    monkeypatch.setattr(export, "_segments_here", dying)

    result = kcompact("spark", "export", f"{executor_host(spark)}:{log_dir}", "--output", str(out), "--json")

    assert_one_line(result, (f"spark export: the listing job failed: {CRASHED}; nothing was written ({out} not "
                             "created), the logs are only read: run it again"))
    assert json.loads(result.stdout)["error"]["path"] == str(out)
    assert not out.exists()
    assert tree_digest(log_dir) == before


def test_spark_dirty_ratio_whose_reading_task_is_lost_is_one_line_and_writes_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 4)
    before = tree_digest(log_dir)
    out = tmp_path / "ratio.parquet"
    monkeypatch.setattr(inspect_job, "run_report_slice", dying)

    result = kcompact("spark", "inspect", "dirty-ratio", str(log_dir), *RATIO_ARGS, "--output", str(out))

    assert_one_line(result, (f"spark inspect dirty-ratio: the reading job failed: {CRASHED}; {RATIO_READ_ONLY}, "
                             f"nothing was written ({out} not created): run it again"))
    assert not out.exists()
    assert tree_digest(log_dir) == before


def test_spark_dirty_ratio_whose_write_task_is_lost_leaves_no_output(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 4)
    before = tree_digest(log_dir)
    out = tmp_path / "ratio.parquet"
    spark_dirty_ratio = inspect_job.spark_dirty_ratio

    def reading(*args: Any, **kwargs: Any) -> Any:  # the write's task dies on the rows it writes
        from pyspark.sql import functions as F
        from pyspark.sql.types import IntegerType

        def dying_at(partition: int) -> int:
            dying()
            return partition

        report = spark_dirty_ratio(*args, **kwargs)
        report.frame = report.frame.withColumn("partition", F.udf(dying_at, IntegerType(), useArrow=False)("partition"))
        return report

    monkeypatch.setattr(inspect_job, "spark_dirty_ratio", reading)

    result = kcompact("spark", "inspect", "dirty-ratio", str(log_dir), *RATIO_ARGS, "--output", str(out))

    assert_one_line(result, (f"spark inspect dirty-ratio: the write job failed: {CRASHED}; nothing was written "
                             f"({out} does not exist): run it again"))
    assert not out.exists()  # Spark had made it, no _SUCCESS in it
    assert tree_digest(log_dir) == before


def test_spark_dirty_ratio_whose_listing_task_on_a_host_is_lost_is_one_line(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    before = tree_digest(log_dir)
    monkeypatch.setattr(inspect_job, "_listed_here", dying)

    result = kcompact("spark", "inspect", "dirty-ratio", f"{executor_host(spark)}:{log_dir}", *RATIO_ARGS)

    assert_one_line(result, f"spark inspect dirty-ratio: the listing job failed: {CRASHED}; {RATIO_READ_ONLY}: run "
                            "it again")
    assert tree_digest(log_dir) == before


def test_spark_replicas_whose_task_is_lost_is_one_line_and_changes_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    brokers = [build_log_dir(tmp_path / name, 2, topics=("orders",)) for name in ("b1", "b2")]
    before = [tree_digest(broker) for broker in brokers]
    monkeypatch.setattr(replicas_job, "run_replicas_task", dying)

    result = kcompact("spark", "inspect", "replicas", *map(str, brokers), "--json")

    assert_one_line(result, f"spark inspect replicas: the comparing job failed: {CRASHED}; {REPLICAS_READ_ONLY}")
    assert [tree_digest(broker) for broker in brokers] == before


def test_spark_dirty_ratio_whose_jvm_dies_is_one_line(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    before = tree_digest(log_dir)

    done = run_with_dying_jvm("dirty-ratio", "spark", "inspect", "dirty-ratio", str(log_dir), *RATIO_ARGS)

    assert_jvm_gone_line(done, "spark inspect dirty-ratio: the reading job", f"{RATIO_READ_ONLY}: run it again")
    assert tree_digest(log_dir) == before


def test_spark_replicas_whose_jvm_dies_is_one_line(tmp_path: Path) -> None:
    brokers = [build_log_dir(tmp_path / name, 2, topics=("orders",)) for name in ("b1", "b2")]

    done = run_with_dying_jvm("replicas", "spark", "inspect", "replicas", *map(str, brokers), "--json")

    assert_jvm_gone_line(done, "spark inspect replicas: the comparing job", REPLICAS_READ_ONLY)
