"""Hadoop's MiniDFSCluster (a NameNode and a DataNode in one JVM) on 127.0.0.1, from Maven Central.

``tests/hdfs/pom.xml`` pins ``hadoop-client-minicluster`` at the Hadoop version pyspark bundles; Maven copies
its jars once per machine into a cache outside the repository (``$KCOMPACT_HDFS_LIBS`` or
``~/.cache/kcompact/hdfs-<version>``, complete once a marker holding the pom's sha256 is written, as
``tests/kafka/jars.py`` does for Kafka). ``java/KcompactMiniHdfs.java`` is run as a single source file (no
build step) and prints the NameNode's ``hdfs://`` and ``webhdfs://`` URLs once the DataNode serves blocks.
``.ci/run`` starts it with the other services (``python -m tests.services start``); a test run without it
starts its own (``tests/conftest.py``: ``hdfs_urls``).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from tests.maven import missing_tool, pom_property, resolve_jars

POM = Path(__file__).with_name("pom.xml")
LAUNCHER = Path(__file__).with_name("java") / "KcompactMiniHdfs.java"
LIBS_ENV = "KCOMPACT_HDFS_LIBS"
READY_TIMEOUT_S = 180.0


class HdfsUnavailable(RuntimeError):
    """Java or Maven is missing, or Maven could not resolve the jars."""


def hadoop_version() -> str:
    """The Hadoop version the pom pins."""
    version = pom_property(POM, "hadoop.version")
    if version is None:
        raise HdfsUnavailable(f"{POM}: no <hadoop.version> property")
    return version


def libs_dir() -> Path:
    """Where the jars are cached (outside the repository)."""
    override = os.environ.get(LIBS_ENV)
    return Path(override) if override else Path.home() / ".cache" / "kcompact" / f"hdfs-{hadoop_version()}"


def why_unavailable() -> str | None:
    """Why the mini cluster cannot run here (no java or no mvn on PATH), or None."""
    tool = missing_tool()
    return None if tool is None else f"{tool} not on PATH: Hadoop's MiniDFSCluster cannot run in the tests"


def resolve() -> Path:
    """Copy the pom's dependencies into :func:`libs_dir` unless already there; returns that directory.

    Raises:
        HdfsUnavailable: java or mvn is missing, or Maven failed (its output in the message).
    """
    return resolve_jars(POM, libs_dir(), HdfsUnavailable, why_unavailable())


def launch_argv(base_dir: Path) -> list[str]:
    """The command that runs the mini cluster with its data under ``base_dir``."""
    return ["java", "-cp", str(resolve() / "*"), str(LAUNCHER), str(base_dir)]


def wait_for_urls(log: Path, alive: subprocess.Popen[bytes] | None = None) -> dict[str, str]:
    """The ``hdfs`` and ``webhdfs`` URLs the launcher printed into ``log``.

    Raises:
        HdfsUnavailable: it exited, or printed nothing within :data:`READY_TIMEOUT_S`.
    """
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = dict(re.findall(r"^(hdfs|webhdfs)=(\S+)$", text, re.MULTILINE))
        if len(found) == 2:
            return found
        if alive is not None and alive.poll() is not None:
            raise HdfsUnavailable(f"the mini cluster exited ({alive.returncode}):\n{text[-4000:]}")
        time.sleep(0.5)
    raise HdfsUnavailable(f"the mini cluster printed no URL within {READY_TIMEOUT_S:.0f} s (log: {log})")
