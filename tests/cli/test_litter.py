"""A log dir after ``kcompact clean`` and ``kcompact repair`` holds what the broker left there, nothing more.

kcompact's own lock files (one per partition worked on, one for the checkpoint files) exist only while it
works; the broker's ``.lock`` stays as the broker left it. Clean and repair of one partition, of a log dir,
with worker processes, and a refused clean, each compared by the listing of every directory of the log dir.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.cleaner.disk.test_crash_recovery import NOW, OVERRIDES, build_partition

CONFIG = [arg for key, value in OVERRIDES.items() for arg in ("--config", f"{key}={value}")]


def listing(log_dir: Path) -> list[str]:
    """Every file and directory of the log dir that is not a segment file (those a clean rewrites)."""
    suffixes = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
    return sorted(str(p.relative_to(log_dir)) for p in log_dir.rglob("*") if not p.name.endswith(suffixes))


def log_dir_with_two_partitions(root: Path) -> Path:
    part = build_partition(root / "logdir")
    build_partition(root / "other").rename(root / "logdir" / "orders-1")
    (part.parent / ".lock").touch()  # as a stopped broker leaves it
    return part


def invoke(*args: str) -> int:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False).exit_code


@pytest.mark.parametrize("target", ["partition", "log-dir", "log-dir-jobs-2"])
def test_clean_and_repair_leave_no_lock_file(tmp_path: Path, target: str) -> None:
    part = log_dir_with_two_partitions(tmp_path)
    log_dir = part.parent
    before = listing(log_dir)
    path = str(part if target == "partition" else log_dir)
    jobs = ["--jobs", "2"] if target.endswith("jobs-2") else []

    assert invoke("clean", path, "--now-ms", str(NOW), *CONFIG, *jobs) == 0
    assert listing(log_dir) == before
    assert invoke("repair", str(part), "--backup-dir", str(tmp_path / "backup")) == 0
    assert listing(log_dir) == before


def test_a_refused_clean_leaves_no_lock_file(tmp_path: Path) -> None:
    part = log_dir_with_two_partitions(tmp_path)
    log = sorted(part.glob("*.log"))[1]
    data = bytearray(log.read_bytes())
    struct.pack_into(">i", data, 8, 3)  # the first batch's size field: too small for any entry
    log.write_bytes(bytes(data))
    before = listing(part.parent)
    assert invoke("clean", str(part), "--now-ms", str(NOW), *CONFIG) == 2
    assert listing(part.parent) == before
