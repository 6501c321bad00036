"""The offset map's merge: two sorted runs (``_offset_runs.Run``) without common keys into one.

``OffsetMap`` (offset_map.py) merges its newest run into the previous one while the newest is at
least a quarter its size, and all runs into one at ``freeze``. A merge writes the new run front to
back, locating chunks of the newer run in the older as lookups do (``Run.locate``), weaving the two
into the output and counting the output's bucket directory as the keys go by. It gives each
input's consumed 2 MiB pages back to the system as it goes (``Run.release``): it needs the output
plus a chunk, not the output plus both inputs (a merge that fails part way, out of memory, leaves
the map unusable).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kcompact.cleaner.offset_map import runs as offset_runs
from kcompact.cleaner.offset_map.runs import I64, U64, Run, directory_bits

# ``offset_runs._MERGE_CHUNK`` is read at each use, not imported: the run layout owns the chunk
# size (its sorted lookups walk the same chunks), and tests shrink it there to reach every path.

__all__ = ["merge_runs"]


def merge_runs(a: Run, b: Run) -> Run:
    """Union of two runs without common keys, written front to back into a new run.

    Both are walked in chunks of ``b``: a chunk's keys are located in ``a`` (as lookups do), then
    the keys of ``a`` before the chunk's last and the chunk are woven into the output, and the
    pages both have given up are returned (``Run.release``). The output's directory is counted
    from the digest prefixes of the keys as they go by.
    """
    n = len(a) + len(b)
    bits = directory_bits(n)
    starts = _merged_directory(n, bits, (a, b))
    padded, rest = Run.allocate(n, a.wide or b.wide)
    merge = _Merge(a, b, (padded, rest), starts[1:], bits)
    for first in range(0, len(b), offset_runs._MERGE_CHUNK):
        merge.weave_chunk(first, min(first + offset_runs._MERGE_CHUNK, len(b)))
    merge.weave_rest_of_a()
    np.cumsum(starts, out=starts)  # one directory-sized array, no int64 copies (128 MiB at 100M)
    return Run(padded, rest, starts, a.base)


def _merged_directory(n: int, bits: int, runs: tuple[Run, ...]) -> npt.NDArray[Any]:
    """A merge output's ``starts``, zero but for ``starts[1:]`` (bucket i's keys, summed in place
    at the end): there, the bucket sizes of the runs with as many buckets or more, added up. The
    other runs' keys are counted as they are written (``_Merge``)."""
    starts = np.zeros((1 << bits) + 1, dtype=np.uint32 if n < 2**32 else np.uint64)
    counts = starts[1:]
    for run in runs:
        if run.bits >= bits:
            np.add(counts, np.diff(run.starts[:: 1 << (run.bits - bits)]), out=counts)
    return starts


class _Merge:
    """One ``merge_runs`` under way: the output, its bucket counts, how far each input is."""

    __slots__ = ("a", "b", "bits", "count_a", "count_b", "counts", "done", "out", "taken")

    def __init__(
        self, a: Run, b: Run, out: tuple[U64, npt.NDArray[np.void]], counts: npt.NDArray[Any],
        bits: int,
    ) -> None:
        self.a, self.b, self.out, self.counts, self.bits = a, b, out, counts, bits
        self.count_a, self.count_b = a.bits < bits, b.bits < bits  # see ``_merged_directory``
        self.done = self.taken = 0  # keys written, keys of ``a`` written

    def weave_chunk(self, first: int, end: int) -> None:
        """Write ``b[first:end]`` and the keys of ``a`` before its last, then release both."""
        a, b = self.a, self.b
        prefix = b.prefix(first, end)
        if self.count_b:
            _count(self.counts, prefix, self.bits)
        buckets = (prefix >> np.uint64(64 - a.bits)).astype(np.intp)
        pos, _ = a.locate(buckets, b.key[first:end])  # b[first + j] goes before a[pos[j]]
        stop, k = int(pos[-1]), 0
        while True:  # a's keys up to the chunk's last, in pieces, with the chunk's keys among them
            piece_end = min(self.taken + offset_runs._MERGE_CHUNK, stop)
            k_end = int(np.searchsorted(pos, piece_end)) if piece_end < stop else len(pos)
            self.take_a(piece_end, first + k, pos[k:k_end] - self.taken)
            k = k_end
            if self.taken >= stop:
                break
        b.release(end)

    def weave_rest_of_a(self) -> None:
        """Write the keys of ``a`` after ``b``'s last, a chunk at a time."""
        no_keys = np.empty(0, dtype=np.int64)
        for first in range(self.taken, len(self.a), offset_runs._MERGE_CHUNK):
            self.take_a(min(first + offset_runs._MERGE_CHUNK, len(self.a)), len(self.b), no_keys)

    def take_a(self, end: int, b_first: int, at: I64) -> None:
        """Write ``a[taken:end]`` with ``len(at)`` keys of ``b`` from ``b_first`` among them (as
        ``_weave`` places them), count them when needed, and release ``a`` up to ``end``."""
        a = self.a
        if self.count_a and end > self.taken:
            _count(self.counts, a.prefix(self.taken, end), self.bits)
        self.done = _weave(self.out, self.done, (a, self.taken, end), (self.b, b_first, at))
        self.taken = end
        a.release(end)


def _count(counts: npt.NDArray[Any], prefix: U64, bits: int) -> None:
    """Add sorted digest prefixes to per-bucket counts (only the buckets they span)."""
    buckets = (prefix >> np.uint64(64 - bits)).astype(np.intp)
    first = int(buckets[0])
    found = np.bincount(buckets - first)
    part = counts[first : first + len(found)]
    np.add(part, found, out=part, casting="unsafe")


def _weave(
    out: tuple[U64, npt.NDArray[np.void]],
    done: int,
    a_part: tuple[Run, int, int],
    b_part: tuple[Run, int, I64],
) -> int:
    """Write ``a[first:end]`` and ``len(at)`` keys of ``b`` from ``b_first`` (key j before
    ``a[first + at[j]]``) to ``out`` (keys, rest) from ``done``; return the new ``done``."""
    (a, first, end), (b, b_first, at) = a_part, b_part
    b_end = b_first + len(at)
    size = (end - first) + len(at)
    into_b = at + np.arange(len(at))
    from_a = np.ones(size, dtype=bool)
    from_a[into_b] = False
    keys, rest = out[0][done : done + size], out[1][done : done + size]
    keys[into_b], keys[from_a] = b.key[b_first:b_end], a.key[first:end]
    a_rest, b_rest = a.rest[first:end], b.rest[b_first:b_end]
    if rest.dtype != a_rest.dtype:  # the output is wide, ``a`` is not
        a_rest = a.wide_rest(slice(first, end))
    if rest.dtype != b_rest.dtype:
        b_rest = b.wide_rest(slice(b_first, b_end))
    rest[into_b], rest[from_a] = b_rest, a_rest
    return done + size
