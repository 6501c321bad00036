"""``kcompact report --from`` the Parquet that ``spark inspect dirty-ratio --output`` wrote: the page's totals
are those rows' (the serial ``inspect dirty-ratio --json``), and its topics add them up."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from tests.spark.logdirs import NOW, build_log_dir
from tests.spark.test_spark_cli import run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_report_from_the_parquet_of_spark_inspect_dirty_ratio(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 4)
    written = run("spark", "inspect", "dirty-ratio", str(log_dir), "--now-ms", str(NOW),
                  "--output", str(tmp_path / "r.parquet"))
    assert written.exit_code == 0, written.output
    serial = json.loads(run("inspect", "dirty-ratio", str(log_dir), "--now-ms", str(NOW), "--json").stdout)
    done = run("report", "--from", str(tmp_path / "r.parquet"), "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    totals = report["totals"]
    assert totals["partitions"] == len(serial)
    assert (totals["clean_bytes"], totals["dirty_bytes"]) == (
        sum(r["clean_bytes"] for r in serial), sum(r["dirty_bytes"] for r in serial))
    assert totals["eligible"] == sum(r["eligible"] for r in serial)
    assert totals["blocked"] == dict(Counter(r["blocking_rule"] for r in serial if not r["eligible"]))
    by_topic = Counter(r["topic"] for r in serial)
    assert {t["topic"]: t["partitions"] for t in report["topics"]} == dict(by_topic)
    ranks = {(r["topic"], r["partition"]): r["cleaner_rank"] for r in serial}
    assert all(p["cleaner_rank"] == ranks[(p["topic"], p["partition"])] for p in report["partitions"])
    page = tmp_path / "cluster.html"
    assert run("report", "--from", str(tmp_path / "r.parquet"), "--output", str(page)).exit_code == 0
    assert page.stat().st_size > 0
