"""Shared test fixtures: where the broker-written log dirs live, and temp copies of them.

The real fixtures in ../shared/fixtures/real are read in place and never modified; a test that
changes a partition copies it into ``tmp_path`` first. Where ../shared is absent (a clone outside
this setup) those tests skip with a reason that says so.
"""

from __future__ import annotations

import importlib
import os
import shutil
import stat
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from tests.counting_s3 import CountingS3

REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_FIXTURES = Path(
    os.environ.get("KCOMPACT_REAL_FIXTURES", REPO_ROOT.parent / "shared" / "fixtures" / "real")
)
PROJECT_FIXTURES = REPO_ROOT / "fixtures"

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("slow", max_examples=2000, deadline=None)
settings.load_profile("slow" if os.environ.get("KCOMPACT_SLOW") else "default")


NO_REAL_FIXTURES = "broker-written fixtures not available at"
"""How the skip reason of a test that needs the broker-written fixtures starts (counted at the end of a run)."""


def real_fixture(*parts: str) -> Path:
    """Path of a broker-written fixture, or skip the test when ../shared is not there."""
    path = REAL_FIXTURES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{NO_REAL_FIXTURES} {REAL_FIXTURES} (../shared absent; CONTRIBUTING.md)")
    return path


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say once, at the end, how many tests skipped for want of the broker-written fixtures."""
    skipped = terminalreporter.stats.get("skipped", [])
    missing = sum(1 for report in skipped if NO_REAL_FIXTURES in str(getattr(report, "longrepr", "")))
    if missing:
        terminalreporter.write_line(
            f"kcompact: {missing} tests skipped: the broker-written fixtures are not at {REAL_FIXTURES} "
            "(put them at ../shared/fixtures/real beside the clone, or set KCOMPACT_REAL_FIXTURES; CONTRIBUTING.md)",
            yellow=True)


def copy_tree_writable(src: Path, dst: Path) -> Path:
    """Copy a (read-only) fixture tree and make the copy writable, keeping mtimes."""
    shutil.copytree(src, dst, copy_function=shutil.copy2)
    for root, dirs, files in os.walk(dst):
        for name in dirs + files:
            p = Path(root) / name
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    Path(dst).chmod(Path(dst).stat().st_mode | stat.S_IWUSR)
    return dst


@pytest.fixture
def real_fixtures() -> Path:
    """The directory of broker-written log dirs (skips when absent)."""
    return real_fixture()


@pytest.fixture
def log_opens(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times each file was opened as a ``LogFile`` in the test (by file name)."""
    from kcompact.segment.log_file import LogFile

    counted: Counter[str] = Counter()
    real_init = LogFile.__init__

    def counting_init(self: LogFile, path: str | os.PathLike[str]) -> None:
        counted[Path(path).name] += 1
        real_init(self, path)

    monkeypatch.setattr(LogFile, "__init__", counting_init)
    return counted


@pytest.fixture(scope="session")
def counting_s3() -> Iterator[CountingS3]:
    """moto's S3 server on 127.0.0.1 in this process, counting the object bytes it serves
    (``tests.counting_s3``)."""
    for module in ("moto.server", "s3fs"):
        try:
            importlib.import_module(module)
        except ImportError:
            pytest.skip(f"{module} is not installed (pip install '.[test]')")
    from tests.counting_s3 import CountingS3

    server = CountingS3()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An S3-protocol server on 127.0.0.1: ``$KCOMPACT_TEST_S3_ENDPOINT`` (CI starts one, ``.ci/run``),
    else moto's standalone server started here and stopped at the end."""
    from tests.services import S3_ENDPOINT_ENV, Services, start_s3

    given = os.environ.get(S3_ENDPOINT_ENV)
    if given:
        yield given
        return
    for module in ("moto.server", "s3fs"):
        try:
            importlib.import_module(module)
        except ImportError:
            pytest.skip(f"{module} is not installed (pip install '.[test]')")
    services = Services(tmp_path_factory.mktemp("s3-server"))
    try:
        yield start_s3(services)
    finally:
        services.stop()


@pytest.fixture(scope="session")
def hdfs_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real HDFS on 127.0.0.1: ``{"hdfs": "hdfs://127.0.0.1:PORT", "webhdfs": "webhdfs://127.0.0.1:PORT"}``,
    from ``$KCOMPACT_TEST_HDFS``/``$KCOMPACT_TEST_WEBHDFS`` (CI starts one, ``.ci/run``), else Hadoop's
    MiniDFSCluster started here and stopped at the end. Skips where Java or Maven is missing (fails in CI)."""
    from tests.hdfs.cluster import why_unavailable
    from tests.services import HDFS_ENV, WEBHDFS_ENV, Services, start_hdfs

    if os.environ.get(HDFS_ENV) and os.environ.get(WEBHDFS_ENV):
        yield {"hdfs": os.environ[HDFS_ENV], "webhdfs": os.environ[WEBHDFS_ENV]}
        return
    reason = why_unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI but no HDFS: {reason}")
        pytest.skip(reason)
    services = Services(tmp_path_factory.mktemp("hdfs"))
    try:
        yield start_hdfs(services)
    finally:
        services.stop()
