"""What a Spark command checks before its session starts: a wrong input, output or Python costs a second.

Starting Spark costs seconds to minutes (a JVM, executors on a cluster); a command whose input cannot
be listed, whose ``--output`` no jar can write, or whose executors' Python cannot import kcompact would
say so only after it. :func:`check_before_session` checks what the driver alone can know, each failure
one :class:`~kcompact.errors.KcompactError` line:

* every input URL is listed (fsspec), as the job would list it on the driver;
* ``--output``'s Hadoop file system package, where the command's settings show it cannot be there
  (:func:`kcompact.spark.hadoop_fs.missing_output_package`; the JVM-side check runs once the session is up);
* the executors' Python, when the executors run on this machine (a ``local[…]`` master) and it is not this
  interpreter: it runs, has this Python's minor version (pyspark refuses another) and imports this
  kcompact and pyarrow. On a cluster the Python lives on the workers: ``kcompact.spark.probe`` asks them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping

from kcompact import __version__
from kcompact.errors import RefusedError
from kcompact.segment.remote import StorageOptions, remote_partition_dirs
from kcompact.segment.url import is_url
from kcompact.spark.hadoop_fs import missing_output_package
from kcompact.spark.probe import SET_PYTHON
from kcompact.spark.session import DEFAULT_MASTER, PYTHON_CONF, master_set_by_launcher

PYTHON_CHECK_TIMEOUT_S = 60.0
_PYTHON_CHECK = ("import sys, kcompact, pyarrow; "
                 "print(kcompact.__version__, '%d.%d' % sys.version_info[:2])")


def check_before_session(paths: Iterable[str], *, output: str | None = None, master: str | None = None,
                         conf: Mapping[str, str] | None = None, executor_python: str | None = None,
                         storage_options: StorageOptions | None = None) -> None:
    """Check a Spark command's inputs, output and executors' Python before its session starts.

    Args:
        paths: the command's inputs (local paths are checked by the command's argument parsing).
        output: the ``--output`` as given, if any.
        master: the ``--master`` as given.
        conf: the ``--conf`` settings.
        executor_python: the ``--executor-python`` as given.
        storage_options: fsspec storage options for URL inputs.

    Raises:
        KcompactError: an input URL cannot be listed or holds no partition.
        RefusedError: the output's file system cannot load, or the local executors' Python cannot run kcompact.
    """
    settings = dict(conf or {})
    for path in paths:
        if is_url(path):
            check_listable(path, storage_options or {})
    missing_output_package(output, settings)
    python, chosen_by = executors_python(executor_python, settings)
    if python is not None and _runs_on_this_machine(master):
        check_local_python(python, chosen_by)


def check_listable(url: str, storage_options: StorageOptions) -> None:
    """List ``url`` as the job will (its partition directories), a file system that cannot even start
    (``hdfs://`` without libhdfs) included.

    Raises:
        KcompactError: it cannot be listed, or holds no partition directory.
    """
    remote_partition_dirs(url, storage_options)


def executors_python(executor_python: str | None, conf: Mapping[str, str]) -> tuple[str | None, str]:
    """The Python the session will give the executors, and who chose it (as ``kcompact.spark.session``
    chooses); None when that is this interpreter (nothing to check)."""
    for given, who in ((executor_python, "--executor-python"), (conf.get(PYTHON_CONF), PYTHON_CONF),
                       (os.environ.get("PYSPARK_PYTHON"), "PYSPARK_PYTHON")):
        if given:
            return given, who
    return None, "kcompact"


def check_local_python(python: str, chosen_by: str) -> None:
    """Run ``python`` once: it must start, be this Python's minor version and import this kcompact and pyarrow.

    Args:
        python: the executors' Python (a path, or a name on the PATH).
        chosen_by: who chose it (named in the error).

    Raises:
        RefusedError: it does not run, is another Python version, or has no or another kcompact.
    """
    where = f"executors' Python {python} (from {chosen_by})"
    try:
        done = subprocess.run([python, "-c", _PYTHON_CHECK], capture_output=True, text=True,
                              timeout=PYTHON_CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        raise RefusedError(f"{where} cannot run ({type(err).__name__}: {err}); "
                           + SET_PYTHON.format(version=__version__)) from err
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit code {done.returncode}"
        raise RefusedError(f"{where} cannot import kcompact and pyarrow ({reason}); "
                           + SET_PYTHON.format(version=__version__))
    version, _, python_version = done.stdout.strip().partition(" ")
    driver_version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if python_version != driver_version:
        raise RefusedError(f"{where} is Python {python_version}, the driver's {driver_version} (pyspark needs "
                           "the same); " + SET_PYTHON.format(version=__version__))
    if version != __version__:
        raise RefusedError(f"{where} has kcompact {version}, the driver {__version__}; "
                           + SET_PYTHON.format(version=__version__))


def _runs_on_this_machine(master: str | None) -> bool:
    """The executors will run on this machine: a ``local`` master given or chosen by default."""
    if master is None:
        master = os.environ.get("MASTER")
    if master is None:
        return not master_set_by_launcher() and DEFAULT_MASTER.startswith("local")
    return master.startswith("local")
