"""A failed Spark job said in one line: the lost task and its cause, or a JVM that is gone."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest

from kcompact.errors import KcompactError
from kcompact.spark.job_failure import JobFailure, lost_job, one_line_job

if TYPE_CHECKING:
    from pyspark import SparkContext

LOST_WORKER = (
    "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 3 in stage 0.0 failed 1 times, "
    "most recent failure: Lost task 3.0 in stage 0.0 (TID 3) (192.0.2.2 executor driver): "
    "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). Consider setting "
    "'spark.sql.execution.pyspark.udf.faulthandler.enabled' or'spark.python.worker.faulthandler.enabled' "
    "configuration to 'true' for the better Python traceback.\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator$$anonfun$1.applyOrElse(PythonRunner.scala:1136)\n"
)


def test_a_lost_python_worker_names_its_task_and_cause() -> None:
    failure = JobFailure.of(RuntimeError(LOST_WORKER), jvm_lost=False)
    assert (failure.lost_task, failure.cause, failure.jvm_lost) == (
        3, "Python worker exited unexpectedly (crashed)", False)
    assert failure.detail == LOST_WORKER


def test_a_lost_executor_names_its_task() -> None:
    text = ("Job aborted due to stage failure: Task 1 in stage 2.0 failed 4 times, most recent failure: Lost "
            "task 1.3 in stage 2.0 (TID 9) (10.0.0.7 executor 2): ExecutorLostFailure (executor 2 exited "
            "caused by one of the running tasks) Reason: Remote RPC client disassociated.\n")
    failure = JobFailure.of(RuntimeError(text), jvm_lost=False)
    assert failure.lost_task == 1
    assert failure.cause.startswith("ExecutorLostFailure (executor 2 exited caused by one of the running tasks)")


def test_a_jvm_that_is_gone_is_said_as_such() -> None:
    failure = JobFailure.of(ConnectionRefusedError(111, "Connection refused"), jvm_lost=True)
    assert (failure.lost_task, failure.jvm_lost) == (None, True)
    assert failure.cause == "Spark's JVM is gone ([Errno 111] Connection refused)"


def test_a_jvm_that_is_gone_is_said_in_py4js_words_without_its_class_names() -> None:
    """Which of py4j's errors a closed socket raises depends on the moment: the line says what happened only."""

    class Py4JNetworkError(Exception):  # py4j's own name, as the error arrives
        pass

    failure = JobFailure.of(Py4JNetworkError("Error while sending or receiving"), jvm_lost=True)
    assert failure.cause == "Spark's JVM is gone (Error while sending or receiving)"
    assert JobFailure.of(Py4JNetworkError(), jvm_lost=True).cause == "Spark's JVM is gone (Py4JNetworkError)"


def context(*, jvm_alive: bool, **more: object) -> SparkContext:
    """What ``lost_job`` asks of a SparkContext: whether its JVM answers a trivial call (and ``more``
    attributes)."""

    def now() -> int:
        if not jvm_alive:
            raise ConnectionRefusedError(111, "Connection refused")
        return 0

    system = SimpleNamespace(currentTimeMillis=now)
    return cast("SparkContext", SimpleNamespace(_jvm=SimpleNamespace(java=SimpleNamespace(lang=SimpleNamespace(
        System=system))), **more))


TASK_RAISED = ("An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
               ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 failed 1 "
               "times, most recent failure: Lost task 0.0 in stage 1.0 (TID 1) (192.0.2.2 executor driver): "
               "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
               '  File "/x/report_job.py", line 9, in run_report_task\nRuntimeError: a bug\n')


def test_a_lost_worker_is_a_lost_job_said_in_one_line() -> None:
    failure = lost_job(RuntimeError(LOST_WORKER), context(jvm_alive=True))
    assert failure is not None
    assert failure.line("spark report: the reading job", "nothing was changed") == (
        "spark report: the reading job failed: Python worker exited unexpectedly (crashed); nothing was changed")


def test_a_task_whose_code_raised_is_not_a_lost_job() -> None:
    assert lost_job(RuntimeError(TASK_RAISED), context(jvm_alive=True)) is None  # its own error, or a bug
    assert lost_job(RuntimeError("no such table"), context(jvm_alive=True)) is None


def test_a_jvm_that_is_gone_is_a_lost_job_whatever_was_raised() -> None:
    failure = lost_job(RuntimeError(TASK_RAISED), context(jvm_alive=False))
    assert failure is not None and failure.jvm_lost


def job_context(*, jvm_alive: bool) -> SparkContext:
    """A SparkContext as ``one_line_job`` uses it with ``verbose`` (no log levels): its JVM, a description."""
    def describe(_: str | None) -> None:
        if not jvm_alive:
            raise ConnectionRefusedError(111, "Connection refused")

    return context(jvm_alive=jvm_alive, setJobDescription=describe)


def test_a_job_whose_jvm_is_already_gone_is_one_line() -> None:
    with pytest.raises(KcompactError) as raised, one_line_job(job_context(jvm_alive=False), "kcompact: a job",
                                                              "spark x: the reading job", "nothing was changed",
                                                              verbose=True):
        pytest.fail("the job ran with no JVM")

    assert str(raised.value) == ("spark x: the reading job failed: Spark's JVM is gone ([Errno 111] Connection "
                                 "refused); nothing was changed")


def test_a_job_whose_task_raised_a_kcompact_error_says_that_error_and_a_bug_keeps_its_traceback() -> None:
    said = TASK_RAISED.replace("RuntimeError: a bug", "kcompact.errors.KcompactError: /x/orders-0: gone since the plan")
    with pytest.raises(KcompactError, match="^/x/orders-0: gone since the plan$"), one_line_job(
            job_context(jvm_alive=True), "kcompact: a job", "spark x: the reading job", "…", verbose=True):
        raise RuntimeError(said)

    bug = RuntimeError(TASK_RAISED)
    with pytest.raises(RuntimeError) as raised, one_line_job(
            job_context(jvm_alive=True), "kcompact: a job", "spark x: the reading job", "…", verbose=True):
        raise bug
    assert raised.value is bug
