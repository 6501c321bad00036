"""The question pass 2 asks of the offset map — "is this record the latest for its key?" — as a seam.

Kafka's ``shouldRetainRecord`` keeps a keyed record covered by the map when ``offset >= map.get(key)``
(``Cleaner.shouldRetainRecord``). Two facts make that a question about offsets alone:

* a record of the dirty range ``[first_dirty, map_latest_offset]`` was put into the map itself, so it is
  the latest for its key exactly when its offset *is* the map's value for its digest;
* a record of the clean section (below ``first_dirty``) is older than every value of the map, so it is
  the latest exactly when its digest is *not* in the map.

:class:`OffsetMapOracle` answers from an :class:`~kcompact.log.offset_map.OffsetMap` (membership in
its sorted values for the dirty range, a digest lookup for the clean section). :class:`SortedOffsetsOracle`
answers from one sorted array of offsets — the map's values plus the clean-section offsets whose digest is
absent — so a distributed map (``kcompact.spark``) only has to ship which offsets survive, never digests.
Both must give the same answers; the output bytes are then identical.

Membership is tested against a dense window of the sorted array (one byte per offset over
``_WINDOW`` offsets, rebuilt as the walk moves on), since pass 2 asks in increasing offset order:
one gather per record instead of a binary search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from kcompact.log.offset_map import OffsetMap, key_digests

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
KeysAt = Callable[[npt.NDArray[np.intp]], Sequence[bytes]]
"""Given positions into the queried offsets, the keys of those records (only the map oracle asks)."""

_WINDOW = 1 << 20  # offsets per dense membership window (1 MiB of bools)


class RetentionOracle(Protocol):
    """Answers pass 2's per-record question (see the module docstring)."""

    @property
    def map_latest_offset(self) -> int:
        """The last offset the map covers; records beyond it are kept without asking."""
        ...

    def is_latest(self, offsets: I64, keys_at: KeysAt) -> Mask:
        """Whether each keyed record at ``offsets`` (all ``<= map_latest_offset``) is its key's latest.

        Args:
            offsets: the records' offsets (ascending in a well-formed batch; not relied upon).
            keys_at: the keys of the records at given positions of ``offsets`` (may be unused).

        Returns:
            One bool per offset.
        """
        ...


class _Membership:
    """``offsets ∈ sorted_offsets``, through a dense window for clustered ascending queries."""

    def __init__(self, sorted_offsets: I64) -> None:
        self._sorted = np.ascontiguousarray(sorted_offsets, dtype=np.int64)
        # (start, window) in one attribute: threads of one round ask at once (workers.parallel), and
        # each reads and replaces the pair whole
        self._window: tuple[int, Mask] | None = None

    def contains(self, offsets: I64) -> Mask:
        if len(offsets) == 0 or len(self._sorted) == 0:
            return np.zeros(len(offsets), dtype=bool)
        low, high = int(offsets.min()), int(offsets.max())
        if high - low >= _WINDOW:
            pos = np.minimum(np.searchsorted(self._sorted, offsets), len(self._sorted) - 1)
            hits: Mask = self._sorted[pos] == offsets
            return hits
        cached = self._window
        if cached is None or low < cached[0] or high >= cached[0] + len(cached[1]):
            cached = self._move(low, high)
        start, window = cached
        window_hits: Mask = window[offsets - start]
        return window_hits

    def _move(self, start: int, high: int) -> tuple[int, Mask]:
        # up to the last member where the queries stay within it (a small log's offsets need no MiB of
        # zeros, each one a fresh mapping), else the full width
        last = int(self._sorted[-1])
        width = _WINDOW if high > last else min(_WINDOW, last - start + 1)
        lo, hi = np.searchsorted(self._sorted, [start, start + width])
        window = np.zeros(width, dtype=bool)
        window[self._sorted[lo:hi] - start] = True
        self._window = (start, window)
        return self._window


class SortedOffsetsOracle:
    """An oracle from the offsets that survive: the map's values plus the clean-section offsets whose
    key is absent from the map.

    Args:
        latest_offsets: those offsets, ascending (int64).
        map_latest_offset: the map's latest offset (the round's last covered offset).
    """

    def __init__(self, latest_offsets: I64, map_latest_offset: int) -> None:
        self._latest = map_latest_offset
        self._members = _Membership(latest_offsets)

    @property
    def map_latest_offset(self) -> int:
        """The last offset the map covers."""
        return self._latest

    def is_latest(self, offsets: I64, keys_at: KeysAt) -> Mask:
        """Membership of each offset in the surviving set (``keys_at`` is not needed)."""
        return self._members.contains(offsets)


class OffsetMapOracle:
    """The serial oracle: an :class:`OffsetMap` built over ``[first_dirty_offset, latest_offset]``.

    Args:
        offset_map: the frozen map; its ``latest_offset`` is the oracle's ``map_latest_offset``.
        first_dirty_offset: where the dirty range starts.
    """

    def __init__(self, offset_map: OffsetMap, first_dirty_offset: int) -> None:
        self._map = offset_map
        self._first_dirty = first_dirty_offset
        self._members = _Membership(offset_map.latest_offsets_sorted())

    @property
    def map_latest_offset(self) -> int:
        """The last offset the map covers."""
        return self._map.latest_offset

    def is_latest(self, offsets: I64, keys_at: KeysAt) -> Mask:
        """Dirty records by membership in the map's values, clean-section ones by a digest lookup."""
        clean = offsets < self._first_dirty
        if not clean.any():
            return self._members.contains(offsets)
        result = np.empty(len(offsets), dtype=bool)
        dirty = ~clean
        result[dirty] = self._members.contains(offsets[dirty])
        at = np.flatnonzero(clean)
        hi, lo = key_digests(keys_at(at))
        result[at] = offsets[at] >= self._map.get_batch(hi, lo)
        return result
