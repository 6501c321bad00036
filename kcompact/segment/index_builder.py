"""Build a segment's offset and time indexes from its batches as Kafka 4.1 does (``LogSegment.append``).

Since KAFKA-806 (Kafka 4.1, back-ported to 4.0.x) ``LogSegment.append`` decides per batch whether to
index it, which is also what ``LogSegment.recover`` always did; so one algorithm gives what a broker
writes on append, what the 4.1 cleaner writes into a cleaned segment, and what recovery rebuilds:

* keep the running maximum batch ``maxTimestamp`` and the last offset of the first batch that
  reached it (strictly larger only; it starts at −1, so batches stamped −1 or below never count);
* before a batch is counted, if **more than** ``index_interval_bytes`` bytes were written since the
  last entry (strict ``>``), add the offset-index entry ``(batch last offset, batch position)`` and
  offer the running maximum to the time index; then add the batch's size to the byte count. The
  first batch of a segment (position 0, nothing written yet) therefore never gets an entry;
* the time index takes an offered entry only if its timestamp is strictly larger than its last
  entry's (an empty time index counts as timestamp −1);
* when the segment stops being active (``onBecomeInactiveSegment``, ``close``, end of ``recover``)
  the running maximum is offered once more — the final entry that the broker reads as the segment's
  largest timestamp.

Kafka's own failures are kept: a batch whose last offset does not fit the segment's 32-bit relative
offsets (``LogSegmentOffsetOverflowException``) and an index entry that would not increase
(``InvalidOffsetException``) raise :class:`~kcompact.errors.CorruptIndexError`.

Cost: a run of batches that cannot fail (:meth:`IndexBuilder.append_run`'s checks, a few C passes over its
columns) is only queued; the queue is indexed at once when the builder needs its state (the next
:meth:`~IndexBuilder.append`, a restart, :meth:`~IndexBuilder.finish`), with numpy where it is loaded: the
batches that get an offset entry by a binary search of each batch's successor over the cumulative sizes and
pointer doubling from the first, the running maximum timestamp and where it was reached by cumulative maxima.
So a cleaned segment costs a few Python steps per run, not per batch or per entry; the entries are kept in
int64 columns, and :meth:`~IndexBuilder.finish_encoded` encodes them from there.
"""

from __future__ import annotations

import contextlib
import operator
import sys
from array import array
from collections.abc import Iterable, Sequence
from itertools import islice
from typing import TYPE_CHECKING

from kcompact.errors import CorruptIndexError
from kcompact.records.varint import INT64_MAX
from kcompact.segment.fixed_index import MAX_RELATIVE_OFFSET, fits_relative_offset
from kcompact.segment.offset_index import (
    OffsetIndexEntry,
    encode_offset_index,
    encode_offset_index_columns,
)
from kcompact.segment.time_index import TimeIndexEntry, encode_time_index, encode_time_index_columns

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np
    import numpy.typing as npt

    I64 = npt.NDArray[np.int64]

DEFAULT_INDEX_INTERVAL_BYTES = 4096
"""Kafka's ``index.interval.bytes`` default."""
VECTOR_RUN = 256
"""Queued batches are indexed by numpy when numpy is loaded already (a clean loads it), or when at least this
many are queued (then it is imported: worth its start-up); fewer, with numpy not loaded, batch by batch."""
MAX_QUEUED = 1 << 16
"""Queued batches indexed at once at most: bounds the queue's memory and numpy's temporary arrays."""
_MAX_VECTOR_INTERVAL = 1 << 40  # cumulative sizes plus the interval stay far inside int64


class IndexBuilder:
    """Accumulates one segment's index entries while its batches are appended in file order.

    Args:
        base_offset: the segment's base offset.
        index_interval_bytes: the topic's ``index.interval.bytes`` (≥ 0).

    Raises:
        ValueError: a negative ``index_interval_bytes``.
    """

    def __init__(
        self, base_offset: int, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    ) -> None:
        if index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0; found {index_interval_bytes}")
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self._next_position = 0  # after the queued batches
        self._indexed_position = 0  # where the queued batches start
        self._bytes_since_last_entry = 0
        self._max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self._last_offset = base_offset - 1  # the largest last offset of a batch accepted so far
        # The entries, as columns: offset index (offset, position), time index (timestamp, offset).
        self._index_offsets, self._index_positions = array("q"), array("q")
        self._time_timestamps, self._time_offsets = array("q"), array("q")
        # Batches append_run accepted and has not indexed yet: size, last offset, max timestamp.
        self._queued_sizes, self._queued_lasts, self._queued_stamps = array("q"), array("q"), array("q")
        self._finished = False

    def append(
        self, position: int, size_in_bytes: int, last_offset: int, max_timestamp: int
    ) -> None:
        """Account for the next batch of the segment.

        Args:
            position: the batch's byte position in the ``.log``; batches must be contiguous from 0.
            size_in_bytes: the batch's size including its 12-byte offset/length prefix.
            last_offset: the batch's last offset.
            max_timestamp: the batch's ``maxTimestamp`` (−1 for v0 data).

        Raises:
            CorruptIndexError: ``last_offset`` outside ``base_offset .. base_offset + 2^31 - 1``, an
                index entry that would not increase (batches out of offset order), or a ``max_timestamp``
                above int64 (no time index can hold it).
            ValueError: after :meth:`finish`, a gap or overlap in positions, or a size ≤ 0.
        """
        self._index_queued()
        if self._finished:
            raise ValueError("IndexBuilder.append after finish()")
        if position != self._next_position or size_in_bytes <= 0:
            raise ValueError(
                f"batches must be contiguous with a positive size; expected position "
                f"{self._next_position}, found {position} (size {size_in_bytes})"
            )
        if not fits_relative_offset(last_offset, self.base_offset):
            raise CorruptIndexError(
                f"batch does not fit the segment's relative offsets; expected last offset "
                f"{self.base_offset}..{self.base_offset + MAX_RELATIVE_OFFSET}, "
                f"found {last_offset}",
                position=position,
                offset=last_offset,
            )
        if max_timestamp > INT64_MAX:
            raise CorruptIndexError(
                f"batch max timestamp does not fit the time index; expected at most {INT64_MAX}, "
                f"found {max_timestamp}",
                position=position,
                offset=last_offset,
            )
        self._last_offset = max(self._last_offset, last_offset)
        if max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = max_timestamp, last_offset
        if self._bytes_since_last_entry > self.index_interval_bytes:
            self._append_offset_entry(last_offset, position)
            self._offer_time_entry()
            self._bytes_since_last_entry = 0
        self._bytes_since_last_entry += size_in_bytes
        self._next_position += size_in_bytes
        self._indexed_position = self._next_position

    def append_run(
        self, position: int, sizes: Sequence[int], last_offsets: Sequence[int], max_timestamps: Sequence[int]
    ) -> None:
        """Account for consecutive batches starting at ``position``: what :meth:`append` of each does (the
        cleaner's output arrives a window of batches at a time).

        A run that cannot fail — contiguous, positive sizes, last offsets increasing from above every
        earlier batch's and fitting the segment, timestamps in int64 — is queued (checked by a few C passes
        over its columns) and indexed with the next ones (module docstring); any other run goes batch by
        batch.

        Raises:
            CorruptIndexError, ValueError: as :meth:`append`, for the first batch that fails.
        """
        count = len(sizes)
        columns = None
        if (count and not self._finished and position == self._next_position
                and count == len(last_offsets) == len(max_timestamps) and min(sizes) > 0
                and last_offsets[0] > self._last_offset
                and all(map(operator.lt, last_offsets, islice(last_offsets, 1, None)))
                and last_offsets[-1] - self.base_offset <= MAX_RELATIVE_OFFSET):
            with contextlib.suppress(OverflowError):  # a column outside int64 goes batch by batch
                columns = array("q", sizes), array("q", last_offsets), array("q", max_timestamps)
        if columns is None:
            for size, last_offset, max_timestamp in zip(sizes, last_offsets, max_timestamps, strict=True):
                self.append(position, size, last_offset, max_timestamp)
                position += size
            return
        self._queued_sizes += columns[0]
        self._queued_lasts += columns[1]
        self._queued_stamps += columns[2]
        self._next_position += sum(sizes)
        self._last_offset = last_offsets[-1]
        if len(self._queued_sizes) >= MAX_QUEUED:
            self._index_queued()

    def restart(self) -> None:
        """Model a broker restart while this segment is active.

        ``close()`` offers the running maximum to the time index, and the reloaded segment counts
        bytes since the last index entry from zero again. Active segments of long-lived brokers
        carry one such extra time-index entry per restart (seen in the broker-written fixtures).
        """
        self._index_queued()
        self._offer_time_entry()
        self._bytes_since_last_entry = 0

    def finish(self) -> tuple[list[OffsetIndexEntry], list[TimeIndexEntry]]:
        """Close the segment (``onBecomeInactiveSegment``) and return its indexes.

        Returns:
            ``(offset index entries, time index entries)``, ready for ``encode_offset_index`` and
            ``encode_time_index``; calling again returns the same entries.
        """
        self._close()
        return (list(map(OffsetIndexEntry, self._index_offsets, self._index_positions)),
                list(map(TimeIndexEntry, self._time_timestamps, self._time_offsets)))

    def finish_encoded(self) -> tuple[bytes, bytes]:
        """Close the segment as :meth:`finish` and return its index files' bytes, encoded from the entry
        columns (by numpy where it is loaded or the entries are many).

        Returns:
            ``(.index bytes, .timeindex bytes)``: what ``encode_offset_index`` and ``encode_time_index`` make
            of :meth:`finish`'s entries.

        Raises:
            CorruptIndexError: as those encoders (an offset index position beyond 2^31 - 1).
        """
        self._close()
        if _numpy(len(self._index_offsets) + len(self._time_offsets)) is None:
            offsets, times = self.finish()
            return encode_offset_index(offsets, self.base_offset), encode_time_index(times, self.base_offset)
        return (encode_offset_index_columns(self._index_offsets, self._index_positions, self.base_offset),
                encode_time_index_columns(self._time_timestamps, self._time_offsets, self.base_offset))

    @property
    def next_position(self) -> int:
        """Size of the segment so far: where the next batch goes."""
        return self._next_position

    def _close(self) -> None:
        if not self._finished:
            self._index_queued()
            self._offer_time_entry()
            self._finished = True

    def _append_offset_entry(self, offset: int, position: int) -> None:
        if self._index_offsets and offset <= self._index_offsets[-1]:
            raise CorruptIndexError(
                f"offset index entry would not increase; expected offset > "
                f"{self._index_offsets[-1]}, found {offset}",
                position=position,
                offset=offset,
            )
        self._index_offsets.append(offset)
        self._index_positions.append(position)

    def _offer_time_entry(self) -> None:
        timestamp, offset = self._max_timestamp, self._offset_of_max_timestamp
        if self._time_offsets and offset < self._time_offsets[-1]:
            raise CorruptIndexError(
                f"time index entry would go back; expected offset >= {self._time_offsets[-1]}, found {offset}",
                offset=offset,
            )
        if timestamp > (self._time_timestamps[-1] if self._time_timestamps else -1):
            self._time_timestamps.append(timestamp)
            self._time_offsets.append(offset)

    def _index_queued(self) -> None:
        """Index the queued batches: what :meth:`append` of each would have done (none of them can fail)."""
        if not self._queued_sizes:
            return
        np = _numpy(len(self._queued_sizes))
        if np is None or self.index_interval_bytes > _MAX_VECTOR_INTERVAL:
            self._index_queued_by_batch()
        else:
            self._index_queued_by_columns(np)
        for queue in (self._queued_sizes, self._queued_lasts, self._queued_stamps):
            del queue[:]
        self._indexed_position = self._next_position

    def _index_queued_by_batch(self) -> None:
        """:meth:`_index_queued` in Python, for a few batches where numpy is not loaded."""
        interval, position = self.index_interval_bytes, self._indexed_position
        since, max_ts, max_ts_offset = self._bytes_since_last_entry, self._max_timestamp, self._offset_of_max_timestamp
        for size, last_offset, max_timestamp in zip(self._queued_sizes, self._queued_lasts, self._queued_stamps,
                                                    strict=True):
            if max_timestamp > max_ts:
                max_ts, max_ts_offset = max_timestamp, last_offset
            if since > interval:  # queued last offsets increase past every entry's
                self._index_offsets.append(last_offset)
                self._index_positions.append(position)
                if max_ts > (self._time_timestamps[-1] if self._time_timestamps else -1):
                    self._time_timestamps.append(max_ts)
                    self._time_offsets.append(max_ts_offset)
                since = 0
            since += size
            position += size
        self._bytes_since_last_entry = since
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_ts_offset

    def _index_queued_by_columns(self, np: ModuleType) -> None:
        """:meth:`_index_queued` by numpy: a fixed number of array operations (a few more, logarithmically,
        where batches at or below the interval mix with larger ones)."""
        sizes = np.frombuffer(self._queued_sizes, dtype=np.int64)
        lasts = np.frombuffer(self._queued_lasts, dtype=np.int64)
        stamps = np.frombuffer(self._queued_stamps, dtype=np.int64)
        count = len(sizes)
        before = np.zeros(count + 1, dtype=np.int64)  # bytes of the queue before each batch
        np.cumsum(sizes, out=before[1:])
        since = self._bytes_since_last_entry
        entries = _entry_batches(np, before, sizes, self.index_interval_bytes, since)
        # The running maximum after each batch, and the batch that first reached it (-1: before the queue).
        start_max, start_offset = self._max_timestamp, self._offset_of_max_timestamp
        running = np.maximum(np.maximum.accumulate(stamps), start_max)
        raised = stamps > np.concatenate(([start_max], running[:-1]))
        setter = np.maximum.accumulate(np.where(raised, np.arange(count), -1))
        at = np.append(entries, count - 1)
        maxima, setters = running[at], setter[at]
        max_offsets = np.where(setters >= 0, lasts[setters], start_offset)
        if len(entries):
            self._index_offsets.frombytes(lasts[entries].tobytes())
            self._index_positions.frombytes((before[entries] + self._indexed_position).tobytes())
            offered, offered_offsets = maxima[:-1], max_offsets[:-1]
            kept_before = self._time_timestamps[-1] if self._time_timestamps else -1
            # The offers are a running maximum, so none is below the last entry: keep each that rises.
            kept = offered > np.concatenate(([kept_before], offered[:-1]))
            self._time_timestamps.frombytes(offered[kept].tobytes())
            self._time_offsets.frombytes(offered_offsets[kept].tobytes())
            self._bytes_since_last_entry = int(before[count] - before[entries[-1]])
        else:
            self._bytes_since_last_entry = since + int(before[count])
        self._max_timestamp, self._offset_of_max_timestamp = int(maxima[-1]), int(max_offsets[-1])


def _entry_batches(np: ModuleType, before: I64, sizes: I64, interval: int, since: int) -> I64:
    """Which of the queued batches get an offset entry: the first whose preceding bytes (with ``since``
    before the queue) exceed ``interval``, then from each such batch the first more than ``interval`` bytes
    after its start, found for every batch at once by binary search (``next_entry``) and followed from the
    first by pointer doubling: ``log2(count)`` steps, each reaching twice as far as the last."""
    count = len(sizes)
    first = int(np.searchsorted(before[:count], interval - since, side="right"))
    if first >= count:
        return np.empty(0, dtype=np.int64)  # type: ignore[no-any-return]
    if bool((sizes[first:count - 1] > interval).all()):  # every batch after the first is an entry
        return np.arange(first, count, dtype=np.int64)  # type: ignore[no-any-return]
    next_entry = np.append(np.searchsorted(before[:count], before[:count] + interval, side="right"), count)
    reached = np.zeros(count + 1, dtype=np.bool_)
    reached[first] = True
    span = 1
    while span < count - first:  # each pass reaches every entry fewer than 2 * span steps from the first
        reached[next_entry[reached]] = True
        next_entry = next_entry[next_entry]
        span *= 2
    return np.flatnonzero(reached[:count])  # type: ignore[no-any-return]


def _numpy(count: int) -> ModuleType | None:
    """numpy, where it is loaded already or ``count`` items are worth its import; else None."""
    loaded = sys.modules.get("numpy")
    if loaded is None and count >= VECTOR_RUN:
        import numpy

        return numpy
    return loaded


def build_indexes(
    batches: Iterable[tuple[int, int, int, int]],
    *,
    base_offset: int,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
) -> tuple[list[OffsetIndexEntry], list[TimeIndexEntry]]:
    """Build a finished segment's indexes in one go (see :class:`IndexBuilder`).

    Args:
        batches: ``(position, size_in_bytes, last_offset, max_timestamp)`` of every batch, in file
            order.
        base_offset: the segment's base offset.
        index_interval_bytes: the topic's ``index.interval.bytes``.

    Returns:
        ``(offset index entries, time index entries)``.

    Raises:
        CorruptIndexError: as :meth:`IndexBuilder.append`.
        ValueError: as :meth:`IndexBuilder.append`.
    """
    builder = IndexBuilder(base_offset, index_interval_bytes)
    for position, size_in_bytes, last_offset, max_timestamp in batches:
        builder.append(position, size_in_bytes, last_offset, max_timestamp)
    return builder.finish()
