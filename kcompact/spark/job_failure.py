"""A Spark job that failed under kcompact's tasks, said in one line.

A task whose Python worker dies (killed, out of memory) fails its Spark task; once a task has failed
``spark.task.maxFailures`` times (1 in local mode, 4 on a cluster) Spark aborts the job and the action
raises a ``Py4JJavaError`` whose text is the JVM's stack (~140 lines). When the JVM itself dies, the
action (or the next call into it) raises py4j's network error or a ``ConnectionRefusedError``. Either
way the tasks that had finished did their work (their partitions cleaned, their checkpoint entries
written); what the user needs is which Spark task was lost and why, in one line: :class:`JobFailure`.
The full text is kept for ``--verbose``.

:func:`lost_job` tells such a failure from a task whose own Python code raised (Spark names that task as
lost too, its cause a ``PythonException``): that is a kcompact error the command says in its own words, or a
bug. The commands with no partial result to report (``spark report``, ``spark export``) raise the failure's
:meth:`JobFailure.line` as their one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kcompact.spark.session import jvm_alive

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["JobFailure", "lost_job"]

# "... most recent failure: Lost task 3.0 in stage 5.0 (TID 11) (host executor driver):
#  org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). Consider ..."
_LOST_TASK = re.compile(r"Lost task (\d+)\.\d+ in stage [\d.]+ \([^)]*\)(?: \([^)]*\))?: "
                        r"(?:(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*: )?([^\n]+)")
_JAVA_CAUSE = re.compile(r"(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error): ([^\n]+)")
# the task's own Python code raised: "Lost task 0.0 in stage 1.0 (TID 1) (host executor driver):
#  org.apache.spark.api.python.PythonException: Traceback (most recent call last): ..."
_RAISED_IN_TASK = re.compile(r"Lost task \d+\.\d+ in stage [^\n]*?: org\.apache\.spark\.api\.python\.PythonException\b")
_FIRST_SENTENCE = re.compile(r"^(.+?[).])(?: [A-Z].*)?$")


@dataclass(frozen=True, slots=True)
class JobFailure:
    """Why a Spark job failed: the lost task (its index in the job's RDD) when Spark says, and the cause."""

    cause: str  # one line, e.g. "Python worker exited unexpectedly (crashed)"
    lost_task: int | None  # the RDD partition (kcompact: the pack) whose task failed; None: not said
    jvm_lost: bool  # the driver's JVM is gone: no further Spark call can work
    detail: str  # the whole error as raised (for ``--verbose``)

    @classmethod
    def of(cls, err: BaseException, *, jvm_lost: bool) -> JobFailure:
        """Describe what a Spark action raised.

        Args:
            err: the exception (``Py4JJavaError``, py4j's network error, ``ConnectionRefusedError``…).
            jvm_lost: whether the driver's JVM is gone (``session.jvm_alive`` said no).

        Returns:
            The failure; its cause is the lost task's exception message when the text names one, else
            the first Java exception's message, else the Python exception's first line.
        """
        text = str(err)
        lost = _LOST_TASK.search(text)
        if lost is not None:
            return cls(_sentence(lost.group(2)), int(lost.group(1)), jvm_lost, text)
        java = _JAVA_CAUSE.search(text)
        if java is not None and not jvm_lost:
            return cls(_sentence(java.group(1)), None, jvm_lost, text)
        first = text.strip().splitlines()[0] if text.strip() else ""
        cause = f"{type(err).__name__}: {first}" if first else type(err).__name__
        if jvm_lost:
            cause = f"Spark's JVM is gone ({cause})"
        return cls(cause, None, jvm_lost, text)

    def line(self, job: str, state: str) -> str:
        """The failure as a command's one error line.

        Args:
            job: which job failed, e.g. "spark export: the write job".
            state: what that leaves, and where (what was changed or written, and what to do).

        Returns:
            "<job> failed: <cause>; <state>".
        """
        return f"{job} failed: {self.cause}; {state}"


def lost_job(err: BaseException, context: SparkContext) -> JobFailure | None:
    """Why a Spark action failed, when Spark failed the job: a task lost (its Python worker or executor
    died) or the driver's JVM gone.

    Args:
        err: what the action raised.
        context: the job's SparkContext (asked whether its JVM still answers).

    Returns:
        The failure; None when a task's own Python code raised (a kcompact error, or a bug) or Spark names no
        lost task and its JVM is alive: the caller says that error as it would anyway.
    """
    jvm_lost = not jvm_alive(context)
    failure = JobFailure.of(err, jvm_lost=jvm_lost)
    if jvm_lost or (failure.lost_task is not None and _RAISED_IN_TASK.search(failure.detail) is None):
        return failure
    return None


def _sentence(message: str) -> str:
    """The message's first sentence: Spark appends advice ("Consider setting …") to its causes."""
    found = _FIRST_SENTENCE.match(message.strip())
    return (found.group(1) if found else message.strip()).rstrip(".")
