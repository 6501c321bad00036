"""``inspect dump`` for index files: their entries, and the ``--verify-index`` check against the log.

Dumps the entries of a ``.index``/``.timeindex``/``.txnindex`` and compares each index of a segment
with its ``.log``. Why apart from the ``.log`` walk: an index is a flat array of fixed-size entries
decoded by :mod:`kcompact.segment`, with none of the batch framing and recovery of
:mod:`kcompact.inspect.dump.log`. Item names and key order are those of :mod:`kcompact.inspect.dump`'s
docstring.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kcompact.errors import CorruptDataError
from kcompact.inspect.dump.items import Item, file_item, problem_item, warning_item
from kcompact.segment import offset_index, time_index, txn_index
from kcompact.segment.fixed_index import ends_in_zero_slots
from kcompact.segment.verify_index import verify_index_file

OFFSET_SLOT = offset_index.OFFSET_INDEX_ENTRY_SIZE
TIME_SLOT = time_index.TIME_INDEX_ENTRY_SIZE


# LogLoader.loadSegmentFiles / LogSegment.sanityCheck / LogSegment.recover (segment.startup_recovery)
NO_OFFSET_INDEX = "no .index: a broker recovers this segment at startup and rebuilds its indexes"
TIME_INDEX_REBUILT = ("no .timeindex: a broker starting on this log dir recovers this segment and rebuilds "
                      "it (LogSegment.recover)")
TIME_INDEX_EMPTY = ("no .timeindex: a broker starting on this log dir does not recover this segment, so it "
                    "creates the .timeindex empty and never rebuilds it (LogSegment.sanityCheck): the segment's "
                    "largest timestamp becomes the .log's mtime; kcompact repair rebuilds it")
LIVE_NO_TIME_INDEX = ("no .timeindex: a broker creates an empty one and does not rebuild it (time rules then "
                      "use the .log's mtime)")
REBUILT = "a broker starting on this log dir recovers this segment and rebuilds this index from the log " \
          "(LogSegment.recover), never reading it"


def check_segment_indexes(log_path: Path, base_offset: int, indexes: tuple[Path | None, ...],
                          *, live_active: bool, rebuilt_at_start: bool = False) -> Iterator[Item]:
    """Check the existing ``(.index, .timeindex, .txnindex)`` of one segment; say what a missing one means.

    Args:
        log_path: the segment's ``.log``.
        base_offset: the segment's base offset.
        indexes: its ``.index``, ``.timeindex`` and ``.txnindex``, None for one that is missing.
        live_active: the segment is the active one of a partition a running broker holds.
        rebuilt_at_start: a broker starting on the log dir recovers the segment, rebuilding its indexes
            (``segment.startup_recovery``; one without ``.index`` always).

    Yields:
        ``warning`` items for missing indexes (a ``problem`` for a ``.timeindex`` a starting broker leaves
        empty for good), then what :func:`check_index` yields per index.
    """
    index, time_index_path, _txn = indexes
    if index is None:
        yield warning_item(log_path, NO_OFFSET_INDEX)
    elif time_index_path is None:
        if live_active:
            yield warning_item(log_path, LIVE_NO_TIME_INDEX)
        elif rebuilt_at_start:
            yield warning_item(log_path, TIME_INDEX_REBUILT)
        else:
            yield problem_item(log_path.with_suffix(".timeindex"), None, TIME_INDEX_EMPTY)
    for path in indexes:
        if path is not None:
            yield from check_index(path, base_offset, log_path, live_active=live_active,
                                   rebuilt_at_start=rebuilt_at_start)


def check_index(index_path: Path, base_offset: int, log_path: Path, *,
                live_active: bool, rebuilt_at_start: bool = False) -> Iterator[Item]:
    """Compare one index file with its segment's ``.log``.

    Args:
        index_path: the ``.index``, ``.timeindex`` or ``.txnindex``.
        base_offset: the segment's base offset.
        log_path: the segment's ``.log`` (it may be missing).
        live_active: the segment is the active one of a partition a running broker holds.
        rebuilt_at_start: a broker starting on the log dir recovers the segment and rebuilds this index
            without reading it: what is wrong with it is a ``warning`` (Kafka settles it), not a problem.

    Yields:
        A ``problem`` item per disagreement (a ``warning`` where the broker rebuilds the index), then one
        ``index_check`` item.
    """
    found = verify_index_file(index_path, base_offset, log_path, live_active=live_active,
                              rebuilt_at_start=rebuilt_at_start)
    if rebuilt_at_start:
        if _preallocated(index_path):
            yield warning_item(index_path, "ends in zero-filled slots: preallocated and never trimmed (its broker "
                                           f"did not shut down cleanly); {REBUILT}")
        for message in found:
            yield warning_item(index_path, f"{message}; {REBUILT}")
        found = []
    for message in found:
        yield problem_item(index_path, None, message)
    yield {"type": "index_check", "file": str(index_path),
           "log_file": str(log_path) if log_path.exists() else None, "problems": len(found)}


def _preallocated(index_path: Path) -> bool:
    """Whether an offset or time index ends in all-zero slots (read from its last slot alone)."""
    if index_path.suffix == ".index":
        return ends_in_zero_slots(index_path, OFFSET_SLOT)
    return index_path.suffix == ".timeindex" and ends_in_zero_slots(index_path, TIME_SLOT)


def dump_index(path: Path, kind: str, base_offset: int) -> Iterator[Item]:
    """Dump the entries of one index file.

    Args:
        path: the index file.
        kind: ``index``, ``timeindex`` or ``txnindex``.
        base_offset: the base offset of its segment.

    Yields:
        A ``file`` item, then ``offset_index_entry``, ``time_index_entry`` or ``aborted_txn`` items;
        a ``problem`` item where the file does not read or decode.
    """
    try:
        data = path.read_bytes()
    except OSError as err:
        yield problem_item(path, None, f"cannot read the file: {err.strerror or err}")
        return
    yield file_item(path, kind, base_offset, len(data))
    try:
        if kind == "index":
            entries, zeros = offset_index.split_offset_index(data, base_offset)
            if not entries and zeros:  # the first slot is an entry whatever it holds
                entries, zeros = offset_index.decode_offset_index(data[:OFFSET_SLOT], base_offset), zeros - 1
            for entry in entries:
                yield {"type": "offset_index_entry", "file": str(path), "offset": entry.offset,
                       "position": entry.position}
            yield from _zero_slots(path, zeros)
        elif kind == "timeindex":
            tentries, zeros = time_index.split_time_index(data, base_offset)
            if not tentries and zeros:
                tentries, zeros = time_index.decode_time_index(data[:TIME_SLOT], base_offset), zeros - 1
            for tentry in tentries:
                yield {"type": "time_index_entry", "file": str(path), "timestamp": tentry.timestamp,
                       "offset": tentry.offset}
            yield from _zero_slots(path, zeros)
        else:
            for txn in txn_index.decode_txn_index(data):
                yield {"type": "aborted_txn", "file": str(path), "version": txn.version,
                       "producer_id": txn.producer_id, "first_offset": txn.first_offset,
                       "last_offset": txn.last_offset, "last_stable_offset": txn.last_stable_offset}
    except CorruptDataError as err:
        yield problem_item(path, err.position, err.message)


def _zero_slots(path: Path, zeros: int) -> Iterator[Item]:
    """One ``warning`` for an index's trailing all-zero slots instead of an entry each: a preallocated
    index never trimmed (its broker stopped without a clean shutdown) holds a million of them.
    ``DumpLogSegments.dumpIndex`` stops at the first such slot after the first entry too."""
    if zeros:
        yield warning_item(path, f"{zeros} trailing zero-filled slots not shown (a preallocated index that "
                                 "was never trimmed: its broker stopped without a clean shutdown)")
