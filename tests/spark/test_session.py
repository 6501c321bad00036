"""The shared session: local, UI off, workers on this interpreter, quiet by default."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_session_is_local_two_cores_without_ui(spark: SparkSession) -> None:
    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.ui.enabled") == "false"
    assert spark.sparkContext.defaultParallelism == 2


def test_python_workers_talk_to_the_jvm_over_a_unix_socket(spark: SparkSession) -> None:
    def worker_env(_: int) -> str | None:
        import os

        return os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED")

    assert spark.conf.get("spark.python.unix.domain.socket.enabled") == "true"
    assert spark.sparkContext.parallelize(range(2), 2).map(worker_env).collect() == ["True", "True"]


def test_workers_run_this_interpreter(spark: SparkSession) -> None:
    def worker_python(_: int) -> str:
        import sys as worker_sys

        return worker_sys.executable

    found = spark.sparkContext.parallelize(range(2), 2).map(worker_python).collect()
    assert found == [sys.executable, sys.executable]


def test_spark_session_joins_the_running_session(spark: SparkSession) -> None:
    from kcompact.spark.session import spark_session

    assert spark_session() is spark


def test_a_master_given_by_spark_submit_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from kcompact.spark import session

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf a=b pyspark-shell")
    assert not session._master_set_by_launcher()
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--master yarn pyspark-shell")
    assert session._master_set_by_launcher()
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "41234")  # what spark-submit hands its Python driver
    assert session._master_set_by_launcher()


def test_quiet_logging_configuration_is_written_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kcompact.spark import session

    monkeypatch.setattr(session.tempfile, "gettempdir", lambda: str(tmp_path))
    path = session._quiet_log4j2_file()
    assert path.read_text() == session.QUIET_LOG4J2 and "rootLogger.level = error" in path.read_text()
    assert session._quiet_log4j2_file() == path and list(tmp_path.iterdir()) == [path]
