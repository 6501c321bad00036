"""Jars from Maven Central for the tests' Java services, copied once per machine into a cache outside the repository.

A pom (``tests/kafka/pom.xml``, ``tests/hdfs/pom.xml``) pins the versions; ``mvn dependency:copy-dependencies``
copies its runtime jars into the cache directory, and a ``.complete`` marker holding the pom's sha256 is written
only after Maven copied every jar: an interrupted download is done again, and so is one made for an older pom.
Several pytest processes may ask at once; a lock file beside the directory lets one resolve while the others wait.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
from pathlib import Path

COMPLETE_MARKER = ".complete"
MVN_TIMEOUT_S = 900


def pom_property(pom: Path, name: str) -> str | None:
    """The value of ``<name>`` in the pom's properties, or None when it has none."""
    match = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", pom.read_text())
    return match.group(1) if match else None


def missing_tool() -> str | None:
    """``java`` or ``mvn`` when one of them is not on PATH, else None."""
    return next((tool for tool in ("java", "mvn") if shutil.which(tool) is None), None)


def is_complete(pom: Path, target: Path) -> bool:
    """Maven copied every jar of this version of ``pom`` into ``target``."""
    marker = target / COMPLETE_MARKER
    return marker.exists() and marker.read_text().strip() == _digest(pom)


def copy_dependencies(pom: Path, target: Path) -> str | None:
    """Copy ``pom``'s runtime jars into ``target`` unless they are there; None, or Maven's failure as text."""
    if is_complete(pom, target):
        return None
    target.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(pom, target):
            return None
        command = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                   f"-DoutputDirectory={target}", "-DincludeScope=runtime"]
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=MVN_TIMEOUT_S)
        if done.returncode != 0:
            return f"mvn failed ({done.returncode}):\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
        (target / COMPLETE_MARKER).write_text(_digest(pom) + "\n")
    return None


def resolve_jars(pom: Path, target: Path, unavailable: type[Exception], reason: str | None) -> Path:
    """Copy ``pom``'s jars into ``target`` unless they are there, and return ``target``.

    Args:
        reason: why the service cannot run here (java or mvn missing), or None.

    Raises:
        unavailable: with ``reason``, or with Maven's failure.
    """
    if reason is not None:
        raise unavailable(reason)
    failure = copy_dependencies(pom, target)
    if failure is not None:
        raise unavailable(failure)
    return target


def _digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()
