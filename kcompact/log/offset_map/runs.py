"""The offset map's storage: sorted runs of digests with their latest offsets.

``OffsetMap`` (the package's ``__init__``) decides when to flush and merge; this module is what a run
is, and how two runs become one (``merge_runs``, at the end).
A *run* holds keys (no duplicates) sorted by digest and split into ``2**bits`` buckets by the top
``bits`` digest bits, ``bits = max(IMPLIED_BITS, log2(keys / 4))``; ``starts`` (uint32, ``2**bits
+ 1`` entries: at most a byte a key from 2**14 keys on, 16 KiB below) says where each bucket
begins, so a key's first ``IMPLIED_BITS`` (12) digest bits are given by its position. Per key a
run keeps ``key`` (uint64: digest bits 12-75, sorted within a bucket; keys sharing them, in any
order: lookups compare them all) and the 7 bytes of ``REST``
(bits 76-99, ``offset - base`` in uint32; base: the map's first offset): 15 bytes a key. A run
whose offsets do not fit (a span of 2**32 or more, or one below base) keeps ``REST_WIDE`` (19).

Lookups bisect each query's bucket in vectorised steps; a few queries (a cleaner's batch) are
instead compared with the first 16 keys of their bucket at once. A run a merge writes lives in its
own anonymous mapping when big (``Run.allocate``), so that the merge can give each input's consumed
2 MiB pages back to the system as it goes (``Run.release``, ``madvise``).
"""

from __future__ import annotations

import functools
import mmap
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from kcompact.log.offset_map import accel
from kcompact.value import frozen

U64 = npt.NDArray[np.uint64]
U16 = npt.NDArray[np.uint16]
U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
Index = npt.NDArray[np.intp]
Mask = npt.NDArray[np.bool_]

IMPLIED_BITS = 12
"""Leading digest bits a run keeps in its bucket directory instead of in each key."""
STORED_BITS = 88
"""Digest bits stored a key after the implied ones (``key`` 64, ``mid`` 16, ``low`` 8)."""
COMPARED_BITS = IMPLIED_BITS + STORED_BITS
"""Digest bits that tell keys apart: keys equal on digest bits 0-99 are one key."""

_BUCKET_KEYS = 4  # at least 4 keys a bucket on average: uint32 starts cost <= 1 byte a key
_LOOKUP_CHUNK = 8192  # queries per vectorised pass (cache-sized temporaries)
_WINDOW = 16  # keys of a bucket compared at once before bisecting the rest (a multiple of 8)
_WINDOW_QUERIES = 512  # lookups of more queries bisect (measured at 0.5M-10M keys)
_BYTE_SUM = np.uint64(0x0101010101010101)  # x * this >> 56: the sum of x's bytes (if < 256)
_MERGE_CHUNK = 1 << 16  # keys a merge moves at a time
_MMAP_MIN_BYTES = 1 << 20  # merge outputs this big live in their own mapping (pages returnable)
_RELEASE_SHIFT = 21  # give memory back by whole 2 MiB (huge) pages
_OFFSET_DELTA_LIMIT = 2**32
_MADV_HUGEPAGE: int | None = getattr(mmap, "MADV_HUGEPAGE", None)  # Linux only
_MADV_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)
_MAP_PRIVATE: int | None = getattr(mmap, "MAP_PRIVATE", None)  # POSIX

REST = np.dtype([
    ("mid", "<u2"),  # digest bits 76-91
    ("low", "u1"),  # digest bits 92-99
    ("off", "<u4"),  # offset - base
])  # fmt: skip
"""The 7 bytes a key keeps besides ``key`` (packed, no padding)."""
REST_WIDE = np.dtype([
    ("mid", "<u2"),  # digest bits 76-91
    ("low", "u1"),  # digest bits 92-99
    ("off", "<i8"),  # the offset itself: the run's offsets span 2**32 or more
])  # fmt: skip
"""``REST`` for a run whose offsets do not fit ``offset - base`` in 32 bits (11 bytes)."""
_LAYOUTS = {np.dtype(f"V{layout.itemsize}"): layout for layout in (REST, REST_WIDE)}
_VOID_WIDE = np.dtype(f"V{REST_WIDE.itemsize}")
# runs hold ``rest`` as plain void items (numpy moves those ~4x faster than structured ones)


@frozen
class Query:
    """Digests split like a run's keys (``top``: digest bits 0-63, for the bucket)."""

    top: U64
    key: U64
    mid: U16
    low: U8

    @classmethod
    def of(cls, hi: U64, lo: U64) -> Query:
        s = IMPLIED_BITS
        key = (hi << np.uint64(s)) | (lo >> np.uint64(64 - s))
        mid = ((lo >> np.uint64(48 - s)) & np.uint64(0xFFFF)).astype(np.uint16)
        low = ((lo >> np.uint64(40 - s)) & np.uint64(0xFF)).astype(np.uint8)
        return cls(hi, key, mid, low)

    def take(self, which: Mask | Index) -> Query:
        return Query(self.top[which], self.key[which], self.mid[which], self.low[which])


def _alloc(n: int, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """An uninitialised array; a big one in its own anonymous mapping (see ``Run.release``)."""
    size = n * dtype.itemsize
    if size < max(_MMAP_MIN_BYTES, 1):
        return np.empty(n, dtype=dtype)
    # private: MADV_DONTNEED then frees the pages (on a shared anonymous mapping it only unmaps them
    # from this process, and the memory stays allocated until the whole mapping goes)
    mapping = mmap.mmap(-1, size, flags=_MAP_PRIVATE) if _MAP_PRIVATE is not None else mmap.mmap(-1, size)
    if _MADV_HUGEPAGE is not None:  # as numpy does for its big arrays: random gathers need it
        mapping.madvise(_MADV_HUGEPAGE)
    return np.frombuffer(mapping, dtype=dtype, count=n)


def _release_prefix(array: npt.NDArray[Any], done: int, end: int) -> None:
    """Give back to the system the whole huge pages of ``array[:end]`` not given back yet."""
    base = array.base
    while isinstance(base, np.ndarray):  # a view (``Run.key`` of ``Run.padded``)
        base = base.base
    if (
        _MADV_DONTNEED is not None
        and isinstance(base, memoryview)
        and isinstance(base.obj, mmap.mmap)
    ):
        first, last = (
            done * array.itemsize >> _RELEASE_SHIFT,
            end * array.itemsize >> _RELEASE_SHIFT,
        )
        if last > first:
            size = (last - first) << _RELEASE_SHIFT
            base.obj.madvise(_MADV_DONTNEED, first << _RELEASE_SHIFT, size)


@functools.cache
def _prefix_masks(width: int) -> U64:
    """Row i: ``width`` bytes, the first i of them 1, as ``width / 8`` words."""
    masks = np.tri(width + 1, width, -1, dtype=np.uint8)
    return masks.view(np.uint64)


def directory_bits(n: int) -> int:
    """Bits of a bucket directory for ``n`` keys (``_BUCKET_KEYS`` or more a bucket on average)."""
    return max(IMPLIED_BITS, (n // _BUCKET_KEYS).bit_length() - 1)


def _starts(counts: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.unsignedinteger[Any]]:
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return starts.astype(np.uint32 if starts[-1] < 2**32 else np.uint64)


class Run:
    """Sorted, duplicate-free keys with their latest offsets (offsets mutable, keys not)."""

    __slots__ = ("base", "bits", "key", "padded", "released", "rest", "starts", "steps", "windows")

    def __init__(
        self, padded: U64, rest: npt.NDArray[np.void], starts: npt.NDArray[Any], base: int
    ) -> None:
        """``padded``: the keys, then ``_WINDOW`` free items (made sentinels here)."""
        self.padded, self.rest, self.starts, self.base = padded, rest, starts, base
        self.key = padded[: len(rest)]
        padded[len(rest) :] = np.uint64(2**64 - 1)
        self.windows = sliding_window_view(padded, _WINDOW)  # windows[i]: key[i : i + _WINDOW]
        self.bits = (len(starts) - 1).bit_length() - 1
        self.steps = int(np.diff(starts).max()).bit_length()  # bisection steps for any bucket
        self.released = 0

    @classmethod
    def encode(cls, q: Query, offsets: I64, base: int) -> Run:
        """A run of keys sorted by digest, without duplicates."""
        n = len(q.key)
        bits = directory_bits(n)
        counts = np.bincount((q.top >> np.uint64(64 - bits)).astype(np.intp), minlength=1 << bits)
        delta = offsets - base
        narrow = bool(delta.min() >= 0 and delta.max() < _OFFSET_DELTA_LIMIT)
        rest = np.empty(n, dtype=REST if narrow else REST_WIDE)
        rest["mid"], rest["low"], rest["off"] = q.mid, q.low, delta if narrow else offsets
        padded = np.empty(n + _WINDOW, dtype=np.uint64)
        padded[:n] = q.key
        return cls(padded, _void(rest), _starts(counts), base)

    @staticmethod
    def allocate(n: int, wide: bool) -> tuple[U64, npt.NDArray[np.void]]:
        """Uninitialised ``padded`` and ``rest`` for a run of ``n`` keys, for a merge to fill; big
        ones in their own mappings, so that ``release`` can give their pages back."""
        rest = _alloc(n, _VOID_WIDE if wide else np.dtype(f"V{REST.itemsize}"))
        return _alloc(n + _WINDOW, np.dtype(np.uint64)), rest

    def __len__(self) -> int:
        return len(self.key)

    def columns(self) -> tuple[U64, U8, npt.NDArray[Any], int, int]:
        """``(key, rest as bytes, starts, bits, base)``: the run as the C kernels take it."""
        return self.key, self.rest.view(np.uint8), self.starts, self.bits, self.base

    def __reduce__(self) -> tuple[object, ...]:  # not ``windows``: a view, pickled as a copy
        return (Run, (self.padded, self.rest, self.starts, self.base))

    @property
    def wide(self) -> bool:
        return _LAYOUTS[self.rest.dtype] is REST_WIDE

    def fields(self, at: Index | slice | None = None) -> npt.NDArray[np.void]:
        """``rest`` (at ``at``: a copy) viewed field by field."""
        if at is None:
            return self.rest.view(_LAYOUTS[self.rest.dtype])
        part = self.rest[at] if isinstance(at, slice) else np.take(self.rest, at)
        return part.view(_LAYOUTS[self.rest.dtype])

    def wide_rest(self, at: slice) -> npt.NDArray[np.void]:
        """``rest[at]`` as ``REST_WIDE`` items (a view if the run is wide, else a widened copy)."""
        if self.wide:
            return self.rest[at]
        return _void(_widen(self.fields(at), self.offsets(at)))

    def nbytes(self) -> int:
        return self.padded.nbytes + self.rest.nbytes + self.starts.nbytes

    def offsets(self, at: Index | slice | None = None) -> I64:
        """Absolute offsets at ``at`` (all of them when None)."""
        return self.offsets_of(self.fields(at))

    def set_offsets(self, pos: Index, offsets: I64) -> None:
        if not self.wide:
            delta = offsets - self.base
            if delta.min() >= 0 and delta.max() < _OFFSET_DELTA_LIMIT:
                self.fields()["off"][pos] = delta
                return
            self.rest = _void(_widen(self.fields(), self.offsets()))
        self.fields()["off"][pos] = offsets

    def prefix(self, first: int, end: int) -> U64:
        """Digest bits 0-63 of keys ``first:end``: the bucket's bits, then the stored ones."""
        as_start = self.starts.dtype.type  # a Python int would make numpy convert all of starts
        b0 = int(np.searchsorted(self.starts, as_start(first), side="right")) - 1
        b1 = int(np.searchsorted(self.starts, as_start(end - 1), side="right"))
        edges = np.clip(self.starts[b0 : b1 + 1].astype(np.int64), first, end)
        buckets = np.repeat(np.arange(b0, b1, dtype=np.uint64), np.diff(edges))
        rest = self.key[first:end] >> np.uint64(IMPLIED_BITS)
        return (buckets << np.uint64(64 - self.bits)) | rest

    def locate(self, buckets: Index, key: U64) -> tuple[I64, I64]:
        """Where each query would go (the first key ``>= key`` in its bucket, or the bucket's
        end), and where its bucket ends.

        Buckets hold ~4-8 keys. Many queries are bisected in step (``self.steps`` vectorised
        steps). A few (a cleaner's batch), where numpy's per-call cost dominates, are compared
        with the first ``_WINDOW`` keys of their bucket at once (two cache lines) and counted
        (the sum of the comparison's bytes under a prefix mask, 8 at a time); only bigger
        buckets' queries are bisected then.
        """
        if len(key) > _LOOKUP_CHUNK:  # cache-sized temporaries
            parts = [
                self.locate(buckets[at : at + _LOOKUP_CHUNK], key[at : at + _LOOKUP_CHUNK])
                for at in range(0, len(key), _LOOKUP_CHUNK)
            ]
            return np.concatenate([p for p, _ in parts]), np.concatenate([e for _, e in parts])
        low = self.starts[buckets].astype(np.int64)
        end = self.starts[buckets + 1].astype(np.int64)
        if len(key) > _WINDOW_QUERIES:  # many queries: fewer element operations win
            return self._bisect(low, end, key), end
        below = (self.windows[low] < key[:, None]).view(np.uint64)  # 8 comparisons a word
        below &= _prefix_masks(_WINDOW)[np.minimum(end - low, _WINDOW)]
        ahead = ((below * _BYTE_SUM) >> np.uint64(56)).sum(axis=1, dtype=np.int64)  # 0/1 bytes
        big = np.flatnonzero(ahead == _WINDOW)
        if len(big):
            ahead[big] = self._bisect(low[big] + _WINDOW, end[big], key[big]) - low[big]
        return low + ahead, end

    def _bisect(self, low: I64, high: I64, q: U64) -> I64:
        last = len(self) - 1
        for _ in range(self.steps):
            mid = (low + high) >> 1
            right = (mid < high) & (self.key[np.minimum(mid, last)] < q)
            low = np.where(right, mid + 1, low)
            high = np.where(right, high, mid)
        return low

    def find(self, q: Query) -> tuple[I64, Mask]:
        """Positions of the query keys and whether each is present."""
        pos, found, _ = self.lookup(q)
        return pos, found

    def find_sorted(self, q: Query) -> tuple[I64, Mask]:
        """``find`` for queries sorted by digest, in one pass over the run (for big batches)."""
        pos, found = np.zeros(len(q.key), dtype=np.int64), np.zeros(len(q.key), dtype=bool)
        retry = [np.empty(0, dtype=np.intp)]
        for first in range(0, len(self), _MERGE_CHUNK):
            prefix = self.prefix(first, min(first + _MERGE_CHUNK, len(self)))
            these = slice(
                int(np.searchsorted(q.top, prefix[0])),
                int(np.searchsorted(q.top, prefix[-1], side="right")),
            )
            at = np.searchsorted(prefix, q.top[these])  # the first key with the query's prefix
            same = prefix[at] == q.top[these]
            at += first
            rest = self.fields(at)
            hit = same & (self.key[at] == q.key[these])
            hit &= (rest["mid"] == q.mid[these]) & (rest["low"] == q.low[these])
            pos[these][hit], found[these][hit] = at[hit], True
            retry.append(these.start + np.flatnonzero(same & ~hit))  # keys sharing the prefix
        again = np.concatenate(retry)
        again = again[~found[again]]
        if len(again):
            pos[again], found[again] = self.find(q.take(again))
        return pos, found

    def lookup(self, q: Query) -> tuple[I64, Mask, npt.NDArray[np.void]]:
        """``find``, plus ``rest`` at each position (where ``found``: the key's own)."""
        buckets = (q.top >> np.uint64(64 - self.bits)).astype(np.intp)
        pos, end = self.locate(buckets, q.key)
        at = np.minimum(pos, len(self) - 1)
        same_key = (pos < end) & (self.key[at] == q.key)
        rest = self.fields(at)
        found = same_key & (rest["mid"] == q.mid) & (rest["low"] == q.low)
        for i in np.flatnonzero(same_key & ~found).tolist():  # keys sharing digest bits 0-75
            for j in range(int(pos[i]) + 1, int(end[i])):
                if self.key[j] != q.key[i]:
                    break
                item = self.fields(slice(j, j + 1))
                if item["mid"][0] == q.mid[i] and item["low"][0] == q.low[i]:
                    pos[i], found[i], rest[i] = j, True, item[0]
                    break
        return pos, found, rest

    def offsets_of(self, fields: npt.NDArray[np.void]) -> I64:
        """Absolute offsets held by ``fields`` (items of this run's ``rest``)."""
        if self.wide:
            return fields["off"].astype(np.int64)
        return fields["off"].astype(np.int64) + self.base

    def release(self, end: int) -> None:
        """Return the memory of keys ``:end`` to the system (a merge has consumed them)."""
        _release_prefix(self.key, self.released, end)
        _release_prefix(self.rest, self.released, end)
        self.released = end


def _void(fields: npt.NDArray[np.void]) -> npt.NDArray[np.void]:
    return fields.view(f"V{fields.dtype.itemsize}")


def _widen(fields: npt.NDArray[np.void], offsets: I64) -> npt.NDArray[np.void]:
    """``REST`` items as ``REST_WIDE`` ones holding the absolute offsets."""
    wide = np.empty(len(fields), dtype=REST_WIDE)
    wide["mid"], wide["low"], wide["off"] = fields["mid"], fields["low"], offsets
    return wide


def compared_mask() -> np.uint64:
    """The bits of ``lo`` a run compares (``lo & this``: keys equal on the compared digest bits
    become equal; ``Query`` never reads the others)."""
    return np.uint64(2**64 - (1 << (128 - IMPLIED_BITS - STORED_BITS)))


# The merge of two runs.
#
# The merge: ``OffsetMap`` merges its newest run into the previous one while the newest is at
# least a quarter its size, and all runs into one at ``freeze``. A merge writes the new run front to
# back (in C one walk over both; the numpy reference locates chunks of the newer run in the older as
# lookups do, ``Run.locate``, and weaves the two), counting the output's bucket directory as the keys
# go by. It gives each
# input's consumed 2 MiB pages back to the system as it goes (``Run.release``): it needs the output
# plus a chunk, not the output plus both inputs (a merge that fails part way, out of memory, leaves
# the map unusable).


def merge_runs(a: Run, b: Run) -> Run:
    """Union of two runs without common keys, written front to back into a new run.

    In C (``merge_runs_step``: one walk over both, counting the output's directory as the keys
    go by) a chunk of output slots at a time, giving back the pages both inputs have given up
    after each (``Run.release``); else :func:`_merge_runs_reference`. The two write the same run.
    """
    n = len(a) + len(b)
    bits = directory_bits(n)
    padded, rest = Run.allocate(n, a.wide or b.wide)
    starts = np.zeros((1 << bits) + 1, dtype=np.uint32 if n < 2**32 else np.uint64)
    out = (padded, rest.view(np.uint8), starts, bits, a.base)
    ia = ib = 0
    for stop in range(_MERGE_CHUNK, n + _MERGE_CHUNK, _MERGE_CHUNK):
        step = accel.merge_runs_step(a.columns(), b.columns(), out, IMPLIED_BITS, ia, ib, min(stop, n))
        if step is None:  # declined, before writing anything: the runs as they are are not its
            if ia or ib:  # the same runs at every step: a step after the first never declines
                raise RuntimeError("merge_runs_step declined a merge it had begun")
            return _merge_runs_reference(a, b)
        ia, ib = step
        a.release(ia)
        b.release(ib)
    np.cumsum(starts, out=starts)  # one directory-sized array, no int64 copies (128 MiB at 100M)
    return Run(padded, rest, starts, a.base)


def _merge_runs_reference(a: Run, b: Run) -> Run:
    """:func:`merge_runs` in numpy.

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
    for first in range(0, len(b), _MERGE_CHUNK):
        merge.weave_chunk(first, min(first + _MERGE_CHUNK, len(b)))
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
            piece_end = min(self.taken + _MERGE_CHUNK, stop)
            k_end = int(np.searchsorted(pos, piece_end)) if piece_end < stop else len(pos)
            self.take_a(piece_end, first + k, pos[k:k_end] - self.taken)
            k = k_end
            if self.taken >= stop:
                break
        b.release(end)

    def weave_rest_of_a(self) -> None:
        """Write the keys of ``a`` after ``b``'s last, a chunk at a time."""
        no_keys = np.empty(0, dtype=np.int64)
        for first in range(self.taken, len(self.a), _MERGE_CHUNK):
            self.take_a(min(first + _MERGE_CHUNK, len(self.a)), len(self.b), no_keys)

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
