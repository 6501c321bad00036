"""``--sole-replica`` in the Spark commands: ``spark clean``, ``spark report`` and ``spark export --latest`` take a
partition's high watermark as its log end exactly where the serial commands do, and keep the stale
replication-offset-checkpoint's without the flag (the log dir of ``tests/cleaner/logdir/test_sole_replica``,
whose metadata log says nothing, so the flag decides)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.cleaner.logdir.test_sole_replica import LOG_END, STALE_HW, clean, invoke, log_dir_with, only_row

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMPACT = ("--config", "cleanup.policy=compact")


def spark_json(*args: str | Path, clock: bool = True) -> Any:
    done = invoke("spark", *args, "--json", clock=clock)
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_spark_clean_takes_the_log_end_as_clean_does(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = log_dir_with(tmp_path, None)
    serial = only_row(clean(log_dir / "orders-0", "--dry-run", "--json", *COMPACT, "--sole-replica"))

    (flagged,) = spark_json("clean", log_dir, "--dry-run", *COMPACT, "--sole-replica")["partitions"]
    (stale,) = spark_json("clean", log_dir, "--dry-run", *COMPACT)["partitions"]

    assert (flagged["high_watermark"], flagged["first_uncleanable_offset"]) == (LOG_END, 26)
    assert flagged["high_watermark_note"] == serial["high_watermark_note"]
    assert "(--sole-replica)" in str(flagged["high_watermark_note"])
    assert (stale["high_watermark"], stale["first_uncleanable_offset"]) == (STALE_HW, 11)


def test_spark_report_and_export_take_the_flag_as_the_serial_commands(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = log_dir_with(tmp_path, None)
    serial = json.loads(invoke("report", log_dir, "--json", *COMPACT, "--sole-replica").stdout)

    (entry,) = spark_json("report", log_dir, *COMPACT, "--sole-replica")["partitions"]
    (before,) = spark_json("report", log_dir, *COMPACT)["partitions"]
    (stop,) = spark_json("export", log_dir / "orders-0", "--latest", "--output", tmp_path / "a",
                         "--sole-replica", clock=False)["stops"]
    (stale_stop,) = spark_json("export", log_dir / "orders-0", "--latest", "--output", tmp_path / "b",
                               clock=False)["stops"]

    (serial_entry,) = serial["partitions"]
    assert entry["high_watermark_note"] == serial_entry["high_watermark_note"] is not None
    assert entry["size_in_bytes_after"] == serial_entry["size_in_bytes_after"] < before["size_in_bytes_after"]
    assert before["high_watermark_note"] is None
    assert (stop["stops_at"], stop["high_watermark"]) == (LOG_END, LOG_END)
    assert "(--sole-replica)" in str(stop["high_watermark_note"])
    assert (stale_stop["stops_at"], stale_stop["reason"]) == (STALE_HW, "high watermark")
