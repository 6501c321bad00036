"""What every ``kcompact spark`` command checks around its Spark session, and the lines it prints about it:
before the session starts (``--conf``, the inputs, the output, the executors' Python), once it runs (the
output's Hadoop file system, the executors), and its start-up time. Pyspark and the library are imported
inside, so ``kcompact --help`` stays fast."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kcompact.cli import render

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kcompact.spark.probe import ExecutorCheck


def checks_before_session(paths: tuple[str, ...], *, output: str | None, master: str | None,
                          spark_conf_pairs: tuple[str, ...], executor_python: str | None,
                          storage_options: dict[str, Any] | None = None) -> dict[str, str]:
    """Parse ``--conf`` and check, before Spark starts, what the driver alone can check
    (``kcompact.spark.preflight``); returns the Spark settings.

    Raises:
        KcompactError: a ``--conf`` pair, an input URL, the output's file system or the executors' Python.
    """
    from kcompact.spark.preflight import check_before_session
    from kcompact.spark.session import parse_spark_conf

    conf = parse_spark_conf(spark_conf_pairs)
    check_before_session(paths, output=output, master=master, conf=conf, executor_python=executor_python,
                         storage_options=storage_options)
    return conf


def checks_in_session(spark: SparkSession, paths: tuple[str, ...], *, output: str | None, verbose: bool) -> None:
    """Once the session runs, before any job: the driver's address (``--verbose``), the output's Hadoop file
    system, and the executors (the probe job).

    Raises:
        RefusedError: the output's file system does not load, or the executors cannot run kcompact.
    """
    from kcompact.spark.hadoop_fs import check_output_filesystem
    from kcompact.spark.probe import check_executors
    from kcompact.spark.session import driver_address

    context = spark.sparkContext
    if verbose:
        render.err_console().print(f"Spark driver ({context.master}) listens on {driver_address(context)}",
                                   highlight=False, soft_wrap=True)
    check_output_filesystem(context, output)
    executors_line(check_executors(context, paths))


def check_new_output(output: str | None) -> None:
    """Refuse an ``--output`` that exists before any Spark work starts (a URI other than ``file://``
    is checked by Spark when it writes).

    Raises:
        KcompactError: the path exists.
    """
    from kcompact.spark.output import check_new_output as check_output

    if output is not None:
        check_output(output)


def executors_line(check: ExecutorCheck) -> None:
    """Which Python the executors run, when kcompact chose it (stderr)."""
    note = check.note()
    if note is not None:
        render.err_console().print(note, highlight=False, soft_wrap=True)


def startup_line(startup_s: float) -> None:
    """Spark's start-up time, apart from the work (stderr, so it never mixes with results)."""
    render.err_console().print(f"Spark session start-up: {startup_s:.1f} s", highlight=False)
