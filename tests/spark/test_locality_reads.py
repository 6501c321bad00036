"""``host:/path`` for the read-only Spark commands: ``spark inspect dirty-ratio`` and ``spark export`` list and
read a broker host's log dir in tasks preferring that host, with the rows of the same log dir given as a plain
path; ``spark inspect replicas`` refuses it in one line (a task compares copies on several hosts).

Local mode has one executor, on the driver's host: tasks preferring it run there, so the rows can be compared
with the plain path's run, and the preferred hosts are read from each job's RDD as the scheduler sees them.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.errors import KcompactError
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.spark import export, inspect_job, locality
from kcompact.spark.export import spark_export
from kcompact.spark.inspect_job import spark_dirty_ratio
from kcompact.spark.locality import located_rdd
from tests.spark.logdirs import COMPACT, NOW, build_log_dir, build_partition
from tests.spark.scheduler_view import preferred_hosts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def executor_host(spark: SparkSession) -> str:
    """The host local mode's executor registers with (the driver's)."""
    return spark.sparkContext.getConf().get("spark.driver.host") or socket.gethostname()


@pytest.fixture
def jobs_hosts(monkeypatch: pytest.MonkeyPatch) -> list[list[list[str]]]:
    """Per located RDD the read-only commands build (a job each), its partitions' preferred hosts."""
    seen: list[list[list[str]]] = []

    def recording(context: Any, items: Any, hosts: Any) -> Any:
        rdd = located_rdd(context, items, hosts)
        seen.append(preferred_hosts(rdd))
        return rdd

    for module in (locality, inspect_job, export):
        monkeypatch.setattr(module, "located_rdd", recording)
    return seen


def test_dirty_ratio_of_a_host_path_is_read_on_that_host_with_the_plain_paths_rows(
    spark: SparkSession, tmp_path: Path, jobs_hosts: list[list[list[str]]]
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 5)
    write_offset_checkpoint(log_dir / "cleaner-offset-checkpoint", {("orders", 1): 19})
    host = executor_host(spark)
    plain = spark_dirty_ratio(spark, [log_dir], cli_overrides=COMPACT, now_ms=NOW)
    assert jobs_hosts == [[[]] * len(jobs_hosts[0])]  # a plain path: one job, no preferred host

    jobs_hosts.clear()
    located = spark_dirty_ratio(spark, [f"{host}:{log_dir}"], cli_overrides=COMPACT, now_ms=NOW)

    assert located.rows == plain.rows and len(plain.rows) == 5
    assert len(jobs_hosts) == 2  # the listing on the host, then the slices
    assert all(prefs == [host] for job in jobs_hosts for prefs in job)


def test_export_of_a_host_path_is_listed_checked_and_read_on_that_host_with_the_plain_paths_rows(
    spark: SparkSession, tmp_path: Path, jobs_hosts: list[list[list[str]]]
) -> None:
    from tests.spark.test_export import parquet_rows

    log_dir = build_log_dir(tmp_path / "logs", 4)
    build_partition(log_dir, "pending", 0, open_txn=True)
    host = executor_host(spark)
    for latest in (False, True):
        name = "latest" if latest else "all"
        plain = spark_export(spark, [log_dir], tmp_path / f"plain-{name}", latest=latest, split_bytes=2000)
        jobs_hosts.clear()
        located = spark_export(spark, [f"{host}:{log_dir}"], tmp_path / f"located-{name}", latest=latest,
                               split_bytes=2000)

        assert parquet_rows(tmp_path / f"located-{name}") == parquet_rows(tmp_path / f"plain-{name}")
        assert (located.records, located.partitions, located.segments) == (
            plain.records, plain.partitions, plain.segments)
        assert located.stops == plain.stops
        assert len(jobs_hosts) == 3  # the listing, the check, the read
        assert len(jobs_hosts[2]) > 1  # several splits, each preferring the host
        assert all(prefs == [host] for job in jobs_hosts for prefs in job)


def test_a_host_path_that_is_not_a_log_dir_is_one_error_naming_it(spark: SparkSession, tmp_path: Path) -> None:
    host = executor_host(spark)
    (tmp_path / "empty").mkdir()
    missing = f"{host}:{tmp_path / 'nowhere'}"
    reads: list[Callable[[], Any]] = [
        lambda: spark_dirty_ratio(spark, [missing], cli_overrides=COMPACT, now_ms=NOW),
        lambda: spark_export(spark, [missing], tmp_path / "out"),
    ]
    for read in reads:
        with pytest.raises(KcompactError, match=f"^{host}:{tmp_path / 'nowhere'}"):
            read()
    assert not (tmp_path / "out").exists()


def test_replicas_refuses_a_host_path_in_one_line_before_spark_starts() -> None:
    result = CliRunner().invoke(cli, ["spark", "inspect", "replicas", "broker-1:/var/kafka-logs",
                                      "broker-2:/var/kafka-logs"])

    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "broker-1:/var/kafka-logs" in lines[0]
    assert "one task" in lines[0] and "HOST:/path" in lines[0]


def test_report_refuses_a_host_path_in_one_line_before_spark_starts(tmp_path: Path) -> None:
    page = str(tmp_path / "r.html")
    result = CliRunner().invoke(cli, ["spark", "report", "broker-1:/var/kafka-logs", "--output", page])

    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "broker-1:/var/kafka-logs" in lines[0] and "driver" in lines[0]
    assert not Path(page).exists()
