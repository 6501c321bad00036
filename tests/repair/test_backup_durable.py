"""Every name the backup creates is durable before the repair goes on: the manifest's renames, the backup
directory and its sub-directories, the copies and the quarantined bytes (file fsynced, then its directory)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.repair.support import batch_positions, build_partition, patch

LOG0 = "00000000000000000000.log"


def record_syncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Path]]:
    """("fsync", what) and ("replace", destination), in the order the repair does them."""
    events: list[tuple[str, Path]] = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd: int) -> None:
        events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}"))))
        fsync(fd)

    def recording_replace(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        replace(source, target)
        events.append(("replace", Path(target).resolve()))

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    return events


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names an fd through /proc/self/fd")
def test_the_backup_is_durable_at_every_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = build_partition(tmp_path / "logdir", segments=1, batches=5)
    position, size = batch_positions(part / LOG0)[2]
    patch(part / LOG0, position + size - 4, ">i", 77)  # a batch fails its CRC: quarantined, segment rewritten
    backup = (tmp_path / "backups" / "b1").resolve()
    events = record_syncs(monkeypatch)

    result = CliRunner().invoke(cli, ["repair", str(part), "--backup-dir", str(backup)], catch_exceptions=False)

    assert result.exit_code == 0, result.output
    synced = [what for kind, what in events if kind == "fsync"]
    manifest_renames = [i for i, event in enumerate(events) if event == ("replace", backup / "manifest.json")]
    assert manifest_renames
    for i in manifest_renames:  # the rename itself made durable before anything else
        assert events[i + 1] == ("fsync", backup), events[i - 1: i + 3]
    first = manifest_renames[0]
    for made in (backup, backup / "files", backup / "files" / part.name, backup / "quarantine"):
        assert ("fsync", made.parent) in events[:first], f"{made} not durable in its parent"
    written = sorted(p for p in backup.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert any(p.parent.name == "quarantine" for p in written)
    for copy in written:  # each copy's bytes, then its name
        data_at = synced.index(copy)
        assert copy.parent in synced[data_at + 1:], f"{copy}'s name not made durable"
