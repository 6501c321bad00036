"""The shared session: local, UI off, workers on this interpreter, quiet by default."""

from __future__ import annotations

import os
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
    assert not session.master_set_by_launcher()
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--master yarn pyspark-shell")
    assert session.master_set_by_launcher()
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "41234")  # what spark-submit hands its Python driver
    assert session.master_set_by_launcher()


def test_quiet_logging_configuration_is_written_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kcompact.spark import session

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    path = session._quiet_log4j2_file()
    assert path.read_text() == session.QUIET_LOG4J2 and "rootLogger.level = error" in path.read_text()
    assert session._quiet_log4j2_file() == path and list(tmp_path.iterdir()) == [path]


def test_session_defaults_never_override_what_spark_submit_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from kcompact.spark import session

    monkeypatch.setattr(session, "_stderr_is_terminal", lambda: True)

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


def test_the_progress_bar_is_drawn_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from kcompact.spark import session

    with open(os.devnull, "w") as log_file:  # a pipe or a log file: no carriage returns
        monkeypatch.setattr(sys, "stderr", log_file)
        assert session._session_conf(False, local=True, launched=False)["spark.ui.showConsoleProgress"] == "false"
    monkeypatch.setattr(session, "_stderr_is_terminal", lambda: True)
    assert session._session_conf(False, local=True, launched=False)["spark.ui.showConsoleProgress"] == "true"


def test_a_local_driver_binds_to_loopback_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    from kcompact.spark import session

    for name in session.LOCAL_IP_ENV:
        monkeypatch.delenv(name, raising=False)
    local = session._session_conf(False, local=True, launched=False)
    assert (local["spark.driver.bindAddress"], local["spark.driver.host"]) == ("127.0.0.1", "127.0.0.1")
    assert "spark.driver.bindAddress" not in session._session_conf(False, local=False, launched=False)
    told = session._session_conf(False, local=True, launched=False, already_set={"spark.driver.bindAddress"})
    assert "spark.driver.bindAddress" not in told  # --conf spark.driver.bindAddress=… wins
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.0.0.7")
    assert "spark.driver.bindAddress" not in session._session_conf(False, local=True, launched=False)


def test_conf_pairs_reach_the_builder_after_kcompacts_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """--conf wins over kcompact's defaults (here: the progress bar and the loopback address)."""
    from pyspark.sql import SparkSession

    from kcompact.spark import session

    given: dict[str, str] = {}

    class Recording:
        def appName(self, _: str) -> Recording:
            return self

        def master(self, _: str) -> Recording:
            return self

        def config(self, key: str, value: str) -> Recording:
            given[key] = value
            return self

        def getOrCreate(self) -> None:
            raise RuntimeError("recorded")

    monkeypatch.setattr(SparkSession, "builder", Recording())
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    conf = session.parse_spark_conf(["spark.ui.showConsoleProgress=true", "spark.driver.bindAddress=0.0.0.0",
                                     "spark.hadoop.fs.s3a.endpoint=http://127.0.0.1:9000"])
    with pytest.raises(RuntimeError, match="recorded"):
        session.spark_session("local[1]", conf=conf)
    assert given["spark.ui.showConsoleProgress"] == "true"
    assert given["spark.driver.bindAddress"] == "0.0.0.0" and given["spark.driver.host"] == "127.0.0.1"
    assert given["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
