"""Interrupted cleans, and interrupted repairs, at each crash point of the swap protocol.

A real ``kcompact clean`` (or ``kcompact repair``) runs in a subprocess with ``KCOMPACT_CRASH_AT=<point>``
and dies there with ``os._exit(137)``, as tests/cleaner does. ``kcompact repair`` must then report the
leftovers, settle them exactly as Kafka's loader would (the group wholly old before ``swap-complete``,
wholly new from it on, LogLoader.load), keep the promise (a broker's full recovery finds nothing to change, no
record lost), and ``--undo`` must give back the crashed state byte for byte.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kcompact.cleaner.disk.swap import CRASH_POINTS
from kcompact.repair.repair import RepairOptions, repair_partition
from kcompact.repair.undo import undo_repair
from kcompact.repair.verify import verify_partition
from tests.conftest import REPO_ROOT
from tests.repair.support import (
    all_records,
    broker_would_change,
    build_partition,
    crc_valid_records,
    flip_byte,
    partition_digest,
)

NOW = 1_800_000_000_000
COMPLETING = CRASH_POINTS[CRASH_POINTS.index("swap-complete"):]


def kcompact(*args: str, crash_at: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KCOMPACT_CRASH_AT": crash_at}
    return subprocess.run([sys.executable, "-m", "kcompact", *args], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[object], list[object]]:
    """Records of the partition before and after an uninterrupted clean."""
    part = build_partition(tmp_path_factory.mktemp("reference") / "logdir")
    before = all_records(part)
    from kcompact.cleaner.round.options import CleanOptions
    from kcompact.cleaner.workers.bound_clean import clean_partition
    from kcompact.config.topic_config import defaults_with_overrides

    config = defaults_with_overrides({"cleanup.policy": "compact"})
    clean_partition(part, config, CleanOptions(now_ms=NOW))
    return before, all_records(part)  # type: ignore[return-value]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_clean_killed_at_each_crash_point_is_settled_as_kafka_would(
    tmp_path: Path, point: str, reference: tuple[list[object], list[object]]
) -> None:
    part = build_partition(tmp_path / "logdir")
    proc = kcompact("clean", str(part), "--now-ms", str(NOW), "--config", "cleanup.policy=compact",
                    crash_at=point)
    assert proc.returncode == 137, proc.stderr
    crashed = partition_digest(part)
    check = verify_partition(part)
    assert {f.kind for f in check.findings} >= {"leftover"} and check.recovery_plan

    result = repair_partition(part)

    assert broker_would_change(part) == []
    before, cleaned = reference
    assert all_records(part) == (cleaned if point in COMPLETING else before)
    assert any(action.startswith(("delete", "rename")) for action in result.actions)
    undo_repair(result.backup_dir or "")
    assert partition_digest(part) == crashed


@pytest.mark.parametrize("point", ["swap-partial", "deleted-partial", "final-partial"])
def test_repair_killed_mid_swap_is_finished_by_the_next_repair(tmp_path: Path, point: str) -> None:
    part = build_partition(tmp_path / "logdir", segments=2)
    log = part / "00000000000000000000.log"
    flip_byte(log, 3000)
    original = partition_digest(part)
    valid_before = crc_valid_records(part)
    backups = tmp_path / "backups"
    proc = kcompact("repair", str(part), "--backup-dir", str(backups / "first"), crash_at=point)
    assert proc.returncode == 137, proc.stderr

    second = repair_partition(part, RepairOptions(backup_dir=backups / "second"))

    assert broker_would_change(part) == []
    assert valid_before <= set(all_records(part))
    undo_repair(second.backup_dir or "")  # back to what the killed repair left …
    undo_repair(backups / "first")  # … and from its (unfinished) backup to the original
    assert partition_digest(part) == original
    shutil.rmtree(backups)


@pytest.mark.parametrize("point", ["swap-partial", "deleted-partial", "final-complete"])
def test_broker_written_partition_clean_killed_then_repaired(tmp_path: Path, point: str) -> None:
    from tests.repair.support import real_partition

    part = real_partition(tmp_path / "crashed", "confluent512-lz4-logdir", "__consumer_offsets-37")
    twin = real_partition(tmp_path / "reference", "confluent512-lz4-logdir", "__consumer_offsets-37")
    original = all_records(part)
    args = ["--now-ms", str(NOW), "--roll", "--config", "cleanup.policy=compact"]
    assert kcompact("clean", str(twin), *args, crash_at="none").returncode == 0
    assert len(all_records(twin)) < len(original)  # the clean removes records: the outcomes differ
    proc = kcompact("clean", str(part), *args, crash_at=point)
    assert proc.returncode == 137, proc.stderr
    crashed = partition_digest(part)

    result = repair_partition(part)

    assert broker_would_change(part) == []
    assert all_records(part) == (all_records(twin) if point in COMPLETING else original)
    undo_repair(result.backup_dir or "")
    assert partition_digest(part) == crashed
