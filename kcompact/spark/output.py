"""Where a Spark command writes its Parquet ``--output``: a URI handed to Spark untouched, or a local path.

An ``--output`` with a scheme (``hdfs://host:9000/dir``, ``s3a://bucket/dir``, ``abfss://…``,
``file:///shared/dir``) is given to Spark's writer exactly as typed: ``Path()`` would fold its ``//``
(``hdfs:/host:9000/dir``). A plain local path is fine with a ``local[…]`` master (the executors are
threads of this machine) but not with a cluster's: each executor would leave its part files on its own
disk and the driver would find an incomplete directory. There the user must say ``file://`` (a file
system every executor and the driver share) or give a cluster file system's URI.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcompact.errors import KcompactError, RefusedError
from kcompact.spark.job_failure import lost_job, task_error
from kcompact.spark.session import quiet_task_failures

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, DataFrameWriter

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
FILE_SCHEME = "file://"
_JAVA_CAUSE = re.compile(r"(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error): [^\n]+")


def is_uri(text: str) -> bool:
    """``text`` starts with a URI scheme and ``//`` (``s3a://…``, ``file:///…``)."""
    return _SCHEME.match(text) is not None


def is_local_master(master: str | None) -> bool:
    """The master runs every executor inside this driver's machine (``local``, ``local[4]``, …)."""
    return master is not None and master.startswith("local")


def local_part(output: str) -> Path | None:
    """The local file system path ``output`` names: itself, or a ``file://`` URI's path; None for other URIs."""
    if output.startswith(FILE_SCHEME):
        return Path(output[len(FILE_SCHEME):] or "/")
    return None if is_uri(output) else Path(output)


def check_new_output(output: str) -> None:
    """Refuse an ``--output`` that already exists on the local file system (other URIs: Spark says).

    Raises:
        KcompactError: it exists.
    """
    local = local_part(output)
    if local is not None and local.exists():
        raise KcompactError(f"{output}: the --output directory; expected a new path, found it exists")


def output_target(output: str, master: str | None) -> str:
    """What to hand Spark's writer for ``--output``, checked against the master.

    Args:
        output: the ``--output`` as given.
        master: the running SparkContext's master.

    Returns:
        ``output`` itself, untouched.

    Raises:
        RefusedError: a plain local path with a cluster master.
        KcompactError: the local path (or ``file://`` path) exists.
    """
    check_new_output(output)
    if not is_uri(output) and not is_local_master(master):
        absolute = Path(output).absolute()
        raise RefusedError(
            f"{output}: --output is a plain local path with master {master}; expected a URI every executor "
            f"can write to (file://{absolute} on a file system the driver and all executors share, or "
            "hdfs://, s3a://, abfss://…), found a path each executor would resolve on its own disk")
    return output


def write_new_parquet(writer: DataFrameWriter, output: str, context: SparkContext, *,
                      verbose: bool = False, then: Callable[[], None] | None = None,
                      job: str = "the write job", done: str | None = None) -> None:
    """``writer.parquet(output)`` into a new ``output``, a failure one line naming the URI as given, leaving
    nothing there when it fails.

    Spark creates the directory before its tasks run and, when one fails, aborts the job but leaves
    the directory (empty, or with a ``_temporary`` of part files, and never the ``_SUCCESS`` its committer
    writes last); a directory at ``--output`` would look like an export. Removed here when it was not there
    before (through Hadoop's FileSystem: any URI Spark writes; when the JVM is gone, a local path through
    Python). A failing task's own log lines are silenced (:func:`quiet_task_failures`): the error is
    kcompact's one line; a task lost or a JVM gone (:func:`kcompact.spark.job_failure.lost_job`) is said as
    such, with what is left at ``output``: nothing, or an incomplete directory that must not be used.

    Args:
        writer: the DataFrame's writer.
        output: the ``--output`` as given (checked by :func:`output_target`).
        context: the SparkContext (its JVM reaches the output's file system).
        verbose: keep Spark's logs of a failing task.
        then: called once the write is done; should it raise, the output is removed all the same
            (``spark export``: the data turned out not to parse).
        job: the job named in a lost task's line, e.g. "spark export: the write job".
        done: what the command did before the write and stands whatever the write did (``spark clean``: the
            partitions are cleaned), said in place of "run it again", which would not give the same rows.

    Raises:
        KcompactError: a task's kcompact error, a lost task or JVM, or Spark could not write there (or what
            ``then`` raised).
    """
    target = _hadoop_path(context, output)
    existed = target is None or _exists(*target)
    try:
        with quiet_task_failures(context, verbose=verbose):
            try:
                writer.parquet(output)
            except Exception as err:
                lost = lost_job(err, context)
                if lost is None:
                    raise _write_error(err, output) from err
                left = None if existed else _remove_new_output(target, output)
                raise KcompactError(lost.line(job, _left_at(output, left, done)), path=output) from err
        if then is not None:
            then()
    except BaseException:
        if target is not None and not existed:
            _remove_quietly(*target)
        raise


def _remove_new_output(target: tuple[Any, Any] | None, output: str) -> bool | None:
    """Remove what a failed write left at a new ``output``: through Hadoop's FileSystem, and a local path
    through Python too (a JVM that is gone reaches no file system). Returns whether something is still
    there; None when that cannot be told (a URI, the JVM gone)."""
    if target is not None:
        _remove_quietly(*target)
    local = local_part(output)
    if local is None:
        return None if target is None else _still_there(*target)
    shutil.rmtree(local, ignore_errors=True)
    return local.exists()


def _still_there(fs: Any, path: Any) -> bool | None:
    try:
        return bool(fs.exists(path))
    except Exception:  # noqa: BLE001 - the JVM is gone: unknown
        return None


def _left_at(output: str, left: bool | None, done: str | None = None) -> str:
    """What a failed write leaves at ``output``, for its one line (``left``: see :func:`_remove_new_output`), and
    what to do: run it again, or (``done``) what the command did all the same."""
    if left is False:
        return f"nothing was written ({output} does not exist): " + (done or "run it again")
    if left:
        return f"{output} is incomplete (no _SUCCESS) and must not be used: remove it" + (
            f"; {done}" if done else ", then run again")
    return f"{output} may hold an incomplete output (no _SUCCESS) that must not be used: remove it" + (
        f"; {done}" if done else ", then run again")


def _hadoop_path(context: SparkContext, output: str) -> tuple[Any, Any] | None:
    """Hadoop's ``(FileSystem, Path)`` for ``output``; None when it cannot be resolved (Spark says why
    when it writes)."""
    try:
        jvm: Any = context._jvm
        path = jvm.org.apache.hadoop.fs.Path(output)
        hadoop: Any = context._jsc
        return path.getFileSystem(hadoop.hadoopConfiguration()), path
    except Exception:  # noqa: BLE001 - a URI Hadoop does not know: nothing to remove, Spark's error says so
        return None


def _exists(fs: Any, path: Any) -> bool:
    """Whether ``path`` exists; True when that cannot be told (then nothing is ever removed)."""
    try:
        return bool(fs.exists(path))
    except Exception:  # noqa: BLE001 - unknown: assume it was there
        return True


def _remove_quietly(fs: Any, path: Any) -> None:
    try:
        if fs.exists(path):
            fs.delete(path, True)
    except Exception:  # noqa: BLE001, S110 - best effort: the write's own error is what the user needs
        pass


def write_frame(frame: DataFrame, output: str, context: SparkContext, *, job: str, verbose: bool = False,
                done: str | None = None) -> None:
    """Write a small report's rows as one Parquet file under a new ``output`` (checked by :func:`output_target`),
    leaving nothing there should the write fail (:func:`write_new_parquet`).

    Args:
        frame: the rows.
        output: the ``--output`` as given.
        context: the SparkContext.
        job: the job named in a lost task's line, e.g. "spark inspect dirty-ratio: the write job".
        verbose: keep Spark's logs of a failing task.
        done: what stands whatever the write did (see :func:`write_new_parquet`).

    Raises:
        KcompactError: the output is refused, or the write failed (one line).
    """
    write_new_parquet(frame.coalesce(1).write, output_target(output, context.master), context, verbose=verbose,
                      job=job, done=done)


def _write_error(err: Exception, output: str) -> KcompactError:
    found = task_error(err)
    if isinstance(found, KcompactError):
        return found
    text = str(err)
    cause = _JAVA_CAUSE.search(text)
    lines = text.strip().splitlines()
    first = cause.group(0).strip() if cause else (lines[0] if lines else type(err).__name__)
    return KcompactError(f"{output}: the --output; Spark could not write it: {first}")
