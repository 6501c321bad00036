"""Writing a cleaned segment and swapping it in: Kafka's crash-safe ``replaceSegments`` protocol.

The only code that changes a partition's segments (``repair`` writes through it too). Steps, as in Kafka's
``LocalLog.replaceSegments`` (spec §6.13) — each a named crash point (``CRASH_POINTS``):

1. ``<base>.log.cleaned`` (+ ``.index.cleaned``, ``.timeindex.cleaned``, ``.txnindex.cleaned`` when it has
   entries) are written, trimmed, fsynced, and given the mtime and the owner/mode of the files they replace.
2. Each new file is renamed ``.cleaned`` → ``.swap`` (log first, as Kafka's ``changeFileSuffixes``); the
   directory is fsynced.
3. Every replaced segment's files are renamed to ``….deleted``, with the ``<base>.snapshot`` of each base
   offset that disappears; the directory is fsynced.
4. Each ``.swap`` is renamed to its final name; the directory is fsynced.
5. The ``.deleted`` files are removed (a broker does it 60 s later; offline there is no reason to wait).

Recovery (:func:`recover_interrupted_swaps`) applies Kafka's loader rules (spec §7.1 passes 1–3, §7.2): a
``.cleaned`` file means the swap never started — delete it, and any ``.swap`` at or above the lowest
``.cleaned`` base; a ``.swap`` without ``.cleaned`` means the new segment was complete — delete the old files
its range covers, then rename the ``.swap`` files into place; ``.deleted`` files are removed. Every segment
group ends wholly old or wholly new, and a broker started on any intermediate state does the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kcompact.errors import CleanerStateError
from kcompact.segment.index_builder import IndexBuilder
from kcompact.segment.log_file import LogFile
from kcompact.segment.names import format_offset, parse_segment_file_name, segment_file_name
from kcompact.segment.offset_index import encode_offset_index
from kcompact.segment.partition import SegmentFiles
from kcompact.segment.time_index import encode_time_index
from kcompact.segment.txn_index import AbortedTxn, encode_txn_index

INDEX_KINDS = ("log", "index", "timeindex", "txnindex")
CRASH_POINTS = (
    "cleaned-written",  # all .cleaned files complete and fsynced
    "swap-partial",  # the new .log renamed to .swap, its indexes still .cleaned
    "swap-complete",  # every new file is .swap, old segments untouched
    "deleted-partial",  # the first old segment renamed .deleted
    "deleted-complete",  # every old file renamed .deleted
    "final-partial",  # the new .log renamed to its final name, indexes still .swap
    "final-complete",  # the swap is done; .deleted files still present
)
CrashHook = Callable[[str], None]
_CRASH_ENV = "KCOMPACT_CRASH_AT"


def crash_point(name: str, hook: CrashHook | None) -> None:
    """Call the test hook, and honour ``KCOMPACT_CRASH_AT=<name>`` by dying at once (crash tests)."""
    if hook is not None:
        hook(name)
    if os.environ.get(_CRASH_ENV) == name:
        os._exit(137)  # no cleanup, no flush: what a kill -9 leaves


def fsync_dir(directory: Path) -> None:
    """Make renames in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(slots=True)
class CleanedSegment:
    """The ``.cleaned`` files of one output segment, ready to swap in."""

    directory: Path
    base_offset: int
    size_in_bytes: int
    files: dict[str, Path] = field(default_factory=dict)  # kind -> path with the .cleaned suffix


class CleanedSegmentWriter:
    """Appends output batches to ``<base>.log.cleaned`` and builds its indexes as Kafka 4.1 does.

    Args:
        directory: the partition directory.
        base_offset: the output segment's base offset (its group's first segment's base).
        index_interval_bytes: the topic's ``index.interval.bytes``.
        dry_run: count only, write nothing.
    """

    def __init__(
        self, directory: Path, base_offset: int, index_interval_bytes: int, *, dry_run: bool = False
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.dry_run = dry_run
        self.position = 0
        self.aborted: list[AbortedTxn] = []
        self._builder = IndexBuilder(base_offset, index_interval_bytes)
        self._log_path = directory / segment_file_name(base_offset, "log", "cleaned")
        self._file = None if dry_run else _create(self._log_path)

    def append(self, data: bytes | memoryview, last_offset: int, max_timestamp: int) -> None:
        """Append one output batch."""
        if last_offset - self.base_offset > 0x7FFFFFFF:
            raise CleanerStateError(
                f"offset {last_offset} does not fit a segment based at {self.base_offset} "
                "(32-bit relative offsets); Kafka would split this segment first"
            )
        if self._file is not None:
            self._file.write(data)
        self._builder.append(self.position, len(data), last_offset, max_timestamp)
        self.position += len(data)

    def finish(self, mtime_ns: int, template: SegmentFiles | None) -> CleanedSegment:
        """Write the indexes, fsync everything, set mtimes and ownership; return the segment."""
        offsets, times = self._builder.finish()
        result = CleanedSegment(self.directory, self.base_offset, self.position)
        if self._file is None:
            return result
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        result.files["log"] = self._log_path
        blobs = {
            "index": encode_offset_index(offsets, self.base_offset),
            "timeindex": encode_time_index(times, self.base_offset),
        }
        if self.aborted:
            blobs["txnindex"] = encode_txn_index(self.aborted)
        for kind, blob in blobs.items():
            path = self.directory / segment_file_name(self.base_offset, kind, "cleaned")
            _write_synced(path, blob)
            result.files[kind] = path
        for kind, path in result.files.items():
            if kind != "txnindex":  # Kafka leaves the txn index's mtime alone
                os.utime(path, ns=(mtime_ns, mtime_ns))
            if template is not None:
                _copy_ownership(template.log_path, path)
        return result

    def abort(self) -> None:
        """Remove whatever ``.cleaned`` files this writer created."""
        if self._file is not None and not self._file.closed:
            self._file.close()
        remove_cleaned(self.directory, self.base_offset)


def _create(path: Path):  # type: ignore[no-untyped-def]
    if path.exists():
        path.unlink()
    return open(path, "xb", buffering=1 << 20)  # noqa: SIM115 - closed in finish()/abort()


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _copy_ownership(template: Path, path: Path) -> None:
    st = template.stat()
    os.chmod(path, st.st_mode & 0o7777)
    if hasattr(os, "chown") and (st.st_uid, st.st_gid) != (path.stat().st_uid, path.stat().st_gid):
        try:
            os.chown(path, st.st_uid, st.st_gid)
        except PermissionError:
            pass  # not root: the files stay ours, which the broker's user may still read


def remove_cleaned(directory: Path, base_offset: int) -> None:
    """Delete stale ``<base>.*.cleaned`` files (Kafka does this before writing a cleaned segment)."""
    for kind in INDEX_KINDS:
        (directory / segment_file_name(base_offset, kind, "cleaned")).unlink(missing_ok=True)


def replace_segments(
    new: CleanedSegment, old: Sequence[SegmentFiles], *, hook: CrashHook | None = None
) -> None:
    """Swap one cleaned segment in for the segments of its group (steps 2–5 of the module docstring)."""
    directory = new.directory
    crash_point("cleaned-written", hook)
    for i, kind in enumerate(k for k in INDEX_KINDS if k in new.files):
        _rename(new.files[kind], _with_suffix(directory, new.base_offset, kind, "swap"))
        if i == 0:
            crash_point("swap-partial", hook)
    fsync_dir(directory)
    crash_point("swap-complete", hook)
    deleted: list[Path] = []
    for i, seg in enumerate(sorted(old, key=lambda s: s.base_offset)):
        deleted += _mark_deleted(directory, seg.base_offset, keep_snapshot=seg.base_offset == new.base_offset)
        if i == 0:
            crash_point("deleted-partial", hook)
    fsync_dir(directory)
    crash_point("deleted-complete", hook)
    for i, kind in enumerate(k for k in INDEX_KINDS if k in new.files):
        _rename(_with_suffix(directory, new.base_offset, kind, "swap"), directory / segment_file_name(new.base_offset, kind))
        if i == 0:
            crash_point("final-partial", hook)
    fsync_dir(directory)
    crash_point("final-complete", hook)
    for path in deleted:
        path.unlink(missing_ok=True)


def _with_suffix(directory: Path, base: int, kind: str, suffix: str) -> Path:
    return directory / segment_file_name(base, kind, suffix)


def _rename(src: Path, dst: Path) -> None:
    os.replace(src, dst)


def _mark_deleted(directory: Path, base: int, *, keep_snapshot: bool) -> list[Path]:
    kinds = list(INDEX_KINDS) + ([] if keep_snapshot else ["snapshot"])
    moved = []
    for kind in kinds:
        path = directory / segment_file_name(base, kind)
        if path.exists():
            target = directory / segment_file_name(base, kind, "deleted")
            _rename(path, target)
            moved.append(target)
    return moved


@dataclass(slots=True)
class RecoveryReport:
    """What :func:`recover_interrupted_swaps` did, in words a report can print."""

    actions: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.actions)


def recover_interrupted_swaps(directory: Path, *, dry_run: bool = False) -> RecoveryReport:
    """Finish or roll back an interrupted clean exactly as Kafka's log loader does (spec §7.1, §7.2)."""
    report = RecoveryReport()
    files = [(p, parse_segment_file_name(p.name)) for p in sorted(directory.iterdir()) if p.is_file()]
    cleaned = [(p, n) for p, n in files if n is not None and n.temp_suffix == "cleaned"]
    swaps = [(p, n) for p, n in files if n is not None and n.temp_suffix == "swap"]
    min_cleaned = min((n.base_offset for _p, n in cleaned), default=None)
    for p, n in files:
        if n is not None and n.temp_suffix == "deleted" and n.kind != "checkpoint":
            _act(report, dry_run, f"delete leftover {p.name}", p.unlink)
    for p, _n in cleaned:
        _act(report, dry_run, f"delete unfinished {p.name}", p.unlink)
    valid = []
    for p, n in swaps:
        if min_cleaned is not None and n.base_offset >= min_cleaned:
            _act(report, dry_run, f"delete {p.name} (its swap never completed)", p.unlink)
        else:
            valid.append((p, n))
    log_swaps = [(p, n) for p, n in valid if n.kind == "log"]
    if log_swaps:
        low = min(n.base_offset for _p, n in log_swaps)
        high = max(_next_offset(p, n.base_offset) for p, n in log_swaps)
        for p, n in files:
            if n is not None and n.temp_suffix is None and low <= n.base_offset < high and n.kind != "checkpoint":
                _act(report, dry_run, f"delete {p.name} (replaced by the interrupted swap)", p.unlink)
    for p, n in valid:
        final = directory / segment_file_name(n.base_offset, n.kind)
        _act(report, dry_run, f"rename {p.name} to {final.name}", lambda p=p, final=final: os.replace(p, final))
    if report.changed and not dry_run:
        fsync_dir(directory)
    return report


def _next_offset(path: Path, base: int) -> int:
    with LogFile(path) as log:
        last = log.last_summary()
    return base if last is None else last.last_offset + 1


def _act(report: RecoveryReport, dry_run: bool, what: str, action: Callable[[], object]) -> None:
    report.actions.append(what)
    if not dry_run:
        action()


def leftover_files(directory: Path) -> list[Path]:
    """The ``.cleaned``/``.swap``/``.deleted`` files of an interrupted clean (KRaft snapshots excluded)."""
    out = []
    for p in sorted(directory.iterdir()):
        n = parse_segment_file_name(p.name)
        if n is not None and n.temp_suffix is not None and n.kind != "checkpoint":
            out.append(p)
    return out


def describe_base(base: int) -> str:
    return format_offset(base)


def unlink_all(paths: Iterable[Path]) -> None:
    for p in paths:
        p.unlink(missing_ok=True)
