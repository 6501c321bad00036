"""Cleaning through a scratch dir on another volume (``clean --scratch-dir``): a partition on a full volume.

Every group's ``.cleaned`` files are written, fsynced and self-checked in ``DIR/<partition dir name>/`` instead
of the partition directory; then, group by group in the partition's order, each is brought in
(:func:`bring_in`). Steps, each a named crash point (``SCRATCH_CRASH_POINTS``):

1. An empty marker ``kcompact-scratch.pending`` is created in the partition directory (an empty file takes no
   block); it stays until no manifest is left for the partition, and ``clean`` without ``--scratch-dir`` refuses
   the partition while it is there. A manifest ``<base>.scratch.json`` (the partition, the group's base, its old
   ``.log`` files and their sizes, the new files with their sizes and SHA-256) is written to a temporary name,
   fsynced and renamed, so it is whole or absent (``scratch-written``).
2. When the partition's volume has room for the new files (rounded to its blocks) with one block to spare,
   they are copied in as ``.cleaned`` files (hashed as they are copied, then fsynced: ``scratch-copied-partial``
   after the ``.log``, ``scratch-copied``) and swapped in by ``swap.replace_segments`` — Kafka's own protocol
   with its own crash points. A broker started at any moment finds each group wholly old or wholly new.
3. When it has not (not one byte free), the group is *evacuated*: the old group's files are deleted
   (``scratch-old-deleted``: the window), the new files are copied in as in 2 and swapped in with no old
   segment to replace. Between the first delete and the ``.swap`` renames the partition directory lacks the
   group's records; they are durable, verified, in the scratch dir, and nothing on the full volume can hold
   them there first (ARCHITECTURE.md: a Kafka loader can settle a group only from files in the partition
   directory). What the group gives back usually lets the next groups in as in 2.
4. The group's scratch files and manifest are deleted (``scratch-swapped`` before).

Settlement (:func:`settle_scratch`, the next ``clean --scratch-dir DIR``): Kafka's loader rules first
(``swap.recover_interrupted_swaps``); then per manifest, the group is new (its files in place with the
manifest's sizes and hashes: done), old (every old ``.log`` there with its size: the clean never changed it),
or neither (killed in the window): what is left of the old group goes and the new files are brought in from
the scratch dir. Then the scratch files, the manifest and the marker go. A settled partition has no file of
the round in the scratch dir.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kcompact.cleaner.disk.space import held_bytes, volume_of
from kcompact.cleaner.disk.swap import (
    INDEX_KINDS,
    CleanedSegment,
    CrashHook,
    crash_point,
    recover_interrupted_swaps,
    replace_segments,
)
from kcompact.errors import KcompactError, NoSpaceError
from kcompact.segment.files import copy_ownership, file_access, fsync_dir
from kcompact.segment.names import parse_segment_file_name, segment_file_name
from kcompact.segment.partition import SegmentFiles

SCRATCH_CRASH_POINTS = (
    "scratch-written",  # the group's output and manifest durable in the scratch dir; the partition untouched
    "scratch-old-deleted",  # evacuating: the old group's files deleted, nothing of the new one in place yet
    "scratch-copied-partial",  # the new .log copied in as .cleaned, its indexes not yet
    "scratch-copied",  # every new file copied in as .cleaned and fsynced (then swap.py's own points)
    "scratch-swapped",  # the group is new in the partition; its scratch files and manifest still there
)
PENDING_MARKER = "kcompact-scratch.pending"  # empty: on a volume with no free byte it still fits
_MANIFEST_SUFFIX = ".scratch.json"
_COPY_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class ScratchFile:
    """One file of a group as the manifest names it: its final name in the partition directory."""

    kind: str
    name: str
    size: int
    sha256: str = ""  # the new files' only (the old ones are known by name and size)


@dataclass(frozen=True, slots=True)
class ScratchManifest:
    """What a group brought in through the scratch dir replaces and is replaced by."""

    partition_dir: str
    base_offset: int
    old: tuple[ScratchFile, ...]  # the old group's .log files
    new: tuple[ScratchFile, ...]  # the cleaned segment's files, .log first

    def to_json(self) -> str:
        def files(items: tuple[ScratchFile, ...]) -> list[dict[str, object]]:
            return [{"kind": f.kind, "name": f.name, "size": f.size, "sha256": f.sha256} for f in items]
        return json.dumps({"partition_dir": self.partition_dir, "base_offset": self.base_offset,
                           "old": files(self.old), "new": files(self.new)}, indent=1)

    @staticmethod
    def read(path: Path) -> ScratchManifest:
        """Raises: KcompactError: the manifest does not parse (one line naming it)."""
        try:
            raw = json.loads(path.read_text())
            return ScratchManifest(
                str(raw["partition_dir"]), int(raw["base_offset"]),
                tuple(ScratchFile(str(f["kind"]), str(f["name"]), int(f["size"]), str(f["sha256"]))
                      for f in raw["old"]),
                tuple(ScratchFile(str(f["kind"]), str(f["name"]), int(f["size"]), str(f["sha256"]))
                      for f in raw["new"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise KcompactError(f"{path}: not a kcompact scratch manifest ({err}); remove it by hand once the "
                                "partition is known to be whole") from err


def scratch_subdir(scratch_dir: str | Path, partition_dir: Path) -> Path:
    """Where a partition's cleaned segments are written in the scratch dir."""
    return Path(scratch_dir) / partition_dir.name


def pending_marker(partition_dir: Path) -> Path | None:
    """The marker of a group evacuated through a scratch dir and not yet settled, if there is one."""
    marker = partition_dir / PENDING_MARKER
    return marker if marker.exists() else None


def bring_in(
    cleaned: CleanedSegment, old: Sequence[SegmentFiles], partition_dir: Path, *, hook: CrashHook | None = None
) -> bool:
    """Bring one group's verified output from the scratch dir into the partition (steps 1–4).

    Args:
        cleaned: the group's ``.cleaned`` files, complete, fsynced and self-checked in the scratch dir.
        old: the group's segments in the partition.
        partition_dir: the partition directory (hold its lock).
        hook: called with each crash point's name (tests).

    Returns:
        Whether the group was evacuated (its old files deleted before the new ones were copied in).

    Raises:
        NoSpaceError: the partition's volume cannot take the new files even with the old group gone
            (nothing in the partition changed; the scratch files are removed).
        KcompactError: an I/O error after the manifest was written; it stays, and the next
            ``clean --scratch-dir`` settles the group (the message says so).
    """
    volume = volume_of(partition_dir)
    need = sum(volume.allocated(size) for size in _sizes(cleaned).values())
    fits = need + volume.block_bytes <= volume.free_bytes
    old_held = held_bytes(p for seg in old for p in _group_files(partition_dir, seg.base_offset))
    if not fits and need > volume.free_bytes + old_held:
        _discard_files(cleaned.directory, cleaned.base_offset)
        raise NoSpaceError(
            f"{partition_dir}: the cleaned {segment_file_name(cleaned.base_offset, 'log')} needs {need} bytes and "
            f"the volume has {volume.free_bytes} free with {old_held} held by the segments it replaces; "
            "the group was left as it was"
        )
    with file_access(partition_dir, "bring a cleaned segment in from the scratch dir"):
        (partition_dir / PENDING_MARKER).touch()  # before the manifest: a clean without the scratch dir refuses
        fsync_dir(partition_dir)
        manifest = _write_manifest(cleaned, old, partition_dir)
        crash_point("scratch-written", hook)
        try:
            if not fits:
                _delete_group(partition_dir, manifest)
                crash_point("scratch-old-deleted", hook)
            _copy_in(cleaned.directory, manifest, partition_dir, hook)
            replace_segments(_in_partition(manifest, partition_dir), old if fits else [], hook=hook)
            crash_point("scratch-swapped", hook)
            _finish(cleaned.directory, manifest, partition_dir)
        except (OSError, KcompactError) as err:
            raise KcompactError(
                f"{partition_dir}: bringing in the cleaned {segment_file_name(cleaned.base_offset, 'log')} from "
                f"{cleaned.directory} failed ({_reason(err)}); its manifest stays there: run `kcompact clean "
                f"--scratch-dir {cleaned.directory.parent}` again before a broker starts on the partition"
            ) from err
    return not fits


def _reason(err: OSError | KcompactError) -> str:
    return (err.strerror or str(err)) if isinstance(err, OSError) else str(err)


def settle_scratch(partition_dir: Path, scratch_dir: str | Path) -> list[str]:
    """Settle what an interrupted ``clean --scratch-dir`` left for this partition (module docstring).

    Returns:
        What was done, in words a report prints.

    Raises:
        KcompactError: a manifest does not parse, or a scratch file lost its bytes while the group is not
            whole in the partition (then nothing of that group is changed).
    """
    sub = scratch_subdir(scratch_dir, partition_dir)
    actions: list[str] = []
    if not sub.is_dir():
        if pending_marker(partition_dir) is not None:
            raise KcompactError(f"{partition_dir / PENDING_MARKER}: a group evacuated through a scratch dir is "
                                f"not settled and {sub} does not exist; give the --scratch-dir it was cleaned with")
        return actions
    with file_access(partition_dir, "settle a clean through the scratch dir"):
        manifests = sorted(sub.glob("*" + _MANIFEST_SUFFIX))
        if manifests:
            actions += recover_interrupted_swaps(partition_dir).actions
        for path in manifests:
            manifest = ScratchManifest.read(path)
            log_name = segment_file_name(manifest.base_offset, "log")
            if _is_new(partition_dir, manifest):
                actions.append(f"{log_name}: the scratch clean had swapped it in; scratch files removed")
            elif _is_old(partition_dir, manifest):
                actions.append(f"{log_name}: the scratch clean had not changed its group; scratch files removed")
            else:
                _delete_group(partition_dir, manifest)
                _copy_in(sub, manifest, partition_dir, None)
                replace_segments(_in_partition(manifest, partition_dir), [])
                actions.append(f"{log_name}: evacuated group brought in from {sub}")
            _finish(sub, manifest, partition_dir)
        for stray in sorted(p for p in sub.iterdir() if p.is_file()):
            stray.unlink()  # .cleaned files of groups a killed round had not begun to bring in
            actions.append(f"delete unfinished {stray} (no manifest: its group was never brought in)")
        marker = pending_marker(partition_dir)
        if marker is not None:
            marker.unlink()
            fsync_dir(partition_dir)
        sub.rmdir()
        fsync_dir(sub.parent)
    return actions


def _sizes(cleaned: CleanedSegment) -> dict[str, int]:
    return {kind: path.stat().st_size for kind, path in cleaned.files.items()}


def _group_files(partition_dir: Path, base: int) -> list[Path]:
    return [p for kind in INDEX_KINDS if (p := partition_dir / segment_file_name(base, kind)).exists()]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_COPY_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _manifest_path(sub: Path, base: int) -> Path:
    return sub / f"{base:020d}{_MANIFEST_SUFFIX}"


def _write_manifest(cleaned: CleanedSegment, old: Sequence[SegmentFiles], partition_dir: Path) -> ScratchManifest:
    new = tuple(ScratchFile(kind, segment_file_name(cleaned.base_offset, kind), path.stat().st_size, _sha256(path))
                for kind, path in sorted(cleaned.files.items(), key=lambda item: INDEX_KINDS.index(item[0])))
    olds = tuple(ScratchFile("log", seg.log_path.name, seg.size_in_bytes) for seg in old)
    manifest = ScratchManifest(str(partition_dir), cleaned.base_offset, olds, new)
    path = _manifest_path(cleaned.directory, cleaned.base_offset)
    temp = path.with_name(path.name + ".tmp")
    with open(temp, "w") as file:
        file.write(manifest.to_json())
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)
    fsync_dir(cleaned.directory)
    return manifest


def _delete_group(partition_dir: Path, manifest: ScratchManifest) -> None:
    """Delete the old group's files (and the producer snapshots of the bases that disappear), fsynced."""
    for old in manifest.old:
        name = parse_segment_file_name(old.name)
        if name is None:
            continue
        kinds = list(INDEX_KINDS) + ([] if name.base_offset == manifest.base_offset else ["snapshot"])
        for kind in kinds:
            (partition_dir / segment_file_name(name.base_offset, kind)).unlink(missing_ok=True)
    fsync_dir(partition_dir)


def _copy_in(sub: Path, manifest: ScratchManifest, partition_dir: Path, hook: CrashHook | None) -> None:
    """Copy the new files in as ``.cleaned``, hashing the scratch bytes as they go; fsync each and the dir."""
    for i, f in enumerate(manifest.new):
        src = sub / segment_file_name(manifest.base_offset, f.kind, "cleaned")
        dst = partition_dir / segment_file_name(manifest.base_offset, f.kind, "cleaned")
        digest = hashlib.sha256()
        with open(src, "rb") as reader, open(dst, "wb") as writer:
            while chunk := reader.read(_COPY_CHUNK):
                digest.update(chunk)
                writer.write(chunk)
            writer.flush()
            os.fsync(writer.fileno())
        if digest.hexdigest() != f.sha256:
            dst.unlink()
            raise KcompactError(f"{src}: its bytes no longer match the scratch manifest's SHA-256; "
                                "it was not brought in")
        st = src.stat()
        os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        copy_ownership(src, dst)
        if i == 0:
            crash_point("scratch-copied-partial", hook)
    fsync_dir(partition_dir)
    crash_point("scratch-copied", hook)


def _in_partition(manifest: ScratchManifest, partition_dir: Path) -> CleanedSegment:
    files = {f.kind: partition_dir / segment_file_name(manifest.base_offset, f.kind, "cleaned")
             for f in manifest.new}
    return CleanedSegment(partition_dir, manifest.base_offset, manifest.new[0].size, files)


def _is_new(partition_dir: Path, manifest: ScratchManifest) -> bool:
    for f in manifest.new:
        path = partition_dir / f.name
        if not path.exists() or path.stat().st_size != f.size or _sha256(path) != f.sha256:
            return False
    return True


def _is_old(partition_dir: Path, manifest: ScratchManifest) -> bool:
    return all((p := partition_dir / f.name).exists() and p.stat().st_size == f.size for f in manifest.old)


def _discard_files(sub: Path, base: int) -> None:
    for kind in INDEX_KINDS:
        (sub / segment_file_name(base, kind, "cleaned")).unlink(missing_ok=True)


def _finish(sub: Path, manifest: ScratchManifest, partition_dir: Path) -> None:
    """The group is settled: its scratch files go, then its manifest; the marker with the last one."""
    _discard_files(sub, manifest.base_offset)
    _manifest_path(sub, manifest.base_offset).unlink(missing_ok=True)
    fsync_dir(sub)
    if not any(sub.glob("*" + _MANIFEST_SUFFIX)):
        marker = pending_marker(partition_dir)
        if marker is not None:
            marker.unlink()
            fsync_dir(partition_dir)
