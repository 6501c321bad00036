"""The shared session: local, UI off, workers on this interpreter, quiet by default."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.spark.fakes import fake_context

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

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    path = session._quiet_log4j2_file()
    assert path.read_text() == session.QUIET_LOG4J2 and "rootLogger.level = error" in path.read_text()
    assert session._quiet_log4j2_file() == path and list(tmp_path.iterdir()) == [path]


def test_session_defaults_never_override_what_spark_submit_was_given() -> None:
    from kcompact.spark import session

    local = session._session_conf(False, local=True, launched=False)
    assert local["spark.python.unix.domain.socket.enabled"] == "true"
    assert "log4j2.configurationFile" in local["spark.driver.extraJavaOptions"]
    cluster = session._session_conf(False, local=False, launched=True,
                                    already_set={"spark.ui.enabled", "spark.python.unix.domain.socket.enabled"})
    assert cluster == {"spark.ui.showConsoleProgress": "true"}  # the operator's ui setting, JVM options kept
    assert "spark.python.unix.domain.socket.enabled" not in session._session_conf(True, local=False, launched=False)


def test_cluster_cores_counts_the_executors_asked_for_while_they_register() -> None:
    from kcompact.spark.session import MAX_COUNTED_EXECUTORS, cluster_cores

    assert cluster_cores(fake_context(2)) == 2  # nothing asked: Spark's own figure
    assert cluster_cores(fake_context(2, spark_executor_instances="10", spark_executor_cores="4")) == 40
    assert cluster_cores(fake_context(96, spark_executor_instances="10", spark_executor_cores="4")) == 96
    dynamic = {"spark_dynamicAllocation_enabled": "true", "spark_executor_cores": "2"}
    assert cluster_cores(fake_context(2, **dynamic, spark_dynamicAllocation_maxExecutors="16")) == 32
    assert cluster_cores(fake_context(2, **dynamic, spark_dynamicAllocation_maxExecutors="2147483647")) == (
        2 * MAX_COUNTED_EXECUTORS)
    assert cluster_cores(fake_context(2, **dynamic)) == 2  # no maximum given: nothing to count on
    assert cluster_cores(fake_context(2, spark_executor_instances="lots")) == 2


def test_speculation_is_refused_naming_what_two_attempts_would_do() -> None:
    from kcompact.errors import RefusedError
    from kcompact.spark.session import refuse_speculation

    refuse_speculation(fake_context(2), "spark clean", "twice")
    refuse_speculation(fake_context(2, spark_speculation="false"), "spark clean", "twice")
    with pytest.raises(RefusedError, match=r"^spark clean: spark.speculation; expected false \(twice\), found true"):
        refuse_speculation(fake_context(2, spark_speculation=" True"), "spark clean", "twice")
