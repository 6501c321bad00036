"""A ``kcompact`` command line whose Spark JVM is killed mid-job, by the job's own Python task.

Run as ``python -m tests.spark.dying_jvm JOB kcompact-args...`` (its own Spark session: the tests' shared one
must live on). JOB names the task that SIGKILLs the driver's JVM (in local mode the Python worker's ancestor):
``report`` (the reading job of ``spark report``), ``dirty-ratio`` (that of ``spark inspect dirty-ratio``),
``replicas`` (the comparing job of ``spark inspect replicas``) or ``write`` (the write job of ``spark export``,
from a UDF over the rows being written, once the output directory exists). The wrappers are closures, so Spark ships
them by value to the Python workers, where kcompact itself is unpatched.
"""

from __future__ import annotations

import sys
from typing import Any


def kill_jvm() -> None:
    """SIGKILL the nearest ``java`` ancestor of this process (a Spark Python worker: the driver's JVM)."""
    import os
    import signal
    import time

    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/comm") as comm:
            if comm.read().strip() == "java":
                os.kill(pid, signal.SIGKILL)
                time.sleep(60)  # this worker goes with its JVM
                return


def patch_report() -> None:
    from kcompact.spark import report_job

    def dying(part: Any) -> Any:
        kill_jvm()

    report_job.run_report_task = dying


def patch_dirty_ratio() -> None:
    from kcompact.spark import inspect_job

    def dying(part: Any) -> Any:
        kill_jvm()

    inspect_job.run_report_slice = dying


def patch_replicas() -> None:
    from kcompact.spark import replicas_job

    def dying(task: Any) -> Any:
        kill_jvm()

    replicas_job.run_replicas_task = dying


def patch_write() -> None:
    from kcompact.spark import export

    read_records = export.read_records

    def reading(*args: Any, **kwargs: Any) -> Any:
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType

        def dying_at(offset: int) -> int:
            if offset == 3:
                kill_jvm()
            return offset

        frame = read_records(*args, **kwargs)
        return frame.withColumn("offset", F.udf(dying_at, LongType(), useArrow=False)("offset"))

    export.read_records = reading


if __name__ == "__main__":
    {"report": patch_report, "dirty-ratio": patch_dirty_ratio, "replicas": patch_replicas,
     "write": patch_write}[sys.argv[1]]()
    from kcompact.cli.main import main

    sys.argv = ["kcompact", *sys.argv[2:]]
    main()
