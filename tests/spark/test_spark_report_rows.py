"""``kcompact spark clean`` and ``kcompact clean`` print one row shape (Spark adds how and where a
task ran), and the spark tables, piped, name every partition whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from click.testing import CliRunner, Result

from kcompact.cleaner.logdir.report_row import ROW_COLUMNS
from kcompact.cli.main import cli
from kcompact.spark.rows import CLEAN_COLUMNS
from tests.cli.test_pipe_output import COMPACT, EMPTY, NAMES, assert_whole, long_named_log_dir
from tests.spark.logdirs import NOW, build_log_dir, flip_crc_of_a_kept_batch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_ONLY = {"distributed_map", "executor", "task_cpu_s"}


def run(*args: str | Path | int) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    return runner.invoke(cli, [str(arg) for arg in args], prog_name="kcompact")


def test_spark_columns_are_the_report_row_then_the_spark_fields() -> None:
    names = [name for name, _ in CLEAN_COLUMNS]
    assert names[: len(ROW_COLUMNS)] == [name for name, _ in ROW_COLUMNS]
    assert set(names[len(ROW_COLUMNS):]) == SPARK_ONLY


def test_serial_and_spark_clean_json_rows_have_the_same_keys(spark: SparkSession, tmp_path: Path) -> None:
    template = build_log_dir(tmp_path / "template" / "logs", 3)
    flip_crc_of_a_kept_batch(template / "orders-1")
    serial_dir = Path(shutil.copytree(template, tmp_path / "serial" / "logs"))
    spark_dir = Path(shutil.copytree(template, tmp_path / "spark" / "logs"))
    serial = run("clean", serial_dir, "--now-ms", NOW, "--json", *COMPACT)
    distributed = run("spark", "clean", spark_dir, "--now-ms", NOW, "--json", *COMPACT)
    assert (serial.exit_code, distributed.exit_code) == (2, 2)  # orders-1 failed in both
    serial_report, spark_report = json.loads(serial.stdout), json.loads(distributed.stdout)
    serial_rows = {Path(r["partition_dir"]).name: r for r in serial_report["results"] + serial_report["failures"]}
    spark_rows = {Path(r["partition_dir"]).name: r for r in spark_report["partitions"]}
    assert serial_rows.keys() == spark_rows.keys() == {"orders-0", "orders-1", "users-0"}
    ignore = {"partition_dir", "elapsed_s", "error", *SPARK_ONLY}
    for name, serial_row in serial_rows.items():
        spark_row = spark_rows[name]
        assert list(spark_row) == list(serial_row) + [k for k in spark_row if k in SPARK_ONLY]
        if name == "orders-1":  # failed in both; a Spark task knows which partition it had
            assert (serial_row["status"], spark_row["status"]) == ("failed", "failed")
            continue
        assert ({k: v for k, v in serial_row.items() if k not in ignore}
                == {k: v for k, v in spark_row.items() if k not in ignore})


def test_spark_tables_name_every_partition_whole(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = long_named_log_dir(tmp_path)
    clean = run("spark", "clean", log_dir, "--roll", "--dry-run", *COMPACT)
    assert clean.exit_code == 0, clean.output
    assert_whole(clean.stdout, NAMES)
    table_rows = [line for line in clean.stdout.splitlines() if any(n in line for n in NAMES)]
    assert len(table_rows) == len(NAMES)  # one line a partition: nothing wrapped or folded
    ratio = run("spark", "inspect", "dirty-ratio", log_dir, *COMPACT)
    assert ratio.exit_code == 0, ratio.output
    assert_whole(ratio.stdout, [name for name in NAMES if name not in EMPTY])  # the empty ones counted
