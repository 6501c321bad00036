"""pyspark's Python worker daemon with its stderr (and its workers') silenced, for a run without ``--verbose``.

Spark starts one daemon per executor (``PythonWorkerFactory``: ``python -m <spark.python.daemon.module>``);
the daemon forks the Python workers, and the JVM copies the daemon's stderr, which the workers inherit, to
its own — in local mode the command's stderr. Under load pyspark's daemon prints a traceback there when it
cannot flush a worker's output ("PySpark daemon failed to flush the output to the worker process",
``BrokenPipeError``: the JVM closed the socket first), which is none of the user's business: a task's
failure reaches the driver through the task's own result, and kcompact says it in one line. This module
points file descriptor 2 at ``/dev/null`` and then runs pyspark's own daemon unchanged. ``spark.session``
names it in ``spark.python.daemon.module`` unless ``--verbose`` is given or the operator chose a daemon.
"""

from __future__ import annotations

import os


def main() -> None:
    """Silence stderr, then run ``pyspark.daemon.manager`` (which reads its worker module from argv)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
