"""A Spark job that failed under kcompact's tasks, said in one line.

A task whose Python worker dies (killed, out of memory) fails its Spark task; once a task has failed
``spark.task.maxFailures`` times (1 in local mode, 4 on a cluster) Spark aborts the job and the action
raises a ``Py4JJavaError`` whose text is the JVM's stack (~140 lines). When the JVM itself dies, the
action (or the next call into it) raises py4j's network error or a ``ConnectionRefusedError``. Either
way the tasks that had finished did their work (their partitions cleaned, their checkpoint entries
written); what the user needs is which Spark task was lost and why, in one line: :class:`JobFailure`.
The full text is kept for ``--verbose``.

:func:`lost_job` tells such a failure from a task whose own Python code raised (Spark names that task as
lost too, its cause a ``PythonException``): that is a kcompact error the command says in its own words
(:func:`task_error`), or a bug. The jobs with no partial result to report (``spark report``'s,
``spark inspect``'s, ``spark export``'s) run their action in :func:`one_line_job`, which raises the task's
error or the failure's :meth:`JobFailure.line` as the command's one line, and lets a bug's traceback through.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kcompact.errors import KcompactError
from kcompact.spark.session import jvm_alive, local_properties, quiet_task_failures
from kcompact.value import frozen

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["JobFailure", "lost_job", "one_line_job", "task_error"]

# "... most recent failure: Lost task 3.0 in stage 5.0 (TID 11) (host executor driver):
#  org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). Consider ..."
_LOST_TASK = re.compile(r"Lost task (\d+)\.\d+ in stage [\d.]+ \([^)]*\)(?: \([^)]*\))?: "
                        r"(?:(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*: )?([^\n]+)")
_JAVA_CAUSE = re.compile(r"(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error): ([^\n]+)")
# the task's own Python code raised: "Lost task 0.0 in stage 1.0 (TID 1) (host executor driver):
#  org.apache.spark.api.python.PythonException: Traceback (most recent call last): ..."
_RAISED_IN_TASK = re.compile(r"Lost task \d+\.\d+ in stage [^\n]*?: org\.apache\.spark\.api\.python\.PythonException\b")
_FIRST_SENTENCE = re.compile(r"^(.+?[).])(?: [A-Z].*)?$")
# the task's own kcompact error, as its traceback (inside Spark's text) ends: "kcompact.errors.KcompactError: …"
_TASK_ERROR = re.compile(r"kcompact\.errors\.(\w+): (.+)")


@frozen
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
        if jvm_lost:  # py4j's words for a closed socket (its error classes vary with the moment: not said)
            return cls(f"Spark's JVM is gone ({first or type(err).__name__})", None, jvm_lost, text)
        cause = f"{type(err).__name__}: {first}" if first else type(err).__name__
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


def task_error(err: Exception) -> Exception:
    """A Spark job's failure: the kcompact error a task raised, as one line, or ``err`` itself.

    Args:
        err: what the Spark action raised (a PythonException or Py4J error carrying the traceback).

    Returns:
        A :class:`~kcompact.errors.KcompactError` with the task's message, or ``err`` unchanged.
    """
    found = _TASK_ERROR.findall(str(err))
    if not found:
        return err
    return KcompactError(found[-1][1].strip())


@contextlib.contextmanager
def one_line_job(context: SparkContext, description: str, job: str, state: str, *, verbose: bool = False,
                 path: str | None = None) -> Iterator[None]:
    """Run a job that reads (or lists) and has nothing to report should it fail, its failure one line.

    Inside the block Spark's log lines about a failing task are silenced (:func:`quiet_task_failures`) and the
    job carries ``description`` in Spark's UI. Should the block raise, a task's own kcompact error is raised as
    its line (:func:`task_error`); a task lost or the JVM gone (:func:`lost_job`) as
    "<job> failed: <cause>; <state>"; anything else (a bug) as it was, traceback and all.

    Args:
        context: the job's SparkContext.
        description: the job's description in Spark's UI.
        job: the command and job, e.g. "spark inspect dirty-ratio: the reading job".
        state: what the failure leaves, e.g. "nothing was changed (… only reads): run it again".
        verbose: keep Spark's logs of a failing task.
        path: the error's path (``--json``'s ``path``), e.g. the ``--output`` left uncreated.

    Yields:
        Nothing; the description is removed when the block ends (when the JVM still answers).

    Raises:
        KcompactError: a task's kcompact error, or a lost task or JVM, as one line.
    """
    try:
        context.setJobDescription(description)  # inside: a JVM already gone is the same one line
        with quiet_task_failures(context, verbose=verbose):
            yield
    except Exception as err:
        said = task_error(err)
        if said is err:
            lost = lost_job(err, context)
            if lost is None:
                raise
            said = KcompactError(lost.line(job, state), path=path)
        raise said from err
    finally:
        with contextlib.suppress(Exception):  # a JVM that is gone has no description to reset
            local_properties(context).setJobDescription(None)


def _sentence(message: str) -> str:
    """The message's first sentence: Spark appends advice ("Consider setting …") to its causes."""
    found = _FIRST_SENTENCE.match(message.strip())
    return (found.group(1) if found else message.strip()).rstrip(".")
