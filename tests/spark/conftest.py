"""The Spark tests' one SparkSession: ``local[2]``, started once per test run.

Every test here is marked ``spark`` (select with ``-m spark``, deselect with ``-m "not spark"``).
The session skips its tests, with the reason, when pyspark/pyarrow are not installed or no Java
runtime is found, so a core install (without ``kcompact[spark]``) still runs the suite green.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_MASTER = "local[2]"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/spark with ``spark``."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)


def _why_no_spark() -> str | None:
    for module in ("pyspark", "pyarrow"):
        try:
            importlib.import_module(module)
        except ImportError:
            return f"{module} is not installed (pip install '.[spark]')"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and (Path(java_home) / "bin" / "java").exists()):
        return "no Java runtime (java not on PATH and JAVA_HOME unset): Spark cannot start"
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] SparkSession shared by the whole test run (skips when Spark cannot run here)."""
    reason = _why_no_spark()
    if reason is not None:
        pytest.skip(reason)
    from kcompact.spark.session import spark_session

    session = spark_session(SPARK_MASTER)
    yield session
    session.stop()


@pytest.fixture
def shipped_packs(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The packs ``spark clean`` hands to Spark in this test (indexes into its partitions), recorded
    on the driver around the real :func:`kcompact.spark.packing.pack_partitions`."""
    from kcompact.spark import clean_job
    from kcompact.spark.packing import pack_partitions

    packs: list[list[int]] = []

    def recording(sizes_in_bytes: list[int], cores: int, task_bytes: int | None = None) -> list[list[int]]:
        found = pack_partitions(sizes_in_bytes, cores, task_bytes)
        packs.extend(found)
        return found

    monkeypatch.setattr(clean_job, "pack_partitions", recording)
    return packs


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone master URL with a live worker on 127.0.0.1: ``$KCOMPACT_TEST_SPARK_MASTER``
    (CI starts one, ``.ci/run``), else a master and a worker started here from the pip pyspark and
    stopped (every process) at the end. Skips only where Spark cannot run (no Java, no pyspark)."""
    from tests.services import SPARK_MASTER_ENV, Services, start_spark

    given = os.environ.get(SPARK_MASTER_ENV)
    if given:
        yield given
        return
    reason = _why_no_spark()
    if reason is not None:
        pytest.skip(reason)
    services = Services(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield start_spark(services)
    finally:
        services.stop()


@pytest.fixture
def session_starts(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The masters of the sessions a command asked for (none is started: the test fails if one is)."""
    from kcompact.spark import session

    asked: list[str | None] = []

    def refuse(master: str | None = None, **_: object) -> None:
        asked.append(master)
        raise AssertionError("the Spark session was started")

    monkeypatch.setattr(session, "spark_session", refuse)
    return asked


@pytest.fixture
def python_without_kcompact(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    """A Python of this very version with nothing installed (a venv without pip), run from a directory
    without kcompact (a local executor's Python imports from the driver's working directory)."""
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    venv = tmp_path_factory.mktemp("bare-python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return str(venv / "bin" / "python")
