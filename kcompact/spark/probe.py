"""Before a Spark command works on a cluster: one tiny probe job asks the executors what they see.

A fresh cluster's executors run whatever Python ``PYSPARK_PYTHON`` names there (pyspark's default is
``python3`` on the worker's PATH), which often has no kcompact, and their file system may not hold the
driver's log dirs. Left alone, every task then fails with a traceback after the whole job ran. The
probe runs first, on every core the application has (tasks spread over the executors as Spark places
them), and asks each: which Python, which kcompact version, and can it see each input path. Any
mismatch is one :class:`~kcompact.errors.RefusedError` line saying what to set.

The probe's function is compiled from source here, so cloudpickle ships it *by value*: an executor
whose Python cannot import kcompact still runs it and answers "no kcompact" instead of failing to
unpickle the task.

A ``local[…]`` master whose workers run this very interpreter needs no probe (same process tree, same
files); with any other Python, or any other master, the probe runs (a second or so).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kcompact import __version__
from kcompact.errors import KcompactError, RefusedError
from kcompact.spark.job_failure import JobFailure, lost_job
from kcompact.spark.output import is_local_master, is_uri
from kcompact.spark.session import CHOSEN_BY_CONF, cluster_cores, local_properties
from kcompact.value import frozen

if TYPE_CHECKING:
    from pyspark import SparkContext

PROBE_TIMEOUT_S = 180.0  # a cluster with no free cores never runs the probe: say so instead of waiting
MAX_PROBE_TASKS = 64
SET_PYTHON = ("set --executor-python (or PYSPARK_PYTHON, spark.pyspark.python) to a Python that has "
              "kcompact {version} at the same path on every worker")

_PROBE_SOURCE = '''
def probe(paths):
    import os, socket, sys
    try:
        import kcompact
        import pyarrow  # the export's reader and every Parquet write need it too
        version, problem = kcompact.__version__, None
    except Exception as err:
        version, problem = None, f"{type(err).__name__}: {err}"
    missing = [p for p in paths if not os.path.isdir(p)]
    return (socket.gethostname(), sys.executable, version, problem, missing)


def task(paths):
    return lambda _index: probe(paths)
'''


@frozen
class ExecutorCheck:
    """What the probe found: the executors' Python, who chose it, and the hosts that answered."""

    python: str
    chosen_by: str
    hosts: tuple[str, ...]

    def note(self) -> str | None:
        """The line to tell the user when kcompact chose the executors' Python itself (and probed them)."""
        if self.chosen_by != "kcompact" or not self.hosts:
            return None
        return (f"executors run {self.python} (the driver's Python; set PYSPARK_PYTHON or "
                "spark.pyspark.python to choose another)")


def check_executors(context: SparkContext, paths: Iterable[str], *, timeout_s: float = PROBE_TIMEOUT_S,
                    always: bool = False) -> ExecutorCheck:
    """Check that the executors import this kcompact version and see every local input path.

    Args:
        context: the running SparkContext.
        paths: the command's inputs (URLs are not checked: they are read through their file system).
        timeout_s: how long to wait for the probe to run at all.
        always: probe even local workers running this interpreter.

    Returns:
        The :class:`ExecutorCheck` (no host when the probe was not needed).

    Raises:
        RefusedError: an executor could not run Python, has no or another kcompact, or cannot see a path.
    """
    python = context.pythonExec or "python3"
    chosen_by = context.getConf().get(CHOSEN_BY_CONF, "PYSPARK_PYTHON") or "PYSPARK_PYTHON"
    same_python = os.path.realpath(python) == os.path.realpath(sys.executable)
    if is_local_master(context.master) and same_python and not always:
        return ExecutorCheck(python, chosen_by, ())
    local = [os.path.abspath(p) for p in paths if not is_uri(p)]
    answers = _run_probe(context, local, python, chosen_by, timeout_s)
    for host, executor_python, version, problem, missing in answers:
        where = f"executor {host}: Python {executor_python} ({_said_by(chosen_by)})"
        if version is None:
            raise RefusedError(f"{where} cannot import kcompact and pyarrow ({problem}); "
                               + SET_PYTHON.format(version=__version__))
        if version != __version__:
            raise RefusedError(f"{where} has kcompact {version}, the driver {__version__}; "
                               + SET_PYTHON.format(version=__version__))
        if missing:
            raise RefusedError(
                f"{missing[0]}: executor {host} cannot see it; expected every executor to see the inputs at "
                "the driver's paths (a shared POSIX file system), or run on that host with --master 'local[*]'")
    return ExecutorCheck(python, chosen_by, tuple(sorted({answer[0] for answer in answers})))


def _run_probe(context: SparkContext, paths: list[str], python: str, chosen_by: str,
               timeout_s: float) -> list[tuple[Any, ...]]:
    namespace: dict[str, Any] = {"__name__": "kcompact_probe"}  # no such module: pickled by value
    exec(compile(_PROBE_SOURCE, "<kcompact probe>", "exec"), namespace)  # noqa: S102 - our own constant
    task = namespace["task"](paths)
    tasks = min(MAX_PROBE_TASKS, max(2, cluster_cores(context)))
    group = f"kcompact-probe-{os.getpid()}"
    context.setJobGroup(group, "kcompact: probe the executors (Python, kcompact, paths)")
    timer = threading.Timer(timeout_s, context.cancelJobGroup, [group])
    timer.start()
    try:
        answers: list[tuple[Any, ...]] = (context.parallelize(range(tasks), tasks)
                                          .map(task).collect())
    except Exception as err:
        if not timer.is_alive():
            raise RefusedError(f"{context.master}: no executor ran kcompact's probe task within "
                               f"{timeout_s:.0f} s; expected a worker with free cores for this application "
                               "(check the master's workers and spark.executor.cores/memory)") from err
        lost = lost_job(err, context)
        if lost is not None and lost.jvm_lost:  # no executor's fault: the driver's JVM is gone
            raise KcompactError(lost.line("the probe of the executors", "nothing was changed: run it again")) from err
        raise RefusedError(f"executors could not run Python {python} ({_said_by(chosen_by)}): "
                           f"{_reason(err, lost)}; " + SET_PYTHON.format(version=__version__)) from err
    finally:
        timer.cancel()
        local_properties(context).setJobGroup(None, None)
    return answers


def _said_by(chosen_by: str) -> str:
    return "the driver's Python, chosen by kcompact" if chosen_by == "kcompact" else f"from {chosen_by}"


_REASONS = (
    re.compile(r"Cannot run program [^\n]*"),
    re.compile(r"Python in worker has different version[^\n]*"),
    re.compile(r"(?:ModuleNotFoundError|ImportError): [^\n]*"),
)


def _reason(err: Exception, lost: JobFailure | None) -> str:
    """Why the probe's tasks failed: a known cause, else the lost task's (a worker that died, e.g. crashed)."""
    text = str(err)
    for pattern in _REASONS:
        found = pattern.search(text)
        if found:
            return found.group(0).strip().rstrip(".")
    if lost is not None:
        return lost.cause
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(err).__name__)[:300]
