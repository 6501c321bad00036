"""``repair --undo`` after a repair that failed part-way: it restores what the repair changed and never
deletes or overwrites a file the repair cannot be proven to have written (a segment a broker wrote since)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.errors import FileAccessError
from kcompact.records.batch import iter_batches
from kcompact.repair import repair as repair_module
from kcompact.repair.repair import RepairOptions, repair_partition
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.names import segment_file_name
from kcompact.segment.partition import open_partition
from tests.repair.support import (
    batch_positions,
    build_partition,
    flip_byte,
    partition_digest,
    patch,
)


def disk_full(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def failed_repair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, dict[str, str]]:
    """A damaged partition whose repair rewrites a segment, then dies at its last step (disk full)."""
    part = build_partition(tmp_path / "logdir", segments=2)
    log = open_partition(part).segments[0].log_path
    position, size = batch_positions(log)[10]
    flip_byte(log, position + size // 2)
    write_offset_checkpoint(part.parent / "cleaner-offset-checkpoint",
                            {open_partition(part).topic_partition: 10**9})
    original = partition_digest(part)
    backup = tmp_path / "backup"
    monkeypatch.setattr(repair_module, "update_offset_checkpoint", disk_full)
    with pytest.raises(FileAccessError, match="No space left"):
        repair_partition(part, RepairOptions(backup_dir=backup))
    monkeypatch.undo()
    assert partition_digest(part) != original  # the segment was rewritten before the failure
    return part, backup, original


def broker_writes_a_segment(part: Path) -> Path:
    """What a broker started after the failed repair appends: a new segment past the log end."""
    active = open_partition(part).segments[-1].log_path
    first = next(iter(iter_batches(active.read_bytes())))
    new_log = part / segment_file_name(10_000, "log")
    new_log.write_bytes(bytes(first.buffer))
    patch(new_log, 0, ">q", 10_000)  # its base offset (outside the CRC)
    return new_log


def undo(backup: Path, *extra: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, ["repair", "--undo", str(backup), *extra],
                                                     catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_undo_after_a_failed_repair_refuses_to_delete_a_segment_written_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part, backup, _original = failed_repair(tmp_path, monkeypatch)
    new_log = broker_writes_a_segment(part)
    written = new_log.read_bytes()
    before_undo = partition_digest(part)

    code, out, err = undo(backup, "--json")

    assert code == 2
    assert "changed since the repair" in err and new_log.name in err
    assert json.loads(out)["error"]["kind"] == "RefusedError"
    assert new_log.read_bytes() == written
    assert partition_digest(part) == before_undo


def test_undo_after_a_failed_repair_restores_the_partition_when_nothing_changed_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part, backup, original = failed_repair(tmp_path, monkeypatch)

    code, _out, err = undo(backup)

    assert code == 0, err
    assert partition_digest(part) == original
