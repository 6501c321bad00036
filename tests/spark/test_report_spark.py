"""``kcompact spark report``: the page of ``kcompact report``, each partition read by a Spark task. Its totals,
topics, partitions and replicas are the serial ``kcompact report --json``'s on the same log dirs (the bytes on
disk, what a clean gives back, the last clean and the hanging transactions real, not "n/a" as with ``--from``),
and the page opens in a browser with no console error and no request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kcompact.report.gather import ConfigInputs
from tests.conftest import PROJECT_FIXTURES, real_fixture
from tests.partition_builder import PartitionBuilder
from tests.report.browser import open_page, require_browser
from tests.report.test_report import NOW, corrupt, mixed_log_dir, run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMMON = ["--now-ms", str(NOW), "--config", "cleanup.policy=compact"]


def report_json(*args: str) -> dict[str, Any]:
    done = run(*args, *COMMON, "--json")
    assert done.exit_code in (0, 2, 3), done.output  # 3: replicas diverge
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def by_partition(report: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(report["partitions"], key=lambda p: (p["log_dir"], p["topic"], p["partition"]))


def paths_under_test(name: str, tmp_path: Path) -> list[str]:
    if name == "mixed":
        return [str(mixed_log_dir(tmp_path / "logdir"))]
    if name == "two-brokers":  # orders-0 in both: the replicas compared
        return [str(mixed_log_dir(tmp_path / "b1")), str(PROJECT_FIXTURES / "sample-logdir")]
    if name.startswith("real/"):
        return [str(real_fixture(name.removeprefix("real/")))]
    return [str(PROJECT_FIXTURES / name)]


@pytest.mark.parametrize("name", ["mixed", "two-brokers", "codecs-logdir", "real/bitnami2024-rolled-logdir",
                                  "real/kraft37-cleaned-logdir", "real/confluent512-lz4-logdir"])
def test_spark_report_equals_the_serial_report(spark: SparkSession, name: str, tmp_path: Path) -> None:
    paths = paths_under_test(name, tmp_path)
    serial = report_json("report", *paths)
    distributed = report_json("spark", "report", *paths)
    assert distributed["totals"] == serial["totals"]
    assert distributed["topics"] == serial["topics"]
    assert by_partition(distributed) == by_partition(serial)  # few partitions: every one listed
    assert distributed["replicas"] == serial["replicas"]
    assert (distributed["log_dirs"], distributed["advice"]) == (serial["log_dirs"], serial["advice"])
    assert distributed["source"] == "spark-log-dirs"
    assert serial["totals"]["size_in_bytes"] > 0  # what --from cannot say


def test_at_scale_the_largest_and_the_hanging_are_listed_and_every_partition_counted(
        spark: SparkSession, tmp_path: Path) -> None:
    from kcompact.spark.report_job import plan_report, spark_report

    log_dir = mixed_log_dir(tmp_path / "logdir")
    for number in range(1, 6):  # more small partitions than are listed
        PartitionBuilder("prices", number).batch([(b"p", b"1")]).write(log_dir)
    corrupt(log_dir / "prices-4")
    plan = plan_report([log_dir], ConfigInputs({}), now_ms=NOW)
    everything, listed = spark_report(spark, plan), spark_report(spark, plan, listed=1)
    assert listed.totals == everything.totals and listed.totals.partitions == 8
    assert (listed.totals.hanging_transactions, listed.totals.errors) == (1, 1)
    largest = sorted(everything.partitions, key=lambda p: -(p.size_in_bytes or 0))[:1]
    assert [f"{p.topic}-{p.partition}" for p in largest] == ["orders-0"]
    assert listed.partitions[0] == largest[0]
    # the one failing to read and the one with a hanging transaction are listed too, whatever their size
    assert sorted(f"{p.topic}-{p.partition}" for p in listed.partitions[1:]) == ["orders-3", "prices-4"]
    assert listed.partitions_listed == 3


def test_a_log_dir_damaged_after_the_plan_is_one_line_not_a_spark_traceback(spark: SparkSession,
                                                                            tmp_path: Path) -> None:
    from kcompact.errors import KcompactError
    from kcompact.spark.report_job import plan_report, spark_report

    log_dir = mixed_log_dir(tmp_path / "logdir")
    plan = plan_report([log_dir], ConfigInputs({}), now_ms=NOW)  # checked here, then a broker rewrites it badly
    (log_dir / "cleaner-offset-checkpoint").write_text("0\n1\nnot a checkpoint line\n")
    with pytest.raises(KcompactError) as raised:
        spark_report(spark, plan)
    assert "cleaner-offset-checkpoint" in str(raised.value) and "\n" not in str(raised.value)
    assert "Traceback" not in str(raised.value)


def test_a_partition_that_fails_to_read_is_a_row_and_exit_2(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = mixed_log_dir(tmp_path / "logdir")
    log = corrupt(log_dir / "prices-0")
    done = run("spark", "report", str(log_dir), "--now-ms", str(NOW), "--output", str(tmp_path / "r.html"))
    assert done.exit_code == 2
    assert str(log) in done.stderr and "Traceback" not in done.output
    assert str(log) in (tmp_path / "r.html").read_text()


def test_the_page_opens_with_real_sizes_and_no_console_error(spark: SparkSession, tmp_path: Path) -> None:
    require_browser()
    paths = paths_under_test("two-brokers", tmp_path)
    serial = report_json("report", *paths)["totals"]
    page_path = tmp_path / "cluster.html"
    done = run("spark", "report", *paths, *COMMON, "--output", str(page_path))
    assert done.exit_code == run("report", *paths, *COMMON, "--output", str(tmp_path / "serial.html")).exit_code
    assert done.exit_code == 3, done.output  # orders-0's copies diverge, as the serial report says
    with open_page(page_path, tmp_path / "profile") as visit:
        page = visit.page
        assert visit.console_errors == []
        assert visit.requests == [page_path.resolve().as_uri()]
        for chart in ("chart-disk", "chart-status", "chart-ratio-histogram", "chart-ratio", "chart-hanging",
                      "chart-replicas"):
            assert page.locator(f"#{chart} svg.main-svg").count() > 0, chart
        for key in ("partitions", "size_in_bytes", "reclaimable_bytes", "hanging_transactions", "eligible"):
            assert page.locator(f"#total-{key}").get_attribute("data-value") == str(serial[key]), key
        assert "n/a" not in page.locator(".cards").inner_text()
        assert "--start-offset 7" in page.locator("#abort-lines").inner_text()
