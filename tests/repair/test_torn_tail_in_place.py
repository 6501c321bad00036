"""A torn tail is cut in place, where Kafka's recovery cuts it: no byte written beside the segment (a broker that
died of a full volume leaves no room for a rewritten copy), the original and the torn bytes in ``--backup-dir``.

Kafka's log loader is the referee of where the cut falls (``tests/kafka/test_loaded_log_end.py``, "torn tail"), and
a broker started on a cut and cleaned copy serves every record (``tests/kafka/test_dead_broker_e2e.py``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.repair import undo
from kcompact.repair.repair import RepairOptions, repair_partition
from kcompact.repair.undo import undo_repair
from kcompact.segment.partition import open_partition
from tests.repair.support import all_records, batch_positions, build_partition, partition_digest


def tear(part: Path) -> tuple[Path, int]:
    """Appends the last batch again cut short (a torn append); returns the segment and where the torn bytes start."""
    log = open_partition(part).segments[-1].log_path
    data = log.read_bytes()
    position, size = batch_positions(log)[-1]
    with log.open("ab") as active:
        active.write(data[position : position + size - 11])
    return log, len(data)


def test_a_torn_tail_alone_is_cut_in_place_and_undone(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    records = set(all_records(part))
    log, torn_at = tear(part)
    before, stat = partition_digest(part), log.stat()
    listing = sorted(p.name for p in part.iterdir())
    result = repair_partition(part, RepairOptions(backup_dir=tmp_path / "other-volume"))
    after = log.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (stat.st_ino, torn_at, stat.st_mtime_ns)
    assert sorted(p.name for p in part.iterdir()) == listing  # no .cleaned, no .swap: nothing written beside it
    assert set(all_records(part)) == records
    assert result.actions[0].startswith(f"cut segment {log.name} at position {torn_at}, where Kafka's recovery")
    (quarantined,) = result.quarantined
    assert (quarantined.kind, quarantined.position) == ("torn-tail", torn_at)
    assert result.backup_dir == str(tmp_path / "other-volume") and result.ok
    undo_repair(result.backup_dir)
    assert partition_digest(part) == before


def test_undo_on_a_full_volume_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = build_partition(tmp_path / "logdir")
    tear(part)
    result = repair_partition(part, RepairOptions(backup_dir=tmp_path / "other-volume"))

    def full(source: Path, target: Path) -> str:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

    monkeypatch.setattr(undo, "copy_hashed", full)
    done = CliRunner().invoke(cli, ["repair", "--undo", str(result.backup_dir)])
    assert done.exit_code == 2
    (line,) = done.stderr.strip().splitlines()  # one line naming the file, no traceback
    assert line.startswith(f"kcompact: error: {part}/") and line.endswith(": cannot restore (No space left on device)")
