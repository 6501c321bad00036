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
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

from kcompact.errors import CorruptIndexError
from kcompact.segment.fixed_index import MAX_RELATIVE_OFFSET, fits_relative_offset
from kcompact.segment.offset_index import OffsetIndexEntry
from kcompact.segment.time_index import TimeIndexEntry

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

DEFAULT_INDEX_INTERVAL_BYTES = 4096
"""Kafka's ``index.interval.bytes`` default."""
VECTOR_RUN = 256
"""A run of at least this many batches, with few index entries among them, is indexed by entries, not
batches (:meth:`IndexBuilder._append_run_by_entries`)."""


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
        self._next_position = 0
        self._bytes_since_last_entry = 0
        self._max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self._offset_entries: list[OffsetIndexEntry] = []
        self._time_entries: list[TimeIndexEntry] = []
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
            CorruptIndexError: ``last_offset`` outside ``base_offset .. base_offset + 2^31 - 1``, or
                an index entry that would not increase (batches out of offset order).
            ValueError: after :meth:`finish`, a gap or overlap in positions, or a size ≤ 0.
        """
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
        if max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = max_timestamp, last_offset
        if self._bytes_since_last_entry > self.index_interval_bytes:
            self._append_offset_entry(last_offset, position)
            self._offer_time_entry()
            self._bytes_since_last_entry = 0
        self._bytes_since_last_entry += size_in_bytes
        self._next_position += size_in_bytes

    def append_run(
        self, position: int, sizes: Sequence[int], last_offsets: Sequence[int], max_timestamps: Sequence[int]
    ) -> None:
        """Account for consecutive batches starting at ``position``: what :meth:`append` of each does, in one
        loop (the cleaner's output arrives a window of batches at a time).

        Raises:
            CorruptIndexError, ValueError: as :meth:`append`, for the first batch that fails.
        """
        base, interval = self.base_offset, self.index_interval_bytes
        lasts = None
        if len(sizes) >= VECTOR_RUN:  # numpy loads only here: a small clean's start-up never pays for it
            import numpy as np

            lasts = np.asarray(last_offsets, dtype=np.int64)
        ok = (not self._finished and position == self._next_position and len(sizes) > 0
              and min(sizes) > 0 and base <= min(last_offsets) and max(last_offsets) - base <= MAX_RELATIVE_OFFSET
              and (not self._offset_entries or last_offsets[0] > self._offset_entries[-1].offset)
              and (bool((lasts[1:] > lasts[:-1]).all()) if lasts is not None
                   else all(a < b for a, b in pairwise(last_offsets))))
        if not ok:  # an unusual run: batch by batch, to fail where append fails
            for size, last_offset, max_timestamp in zip(sizes, last_offsets, max_timestamps, strict=True):
                self.append(position, size, last_offset, max_timestamp)
                position += size
            return
        if lasts is not None and sum(sizes) // (interval + 1) < len(sizes) // 8:  # few entries
            self._append_run_by_entries(position, sizes, lasts, max_timestamps)
            return
        since, max_ts, max_ts_offset = self._bytes_since_last_entry, self._max_timestamp, self._offset_of_max_timestamp
        offsets, times = self._offset_entries, self._time_entries
        for size, last_offset, max_timestamp in zip(sizes, last_offsets, max_timestamps, strict=True):
            if max_timestamp > max_ts:
                max_ts, max_ts_offset = max_timestamp, last_offset
            if since > interval:  # the increasing last offsets keep offset entries increasing
                offsets.append(OffsetIndexEntry(offset=last_offset, position=position))
                self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_ts_offset
                if not times or max_ts > times[-1].timestamp:
                    self._offer_time_entry()
                since = 0
            since += size
            position += size
        self._bytes_since_last_entry, self._next_position = since, position
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_ts_offset

    def _append_run_by_entries(
        self, position: int, sizes: Sequence[int], last: npt.NDArray[np.int64], max_timestamps: Sequence[int]
    ) -> None:
        """:meth:`append_run`'s loop for a long run of small batches (a cleaned legacy log writes one
        batch per message): the batches that get an index entry found by binary search over the
        cumulative sizes, and the running maximum timestamp by numpy, so that Python steps once per
        entry (about every ``index_interval_bytes``) instead of once per batch. Same entries, same
        state after: the run passed :meth:`append_run`'s checks."""
        import numpy as np  # loaded already: ``last`` is an array

        size = np.asarray(sizes, dtype=np.int64)
        stamps = np.asarray(max_timestamps, dtype=np.int64)
        count, interval = len(size), self.index_interval_bytes
        before = np.zeros(count + 1, dtype=np.int64)  # bytes of the run before each batch
        np.cumsum(size, out=before[1:])
        start_max, start_offset = self._max_timestamp, self._offset_of_max_timestamp
        below = np.maximum(np.maximum.accumulate(stamps), start_max)  # the maximum after each batch
        raised = stamps > np.concatenate(([start_max], below[:-1]))  # a batch that set a new maximum
        setter = np.maximum.accumulate(np.where(raised, np.arange(count), -1)).tolist()
        cum, lasts, times_at = before.tolist(), last.tolist(), stamps.tolist()

        def maximum_after(i: int) -> tuple[int, int]:
            at = setter[i]
            return (start_max, start_offset) if at < 0 else (times_at[at], lasts[at])

        offsets, times = self._offset_entries, self._time_entries
        since = self._bytes_since_last_entry
        entry = bisect.bisect_right(cum, interval - since, 0, count)
        last_entry = -1
        while entry < count:
            offsets.append(OffsetIndexEntry(offset=lasts[entry], position=position + cum[entry]))
            self._max_timestamp, self._offset_of_max_timestamp = maximum_after(entry)
            if not times or self._max_timestamp > times[-1].timestamp:
                self._offer_time_entry()
            last_entry = entry
            entry = bisect.bisect_right(cum, cum[entry] + interval, entry + 1, count)
        self._bytes_since_last_entry = (since + cum[count] if last_entry < 0
                                        else cum[count] - cum[last_entry])
        self._next_position = position + cum[count]
        self._max_timestamp, self._offset_of_max_timestamp = maximum_after(count - 1)

    def restart(self) -> None:
        """Model a broker restart while this segment is active.

        ``close()`` offers the running maximum to the time index, and the reloaded segment counts
        bytes since the last index entry from zero again. Active segments of long-lived brokers
        carry one such extra time-index entry per restart (seen in the broker-written fixtures).
        """
        self._offer_time_entry()
        self._bytes_since_last_entry = 0

    def finish(self) -> tuple[list[OffsetIndexEntry], list[TimeIndexEntry]]:
        """Close the segment (``onBecomeInactiveSegment``) and return its indexes.

        Returns:
            ``(offset index entries, time index entries)``, ready for ``encode_offset_index`` and
            ``encode_time_index``; calling again returns the same entries.
        """
        if not self._finished:
            self._offer_time_entry()
            self._finished = True
        return list(self._offset_entries), list(self._time_entries)

    @property
    def next_position(self) -> int:
        """Size of the segment so far: where the next batch goes."""
        return self._next_position

    def _append_offset_entry(self, offset: int, position: int) -> None:
        if self._offset_entries and offset <= self._offset_entries[-1].offset:
            raise CorruptIndexError(
                f"offset index entry would not increase; expected offset > "
                f"{self._offset_entries[-1].offset}, found {offset}",
                position=position,
                offset=offset,
            )
        self._offset_entries.append(OffsetIndexEntry(offset=offset, position=position))

    def _offer_time_entry(self) -> None:
        timestamp, offset = self._max_timestamp, self._offset_of_max_timestamp
        last = self._time_entries[-1] if self._time_entries else None
        if last is not None and offset < last.offset:
            raise CorruptIndexError(
                f"time index entry would go back; expected offset >= {last.offset}, found {offset}",
                offset=offset,
            )
        if timestamp > (last.timestamp if last is not None else -1):
            self._time_entries.append(TimeIndexEntry(timestamp=timestamp, offset=offset))


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
