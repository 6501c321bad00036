"""Where a Spark task should run: ``host:/path`` log dirs, and RDDs whose tasks prefer a host.

A broker's log dirs are on its own disks. Given as ``HOST:/absolute/path`` (the ``scp``/``rsync``
form an operator writes for a file on another machine), a log dir or partition directory is read and
cleaned by tasks that prefer ``HOST`` (``spark clean``; ``spark inspect dirty-ratio`` and ``spark export``
read it so, their listing included): Spark's scheduler starts them on an executor of that host when one
has a free core, waiting ``spark.locality.wait`` (3 s by default) before it gives up the preference. A
preference, not a constraint: to keep every task on its broker's host, run one executor per broker host
and set ``spark.locality.wait`` above the job's length (docs/spark.md: one executor per broker host). ``HOST``
must be the name the executors register with (what ``hostname`` says there, or ``SPARK_LOCAL_HOSTNAME``).

A preference only, so every task that reads or changes a ``host:/path`` first checks that it runs on that
host (:func:`refuse_other_host`: ``HOST`` is this machine's ``socket.gethostname()``, its FQDN,
``SPARK_LOCAL_HOSTNAME`` or ``SPARK_LOCAL_IP``, or resolves to an address this machine can bind) and refuses
before it touches the disk otherwise: a host that never registers as an executor, whose tasks Spark ran
elsewhere once the locality wait was over, fails its rows, changing nothing, instead of cleaning or reading
another machine's directory of the same name.

A plain path means a file system every executor sees at that path (local mode, NFS and the like), as
before: its tasks prefer no host. A path that exists on the driver is always plain, colon or not. So is a
URL without ``//`` (``file:/tmp/x``, ``s3:/bucket/x``, ``hdfs:/x``: Hadoop's own form, :data:`URL_SCHEMES`)
and a drive letter (``C:/x``): neither names a host.

PySpark's ``SparkContext.parallelize`` gives its tasks no preferred locations; Spark's own
``SparkContext.makeRDD(Seq[(T, Seq[String])])`` does (a ``ParallelCollectionRDD`` with location prefs).
:func:`located_rdd` builds that RDD in the JVM with each element pickled as PySpark's own RDDs carry them,
one element per Spark partition, and wraps it as a PySpark RDD.
"""

from __future__ import annotations

import functools
import os
import pickle
import re
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcompact.errors import RefusedError
from kcompact.value import frozen

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext

HOST_PATH = re.compile(r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(?P<path>/(?!/).*)$")
"""``host:/absolute/path``: a host name (or IPv4 address) and an absolute path (not ``scheme://``); see
:func:`parse_host_path` for the names that are not hosts."""

URL_SCHEMES = frozenset({
    "file", "local", "memory", "http", "https", "ftp", "sftp", "ssh",  # fsspec's and Java's own
    "s3", "s3a", "s3n", "gs", "gcs", "hdfs", "webhdfs", "swebhdfs", "viewfs", "har",  # Hadoop's FileSystems
    "abfs", "abfss", "az", "adl", "wasb", "wasbs", "oss", "cos", "cosn", "obs", "o3fs", "ofs", "r2",
})
"""URL schemes that are not host names: ``file:/tmp/x`` is Hadoop's ``Path`` for a local file (``hdfs:/x``
the default NameNode's), never host ``file``."""


class OtherHostError(RefusedError):
    """A task for a ``host:/path`` runs on another host (its preference given up): it refused to start."""


def parse_host_path(text: str) -> tuple[str, str] | None:
    """``(host, path)`` of ``host:/absolute/path``, or None: not that form, a URL scheme
    (:data:`URL_SCHEMES`: ``file:/tmp/x``), or a drive letter (``C:/x``, a one-letter name).

    Args:
        text: as given.
    """
    found = HOST_PATH.match(text)
    if found is None or len(found["host"]) == 1 or found["host"].lower() in URL_SCHEMES:
        return None
    return found["host"], found["path"]


@frozen
class Located:
    """A path and the host whose disk holds it (None: any executor sees it at that path)."""

    host: str | None
    path: str

    def __str__(self) -> str:
        return self.path if self.host is None else f"{self.host}:{self.path}"


def locate(raw: str | Path, plain: Callable[[str], Path]) -> Located:
    """A path of the command line: ``host:/path``, or a plain path.

    Args:
        raw: as given.
        plain: what a plain path becomes (e.g. made absolute against the driver's cwd).

    Returns:
        The :class:`Located` path; a ``host:/path`` keeps its path as written.
    """
    text = str(raw)
    found = parse_host_path(text)
    if found is None or isinstance(raw, Path) or Path(text).exists():
        return Located(None, str(plain(text)))
    return Located(*found)


def is_host_path(raw: str) -> bool:
    """Whether ``raw`` is a ``host:/path`` (and no path of that name exists here).

    Args:
        raw: a path of the command line.
    """
    return locate(raw, Path).host is not None


def plain_paths(paths: Sequence[str]) -> list[str]:
    """The paths that are not ``host:/path`` (those every executor must see at the driver's path).

    Args:
        paths: the paths of the command line.
    """
    return [path for path in paths if not is_host_path(path)]


def locate_input(raw: str | Path) -> Located:
    """A path of a read-only command (``spark inspect dirty-ratio``, ``spark export``): a URL as given, a
    ``host:/path``, or a plain path made absolute (the executors have another cwd).

    Args:
        raw: as given.
    """
    from kcompact.segment.url import is_url

    if is_url(raw):
        return Located(None, str(raw))
    return locate(raw, lambda path: Path(path).absolute())


def refuse_other_host(host: str | None, path: str) -> None:
    """Refuse to work on ``host:path`` from another host (what a task does before it touches the disk).

    Spark's scheduler gives a task's preferred host up after ``spark.locality.wait``: a host that never
    registers as an executor has its tasks run elsewhere, where the same path may be another directory.

    Args:
        host: the host the path names (None: a plain path, seen by every executor).
        path: the path on that host.

    Raises:
        OtherHostError: this process does not run on ``host``.
    """
    if host is None or is_this_host(host):
        return
    raise OtherHostError(
        f"{host}:{path}: this task runs on {socket.gethostname()}, not on {host}, so it left the directory "
        f"alone; expected an executor on {host} (HOST must be the name or address the executors register "
        "with: one executor per broker host, spark.locality.wait above the job's length)")


@functools.lru_cache(maxsize=64)
def is_this_host(host: str) -> bool:
    """Whether ``host`` names this machine: its host name, FQDN, ``SPARK_LOCAL_HOSTNAME`` or
    ``SPARK_LOCAL_IP`` (what Spark's ``Utils.localHostName`` registers an executor with), or a name or
    address that resolves to an address this machine can bind (one of its own interfaces, loopback included).

    Args:
        host: a host name or IP address.
    """
    wanted = host.lower().rstrip(".")
    names = {socket.gethostname(), socket.getfqdn(), os.environ.get("SPARK_LOCAL_HOSTNAME", ""),
             os.environ.get("SPARK_LOCAL_IP", "")}
    if wanted in {name.lower().rstrip(".") for name in names if name}:
        return True
    try:
        addresses = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):  # no such name here
        return False
    return any(_bindable(family, address) for family, _, _, _, address in addresses)


def _bindable(family: int, address: Any) -> bool:
    """Whether this machine can bind ``address``: only its own addresses bind."""
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address[0], 0, *address[2:]))
    except OSError:
        return False
    return True


def run_located(context: SparkContext, function: Callable[[Any], Any], items: Sequence[Any],
                hosts: Sequence[str | None]) -> list[Any]:
    """``function`` over ``items`` in Spark tasks, one item a task preferring its host; results in order.

    Args:
        context: the SparkContext.
        function: picklable; what it returns is collected.
        items: picklable elements.
        hosts: each item's preferred host (None: none).
    """
    if not items:
        return []
    return located_rdd(context, items, hosts).map(function).collect()


def located_rdd(context: SparkContext, items: Sequence[Any], hosts: Sequence[str | None]) -> RDD[Any]:
    """An RDD of ``items``, one per Spark partition, the partition of each preferring its host.

    Args:
        context: the SparkContext.
        items: picklable elements.
        hosts: each element's preferred host (None: none); all None gives ``parallelize``'s RDD.

    Returns:
        The RDD; its JVM side's ``preferredLocations`` list each element's host.
    """
    if all(host is None for host in hosts):
        return context.parallelize(list(items), max(1, len(items)))
    from pyspark import RDD
    from pyspark.serializers import CPickleSerializer

    jvm: Any = context._jvm  # py4j's view of the driver JVM (classic sessions)
    to_seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq
    serializer = CPickleSerializer()
    pairs = jvm.java.util.ArrayList()
    for item, host in zip(items, hosts, strict=True):
        prefs = jvm.java.util.ArrayList()
        if host is not None:
            prefs.add(host)
        # what CPickleSerializer.loads reads back in the Python worker: one pickle per element
        pairs.add(jvm.scala.Tuple2(bytearray(pickle.dumps(item, pickle.HIGHEST_PROTOCOL)), to_seq(prefs)))
    byte_array = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    jrdd = context._jsc.sc().makeRDD(to_seq(pairs), byte_array)
    return RDD(jrdd.toJavaRDD(), context, serializer)
