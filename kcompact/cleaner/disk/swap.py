"""Writing a cleaned segment and swapping it in: Kafka's crash-safe ``replaceSegments`` protocol.

The code that writes segments anew (the round's output, ``repair``'s rewrites) and swaps them in (those, and the
groups ``scratch`` copies in). Others change segments too: ``roll`` creates one, ``retention`` deletes whole ones,
``repair`` cuts a torn tail in place (ARCHITECTURE.md, Disk changes, lists every writer). Steps, as in Kafka's
``LocalLog.replaceSegments`` — each a named crash point (``CRASH_POINTS``):

1. ``<base>.log.cleaned`` (+ ``.index.cleaned``, ``.timeindex.cleaned``, ``.txnindex.cleaned`` when it has
   entries) are written, trimmed, fsynced, and given the mtime and the owner/mode of the files they replace.
2. Each new file is renamed ``.cleaned`` → ``.swap`` (log first, as Kafka's ``changeFileSuffixes``).
3. Every replaced segment's files are renamed to ``….deleted``, with the ``<base>.snapshot`` of each base
   offset that disappears.
4. Each ``.swap`` is renamed to its final name; the directory is fsynced, once for the whole swap, as Kafka's
   ``LocalLog.replaceSegments`` ends with ``Utils.flushDir``. Steps 2-4 are renames in one directory, which a
   journaling file system (ext4, XFS: what a broker's log dirs are on) commits in the order they were made, so a
   power loss before this fsync leaves a prefix of them, which recovery finishes or rolls back as it does after a
   kill; the fsync makes the swap durable before anything (the cleaner checkpoint) may count on it.
5. The ``.deleted`` files are removed (a broker does it 60 s later; offline there is no reason to wait, but a
   log dir's worker leaves them to its parent process: :func:`deferring_removals`).

Recovery (:func:`recover_interrupted_swaps`) carries out ``segment.swap_completion``'s plan, Kafka's loader, passes
1–3 in its order (``LogLoader.load``, ``LogLoader.removeTempFilesAndCollectSwapFiles``): delete ``.deleted`` files;
delete every ``.swap`` at or above the lowest ``.cleaned`` base (a swap that never finished renaming), *then* the
``.cleaned`` files; delete every other file named with an offset in ``[lowest .log.swap base, highest .log.swap
next offset)``; rename the ``.swap`` files into place (logs first, so a recovery killed midway is finished the same
way by the next); then, as ``LogLoader.loadSegmentFiles``, delete every index file (``.index``, ``.timeindex``,
``.txnindex``) whose ``.log`` does not exist (an interrupted ``--roll`` creates the new segment's indexes before
its ``.log``). Each group ends wholly old or wholly new, as a broker would leave it. The cleaner writes every
group's ``.cleaned`` files before the first swap; those lie above the swapping group's base, so they never stop it
completing.

An I/O error while writing ``.cleaned`` files is a one-line :class:`~kcompact.errors.KcompactError` (the
cleaner then removes them: nothing changed). One during the swap is recovered from at once, as a restart
would — rolled back while a ``.cleaned`` file of the group remains, else completed — and raised saying which.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import field
from pathlib import Path
from typing import BinaryIO

from kcompact.errors import CleanerStateError, KcompactError
from kcompact.segment.files import copy_ownership, file_access, fsync_dir, start_writeback, write_synced
from kcompact.segment.fixed_index import MAX_RELATIVE_OFFSET
from kcompact.segment.index_builder import IndexBuilder
from kcompact.segment.names import (
    parse_segment_file_name,
    segment_file_name,
)
from kcompact.segment.partition import SegmentFiles
from kcompact.segment.swap_completion import orphaned_indexes, settling_steps
from kcompact.segment.txn_index import AbortedTxn, encode_txn_index
from kcompact.value import mutable

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
_WRITE_BUFFER_SIZE = 1 << 20
_WRITEBACK_BYTES = 8 << 20  # CleanedSegmentWriter._write_back: how often the disk is asked to start writing


def crash_point(name: str, hook: CrashHook | None) -> None:
    """Call the test hook, and honour ``KCOMPACT_CRASH_AT=<name>`` by dying at once (crash tests)."""
    if hook is not None:
        hook(name)
    if os.environ.get(_CRASH_ENV) == name:
        os._exit(137)  # no cleanup, no flush: what a kill -9 leaves


@mutable
class CleanedSegment:
    """The ``.cleaned`` files of one output segment, ready to swap in."""

    directory: Path
    base_offset: int
    size_in_bytes: int
    files: dict[str, Path] = field(default_factory=dict)  # kind -> path with the .cleaned suffix
    file_sizes: dict[str, int] = field(default_factory=dict)  # kind -> bytes, also in a dry run (``disk.space``)


@contextmanager
def _write_errors(path: Path) -> Iterator[None]:
    """Turn an I/O error while writing ``.cleaned`` files into a one-line KcompactError."""
    try:
        yield
    except OSError as err:
        where = err.filename if err.filename is not None else path
        raise KcompactError(
            f"{where}: cannot write the cleaned segment ({err.strerror or err}); "
            "the partition was left as it was"
        ) from err


class CleanedSegmentWriter:
    """Appends output batches to ``<base>.log.cleaned`` and builds its indexes as Kafka 4.1 does.

    Args:
        directory: the partition directory.
        base_offset: the output segment's base offset (its group's first segment's base).
        index_interval_bytes: the topic's ``index.interval.bytes``.
        dry_run: count only, write nothing.
        name_prefix: put before each file's name (a scratch dir that is a Kafka log dir: ``disk.scratch``).

    Raises:
        KcompactError: the ``.cleaned`` file cannot be created (permissions, full disk, ...).
    """

    def __init__(
        self, directory: Path, base_offset: int, index_interval_bytes: int, *, dry_run: bool = False,
        name_prefix: str = "",
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.dry_run = dry_run
        self.name_prefix = name_prefix
        self.position = 0
        self.aborted: list[AbortedTxn] = []
        self._builder = IndexBuilder(base_offset, index_interval_bytes)
        self._log_path = directory / (name_prefix + segment_file_name(base_offset, "log", "cleaned"))
        self._file: BinaryIO | None = None
        self._written_back = 0  # start_writeback asked for the bytes before this
        if not dry_run:
            with _write_errors(self._log_path):
                if self._log_path.exists():  # a stale one
                    self._log_path.unlink()
                self._file = open(self._log_path, "xb", buffering=_WRITE_BUFFER_SIZE)  # noqa: SIM115 (closed by finish or abort)

    def append(self, data: bytes | memoryview, last_offset: int, max_timestamp: int) -> None:
        """Append one output batch.

        Raises:
            CleanerStateError: the batch's last offset does not fit the segment's 32-bit relative range.
            KcompactError: the write fails.
        """
        self._check_fits(last_offset)
        if self._file is not None:
            with _write_errors(self._log_path):
                self._file.write(data)
        self._builder.append(self.position, len(data), last_offset, max_timestamp)
        self.position += len(data)
        self._write_back()

    def append_run(self, data: bytes | memoryview, sizes: Sequence[int], last_offsets: Sequence[int],
                   max_timestamps: Sequence[int]) -> None:
        """Append consecutive output batches held back to back in ``data``, in one write: what
        :meth:`append` of each would do.

        Raises:
            CleanerStateError: a batch's last offset does not fit the segment's 32-bit relative range.
            KcompactError: the write fails.
        """
        if last_offsets and max(last_offsets) - self.base_offset > MAX_RELATIVE_OFFSET:
            for last_offset in last_offsets:
                self._check_fits(last_offset)  # raises for the first that does not fit
        if self._file is not None:
            with _write_errors(self._log_path):
                self._file.write(data)
        self._builder.append_run(self.position, sizes, last_offsets, max_timestamps)
        self.position += sum(sizes)
        self._write_back()

    def _write_back(self) -> None:
        """Every :data:`_WRITEBACK_BYTES` written, have the disk start on them while the round goes on, so
        that :meth:`finish`'s fsync waits for the last few only (``segment.files.start_writeback``)."""
        if self._file is not None and self.position - self._written_back >= _WRITEBACK_BYTES:
            with _write_errors(self._log_path):
                self._file.flush()
            start_writeback(self._file.fileno(), self._written_back, self.position - self._written_back)
            self._written_back = self.position

    def _check_fits(self, last_offset: int) -> None:
        if last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            raise CleanerStateError(
                f"offset {last_offset} does not fit a segment based at {self.base_offset} "
                "(32-bit relative offsets); Kafka would split this segment first"
            )

    def finish(self, mtime_ns: int, template: SegmentFiles | None) -> CleanedSegment:
        """Write the indexes, fsync everything, set mtimes and ownership; return the segment.

        Raises:
            KcompactError: a write, fsync or metadata change fails (call :meth:`abort` then).
        """
        index, timeindex = self._builder.finish_encoded()
        result = CleanedSegment(self.directory, self.base_offset, self.position)
        blobs = {"index": index, "timeindex": timeindex}
        if self.aborted:
            blobs["txnindex"] = encode_txn_index(self.aborted)
        result.file_sizes = {"log": self.position, **{kind: len(blob) for kind, blob in blobs.items()}}
        if self._file is None:
            return result
        with _write_errors(self._log_path):
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            result.files["log"] = self._log_path
            for kind, blob in blobs.items():
                path = self.directory / (self.name_prefix + segment_file_name(self.base_offset, kind, "cleaned"))
                result.files[kind] = path
                write_synced(path, blob)
            for kind, path in result.files.items():
                if kind != "txnindex":  # Kafka leaves the txn index's mtime alone
                    os.utime(path, ns=(mtime_ns, mtime_ns))
                if template is not None:
                    copy_ownership(template.log_path, path)
        return result

    def abort(self) -> None:
        """Remove whatever ``.cleaned`` files this writer created (also after a failed write)."""
        if self._file is not None and not self._file.closed:
            try:
                self._file.close()  # flushes the buffer; after ENOSPC that fails again, and still closes
            except OSError:
                pass
        remove_cleaned(self.directory, self.base_offset, self.name_prefix)


def remove_cleaned(directory: Path, base_offset: int, name_prefix: str = "") -> None:
    """Delete stale ``<base>.*.cleaned`` files (Kafka does this before writing a cleaned segment)."""
    for kind in INDEX_KINDS:
        (directory / (name_prefix + segment_file_name(base_offset, kind, "cleaned"))).unlink(missing_ok=True)


def replace_segments(
    new: CleanedSegment, old: Sequence[SegmentFiles], *, hook: CrashHook | None = None
) -> None:
    """Swap one cleaned segment in for the segments of its group (steps 2–5 of the module docstring).

    Args:
        new: the group's complete, fsynced ``.cleaned`` segment.
        old: the segments it replaces.
        hook: called with the name of each crash point as it is reached (tests).

    Raises:
        KcompactError: an I/O error interrupted the swap; the directory was recovered at once (rolled back
            when a ``.cleaned`` file was still there, else completed) and the message says which.
    """
    try:
        _replace_segments(new, old, hook)
    except OSError as err:
        raise _swap_failure(new, err) from err


def _replace_segments(
    new: CleanedSegment, old: Sequence[SegmentFiles], hook: CrashHook | None
) -> None:
    directory = new.directory
    crash_point("cleaned-written", hook)
    for i, kind in enumerate(k for k in INDEX_KINDS if k in new.files):
        _rename(new.files[kind], _with_suffix(directory, new.base_offset, kind, "swap"))
        if i == 0:
            crash_point("swap-partial", hook)
    crash_point("swap-complete", hook)
    deleted: list[Path] = []
    present = set(os.listdir(directory))  # one listing, not a stat of each name: the partition is locked
    for i, seg in enumerate(sorted(old, key=lambda s: s.base_offset)):
        keep_snapshot = seg.base_offset == new.base_offset
        deleted += _mark_deleted(directory, seg.base_offset, present, keep_snapshot=keep_snapshot)
        if i == 0:
            crash_point("deleted-partial", hook)
    crash_point("deleted-complete", hook)
    for i, kind in enumerate(k for k in INDEX_KINDS if k in new.files):
        final = directory / segment_file_name(new.base_offset, kind)
        _rename(_with_suffix(directory, new.base_offset, kind, "swap"), final)
        if i == 0:
            crash_point("final-partial", hook)
    fsync_dir(directory)  # the one flush of the swap (module docstring, step 4)
    crash_point("final-complete", hook)
    gathered = _DEFERRED[-1] if _DEFERRED else None
    if gathered is not None:
        gathered.extend(str(path) for path in deleted)
    else:
        for path in deleted:
            path.unlink(missing_ok=True)


# the lists of the open deferring_removals() blocks, innermost last; None for a removing_at_once() block
_DEFERRED: list[list[str] | None] = []


@contextmanager
def deferring_removals() -> Iterator[list[str]]:
    """Within the block, the ``.deleted`` files this process's swaps leave are gathered, not removed.

    Once a swap's last rename is durable they are what Kafka leaves for ``file.delete.delay.ms``
    (``LocalLog.deleteSegmentFiles``): a settled swap's leftovers, which a broker's loader and
    :func:`recover_interrupted_swaps` remove wherever a kill leaves them. A log dir's worker process hands them to
    its parent, which removes them (:func:`remove_leftovers`) while the worker goes on with its next partition: on
    ext4 an unlink of a file that holds blocks waits about 0.1 ms, and the swap of a tiny partition of eight segments
    leaves 21.

    Yields:
        The paths gathered, in the order the swaps left them (the caller removes them; on exit they are dropped).
    """
    gathered: list[str] = []
    _DEFERRED.append(gathered)
    try:
        yield gathered
    finally:
        _DEFERRED.pop()  # blocks nest: this one is the innermost


@contextmanager
def removing_at_once() -> Iterator[None]:
    """Within the block, each swap removes its ``.deleted`` files itself, even inside :func:`deferring_removals`:
    for a caller that measures, after a swap, the space the swap freed (``disk.scratch.bring_in``)."""
    _DEFERRED.append(None)
    try:
        yield
    finally:
        _DEFERRED.pop()


def remove_leftovers(paths: Sequence[str]) -> list[str]:
    """Remove the ``.deleted`` files :func:`deferring_removals` gathered; each one that could not be, in words (it
    stays, and the partition's next clean or a broker's start removes it)."""
    failed = []
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as err:
            failed.append(f"{path}: {err.strerror or err}")
    return failed


def _swap_failure(new: CleanedSegment, err: OSError) -> KcompactError:
    """Recover from an I/O error in the middle of a swap as a restart would, and say what became of it."""
    name = segment_file_name(new.base_offset, "log")
    rolled_back = any(path.exists() for path in new.files.values())
    try:
        recover_interrupted_swaps(new.directory)
    except (OSError, KcompactError) as again:
        return KcompactError(
            f"{new.directory}: swapping in the cleaned {name} failed ({err.strerror or err}) and so did "
            f"finishing it ({again}); the next `kcompact clean` (or a broker) finishes or rolls it back"
        )
    outcome = "rolled back" if rolled_back else "completed, as a broker would"
    return KcompactError(
        f"{new.directory}: swapping in the cleaned {name} failed ({err.strerror or err}); its swap was "
        f"{outcome}, earlier segments stay swapped and the cleaner checkpoint was not advanced"
    )


def _with_suffix(directory: Path, base: int, kind: str, suffix: str) -> Path:
    return directory / segment_file_name(base, kind, suffix)


def _rename(src: Path, dst: Path) -> None:
    """Every rename of the protocol goes through here (crash tests count them)."""
    os.replace(src, dst)


def _mark_deleted(directory: Path, base: int, present: set[str], *, keep_snapshot: bool) -> list[Path]:
    """Rename the files of the segment at ``base`` that ``present`` (the directory's names) holds to ``.deleted``."""
    kinds = list(INDEX_KINDS) + ([] if keep_snapshot else ["snapshot"])
    moved = []
    for kind in kinds:
        name = segment_file_name(base, kind)
        if name in present:
            path = directory / name
            target = directory / segment_file_name(base, kind, "deleted")
            _rename(path, target)
            moved.append(target)
    return moved


@mutable
class RecoveryReport:
    """What :func:`recover_interrupted_swaps` did, in words a report can print."""

    actions: list[str] = field(default_factory=list)
    freed_bytes: int = 0  # what the files it deletes held on disk (``st_blocks``)

    @property
    def changed(self) -> bool:
        return bool(self.actions)


def recover_interrupted_swaps(directory: Path, *, dry_run: bool = False) -> RecoveryReport:
    """Finish or roll back an interrupted clean exactly as Kafka's log loader does (``LogLoader.load``).

    The rules and their order are in the module docstring; they are also what a broker does on startup, so
    running this first or letting the broker do it ends in the same files.

    Args:
        directory: the partition directory (hold its kcompact lock).
        dry_run: only report what would be done.

    Returns:
        The actions, in the order they were (or would be) taken.

    Raises:
        CorruptDataError: a ``.log.swap`` to be completed does not parse.
        FileAccessError: a file cannot be deleted or renamed (a read-only directory, …).
    """
    with file_access(directory, "settle an interrupted clean's leftovers"):
        return _recover(directory, dry_run)


def _recover(directory: Path, dry_run: bool) -> RecoveryReport:
    report = RecoveryReport()
    for step in settling_steps(directory):
        if step.rename_to is None:
            _delete(report, dry_run, step.what, step.path)
        else:
            _act(report, dry_run, step.what, functools.partial(os.replace, step.path, step.rename_to))
    if report.changed and not dry_run:
        fsync_dir(directory)
    return report


def _act(report: RecoveryReport, dry_run: bool, what: str, action: Callable[[], object]) -> None:
    report.actions.append(what)
    if not dry_run:
        action()


def _delete(report: RecoveryReport, dry_run: bool, what: str, path: Path) -> None:
    """:func:`_act` deleting ``path``, counting what it held on disk (``st_blocks``: 512-byte units)."""
    held = 0
    with contextlib.suppress(FileNotFoundError):
        held = path.stat().st_blocks * 512
    _act(report, dry_run, what, path.unlink)
    report.freed_bytes += held


def unsettled_files(directory: Path) -> list[Path]:
    """What an interrupted clean or roll left that a loader settles: :func:`leftover_files` and
    :func:`orphaned_indexes`."""
    return sorted([*leftover_files(directory), *orphaned_indexes(directory)])


def leftover_files(directory: Path) -> list[Path]:
    """The ``.cleaned``/``.swap``/``.deleted`` files of an interrupted clean (KRaft snapshots excluded)."""
    out = []
    for name in sorted(os.listdir(directory)):  # by name, as the paths of one directory sort
        n = parse_segment_file_name(name)
        if n is not None and n.temp_suffix is not None and n.kind != "checkpoint":
            out.append(directory / name)
    return out
