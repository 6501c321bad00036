"""Which Hadoop file system writes a Spark command's ``--output``, checked before any job runs.

Spark writes ``--output`` through Hadoop's ``FileSystem`` for the URI's scheme. The pip pyspark ships
Hadoop's client (``hadoop-client-api``/``-runtime``: ``file://``, ``hdfs://``, ``viewfs://``, ``har://``)
and none of the object stores' modules: ``s3a://`` needs ``hadoop-aws`` (and the AWS SDK it depends on),
``abfs(s)://``/``wasb(s)://`` ``hadoop-azure``, ``oss://`` ``hadoop-aliyun``. Without one, the job runs in
full and its write fails at the end with a ``ClassNotFoundException``. A Spark user brings the module with
``spark.jars.packages`` (resolved from Maven Central into Ivy's cache as the JVM starts), of the same
version as the bundled Hadoop client: :func:`bundled_hadoop_version`.

Two checks, each one line naming the package to add:

* :func:`missing_output_package`, before the JVM starts: the scheme needs a module pyspark lacks and
  nothing in the command's settings could bring it (no ``spark.jars*`` or extra class path, no
  ``spark-defaults.conf`` of its own, not run by ``spark-submit``);
* :func:`check_output_filesystem`, once the JVM runs, before any job: Hadoop's own
  ``FileSystem.getFileSystemClass(scheme, conf)`` loads the class, as the write would.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcompact.errors import RefusedError

if TYPE_CHECKING:
    from pyspark import SparkContext

HADOOP_GROUP = "org.apache.hadoop"
SCHEME_MODULES = {  # scheme -> the Apache Hadoop module whose FileSystem serves it
    "s3a": "hadoop-aws",
    "abfs": "hadoop-azure",
    "abfss": "hadoop-azure",
    "wasb": "hadoop-azure",
    "wasbs": "hadoop-azure",
    "oss": "hadoop-aliyun",
}
BUNDLED_SCHEMES = frozenset({"file", "hdfs", "viewfs", "har", "webhdfs", "swebhdfs"})  # in hadoop-client-*
CLASSPATH_KEYS = ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath")
CLASSPATH_ENV = ("SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH", "PYSPARK_SUBMIT_ARGS", "PYSPARK_GATEWAY_PORT")
_CLIENT_JAR = re.compile(r"^hadoop-client-api-(\d[\w.-]*)\.jar$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_JAVA_CAUSE = re.compile(r"(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error): [^\n]+")
FALLBACK_VERSION = "<the Hadoop version of pyspark/jars/hadoop-client-api-*.jar>"


def output_scheme(output: str) -> str | None:
    """The URI scheme of ``output`` in lower case, or None for a plain path."""
    found = _SCHEME.match(output)
    return found.group(1).lower() if found else None


def bundled_hadoop_version() -> str | None:
    """The Hadoop version pyspark's jars were built with (from ``hadoop-client-api-X.jar``), or None."""
    jars = _pyspark_jars()
    if jars is None:
        return None
    for jar in sorted(os.listdir(jars)):
        found = _CLIENT_JAR.match(jar)
        if found:
            return found.group(1)
    return None


def package_hint(scheme: str) -> str:
    """What to add for ``scheme``: ``--conf spark.jars.packages=org.apache.hadoop:hadoop-aws:3.5.0``."""
    module = SCHEME_MODULES.get(scheme)
    if module is None:
        return ("a package whose Hadoop FileSystem serves it on Spark's class path "
                "(--conf spark.jars.packages=GROUP:ARTIFACT:VERSION)")
    return f"--conf spark.jars.packages={HADOOP_GROUP}:{module}:{bundled_hadoop_version() or FALLBACK_VERSION}"


def missing_output_package(output: str | None, conf: Mapping[str, str]) -> None:
    """Refuse, before the JVM starts, an ``--output`` whose file system no jar of this command can serve.

    Args:
        output: the ``--output`` as given (None: no output).
        conf: the command's ``--conf`` settings.

    Raises:
        RefusedError: the scheme needs a Hadoop module that pyspark does not ship and that nothing in
            the command's settings (``--conf``, ``spark-defaults.conf``, ``spark-submit``) could add.
    """
    scheme = None if output is None else output_scheme(output)
    module = None if scheme is None else SCHEME_MODULES.get(scheme)
    if output is None or scheme is None or module is None or _could_add_jars(conf):
        return
    jars = _pyspark_jars()
    if jars is not None and any(name.startswith(f"{module}-") for name in os.listdir(jars)):
        return
    raise RefusedError(f"{output}: {scheme}:// needs {module}, which pyspark does not ship; "
                       f"expected {package_hint(scheme)}")


def check_output_filesystem(context: SparkContext, output: str | None) -> None:
    """Load ``--output``'s Hadoop FileSystem class in the driver's JVM, as Spark's write would, before any job.

    Args:
        context: the running SparkContext.
        output: the ``--output`` as given (None, or a plain path: nothing to check).

    Raises:
        RefusedError: Hadoop has no file system for the scheme, or its class does not load.
    """
    scheme = None if output is None else output_scheme(output)
    if output is None or scheme is None or scheme == "file":
        return
    try:
        jvm: Any = context._jvm
        hadoop: Any = context._jsc
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, hadoop.hadoopConfiguration())
    except Exception as err:  # py4j's Py4JJavaError carries the Java exception as text
        text = str(err)
        cause = _JAVA_CAUSE.search(text)
        found = cause.group(0).strip() if cause else (text.strip().splitlines() or [type(err).__name__])[0]
        raise RefusedError(f"{output}: {scheme}:// has no Hadoop file system in Spark's JVM; "
                           f"expected {package_hint(scheme)}, found {found}") from err


def _could_add_jars(conf: Mapping[str, str]) -> bool:
    """Whether a jar beyond pyspark's own may be on the driver's class path: a class-path setting in
    ``conf`` or in a ``spark-defaults.conf``, or a launcher (``spark-submit``, ``PYSPARK_SUBMIT_ARGS``)."""
    if any(key in conf for key in CLASSPATH_KEYS) or any(os.environ.get(name) for name in CLASSPATH_ENV):
        return True
    for defaults in _defaults_files():
        try:
            text = defaults.read_text(errors="replace")
        except OSError:
            return True  # unreadable here: Spark may read it; let the JVM check say
        if any(re.search(rf"^\s*{re.escape(key)}\b", text, re.MULTILINE) for key in CLASSPATH_KEYS):
            return True
    return False


def _defaults_files() -> list[Path]:
    """The ``spark-defaults.conf`` files ``spark-submit`` would read (``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``)."""
    jars = _pyspark_jars()
    homes = [os.environ.get("SPARK_CONF_DIR"), None if jars is None else str(jars.parent / "conf")]
    files = [Path(home) / "spark-defaults.conf" for home in homes if home]
    return [path for path in files if path.exists()]


def _pyspark_jars() -> Path | None:
    """The ``jars`` directory Spark's JVM starts with: ``$SPARK_HOME/jars``, else pip pyspark's (found
    without importing pyspark), or None."""
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home and (Path(spark_home) / "jars").is_dir():
        return Path(spark_home) / "jars"
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        jars = Path(location) / "jars"
        if jars.is_dir():
            return jars
    return None
