"""The options every ``kcompact spark …`` command shares: where Spark runs and how its session is set up.

``--master``, ``--verbose``, ``--conf KEY=VALUE`` (repeatable: any Spark setting, given to the session's
builder after kcompact's own, e.g. ``spark.jars.packages`` for ``s3a://``) and ``--executor-python``. The
command passes them to ``kcompact.spark.preflight.check_before_session`` (before Spark starts) and to
``kcompact.spark.session.command_session``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])

master_option = click.option(
    "--master", default=None, metavar="URL",
    help="Spark master (local[4], spark://host:7077, yarn…). Default: what spark-submit set, else local[*].")
verbose_option = click.option(
    "--verbose", is_flag=True,
    help="Show Spark's own logs (INFO), its Python workers' stderr and the address the driver listens on, and "
         "(spark clean) every skipped partition on a line of its own; default: errors only, skips counted by reason.")
conf_option = click.option(
    "--conf", "spark_conf_pairs", multiple=True, metavar="KEY=VALUE",
    help="A Spark setting for this command's session, e.g. spark.jars.packages=org.apache.hadoop:hadoop-aws:"
         "VERSION for s3a:// (docs/spark.md). Repeatable; wins over kcompact's own defaults.")
executor_python_option = click.option(
    "--executor-python", default=None, metavar="PYTHON",
    help="The Python the executors run (it must import this kcompact). Default: PYSPARK_PYTHON, else this "
         "interpreter.")


def session_options(command: F) -> F:
    """``--master``, ``--verbose``, ``--conf`` and ``--executor-python``, in that order (the command gets
    ``master``, ``verbose``, ``spark_conf_pairs`` and ``executor_python``)."""
    return master_option(verbose_option(conf_option(executor_python_option(command))))
