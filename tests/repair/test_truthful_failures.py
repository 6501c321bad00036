"""What a repair says when it fails part-way, finds nothing to change, or meets the backup of a killed run:
what was changed, where the backup is and how to undo it; no backup where nothing changed."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kcompact.cleaner.disk import swap
from kcompact.cli.main import cli
from kcompact.segment.partition import open_partition
from tests.repair.support import batch_positions, build_partition, flip_byte, partition_digest


def run(*args: object) -> Any:
    return CliRunner(env={"COLUMNS": "80"}).invoke(cli, ["repair", *map(str, args)], catch_exceptions=False)


def damaged_twice(log_dir: Path) -> Path:
    """A partition whose first two segments each hold a batch that fails its CRC."""
    part = build_partition(log_dir, segments=3)
    for seg in open_partition(part).segments[:2]:
        position, size = batch_positions(seg.log_path)[10]
        flip_byte(seg.log_path, position + size // 2)
    return part


def disk_full_at_write(monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    """Every write to a ``.cleaned`` file counts; the ``nth`` fails as a full disk fails it (ENOSPC)."""
    writes = {"n": 0}

    class Full:
        def __init__(self, handle: Any) -> None:
            self._handle = handle

        def write(self, data: Any) -> int:
            writes["n"] += 1
            if writes["n"] == nth:
                raise OSError(errno.ENOSPC, "No space left on device")
            return int(self._handle.write(data))

        def __getattr__(self, name: str) -> Any:
            return getattr(self._handle, name)

    def full_open(path: Any, mode: str, buffering: int) -> Full:
        return Full(open(path, mode, buffering=buffering))

    monkeypatch.setattr(swap, "open", full_open, raising=False)  # the .cleaned writer's one open


def test_disk_full_in_the_second_segment_says_what_the_first_rewrite_changed_and_how_to_undo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = damaged_twice(tmp_path / "logdir")
    first, second = (seg.log_path.name for seg in open_partition(part).segments[:2])
    before = partition_digest(part)
    disk_full_at_write(monkeypatch, nth=40)  # past the first segment's 29 kept batches
    backup = tmp_path / "backup"
    result = run(part, "--backup-dir", backup)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "left as it was" not in line
    assert "No space left on device" in line and f"{second}.cleaned" in line
    assert f"rewrote segment {first}" in line
    assert f"kcompact repair --undo {backup}" in line
    assert partition_digest(part) != before and (backup / "manifest.json").is_file()
    monkeypatch.undo()
    assert run("--undo", backup).exit_code == 0
    assert partition_digest(part) == before


def test_a_log_dir_row_of_a_failed_repair_names_its_backup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = damaged_twice(tmp_path / "logdir")
    disk_full_at_write(monkeypatch, nth=40)
    result = run(part.parent, "--json", "--jobs", "1", "--backup-dir", tmp_path / "backups")
    assert result.exit_code == 2
    (row,) = json.loads(result.stdout)["rows"]
    assert row["status"] == "failed" and row["backup_dir"] == str(tmp_path / "backups" / part.name)
    assert (tmp_path / "backups" / part.name / "manifest.json").is_file()
    assert "left as it was" not in row["error"]


def test_clean_of_a_sound_partition_that_changes_nothing_says_so_and_keeps_no_backup(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir", segments=2)
    compact = ("--config", "cleanup.policy=compact", "--now-ms", "1700000000000")
    assert run(part, "--clean", *compact, "--backup-dir", tmp_path / "first").exit_code == 0
    before = partition_digest(part)
    result = run(part, "--clean", *compact, "--backup-dir", tmp_path / "second")
    assert result.exit_code == 0
    assert "nothing changed: nothing needed a repair and the clean changed nothing (no backup kept)" in result.stdout
    assert "backup:" not in result.stdout and not (tmp_path / "second").exists()
    assert partition_digest(part) == before
    rows = json.loads(run(part.parent, "--clean", *compact, "--json", "--backup-dir", tmp_path / "third").stdout)
    assert [(r["status"], r["backup_dir"]) for r in rows["rows"]] == [("sound", None)]
    assert not (tmp_path / "third").exists() and partition_digest(part) == before


def test_rerun_of_a_killed_repair_with_its_backup_dir_says_it_is_unfinished_and_how_to_undo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = damaged_twice(tmp_path / "logdir")
    backup = tmp_path / "backup"
    disk_full_at_write(monkeypatch, nth=40)  # stands in for a kill after the first segment's rewrite
    assert run(part, "--backup-dir", backup).exit_code == 2
    monkeypatch.undo()
    between = partition_digest(part)
    result = run(part, "--backup-dir", backup)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "holds the backup of an earlier repair of this partition" in line
    assert "this partition is not finished (1 problem still to repair)" in line
    assert f"undo that repair with: kcompact repair --undo {backup}" in line
    assert partition_digest(part) == between
    assert run(part, "--backup-dir", tmp_path / "again").exit_code == 0  # finishes it
    result = run(part, "--backup-dir", backup, "--clean", "--config", "cleanup.policy=compact")
    assert result.exit_code == 2 and result.stderr == (
        f"kcompact: error: {backup}: holds the backup of an earlier repair of this partition; this partition is "
        "finished (nothing left to repair): give another --backup-dir (or none) to verify it again; undo that "
        f"repair with: kcompact repair --undo {backup}; nothing changed\n")


def test_rerun_of_a_killed_log_dir_repair_says_which_partitions_are_unfinished_and_how_to_undo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = damaged_twice(tmp_path / "logdir")
    backups = tmp_path / "backups"
    disk_full_at_write(monkeypatch, nth=40)
    assert run(part.parent, "--jobs", "1", "--backup-dir", backups).exit_code == 2
    monkeypatch.undo()
    between = partition_digest(part)
    result = run(part.parent, "--backup-dir", backups)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "holds the backups of an earlier repair of this log dir (orders-0: not finished)" in line
    assert f"kcompact repair --undo {backups}/<partition>" in line
    assert partition_digest(part) == between


def test_rerun_of_a_finished_log_dir_repair_says_it_is_finished_and_what_to_do(tmp_path: Path) -> None:
    part = damaged_twice(tmp_path / "logdir")
    backups = tmp_path / "backups"
    assert run(part.parent, "--jobs", "1", "--backup-dir", backups).exit_code == 0
    after = partition_digest(part)

    result = run(part.parent, "--backup-dir", backups)

    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line == (f"kcompact: error: {backups}: holds the backups of an earlier repair of this log dir, finished "
                    "(orders-0: nothing left to repair); give another --backup-dir (or none) to verify and repair "
                    f"the log dir again, or undo a partition's repair with: kcompact repair --undo {backups}/"
                    "<partition>; nothing changed")
    assert partition_digest(part) == after
    assert run(part.parent, "--backup-dir", tmp_path / "another").exit_code == 0  # what the line says to do
