"""The one place kcompact starts a SparkSession.

Every Spark command and job (fan-out clean, inspect, export, S5's distributed offset map) gets its
session from :func:`spark_session`, so they all share the same choices:

* master ``local[*]`` unless told otherwise: ``--master``, ``$MASTER``, or — under ``spark-submit``
  (or ``PYSPARK_SUBMIT_ARGS`` with ``--master``) — the submitted master, which is then left alone;
* the web UI off (nothing listens on a port of a user's machine);
* Python workers talk to their JVM over a Unix domain socket rather than TCP on loopback: over TCP
  a task with a small input waits out a delayed ACK, ~40 ms; measured here, 64 trivial tasks on
  ``local[1]`` take 55 ms each over TCP and 14 ms over the Unix socket;
* Spark's console progress bar on, its logs at ERROR (INFO with ``verbose``) so a run
  prints only the bar and kcompact's own summary;
* in local mode the workers run this very interpreter (``sys.executable``), so they import the same
  kcompact and codec libraries as the driver without any packaging.

pyspark is imported inside the function: importing this module costs nothing and needs no JVM.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.errors import UnsupportedFormatError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
QUIET_LOG_LEVEL = "ERROR"  # Spark's WARNs (native-hadoop, hostname loopback) mean nothing to a user
VERBOSE_LOG_LEVEL = "INFO"
QUIET_LOG4J2 = f"""\
rootLogger.level = {QUIET_LOG_LEVEL.lower()}
rootLogger.appenderRef.stderr.ref = console
logger.spark.name = org.apache.spark
logger.spark.level = {QUIET_LOG_LEVEL.lower()}
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""
MISSING_PYSPARK = (
    "the Spark commands need pyspark and pyarrow; expected them installed "
    "(pip install 'kcompact[spark]'), found {found}"
)


def spark_session(
    master: str | None = None, *, verbose: bool = False, app_name: str = "kcompact"
) -> SparkSession:
    """Start (or join) the SparkSession kcompact's Spark commands run on.

    Args:
        master: a Spark master URL (``local[2]``, ``spark://host:7077``, ``yarn``); None means
            ``$MASTER``, else what ``spark-submit`` set, else ``local[*]``.
        verbose: keep Spark's own INFO logs; otherwise only errors and the progress bar show.
        app_name: the application name shown by the cluster manager.

    Returns:
        The active SparkSession (an existing one is reused, its log level set as asked).

    Raises:
        UnsupportedFormatError: pyspark is not installed.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as err:
        raise UnsupportedFormatError(MISSING_PYSPARK.format(found=f"ImportError: {err}")) from err
    builder = SparkSession.builder.appName(app_name)
    chosen = master or os.environ.get("MASTER")
    if chosen is None and not _master_set_by_launcher():
        chosen = DEFAULT_MASTER
    if chosen is not None:
        builder = builder.master(chosen)
        _local_workers_python(chosen)
    for key, value in _session_conf(verbose).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(VERBOSE_LOG_LEVEL if verbose else QUIET_LOG_LEVEL)
    return session


def _master_set_by_launcher() -> bool:
    """``spark-submit`` started this driver (it passes its gateway's port) or PYSPARK_SUBMIT_ARGS
    names a master: then the master comes from there, and kcompact must not override it."""
    return "PYSPARK_GATEWAY_PORT" in os.environ or "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")


def _session_conf(verbose: bool) -> dict[str, str]:
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true",
        "spark.python.unix.domain.socket.enabled": "true",
    }
    if not verbose:
        # The driver JVM logs before setLogLevel can run: give it a configuration at the quiet level.
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={_quiet_log4j2_file()}"
    return conf


def _quiet_log4j2_file() -> Path:
    """A log4j2 configuration sending only ERRORs to stderr (written once per user, reused)."""
    path = Path(tempfile.gettempdir()) / f"kcompact-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != QUIET_LOG4J2:
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(QUIET_LOG4J2)
        os.replace(temporary, path)
    return path


def _local_workers_python(master: str) -> None:
    """Local workers run this interpreter: pyspark's default (``python3`` on the PATH) may be another
    Python without kcompact. A cluster's executors keep their own setting (``PYSPARK_PYTHON``)."""
    if master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@contextmanager
def command_session(
    master: str | None = None, *, verbose: bool = False, app_name: str = "kcompact"
) -> Iterator[tuple[SparkSession, float]]:
    """A session for one command: started here (and stopped at the end) unless one is already active.

    Args:
        master: as :func:`spark_session`.
        verbose: as :func:`spark_session`.
        app_name: as :func:`spark_session`.

    Yields:
        The session and the seconds its start-up took (about 0 when it was already running).

    Raises:
        UnsupportedFormatError: pyspark is not installed.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as err:
        raise UnsupportedFormatError(MISSING_PYSPARK.format(found=f"ImportError: {err}")) from err
    already = SparkSession.getActiveSession()
    started = time.perf_counter()
    session = spark_session(master, verbose=verbose, app_name=app_name)
    try:
        yield session, time.perf_counter() - started
    finally:
        if already is None:
            session.stop()
