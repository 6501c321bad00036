"""Cleaning through a scratch dir on another volume (``clean --scratch-dir``): a partition on a full volume.

Every group's ``.cleaned`` files are written, fsynced and self-checked in ``DIR/<partition dir name>/`` instead
of the partition directory; then, group by group in the partition's order, each is brought in
(:func:`bring_in`). Steps, each a named crash point (``SCRATCH_CRASH_POINTS``):

1. An empty marker ``kcompact-scratch.pending`` is created in the partition directory (an empty file takes no
   block); it stays until no manifest is left for the partition, and ``clean`` without ``--scratch-dir`` refuses
   the partition while it is there. A manifest ``<base>.scratch.json`` (the partition, the group's base, its old
   ``.log`` files and their sizes, the new files with their sizes and SHA-256) is written to a temporary name,
   fsynced and renamed, so it is whole or absent (``scratch-written``).
2. When the partition's volume has room for the new files (rounded to its blocks) with one block to spare —
   counting, when kcompact runs as root, the blocks the volume keeps for root (``disk.space``: the group gives
   them back at once, and the broker never needed them) — they are copied in as ``.cleaned`` files (hashed as
   they are copied, then fsynced: ``scratch-copied-partial`` after the ``.log``, ``scratch-copied``) and
   swapped in by ``swap.replace_segments`` — Kafka's own protocol with its own crash points. A broker started
   at any moment finds each group wholly old or wholly new.
   Groups come in in the partition's order while one fits so (:func:`next_group`: the first that does).
3. When none has (not one byte free), one group is *evacuated*: the one whose evacuation gives back the most
   (its old files' blocks less its new files'; ties: the lowest offset), so that the most groups after it fit
   beside their old segments; the report says which and why. the old group's files are deleted
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

Where the scratch files go (:class:`ScratchPlace`): ``DIR/<partition dir name>/``, unless DIR is a Kafka log dir
(another of the broker's ``log.dirs``, on another volume: its free space): Kafka 4.1's ``LogManager.loadLogs``
takes every directory of a log dir for a partition, and one whose name ``UnifiedLog.parseTopicPartitionName``
does not parse stops the broker's start, while it passes over the log dir's files. There the scratch files are
files of DIR itself, each named ``kcompact-scratch.<partition dir name>.<its name>``. A scratch dir *inside* a
log dir (a directory there) is refused (:func:`refuse_scratch_dir`), and so is one inside the log dir cleaned.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from kcompact.cleaner.disk.space import held_bytes, volume_of
from kcompact.cleaner.disk.swap import (
    INDEX_KINDS,
    CleanedSegment,
    CrashHook,
    crash_point,
    recover_interrupted_swaps,
    removing_at_once,
    replace_segments,
)
from kcompact.errors import KcompactError, NoSpaceError, RefusedError
from kcompact.segment.files import copy_ownership, file_access, fsync_dir, replacing, write_synced
from kcompact.segment.names import parse_segment_file_name, segment_file_name
from kcompact.segment.partition import LOG_DIR_FILES, SegmentFiles
from kcompact.text import size_text
from kcompact.value import frozen

SCRATCH_CRASH_POINTS = (
    "scratch-written",  # the group's output and manifest durable in the scratch dir; the partition untouched
    "scratch-old-deleted",  # evacuating: the old group's files deleted, nothing of the new one in place yet
    "scratch-copied-partial",  # the new .log copied in as .cleaned, its indexes not yet
    "scratch-copied",  # every new file copied in as .cleaned and fsynced (then swap.py's own points)
    "scratch-swapped",  # the group is new in the partition; its scratch files and manifest still there
)
PENDING_MARKER = "kcompact-scratch.pending"  # empty: on a volume with no free byte it still fits
IN_LOG_DIR_PREFIX = "kcompact-scratch."  # then the partition dir's name and a dot: files of a log dir's top
_MANIFEST_SUFFIX = ".scratch.json"
_COPY_CHUNK = 1 << 20


@frozen
class ScratchFile:
    """One file of a group as the manifest names it: its final name in the partition directory."""

    kind: str
    name: str
    size: int
    sha256: str = ""  # the new files' only (the old ones are known by name and size)


@frozen
class ScratchManifest:
    """What a group brought in through the scratch dir replaces and is replaced by."""

    partition_dir: str
    base_offset: int
    old: tuple[ScratchFile, ...]  # the old group's .log files
    new: tuple[ScratchFile, ...]  # the cleaned segment's files, .log first

    def to_json(self) -> str:
        def files(items: tuple[ScratchFile, ...]) -> list[dict[str, object]]:
            return [{"kind": f.kind, "name": f.name, "size": f.size, "sha256": f.sha256} for f in items]

        import json  # here and in read only: a clean without --scratch-dir never loads it (~2 ms)

        return json.dumps({"partition_dir": self.partition_dir, "base_offset": self.base_offset,
                           "old": files(self.old), "new": files(self.new)}, indent=1)

    @staticmethod
    def read(path: Path) -> ScratchManifest:
        """Raises: KcompactError: the manifest does not parse (one line naming it)."""
        import json

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


@frozen
class ScratchPlace:
    """Where one partition's scratch files are: every file of ``directory`` (``DIR/<partition>``), or, in a
    scratch dir that is a Kafka log dir, those of ``directory`` (DIR) whose names start with ``prefix``."""

    directory: Path
    prefix: str = ""

    @property
    def scratch_dir(self) -> Path:
        """The ``--scratch-dir`` it is in."""
        return self.directory if self.prefix else self.directory.parent

    def path(self, name: str) -> Path:
        """The scratch file of this partition named ``name`` (a segment's or a manifest's name)."""
        return self.directory / (self.prefix + name)

    def cleaned(self, base_offset: int, kind: str) -> Path:
        """Where the ``.cleaned`` file of a group's output of this kind is."""
        return self.path(segment_file_name(base_offset, kind, "cleaned"))

    def files(self) -> list[Path]:
        """This partition's scratch files, sorted (none where its directory does not exist)."""
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if p.name.startswith(self.prefix) and p.is_file())

    def exists(self) -> bool:
        """Whether the partition has a place in the scratch dir (its directory; in a log dir, a file)."""
        return bool(self.files()) if self.prefix else self.directory.is_dir()

    def create(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    def remove_if_empty(self) -> None:
        """The partition's directory goes once nothing of the round is left in it (a log dir stays)."""
        if not self.prefix and self.directory.is_dir() and not any(self.directory.iterdir()):
            self.directory.rmdir()
            fsync_dir(self.directory.parent)

    def __str__(self) -> str:
        return str(self.path("*") if self.prefix else self.directory)


def scratch_place(scratch_dir: str | Path, partition_dir: Path) -> ScratchPlace:
    """Where a partition's cleaned segments are written in the scratch dir (the module docstring)."""
    root = Path(scratch_dir)
    if _holds_log_dir_files(root):
        return ScratchPlace(root, f"{IN_LOG_DIR_PREFIX}{partition_dir.name}.")
    return ScratchPlace(root / partition_dir.name)


def refuse_scratch_dir(scratch_dir: str | Path, log_dir: Path) -> None:
    """Refuse a scratch dir inside the log dir cleaned, or inside (below the top of) another Kafka log dir.

    Raises:
        RefusedError: one line naming the way that works.
    """
    scratch = Path(scratch_dir).resolve()
    if scratch.is_relative_to(log_dir.resolve()):
        raise RefusedError(f"{scratch_dir}: the scratch dir is inside the log dir {log_dir}, whose directories "
                           "are the broker's; give one outside it, on another volume")
    owner = next((d for d in (scratch, *scratch.parents) if _holds_log_dir_files(d)), None)
    if owner is not None and owner != scratch:
        raise RefusedError(
            f"{scratch_dir}: the scratch dir is a directory inside the Kafka log dir {owner}, where a directory "
            "not named topic-partition stops the broker's start (LogManager.loadLogs); give the log dir itself, "
            f"--scratch-dir {owner}: kcompact keeps its scratch there as files {IN_LOG_DIR_PREFIX}<partition>.*, "
            f"which the broker passes over, and remove {scratch_dir} before a broker starts")


def _holds_log_dir_files(directory: Path) -> bool:
    """A Kafka log dir by its own top files (``segment.partition.LOG_DIR_FILES``): its partitions' names are
    not asked, since a plain scratch dir holds directories named like them."""
    return any((directory / name).is_file() for name in LOG_DIR_FILES)


def pending_marker(partition_dir: Path) -> Path | None:
    """The marker of a group evacuated through a scratch dir and not yet settled, if there is one."""
    marker = partition_dir / PENDING_MARKER
    return marker if marker.exists() else None


@frozen
class NextGroup:
    """Which pending group to bring in next, and why it is evacuated where none fits beside its old segments."""

    position: int  # in the pending groups given
    why_evacuated: str = ""


def next_group(pending: Sequence[tuple[CleanedSegment, Sequence[SegmentFiles]]], partition_dir: Path) -> NextGroup:
    """The first pending group whose new files fit beside its old segments (step 2); where none does, the one
    whose evacuation gives back the most, ties to the lowest offset (step 3).

    Args:
        pending: per group not yet brought in, in the partition's order: its files in the scratch dir and its
            old segments.
        partition_dir: the partition directory.
    """
    volume = volume_of(partition_dir)
    room = volume.free_bytes + (volume.reserved_bytes if os.geteuid() == 0 else 0)
    gains: list[int] = []
    for position, (cleaned, old) in enumerate(pending):
        need = sum(volume.allocated(size) for size in _sizes(cleaned).values())
        if need + volume.block_bytes <= room:
            return NextGroup(position)
        gains.append(held_bytes(p for seg in old for p in _group_files(partition_dir, seg.base_offset)) - need)
    best = max(range(len(gains)), key=lambda i: (gains[i], -i))
    which = f"of the {len(pending)} left it gives back the most, " if len(pending) > 1 else \
        "the last left, it gives back "
    return NextGroup(best, f"no group fitted beside its old segments with {size_text(room)} free; {which}"
                           f"{size_text(gains[best])}")


def bring_in(
    cleaned: CleanedSegment, old: Sequence[SegmentFiles], partition_dir: Path, place: ScratchPlace,
    *, hook: CrashHook | None = None, why_evacuated: str = "",
) -> str:
    """Bring one group's verified output from the scratch dir into the partition (steps 1–4).

    Args:
        cleaned: the group's ``.cleaned`` files, complete, fsynced and self-checked in the scratch dir.
        old: the group's segments in the partition.
        partition_dir: the partition directory (hold its lock).
        place: the partition's place in the scratch dir, where ``cleaned`` is.
        hook: called with each crash point's name (tests).
        why_evacuated: why this group, where it is evacuated (:func:`next_group`), for the report.

    Returns:
        How it came in, for the report: evacuated (its old files deleted before the new ones were copied in),
        or copied in beside its old segments (through root's reserve, where only that had room).

    Raises:
        NoSpaceError: the partition's volume cannot take the new files even with the old group gone
            (nothing in the partition changed; the scratch files are removed).
        KcompactError: an I/O error after the manifest was written; it stays, and the next
            ``clean --scratch-dir`` settles the group (the message says so).
    """
    volume = volume_of(partition_dir)
    need = sum(volume.allocated(size) for size in _sizes(cleaned).values())
    reserve = volume.reserved_bytes if os.geteuid() == 0 else 0
    fits = need + volume.block_bytes <= volume.free_bytes + reserve
    old_held = held_bytes(p for seg in old for p in _group_files(partition_dir, seg.base_offset))
    if not fits and need > volume.free_bytes + old_held:
        _discard_files(place, cleaned.base_offset)
        raise NoSpaceError(
            f"{partition_dir}: the cleaned {segment_file_name(cleaned.base_offset, 'log')} needs {need} bytes and "
            f"the volume has {volume.free_bytes} free with {old_held} held by the segments it replaces; "
            "the group was left as it was"
        )
    with file_access(partition_dir, "bring a cleaned segment in from the scratch dir"):
        (partition_dir / PENDING_MARKER).touch()  # before the manifest: a clean without the scratch dir refuses
        fsync_dir(partition_dir)
        manifest = _write_manifest(cleaned, old, partition_dir, place)
        crash_point("scratch-written", hook)
        try:
            if not fits:
                _delete_group(partition_dir, manifest)
                crash_point("scratch-old-deleted", hook)
            _copy_in(place, manifest, partition_dir, hook)
            with removing_at_once():  # the next group's space check counts what this one's old files held
                replace_segments(_in_partition(manifest, partition_dir), old if fits else [], hook=hook)
            crash_point("scratch-swapped", hook)
            _finish(place, manifest, partition_dir)
        except (OSError, KcompactError) as err:
            raise KcompactError(
                f"{partition_dir}: bringing in the cleaned {segment_file_name(cleaned.base_offset, 'log')} from "
                f"{place} failed ({_reason(err)}); its manifest stays there: run `kcompact clean "
                f"--scratch-dir {place.scratch_dir}` again before a broker starts on the partition"
            ) from err
    if not fits:
        return f"evacuated ({why_evacuated}), then brought in" if why_evacuated else "evacuated, then brought in"
    if need + volume.block_bytes > volume.free_bytes:
        return "copied in beside its old segments through root's reserve, then swapped"
    return "copied in beside its old segments, then swapped"


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
    place = scratch_place(scratch_dir, partition_dir)
    actions: list[str] = []
    if not place.exists():
        if pending_marker(partition_dir) is not None:
            raise KcompactError(f"{partition_dir / PENDING_MARKER}: a group evacuated through a scratch dir is "
                                f"not settled and {place} does not exist; give the --scratch-dir it was cleaned with")
        return actions
    with file_access(partition_dir, "settle a clean through the scratch dir"):
        manifests = _manifests(place)
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
                _refuse_foreign(partition_dir, manifest, path)
                _delete_group(partition_dir, manifest)
                _copy_in(place, manifest, partition_dir, None)
                replace_segments(_in_partition(manifest, partition_dir), [])
                actions.append(f"{log_name}: evacuated group brought in from {place}")
            _finish(place, manifest, partition_dir)
        for stray in place.files():
            stray.unlink()  # .cleaned files of groups a killed round had not begun to bring in
            actions.append(f"delete unfinished {stray} (no manifest: its group was never brought in)")
        marker = pending_marker(partition_dir)
        if marker is not None:
            marker.unlink()
            fsync_dir(partition_dir)
        fsync_dir(place.directory)
        place.remove_if_empty()
    return actions


def _manifests(place: ScratchPlace) -> list[Path]:
    return [p for p in place.files() if p.name.endswith(_MANIFEST_SUFFIX)]


def _sizes(cleaned: CleanedSegment) -> dict[str, int]:
    return {kind: path.stat().st_size for kind, path in cleaned.files.items()}


def _group_files(partition_dir: Path, base: int) -> list[Path]:
    return [p for kind in INDEX_KINDS if (p := partition_dir / segment_file_name(base, kind)).exists()]


def _sha256(path: Path) -> str:
    import hashlib  # here and in _copy_in only: a clean without --scratch-dir never loads OpenSSL's (~5 ms of CPU)

    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_COPY_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _manifest_path(place: ScratchPlace, base: int) -> Path:
    return place.path(f"{base:020d}{_MANIFEST_SUFFIX}")


def _write_manifest(
    cleaned: CleanedSegment, old: Sequence[SegmentFiles], partition_dir: Path, place: ScratchPlace
) -> ScratchManifest:
    new = tuple(ScratchFile(kind, segment_file_name(cleaned.base_offset, kind), path.stat().st_size, _sha256(path))
                for kind, path in sorted(cleaned.files.items(), key=lambda item: INDEX_KINDS.index(item[0])))
    olds = tuple(ScratchFile("log", seg.log_path.name, seg.size_in_bytes) for seg in old)
    manifest = ScratchManifest(str(partition_dir), cleaned.base_offset, olds, new)
    path = _manifest_path(place, cleaned.base_offset)
    with replacing(path) as temp:  # <manifest>.tmp, fsynced, renamed over, the scratch directory fsynced
        write_synced(temp, manifest.to_json().encode())
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


def _copy_in(place: ScratchPlace, manifest: ScratchManifest, partition_dir: Path, hook: CrashHook | None) -> None:
    """Copy the new files in as ``.cleaned``, hashing the scratch bytes as they go; fsync each and the dir."""
    import hashlib

    for i, f in enumerate(manifest.new):
        src = place.cleaned(manifest.base_offset, f.kind)
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


def _refuse_foreign(partition_dir: Path, manifest: ScratchManifest, manifest_path: Path) -> None:
    """Refuse to settle a group as killed in the window when a ``.log`` of its old group is there with another
    size and is not the clean's own new ``.log``: something else rewrote the group since (a broker started
    against the advice, whose own cleaner ran); deleting it could lose offsets past the group's.

    Raises:
        KcompactError: one line; nothing of the group is changed, its scratch files stay.
    """
    new_log = manifest.new[0]
    for old in manifest.old:
        path = partition_dir / old.name
        if not path.exists() or path.stat().st_size == old.size:
            continue
        if old.name == new_log.name and path.stat().st_size == new_log.size and _sha256(path) == new_log.sha256:
            continue
        raise KcompactError(
            f"{path}: the scratch clean's group is neither as it found it ({old.size} bytes) nor as it made it, "
            f"found {path.stat().st_size} bytes: something rewrote it since (a broker's cleaner?); nothing of the "
            f"group was changed: once the partition is known whole, remove its scratch files ({manifest_path} "
            f"and the .cleaned files of its base) and {PENDING_MARKER}")


def _is_old(partition_dir: Path, manifest: ScratchManifest) -> bool:
    return all((p := partition_dir / f.name).exists() and p.stat().st_size == f.size for f in manifest.old)


def _discard_files(place: ScratchPlace, base: int) -> None:
    for kind in INDEX_KINDS:
        place.cleaned(base, kind).unlink(missing_ok=True)


def _finish(place: ScratchPlace, manifest: ScratchManifest, partition_dir: Path) -> None:
    """The group is settled: its scratch files go, then its manifest; the marker with the last one."""
    _discard_files(place, manifest.base_offset)
    _manifest_path(place, manifest.base_offset).unlink(missing_ok=True)
    fsync_dir(place.directory)
    if not _manifests(place):
        marker = pending_marker(partition_dir)
        if marker is not None:
            marker.unlink()
            fsync_dir(partition_dir)
