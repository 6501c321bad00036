"""``inspect dump``'s selection: ``--from-offset``/``--to-offset``, ``--from-time``/``--to-time``, ``--key``,
``--max-bytes``, and where each segment's walk starts, found through its indexes.

Why apart from the walk (:mod:`kcompact.inspect.dump.log`): the walk knows the framing; this knows which
part of a partition is asked for, and finds it the way a broker serves a fetch, without reading what comes
before it:

* an offset: the segments are chosen by their base offsets, the start position by the segment's offset
  index (``OffsetIndex.lookup``: the largest entry at or below the offset), then batches below it are
  stepped over;
* a time: the first segment whose largest timestamp (its time index's last entry) reaches it
  (``UnifiedLog.fetchOffsetByTimestamp``), then its time index gives an offset and the offset index a
  position (``LogSegment.findOffsetByTimestamp``); the dump starts at the first batch whose max timestamp
  reaches ``--from-time``, and stops before the first batch after that whose max timestamp passes
  ``--to-time`` — the offsets a consumer's ``offsetsForTimes`` gives, so a record out of time order inside
  that range is shown;
* ``--max-bytes N``: as ``kafka-dump-log --max-bytes``, at most N bytes of each ``.log`` are read, counted
  from where its walk starts; a batch that does not end inside them is not shown;
* ``--key``: only records with that key, and only the batches holding one (every batch is decoded).

An index that is missing or does not decode only costs speed: the walk then starts at the segment's start.
Nor is an entry that decodes trusted blindly: the position it gives must hold a sound batch (its frame, header
and CRC) whose first offset is inside the segment and at or below the entry's offset — then no batch before
it can hold the offset sought (offsets rise through a ``.log``). Otherwise the walk starts at the segment's
start too, and a ``warning`` on the index file names the entry (``SegmentStart.note``).
"""

from __future__ import annotations

import itertools
from enum import Enum
from pathlib import Path
from typing import Any

from kcompact.errors import KcompactError
from kcompact.records.batch_header import MAGIC_VALUE_V2
from kcompact.segment.log_file import LogFile
from kcompact.segment.offset_index import OffsetIndexEntry, lookup_entry, read_offset_index
from kcompact.segment.time_index import TimeIndexEntry, read_time_index
from kcompact.value import frozen


@frozen
class DumpFilter:
    """What part of a partition ``inspect dump`` shows (None: no bound)."""

    from_offset: int | None = None
    to_offset: int | None = None  # inclusive
    from_time: int | None = None
    to_time: int | None = None  # inclusive
    key: bytes | None = None
    max_bytes: int | None = None

    @property
    def selects_records(self) -> bool:
        """Whether records are filtered (and therefore shown) one by one."""
        return self.key is not None


@frozen
class SegmentStart:
    """Where the walk of one segment starts.

    Attributes:
        position: a byte position in the segment's ``.log`` (a batch boundary).
        note: why the offset index's entry was not followed (the walk then starts at 0), or None.
    """

    position: int
    note: str | None = None


class Verdict(Enum):
    """What the walk does with a batch."""

    SHOW = "show"
    SKIP = "skip"
    STOP_FILE = "stop-file"  # the end of --max-bytes: the next file starts afresh
    STOP = "stop"  # past --to-offset / --to-time: nothing after it is shown


class DumpWindow:
    """The selection's state over one dump (segments in offset order).

    Args:
        selection: the bounds asked for.
    """

    def __init__(self, selection: DumpFilter) -> None:
        self.selection = selection
        self.done = False
        self._time_reached = selection.from_time is None
        self._file_limit: int | None = None

    def start_position(self, base_offset: int, next_base: int | None, log_path: Path,
                       index_path: Path | None, time_index_path: Path | None) -> SegmentStart | None:
        """Where the walk of a segment starts, or None to skip the segment.

        Args:
            base_offset: the segment's base offset.
            next_base: the next segment's base offset (None for the last segment or a lone file).
            log_path: its ``.log`` (an index entry's position is checked against it).
            index_path: its ``.index``, if any.
            time_index_path: its ``.timeindex``, if any.

        Returns:
            The start (a batch boundary, with a note when the index entry was wrong), or None.
        """
        sel = self.selection
        if self.done or (sel.to_offset is not None and base_offset > sel.to_offset):
            self.done = True
            return None
        if sel.from_offset is not None and next_base is not None and next_base <= sel.from_offset:
            return None
        target = max(base_offset, sel.from_offset or base_offset)
        if not self._time_reached and sel.from_time is not None:
            times = _time_entries(time_index_path, base_offset)
            if next_base is not None and times and times[-1].timestamp < sel.from_time:
                return None  # every batch of this closed segment is older
            target = max(target, _time_lookup(times, sel.from_time, base_offset))
        start = SegmentStart(0)
        if target > base_offset:
            start = _indexed_start(_offset_entries(index_path, base_offset), target, log_path,
                                   base_offset)
        self._file_limit = None if sel.max_bytes is None else start.position + sel.max_bytes
        return start

    def verdict(self, batch: Any) -> Verdict:
        """Whether ``batch`` (a v2 batch or legacy entry, in walk order) is shown."""
        sel = self.selection
        if self._file_limit is not None and batch.position + batch.size_in_bytes > self._file_limit:
            return Verdict.STOP_FILE
        first = batch.base_offset if batch.magic >= 2 else batch.last_offset
        if sel.to_offset is not None and first > sel.to_offset:
            self.done = True
            return Verdict.STOP
        if sel.from_offset is not None and batch.last_offset < sel.from_offset:
            return Verdict.SKIP
        if not self._time_reached:
            if batch.max_timestamp < (sel.from_time or 0):
                return Verdict.SKIP
            self._time_reached = True
        if sel.to_time is not None and batch.max_timestamp > sel.to_time:
            self.done = True
            return Verdict.STOP
        return Verdict.SHOW

    def shows_record(self, offset: int, key: bytes | memoryview | None) -> bool:
        """Whether the record at ``offset`` with ``key`` (of a shown batch) is shown."""
        sel = self.selection
        if sel.from_offset is not None and offset < sel.from_offset:
            return False
        if sel.to_offset is not None and offset > sel.to_offset:
            return False
        return sel.key is None or (key is not None and bytes(key) == sel.key)


def _indexed_start(entries: list[OffsetIndexEntry], target: int, log_path: Path,
                   base_offset: int) -> SegmentStart:
    """Kafka's ``OffsetIndex.lookup`` (the largest entry at or below ``target``), checked against the log."""
    found = lookup_entry(entries, target)
    if found is None or found[1].position == 0:
        return SegmentStart(0)
    number, entry = found
    fault = _entry_fault(log_path, entry, base_offset)
    if fault is None:
        return SegmentStart(entry.position)
    return SegmentStart(0, f"entry {number} (offset {entry.offset}, position {entry.position}) is wrong: "
                          f"{fault}; dumped {log_path.name} from its start instead")


def _entry_fault(log_path: Path, entry: OffsetIndexEntry, base_offset: int) -> str | None:
    """What is wrong with following ``entry`` into ``log_path``, in words; None when it can be followed."""
    try:
        with LogFile(log_path) as log:
            if entry.position >= log.size_in_bytes:
                return f"{log_path.name} ends at position {log.size_in_bytes}"
            batch = next(log.iter_batches(entry.position), None)
            if batch is None:
                return f"no batch of {log_path.name} starts at that position"
            first = batch.base_offset if batch.magic >= MAGIC_VALUE_V2 else batch.last_offset
            crc_valid = batch.crc_valid()
    except (KcompactError, OSError) as err:
        return f"no batch of {log_path.name} starts at that position ({err})"
    if not crc_valid:
        return f"the batch of {log_path.name} at that position fails its CRC check"
    if not base_offset <= first <= entry.offset:
        return (f"the batch of {log_path.name} at that position starts at offset {first}; expected "
                f"one from {base_offset} to {entry.offset}")
    return None


def _offset_entries(path: Path | None, base_offset: int) -> list[OffsetIndexEntry]:
    if path is None or not path.exists():
        return []
    try:
        entries = read_offset_index(path, base_offset)
    except (KcompactError, OSError):
        return []
    # preallocated zero slots (offset = base, position 0) after the real entries
    while len(entries) > 1 and entries[-1].offset == base_offset and entries[-1].position == 0:
        entries.pop()
    return entries if all(a.offset < b.offset for a, b in itertools.pairwise(entries)) else []


def _time_entries(path: Path | None, base_offset: int) -> list[TimeIndexEntry]:
    if path is None or not path.exists():
        return []
    try:
        entries = read_time_index(path, base_offset)
    except (KcompactError, OSError):
        return []
    while entries and entries[-1].timestamp == 0 and entries[-1].offset == base_offset:
        entries.pop()
    ordered = all(a.timestamp < b.timestamp for a, b in itertools.pairwise(entries))
    return entries if ordered else []


def _time_lookup(entries: list[TimeIndexEntry], timestamp: int, base_offset: int) -> int:
    """Kafka's ``TimeIndex.lookup``: the offset of the largest entry at or below ``timestamp``."""
    found = base_offset
    for entry in entries:
        if entry.timestamp > timestamp:
            break
        found = entry.offset
    return found
