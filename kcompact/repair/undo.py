"""``kcompact repair --undo BACKUP_DIR``: put a repaired partition back byte for byte.

The manifest of the backup (``backup.py``) lists the partition's files before the repair and every original
that changed or went. Undo checks each copy against its sha256, refuses when the partition changed since
the repair in any way the repair cannot have made (a broker or another kcompact wrote to it: restoring
would lose that; only segments a failed or killed step had claimed may differ from the state the manifest
recorded after the last step), removes the files
the repair created, and restores each saved file with its mode, owner and mtime. The log dir's
``cleaner-offset-checkpoint`` is restored byte for byte when nobody wrote it since; otherwise only this
partition's entry is put back, so other partitions' entries are kept. A finished undo is recorded in the
manifest, and a second undo of the same backup is refused: the broker may have written since, and only an
undo that was killed part-way (started, not finished) is resumed.
"""

from __future__ import annotations

import os
import time
from dataclasses import field
from pathlib import Path

from kcompact.clock import wall_clock_ms
from kcompact.errors import CorruptCheckpointError, KcompactError, RefusedError
from kcompact.repair.backup import (
    FILES_DIR,
    MANIFEST_NAME,
    Manifest,
    SavedFile,
    copy_hashed,
    partition_state,
    read_manifest,
    sha256_of,
    write_manifest,
)
from kcompact.segment.checkpoint import (
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from kcompact.segment.files import file_access, fsync_dir, replacing
from kcompact.segment.lock import (
    broker_holds_lock,
    checkpoint_lock,
    log_dir_write_guard,
    partition_lock,
)
from kcompact.segment.names import parse_partition_dir_name, parse_segment_file_name
from kcompact.value import mutable


@mutable
class UndoResult:
    """What :func:`undo_repair` did (or, with ``dry_run``, would do)."""

    backup_dir: str
    partition_dir: str
    dry_run: bool
    removed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def undo_repair(backup_dir: str | Path, *, dry_run: bool = False) -> UndoResult:
    """Restore the partition a repair changed from its backup.

    Args:
        backup_dir: the backup directory the repair reported.
        dry_run: check the backup and list what would change; write nothing.

    Returns:
        The files removed and restored.

    Raises:
        KcompactError: not a backup, a copy whose sha256 does not match, or the partition is gone.
        RefusedError: a broker holds the log dir, another kcompact works on the partition, or the
            partition changed since the repair.
    """
    directory = Path(backup_dir)
    manifest = read_manifest(directory)
    _refuse_finished(directory, manifest)
    log_dir = Path(manifest.log_dir)
    part = log_dir / manifest.partition_dir
    if not part.is_dir():
        raise KcompactError(f"{part}: the repaired partition directory is gone; nothing to restore to")
    _check_copies(directory, manifest)
    result = UndoResult(str(directory), str(part), dry_run)
    if dry_run:
        if broker_holds_lock(log_dir):
            raise RefusedError(f"{log_dir}: held by a running Kafka broker; stop it first", path=log_dir)
        _check_unchanged(part, manifest)
        result.removed = _created(part, manifest)
        result.restored = [s.path for s in manifest.files]
        return result
    with log_dir_write_guard(log_dir), partition_lock(log_dir, part.name):
        manifest = read_manifest(directory)  # another undo may have finished while we waited
        _refuse_finished(directory, manifest)
        _undo_locked(directory, manifest, part, result)
    return result


def undo_backups(backup_dir: str | Path, *, dry_run: bool = False) -> list[UndoResult]:
    """Undo one backup, or every backup a directory holds (a log dir repair's root, ``--backup-dir DIR`` or
    ``<log dir>.kcompact-backup``): those not undone yet, newest first, so that a partition repaired twice is
    put back as it was before the first.

    Before any change, each partition's newest backup is checked as its undo's dry run checks it; a refusal
    then changes nothing. An undo that fails after others finished leaves those undone; running the same undo
    again skips them (a finished backup is recorded as such) and goes on.

    Args:
        backup_dir: a backup directory, or a directory of them (``*/manifest.json``, ``*/*/manifest.json``).
        dry_run: check and list what would change; write nothing (for each partition: its newest backup).

    Returns:
        One :class:`UndoResult` per backup undone, in the order undone.

    Raises:
        KcompactError: neither a backup nor a directory holding any; a backup as :func:`undo_repair` refuses.
        RefusedError: every backup under it is undone already.
    """
    directory = Path(backup_dir)
    if not directory.is_dir() or (directory / MANIFEST_NAME).exists():
        return [undo_repair(directory, dry_run=dry_run)]
    found = [(path.parent, read_manifest(path.parent))
             for path in sorted([*directory.glob(f"*/{MANIFEST_NAME}"), *directory.glob(f"*/*/{MANIFEST_NAME}")])]
    if not found:
        raise KcompactError(f"{directory}: not a kcompact repair backup (no {MANIFEST_NAME}), nor a directory of "
                            f"them (no <backup>/{MANIFEST_NAME} under it)", path=directory)
    pending = sorted(((d, m) for d, m in found if m.undo_finished_ms is None), key=lambda dm: -dm[1].created_ms)
    if not pending:
        raise RefusedError(f"{directory}: every backup under it ({len(found)}) is already undone; nothing changed",
                           path=directory)
    newest: dict[tuple[str, str], Path] = {}
    for path, manifest in pending:
        newest.setdefault((manifest.log_dir, manifest.partition_dir), path)
    checked = [undo_repair(path, dry_run=True) for path in newest.values()]
    if dry_run:
        return checked
    done: list[UndoResult] = []
    for path, _manifest in pending:
        try:
            done.append(undo_repair(path))
        except KcompactError as err:
            undone = ", ".join(r.backup_dir for r in done) or "none"
            raise KcompactError(f"{err}; undone before it: {undone} (the same undo again goes on from here)",
                                path=path) from err
    return done


def _refuse_finished(directory: Path, manifest: Manifest) -> None:
    if manifest.undo_finished_ms is not None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(manifest.undo_finished_ms / 1000))
        raise RefusedError(f"{directory}: already undone at {stamp}; nothing changed")


def _undo_locked(directory: Path, manifest: Manifest, part: Path, result: UndoResult) -> None:
    log_dir = part.parent
    _check_unchanged(part, manifest)
    manifest.undo_started = True  # a rerun after a crash must not refuse its own half-undo
    write_manifest(directory, manifest)
    for name in _created(part, manifest):
        (part / name).unlink()
        result.removed.append(name)
    for saved in manifest.files:
        copy = directory / FILES_DIR / saved.path
        target = log_dir / saved.path
        if target.parent == part:
            _restore(copy, saved, target)
            result.restored.append(saved.path)
        else:
            result.notes.append(_restore_checkpoint(copy, saved, target, manifest))
    for relative in manifest.absent_before:
        note = _remove_created(log_dir / relative, manifest)
        if note:
            result.notes.append(note)
    fsync_dir(part)
    _check_restored(log_dir, manifest, part)
    manifest.undo_finished_ms = wall_clock_ms()  # a later undo must not touch newer data
    write_manifest(directory, manifest)
    fsync_dir(directory)


def _check_copies(directory: Path, manifest: Manifest) -> None:
    for saved in manifest.files:
        copy = directory / FILES_DIR / saved.path
        found = sha256_of(copy) if copy.is_file() else "no file"
        if found != saved.sha256:
            raise KcompactError(f"{copy}: backup copy damaged; expected sha256 {saved.sha256}, "
                                f"found {found}")


def _check_unchanged(part: Path, manifest: Manifest) -> None:
    """Refuse unless every difference from the recorded state is one the repair can have made."""
    if manifest.undo_started:
        return  # an undo resumed: its own half-done restore is what differs
    if manifest.state_after is None:
        raise RefusedError(
            f"{part}: the backup records no state after the repair (an older kcompact's repair that did "
            f"not finish); expected one, found none: undo cannot prove which files the repair wrote, "
            f"restore by hand from the backup's files/")
    claimed = set(manifest.step_bases or ())
    changed = [name for name in _differences(partition_state(part), manifest.state_after)
               if _base_offset(name) not in claimed]
    if changed:
        raise RefusedError(
            f"{part}: changed since the repair; expected the files it left, found differences in "
            f"{', '.join(changed[:5])}{' …' if len(changed) > 5 else ''} (restoring would lose that)")


def _base_offset(name: str) -> int | None:
    parsed = parse_segment_file_name(name)
    return None if parsed is None else parsed.base_offset


def _differences(now: dict[str, list[int]], then: dict[str, list[int]]) -> list[str]:
    return [name for name in sorted(set(now) | set(then)) if now.get(name) != then.get(name)]


def _created(part: Path, manifest: Manifest) -> list[str]:
    before = set(manifest.listing_before)
    return sorted(p.name for p in part.iterdir() if p.is_file() and p.name not in before)


def _restore(copy: Path, saved: SavedFile, target: Path) -> None:
    # a full volume (ENOSPC) or a refused write is bad input, one line naming the file: not a traceback
    with file_access(target, "restore"), \
            replacing(target, target.with_name(f".{target.name}.kcompact-undo")) as temporary:
        copy_hashed(copy, temporary)
        os.chmod(temporary, saved.mode)
        if os.geteuid() == 0:
            os.chown(temporary, saved.uid, saved.gid)
        os.utime(temporary, ns=(saved.mtime_ns, saved.mtime_ns))


def _restore_checkpoint(copy: Path, saved: SavedFile, target: Path, manifest: Manifest) -> str:
    current = sha256_of(target) if target.is_file() else None
    if current in (None, manifest.checkpoint_sha256_after, saved.sha256):
        _restore(copy, saved, target)
        return f"{saved.path}: restored byte for byte"
    tp = parse_partition_dir_name(manifest.partition_dir)
    try:
        original = read_offset_checkpoint(copy)
    except CorruptCheckpointError as err:
        raise RefusedError(f"{target}: changed since the repair and its original does not parse "
                           f"({err}); restore it by hand from {copy}") from err
    key = None if tp is None else (tp.topic, tp.partition)
    with checkpoint_lock(target.parent):
        entries = read_offset_checkpoint(target)
        if key in original and key is not None:
            entries[key] = original[key]
        elif key is not None:
            entries.pop(key, None)
        write_offset_checkpoint(target, entries)
    return (f"{saved.path}: changed by others since the repair; only the entry of "
            f"{manifest.partition_dir} was restored")


def _remove_created(target: Path, manifest: Manifest) -> str | None:
    """Remove a log dir file the repair created, or only this partition's entry if others wrote to it."""
    if target.parent == Path(manifest.log_dir) / manifest.partition_dir or not target.is_file():
        return None
    if sha256_of(target) == manifest.checkpoint_sha256_after:
        target.unlink()
        return f"{target.name}: created by the repair, removed"
    tp = parse_partition_dir_name(manifest.partition_dir)
    if tp is None:
        return None
    with checkpoint_lock(target.parent):
        entries = read_offset_checkpoint(target)
        entries.pop((tp.topic, tp.partition), None)
        write_offset_checkpoint(target, entries)
    return f"{target.name}: written by others since the repair; only {manifest.partition_dir}'s entry removed"


def _check_restored(log_dir: Path, manifest: Manifest, part: Path) -> None:
    for saved in manifest.files:
        target = log_dir / saved.path
        if target.parent == part and sha256_of(target) != saved.sha256:
            raise KcompactError(f"{target}: restored file differs from the backup; expected sha256 "
                                f"{saved.sha256}, found {sha256_of(target)}")
