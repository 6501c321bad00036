"""The one place kcompact starts a SparkSession.

Every Spark command and job (fan-out clean, inspect, export, S5's distributed offset map) gets its
session from :func:`spark_session`, so they all share the same choices:

* master ``local[*]`` unless told otherwise: ``--master``, ``$MASTER``, or — under ``spark-submit``
  (or ``PYSPARK_SUBMIT_ARGS`` with ``--master``) — the submitted master, which is then left alone;
* the web UI off (nothing listens on a port of a user's machine);
* under ``spark-submit``, a setting the operator gave (``--conf``, spark-defaults.conf) is never
  overridden by these defaults;
* in local mode, Python workers talk to their JVM over a Unix domain socket rather than TCP on
  loopback: over TCP a task with a small input waits out a delayed ACK, ~40 ms; measured here, 64
  trivial tasks on ``local[1]`` take 55 ms each over TCP and 14 ms over the Unix socket (a cluster's
  executors keep their operator's setting);
* in local mode, the driver binds to 127.0.0.1 (``spark.driver.bindAddress`` and ``spark.driver.host``):
  every executor is a thread of this process, so nothing needs to reach it from another host (unless the
  user said otherwise: ``--conf``, ``SPARK_LOCAL_IP``/``SPARK_LOCAL_HOSTNAME``); :func:`driver_address` says
  where it listens (``--verbose``);
* Spark's console progress bar only when stderr is a terminal (in a pipe or a log file it is a screen of
  carriage returns), its logs at ERROR (INFO with ``verbose``) so a run prints only the bar and kcompact's
  own summary; pyspark's Python-side tracebacks about a JVM that
  died (py4j's logs, the accumulator server's errors) off unless ``verbose``, and so (in local mode) is
  the Python workers' stderr (pyspark's daemon's tracebacks under load: ``quiet_daemon``);
* the executors run the Python ``PYSPARK_PYTHON`` names (``spark-submit`` sets it from
  ``spark.pyspark.python``); when neither is given, this very interpreter (``sys.executable``): in
  local mode the workers then import the same kcompact and codec libraries as the driver without any
  packaging, and on a cluster the same path is expected to hold the same installation (pyspark's own
  default, ``python3`` on each worker's PATH, rarely has kcompact). Who chose is recorded in the
  conf as :data:`CHOSEN_BY_CONF` (``kcompact`` or ``PYSPARK_PYTHON``) for ``kcompact.spark.probe``,
  which checks the executors before any work; ``--executor-python`` names it for one command;
* last, the user's own ``--conf KEY=VALUE`` pairs, over any of the above (``spark.jars.packages`` for
  hadoop-aws, ``spark.hadoop.*`` for a file system's settings).

pyspark is imported inside the function: importing this module costs nothing and needs no JVM.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from kcompact.errors import ConfigError, RefusedError, UnsupportedFormatError
from kcompact.segment.files import write_replacing

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
LOOPBACK = "127.0.0.1"
BIND_ADDRESS_CONF = "spark.driver.bindAddress"
DRIVER_HOST_CONF = "spark.driver.host"
LOCAL_IP_ENV = ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")  # Spark's own ways to choose the driver's address
PYTHON_CONF = "spark.pyspark.python"
CHOSEN_BY_CONF = "spark.kcompact.executorPythonChosenBy"  # who chose the executors' Python
MAX_COUNTED_EXECUTORS = 1024  # dynamic allocation's default maximum is unbounded: count no more than this
QUIET_LOG_LEVEL = "ERROR"  # Spark's WARNs (native-hadoop, hostname loopback) mean nothing to a user
VERBOSE_LOG_LEVEL = "INFO"
DAEMON_MODULE_CONF = "spark.python.daemon.module"  # PythonWorkerFactory: python -m <it> starts the daemon
QUIET_DAEMON_MODULE = "kcompact.spark.quiet_daemon"  # pyspark.daemon with stderr silenced
QUIETED_LOGGERS = ("org.apache.spark",)  # its own level in QUIET_LOG4J2: the root's does not reach it
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
    master: str | None = None, *, verbose: bool = False, app_name: str = "kcompact",
    conf: Mapping[str, str] | None = None, executor_python: str | None = None,
) -> SparkSession:
    """Start (or join) the SparkSession kcompact's Spark commands run on.

    Args:
        master: a Spark master URL (``local[2]``, ``spark://host:7077``, ``yarn``); None means
            ``$MASTER``, else what ``spark-submit`` set, else ``local[*]``.
        verbose: keep Spark's own INFO logs; otherwise only errors and the progress bar show.
        app_name: the application name shown by the cluster manager.
        conf: the user's Spark settings (``--conf``), given to the builder after kcompact's own.
        executor_python: the Python the executors run (``--executor-python``); None: ``PYSPARK_PYTHON``,
            else this interpreter.

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
    if chosen is None and not master_set_by_launcher():
        chosen = DEFAULT_MASTER
    if chosen is not None:
        builder = builder.master(chosen)
    user_conf = dict(conf or {})
    chosen_by = _executors_python(executor_python, user_conf.get(PYTHON_CONF))
    builder = builder.config(CHOSEN_BY_CONF, chosen_by)
    launched = master_set_by_launcher()
    local = chosen is not None and chosen.startswith("local")
    already_set = (_launcher_conf_keys() if launched else frozenset()) | user_conf.keys()
    for key, value in _session_conf(verbose, local=local, launched=launched, own_python=chosen_by == "kcompact",
                                    already_set=already_set).items():
        builder = builder.config(key, value)
    for key, value in user_conf.items():
        builder = builder.config(key, value)
    with _jvm_stdout_to_stderr():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel(VERBOSE_LOG_LEVEL if verbose else QUIET_LOG_LEVEL)
    _quiet_python_side(session.sparkContext, verbose=verbose)
    return session


@contextmanager
def _jvm_stdout_to_stderr() -> Iterator[None]:
    """A JVM started in this block writes its stdout to this process's stderr.

    pyspark starts the driver JVM with this process's stdout, and the JVM prints there: Ivy's
    ``:: loading settings ::`` line when ``spark.jars.packages`` is resolved, for one, which would
    be the first line of a ``--json`` report. The JVM inherits file descriptor 1 while it points at 2.
    """
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def parse_spark_conf(pairs: Iterable[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` pairs as Spark settings (the last of a key wins, as with ``spark-submit``).

    Raises:
        ConfigError: a pair has no ``=`` or no key.
    """
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--conf: expected KEY=VALUE (a Spark setting), found {pair!r}")
        conf[key.strip()] = value
    return conf


def _quiet_python_side(context: SparkContext, *, verbose: bool) -> None:
    """A JVM that dies makes pyspark's Python side print tracebacks of its own: py4j logs each failed call
    into it, and the accumulator server (a ``socketserver``) prints the connection's ``EOFError``. The
    command says the failure in one line (``spark.job_failure``); ``verbose`` keeps them."""
    logging.getLogger("py4j").setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    server: Any = getattr(context, "_accumulatorServer", None)  # pyspark's own (SparkContext.__init__)
    if server is not None and not verbose:
        server.handle_error = _ignore_request_error


def _ignore_request_error(request: object, client_address: object) -> None:
    """``socketserver.BaseServer.handle_error`` that prints nothing."""


@contextmanager
def quiet_task_failures(context: SparkContext, *, verbose: bool = False) -> Iterator[None]:
    """Spark's own log lines about a failing task (a Python traceback and a JVM stack per attempt,
    ~200 lines) silenced for a job whose failure kcompact reports itself, as one line.

    Spark logs a task's failure at ERROR from several loggers (``Utils``, ``Executor``,
    ``TaskSetManager``, ``FileFormatWriter``) before the action raises; the action's exception still
    carries the cause, which the caller turns into its line. Local mode only changes anything here (a
    cluster's executors log on their own hosts); ``--verbose`` keeps every line.

    Args:
        context: the job's SparkContext.
        verbose: keep Spark's logs (do nothing).

    Yields:
        Nothing; the levels are back as they were when the block ends.
    """
    if verbose:
        yield
        return
    jvm: Any = context._jvm  # py4j's view of the driver JVM (classic sessions)
    log4j = jvm.org.apache.logging.log4j
    configurator = log4j.core.config.Configurator
    names = [log4j.LogManager.ROOT_LOGGER_NAME, *QUIETED_LOGGERS]
    before = [log4j.LogManager.getLogger(name).getLevel() for name in names]
    for name in names:
        configurator.setLevel(name, log4j.Level.OFF)
    try:
        yield
    finally:
        with suppress(Exception):  # a JVM that died in the block has no levels to restore
            for name, level in zip(names, before, strict=True):
                configurator.setLevel(name, level)


class LocalProperties(Protocol):
    """A SparkContext's thread-local job properties as the JVM takes them: None (null) removes one.

    pyspark hints the values as ``str`` only, though its ``setJobDescription(None)`` and friends pass the
    None through py4j to ``SparkContext.setLocalProperty``, which removes the property.
    """

    def setJobDescription(self, value: str | None) -> None: ...

    def setJobGroup(self, groupId: str | None, description: str | None) -> None: ...

    def setLocalProperty(self, key: str, value: str | None) -> None: ...


def local_properties(context: SparkContext) -> LocalProperties:
    """``context`` with its job-property setters typed as the JVM side takes them (:class:`LocalProperties`)."""
    return cast("LocalProperties", context)  # pyspark's hints leave out the None these setters accept


def refuse_speculation(context: SparkContext, subject: str, why: str) -> None:
    """Refuse a job whose tasks write partition files when ``spark.speculation`` is on.

    Args:
        context: the job's SparkContext.
        subject: what is refused (a path, or the command).
        why: what two attempts of one task would do.

    Raises:
        RefusedError: ``spark.speculation`` is true.
    """
    if context.getConf().get("spark.speculation", "false").strip().lower() == "true":
        raise RefusedError(f"{subject}: spark.speculation; expected false ({why}), found true")


def cluster_cores(context: SparkContext) -> int:
    """The cores a job can count on: Spark's ``defaultParallelism``, or, while executors are still
    registering (it is then 2 on a cluster), the cores the application asked for
    (``spark.executor.instances``, else a bounded ``spark.dynamicAllocation.maxExecutors``, times
    ``spark.executor.cores``).

    Args:
        context: the SparkContext.

    Returns:
        At least 1.
    """
    conf = context.getConf()
    per_executor = _conf_int(conf.get("spark.executor.cores", "1"))
    executors = _conf_int(conf.get("spark.executor.instances", "0"))
    if executors == 0 and conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        executors = min(_conf_int(conf.get("spark.dynamicAllocation.maxExecutors", "0")), MAX_COUNTED_EXECUTORS)
    return max(1, context.defaultParallelism, executors * per_executor)


def _conf_int(value: str | None) -> int:
    try:
        return max(0, int(value or "0"))
    except ValueError:
        return 0


def master_set_by_launcher() -> bool:
    """``spark-submit`` started this driver (it passes its gateway's port) or PYSPARK_SUBMIT_ARGS
    names a master: then the master comes from there, and kcompact must not override it."""
    return "PYSPARK_GATEWAY_PORT" in os.environ or "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")


def _launcher_conf_keys() -> frozenset[str]:
    """The settings ``spark-submit`` already gave this driver (its JVM is up: reading them starts nothing)."""
    from pyspark import SparkConf

    return frozenset(key for key, _ in SparkConf().getAll())


def _session_conf(verbose: bool, *, local: bool, launched: bool, own_python: bool = False,
                  already_set: Collection[str] = frozenset()) -> dict[str, str]:
    """kcompact's session defaults, minus what the operator set (``already_set``); ``own_python``: the
    executors run this interpreter (so they can import ``kcompact.spark.quiet_daemon``)."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true" if _stderr_is_terminal() else "false",
    }
    if local:
        conf["spark.python.unix.domain.socket.enabled"] = "true"
        if not any(os.environ.get(name) for name in LOCAL_IP_ENV) and not launched:
            # Spark binds to the address of the host name otherwise: reachable from the network, for nothing
            conf[BIND_ADDRESS_CONF] = LOOPBACK
            conf[DRIVER_HOST_CONF] = LOOPBACK
    if not verbose and local and own_python:
        # In local mode the Python workers' stderr goes through their daemon to the JVM's, the user's:
        # pyspark's daemon prints BrokenPipeError tracebacks there under load (kcompact.spark.quiet_daemon).
        # On a cluster it goes to the executor's log, where it belongs.
        conf[DAEMON_MODULE_CONF] = QUIET_DAEMON_MODULE
    if not verbose and not launched:
        # The driver JVM logs before setLogLevel can run: give it a configuration at the quiet level
        # (under spark-submit the driver JVM is already running: too late, and the operator's choice).
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={_quiet_log4j2_file()}"
    return {key: value for key, value in conf.items() if key not in already_set}


def _quiet_log4j2_file() -> Path:
    """A log4j2 configuration sending only ERRORs to stderr (written once per user, reused)."""
    path = Path(tempfile.gettempdir()) / f"kcompact-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != QUIET_LOG4J2:
        write_replacing(path, QUIET_LOG4J2.encode(), path.with_name(f"{path.name}.{os.getpid()}.tmp"))
    return path


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without it, or closed
        return False


def _executors_python(executor_python: str | None = None, conf_python: str | None = None) -> str:
    """The executors run ``executor_python`` when given (``--executor-python``), else ``conf_python``
    (``--conf spark.pyspark.python=…``: pyspark reads only the environment unless ``spark-submit`` set it
    from there), else ``PYSPARK_PYTHON``, else this interpreter (pyspark's default, ``python3`` on the
    PATH, may be another Python without kcompact). Returns who chose (``kcompact.spark.probe`` names it)."""
    for given, who in ((executor_python, "--executor-python"), (conf_python, PYTHON_CONF)):
        if given:
            os.environ["PYSPARK_PYTHON"] = given
            return who
    if os.environ.get("PYSPARK_PYTHON"):
        return "PYSPARK_PYTHON"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    return "kcompact"


def driver_address(context: SparkContext) -> str:
    """Where the driver listens, for ``--verbose``: its bind address and port, and the host name it
    gives executors when that differs.

    Args:
        context: the running SparkContext.

    Returns:
        E.g. ``127.0.0.1:41234``, or ``0.0.0.0:41234 (executors reach it as host-1)``.
    """
    conf = context.getConf()
    host = conf.get(DRIVER_HOST_CONF, None) or "?"
    bind = conf.get(BIND_ADDRESS_CONF, None) or os.environ.get("SPARK_LOCAL_IP") or host
    port = conf.get("spark.driver.port", None) or "?"
    return f"{bind}:{port}" + ("" if bind == host else f" (executors reach it as {host})")


@contextmanager
def command_session(
    master: str | None = None, *, verbose: bool = False, app_name: str = "kcompact",
    conf: Mapping[str, str] | None = None, executor_python: str | None = None,
) -> Iterator[tuple[SparkSession, float]]:
    """A session for one command: started here (and stopped at the end) unless one is already active.

    Args:
        master: as :func:`spark_session`.
        verbose: as :func:`spark_session`.
        app_name: as :func:`spark_session`.
        conf: as :func:`spark_session`.
        executor_python: as :func:`spark_session`.

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
    session = spark_session(master, verbose=verbose, app_name=app_name, conf=conf, executor_python=executor_python)
    try:
        yield session, time.perf_counter() - started
    finally:
        if already is None:
            _stop(session)


def _stop(session: SparkSession) -> None:
    """Stop the session; a JVM that is already gone (the command reported its job's failure) has nothing
    to stop, and pyspark's attempt to tell it raises."""
    try:
        session.stop()
    except Exception:
        if jvm_alive(session.sparkContext):
            raise


def jvm_alive(context: SparkContext) -> bool:
    """Whether the SparkContext's JVM still answers (a trivial call through py4j).

    Args:
        context: the SparkContext.

    Returns:
        False when the call fails: the JVM died or its gateway is closed.
    """
    try:
        jvm: Any = context._jvm
        jvm.java.lang.System.currentTimeMillis()
    except Exception:  # noqa: BLE001 - any failure of the call means there is no JVM to talk to
        return False
    return True
