"""The shared session: local, UI off, workers on this interpreter, quiet by default."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_session_is_local_two_cores_without_ui(spark: SparkSession) -> None:
    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.ui.enabled") == "false"
    assert spark.sparkContext.defaultParallelism == 2


def test_workers_run_this_interpreter(spark: SparkSession) -> None:
    def worker_python(_: int) -> str:
        import sys as worker_sys

        return worker_sys.executable

    found = spark.sparkContext.parallelize(range(2), 2).map(worker_python).collect()
    assert found == [sys.executable, sys.executable]


def test_spark_session_joins_the_running_session(spark: SparkSession) -> None:
    from kcompact.spark.session import spark_session

    assert spark_session() is spark
