"""The backup a repair leaves behind, its quarantine, and ``kcompact repair --undo``.

Before repair changes or removes a file, the file is copied here byte for byte and listed in the manifest
with its sha256, size, mode, owner and mtime; the manifest is rewritten (atomically) after every addition,
so a repair that dies half-way still leaves a usable backup. Each step of a repair is bracketed by
:meth:`Backup.step`: before it, the manifest names the segments (base offsets) the step may touch; after
it — also when it fails — the manifest records the partition's files as the step left them. ``--undo``
therefore knows, even after a failed or killed repair, exactly which differences the repair can have made
and refuses to delete or overwrite anything else (a segment a broker wrote since). Damaged byte ranges
cut out of a segment go to the quarantine with the file and position they came from. Every file and
directory the backup creates, and every rename of its manifest, is durable before the repair goes on
(the file fsynced, then the directory holding its name), as the cleaner's swap and the checkpoint writer
do: a crash right after must not leave a partition changed and its backup's manifest or copies lost. :func:`undo_repair`
puts the partition back: it removes what the repair (and a ``--clean`` after it) created, restores every saved file with
its mode and mtime, and checks each restored file's sha256.

The backup never lives inside the log dir: Kafka refuses to start when the log dir holds a directory it
cannot parse as a partition name (``UnifiedLog.parseTopicPartitionName``). The default is a sibling of the log dir::

    <log dir>.kcompact-backup/<partition dir>.<UTC time>/
        manifest.json
        files/<partition dir>/<file>       originals of the partition's files
        files/cleaner-offset-checkpoint    the log dir's checkpoint, when it changed
        quarantine/<segment>.<position>.<kind>
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, field
from pathlib import Path
from typing import Any

from kcompact.clock import wall_clock_ms
from kcompact.errors import KcompactError, RefusedError
from kcompact.repair.salvage import DamagedRegion
from kcompact.segment.files import file_access, fsync_dir, write_replacing, write_synced
from kcompact.value import frozen, mutable

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
FILES_DIR = "files"
QUARANTINE_DIR = "quarantine"
BACKUP_SUFFIX = ".kcompact-backup"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
_CHUNK = 1 << 20


@frozen
class SavedFile:
    """One original file kept in the backup; ``path`` is relative to the log dir."""

    path: str
    sha256: str
    size_in_bytes: int
    mode: int
    uid: int
    gid: int
    mtime_ns: int


@frozen
class QuarantinedRegion:
    """Damaged bytes moved out of a segment: ``file`` in the backup, ``source`` in the log dir."""

    file: str
    source: str
    position: int
    size_in_bytes: int
    kind: str
    reason: str
    sha256: str


@mutable
class Manifest:
    """What ``manifest.json`` holds."""

    log_dir: str
    partition_dir: str  # its name inside the log dir
    listing_before: list[str]  # regular files of the partition dir before the repair
    created_ms: int
    files: list[SavedFile] = field(default_factory=list)
    quarantine: list[QuarantinedRegion] = field(default_factory=list)
    absent_before: list[str] = field(default_factory=list)  # log dir files the repair may create
    # name -> [size, mtime_ns] after the last step that ended (finished or failed); None only in
    # backups of older kcompact versions, which recorded it when the whole repair finished
    state_after: dict[str, list[int]] | None = None
    checkpoint_sha256_after: str | None = None
    # base offsets of the segments the step under way may change (None: no step under way); a
    # repair killed mid-step leaves it set, and undo accepts differences in those segments only
    step_bases: list[int] | None = None
    undo_started: bool = False  # an undo began: a rerun after it was killed resumes it
    # when an undo finished (ms since the epoch): a later undo of this backup is refused, since the
    # partition is no longer the repair's and anything that differs now is somebody else's data
    undo_finished_ms: int | None = None
    version: int = MANIFEST_VERSION


def default_backup_dir(partition_dir: Path) -> Path:
    """``<log dir>.kcompact-backup/<partition dir>.<UTC time>``, a fresh name next to the log dir."""
    return _fresh_backup_name(partition_dir.resolve().parent, partition_dir.name)


def default_run_backup_dir(log_dir: Path) -> Path:
    """``<log dir>.kcompact-backup/repair.<UTC time>``: one fresh root for a log dir repair's backups (one
    directory per partition under it), so that ``repair --undo`` of it undoes the run."""
    return _fresh_backup_name(log_dir.resolve(), "repair")


def _fresh_backup_name(log_dir: Path, prefix: str) -> Path:
    """``<log dir>.kcompact-backup/<prefix>.<UTC time>``, numbered ``-2``, ``-3`` … past names already taken."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = log_dir.parent / f"{log_dir.name}{BACKUP_SUFFIX}"
    candidate = root / f"{prefix}.{stamp}"
    number = 1
    while candidate.exists():
        number += 1
        candidate = root / f"{prefix}.{stamp}-{number}"
    return candidate


def check_backup_location(backup_dir: Path, log_dir: Path) -> None:
    """Refuse a backup directory inside the log dir (or a file where the directory should go).

    Args:
        backup_dir: the intended backup directory.
        log_dir: the log dir of the partition being repaired.

    Raises:
        RefusedError: it is inside the log dir, or exists and is not an empty directory.
    """
    target, root = backup_dir.resolve(), log_dir.resolve()
    if target == root or root in target.parents:
        raise RefusedError(
            f"{backup_dir}: the backup must not be inside the log dir {log_dir}; expected a "
            f"directory outside it (Kafka refuses to start with directories it cannot parse there)")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RefusedError(f"{backup_dir}: expected a new or empty backup directory, found one in use")


def refuse_linked_files(partition_dir: Path, *log_dir_files: Path) -> None:
    """Refuse a partition whose files (or the given files of its log dir) are symbolic links.

    A backup saves each file it may change under its path in the log dir, and the repair replaces a
    segment by renaming a new file over it: a link would be backed up as its target (outside the log dir:
    no path to save it under) and then replaced by a plain file, the target left behind. Checked before
    the backup directory is made, so a refusal leaves nothing.

    Args:
        partition_dir: the partition directory about to be repaired.
        log_dir_files: files of the log dir the repair may change (the cleaner checkpoint).

    Raises:
        RefusedError: naming the first link and its target.
    """
    with file_access(partition_dir, "list"), os.scandir(partition_dir) as listing:
        linked = sorted(Path(entry.path) for entry in listing if entry.is_symlink())
    linked += [path for path in log_dir_files if path.is_symlink()]
    if linked:
        path = linked[0]
        raise RefusedError(
            f"{path}: a symbolic link (to {os.readlink(path)}); repair backs up and rewrites the files of the "
            "log dir in place and would replace the link by a plain file; put the file itself where the "
            "link is, or repair a copy of the log dir; nothing was changed")


class Backup:
    """A backup being written (see the module docstring).

    Args:
        directory: the backup directory (created; see :func:`check_backup_location`).
        partition_dir: the partition directory about to be repaired.
    """

    def __init__(self, directory: Path, partition_dir: Path) -> None:
        self.directory = directory
        self.log_dir = partition_dir.resolve().parent
        self.partition_dir = partition_dir.resolve()
        check_backup_location(directory, self.log_dir)
        refuse_linked_files(partition_dir, self.log_dir / CLEANER_CHECKPOINT)
        self._made = [d for d in (directory, *directory.parents) if not d.exists()]  # discard() removes them
        make_dirs_synced(directory / FILES_DIR / self.partition_dir.name)
        make_dirs_synced(directory / QUARANTINE_DIR)
        self.manifest = Manifest(
            log_dir=str(self.log_dir), partition_dir=self.partition_dir.name,
            listing_before=_listing(self.partition_dir), created_ms=wall_clock_ms())
        self._saved: set[str] = set()
        self.checkpoint = self.log_dir / CLEANER_CHECKPOINT
        self._record_state()
        self._state_before = self._state_now()

    def changed(self) -> bool:
        """Whether the partition's files or the log dir's cleaner checkpoint differ from when the backup began.

        A file's name, size and mtime are not enough: a repair can rewrite a segment in place at its old size
        (a batch length or base offset restored) and stamp it with its old mtime, as Kafka's cleaner does; so
        every file the backup saved is also compared by content with its saved copy.
        """
        if self._state_now() != self._state_before:
            return True
        return any(_differs(self.log_dir / saved.path, saved.sha256) for saved in self.manifest.files)

    def discard(self) -> None:
        """Remove the backup, and the directories it made for it: it holds nothing to undo (see :meth:`changed`)."""
        if self.directory in self._made:
            shutil.rmtree(self.directory)
        else:  # an empty directory given by --backup-dir: left as it was given
            for entry in self.directory.iterdir():
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        for made in self._made:
            with suppress(OSError):  # a parent another backup has used since stays
                made.rmdir()
            with suppress(OSError):
                fsync_dir(made.parent)

    def _state_now(self) -> tuple[dict[str, list[int]], str | None]:
        checkpoint = sha256_of(self.checkpoint) if self.checkpoint.is_file() else None
        return partition_state(self.partition_dir), checkpoint

    def save(self, path: Path) -> None:
        """Copy ``path`` (in the partition dir or the log dir) into the backup, once."""
        relative = str(path.resolve().relative_to(self.log_dir))
        if relative in self._saved:
            return
        self._saved.add(relative)
        if not path.is_file():  # undo removes it again if the repair (or the clean) creates it
            self.manifest.absent_before.append(relative)
            self._write_manifest()
            return
        st = path.stat()
        target = self.directory / FILES_DIR / relative
        make_dirs_synced(target.parent)
        digest = copy_hashed(path, target)
        fsync_dir(target.parent)
        self.manifest.files.append(SavedFile(relative, digest, st.st_size, st.st_mode & 0o7777,
                                             st.st_uid, st.st_gid, st.st_mtime_ns))
        self._write_manifest()

    def quarantine(self, source: Path, region: DamagedRegion, data: bytes) -> QuarantinedRegion:
        """Store the damaged bytes of ``region`` (cut from ``source``) in the quarantine."""
        name = f"{source.name}.{region.position:020d}.{region.kind}"
        path = self.directory / QUARANTINE_DIR / name
        write_synced(path, data)
        fsync_dir(path.parent)
        entry = QuarantinedRegion(
            file=f"{QUARANTINE_DIR}/{name}", source=str(source.resolve().relative_to(self.log_dir)),
            position=region.position, size_in_bytes=region.size_in_bytes, kind=region.kind,
            reason=region.reason, sha256=hashlib.sha256(data).hexdigest())
        self.manifest.quarantine.append(entry)
        self._write_manifest()
        return entry

    @contextmanager
    def step(self, bases: Iterable[int]) -> Iterator[None]:
        """Bracket one step of the repair that may change the segments of ``bases``.

        The claim is in the manifest before the step changes anything; the state the step leaves is
        recorded after it, whether it finished or raised (a recording that fails then keeps the claim,
        which is still safe for undo).
        """
        self.manifest.step_bases = sorted(set(bases))
        self._write_manifest()
        try:
            yield
        except BaseException:
            with suppress(OSError):  # the step's own error is the one to report
                self._record_state()
            raise
        self._record_state()

    def _record_state(self) -> None:
        """Record the partition's files and the checkpoint as they are now (what ``--undo`` expects)."""
        self.manifest.state_after = partition_state(self.partition_dir)
        checkpoint = self.checkpoint
        self.manifest.checkpoint_sha256_after = sha256_of(checkpoint) if checkpoint.is_file() else None
        self.manifest.step_bases = None
        self._write_manifest()

    def _write_manifest(self) -> None:
        write_manifest(self.directory, self.manifest)


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """Create or replace ``manifest.json`` atomically and durably (``.tmp``, fsync, rename, fsync directory)."""
    write_replacing(directory / MANIFEST_NAME, json.dumps(asdict(manifest), indent=2).encode("utf-8"))


def make_dirs_synced(directory: Path) -> None:
    """``mkdir -p``, each directory it creates made durable in its parent (the parent fsynced)."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    for created in reversed(missing):
        created.mkdir(exist_ok=True)
        fsync_dir(created.parent)


def read_manifest(directory: Path) -> Manifest:
    """Read a backup's manifest.

    Args:
        directory: the backup directory.

    Returns:
        The manifest.

    Raises:
        KcompactError: no manifest, or one that is not a kcompact repair manifest of this version.
    """
    path = directory / MANIFEST_NAME
    try:
        raw: dict[str, Any] = json.loads(path.read_bytes())
        if raw.get("version") != MANIFEST_VERSION:
            raise KcompactError(f"{path}: unknown manifest version; expected {MANIFEST_VERSION}, "
                                f"found {raw.get('version')!r}")
        raw["files"] = [SavedFile(**f) for f in raw["files"]]
        raw["quarantine"] = [QuarantinedRegion(**q) for q in raw["quarantine"]]
        return Manifest(**raw)
    except FileNotFoundError as err:
        raise KcompactError(f"{path}: not a kcompact repair backup (no manifest)") from err
    except (ValueError, TypeError, KeyError) as err:
        raise KcompactError(f"{path}: unreadable manifest; expected kcompact's JSON, found "
                            f"{type(err).__name__}: {err}") from err


def copy_hashed(source: Path, target: Path) -> str:
    """Copy a file, fsync the copy, and return the sha256 of the bytes copied."""
    digest = hashlib.sha256()
    with open(source, "rb") as fin, open(target, "wb") as fout:
        while chunk := fin.read(_CHUNK):
            digest.update(chunk)
            fout.write(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    return digest.hexdigest()


def _differs(path: Path, sha256: str) -> bool:
    """Whether ``path`` no longer holds the bytes whose digest is ``sha256`` (a missing file differs)."""
    try:
        return sha256_of(path) != sha256
    except FileNotFoundError:
        return True


def sha256_of(path: Path) -> str:
    """The sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fin:
        while chunk := fin.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_file())


def partition_state(directory: Path) -> dict[str, list[int]]:
    """Name -> [size, mtime_ns] of the regular files of a partition directory."""
    out: dict[str, list[int]] = {}
    for p in sorted(directory.iterdir()):
        if p.is_file():
            st = p.stat()
            out[p.name] = [st.st_size, st.st_mtime_ns]
    return out
