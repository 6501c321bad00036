"""The cleaner's dedupe map: key digest -> latest offset over the dirty range (spec §6.6, §9).

Same semantics as Kafka's ``SkimpyOffsetMap`` (a later put of a key wins, every put sets
``latest_offset``, Kafka's capacity rule on request), but fed whole batches: all per-key work is
numpy, with no Python object per key. ``key_digests`` hashes keys with XXH3-128 (seed 0; per key
from Python, 119 ns where ``md5(k).digest()`` takes 340) into ``hi``/``lo``: digest bits 0-63 and
64-127, read big-endian per ``DIGEST_LAYOUT``.

Layout: 15 bytes a key plus a directory of at most 1 (issue #7: at most 16 in all). The map is a
few *runs* (no key in two), each sorted by digest and split into ``2**bits`` buckets by the top
``bits`` digest bits, ``bits = max(IMPLIED_BITS, log2(keys / 4))``; ``starts`` (uint32, ``2**bits +
1`` entries: at most a byte a key from 2**14 keys on, 16 KiB below) says where each bucket begins.
A key's first ``IMPLIED_BITS`` (12) digest bits are thus given by its position and not stored;
per key, a run keeps ``key`` (uint64: digest bits 12-75, sorted within a bucket) and 7 bytes of
``REST`` (bits 76-99, ``offset - base`` in uint32; base: the first offset put). A run whose offsets do not fit (a span of 2**32 or more, or an offset below
base) keeps ``REST_WIDE`` instead: the offset itself in int64, 19 bytes a key.

Collisions: a lookup compares ``COMPARED_BITS`` = 100 digest bits (12 implied + 88 stored), so
keys whose XXH3-128 digests agree on bits 0-99 are one key (the later put wins), where Kafka's MD5
map needs all 128 bits to agree. 16 bytes cannot hold keys as distinct as 128-bit digests in a
layout one can search: N random 128-bit digests carry ``log2 C(2**128, N) / N ~ 129.44 - log2 N``
bits a key and which key has which offset at least ``log2(N!) / N ~ log2 N - 1.44`` more, i.e.
128 bits a key with perfect entropy coding and no room for a directory, fixed-width fields or the
offsets' own spread. We chose 16 bytes (issue #7's goal) and 100 bits. Chance that two distinct
keys of one pass's map are taken for one (~ N**2 / 2 / 2**bits; the older one's records go)::

    keys    100 bits (this map)   96 bits (12-byte digest + offset)   128 bits (Kafka's MD5)
    5M      9.9e-18               1.6e-16                             3.7e-26
    100M    3.9e-15               6.3e-14                             1.5e-23

and a key only in the clean part of the log is dropped with chance N / 2**100 each (8e-23 at 100M
map keys). Both sit far below the chance that such a pass meets an unrecoverable disk read error
(~1e-15 a bit read: ~1e-3 over 100 GB) and the 2**-32 chance that CRC32C misses a corrupted
batch, which Kafka accepts. (The layout before issue #7 kept all 128 bits, at 20.5-21 bytes a key.)

Build: puts append to a *pending* list; a flush (at max(2**20, size / 32) puts, which bounds its
sort's temporaries to ~2.5 bytes a key) keeps each key's last put, overwrites in place the offsets
of keys a run holds (a merge-join for big flushes) and makes a run of the new keys; the newest run
merges into the previous one while at least a quarter its size. A merge writes a new run front to
back, locating chunks of the newer run in the older as lookups do, and gives each input's consumed
2 MiB pages back to the system as it goes (``madvise``): it needs the output plus a chunk, not the
output plus both inputs (a merge that fails part way, out of memory, leaves the map unusable).
Lookups bisect each query's bucket in vectorised steps; a few queries (a cleaner's batch) are
instead compared with the first 16 keys of their bucket at once.

Capacity: Kafka checks ``entries < floor(slots * load_factor)`` before every put, even of a key it
holds. ``put_batch`` takes a batch blind while ``size + pending + len(batch) <= max_entries``, else
it flushes, counts the new keys before each position and accepts the prefix Kafka would.

``scripts/bench_offset_map.py N`` (random digests, batches of 1000, put time includes ``freeze``;
then every key and as many absent ones looked up; hashing excluded; build peak: RSS growth to the
end of ``freeze`` over the frozen map, which includes ~100 MiB of flush floor, allocator and bench
chunks, whatever the map's size; shared 2-core VM)::

    keys   bytes/key   put keys/s   freeze   get keys/s   build peak / map   peak RSS
    1M     15.52       5.6M         0.15 s   9.3M         5.7                114 MiB
    10M    15.84       3.0M         0.29 s   6.0M         1.86               363 MiB
    100M   15.67       1.9M         1.6 s    5.0M         1.31               2.5 GiB

The layout before issue #7, same day and machine: 100M keys at 20.67 bytes a key, put at 1.8M/s
(9.8 s freeze), got at 5.3M/s, build peak 2.36, peak RSS 4.4 GiB. The clean bench's map work
(``--clean-shape``: 2M records over 500k keys, 200 a batch): put 0.23 s, get 0.45 s (0.27 s and
0.52 s before).
"""

from __future__ import annotations

import functools
import mmap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash
from numpy.lib.stride_tricks import sliding_window_view

from kcompact.errors import ConfigError

U64 = npt.NDArray[np.uint64]
U16 = npt.NDArray[np.uint16]
U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
Index = npt.NDArray[np.intp]
Mask = npt.NDArray[np.bool_]

DIGEST_LAYOUT = np.dtype([
    ("hi", ">u8"),  # digest bytes 0-7, big-endian: buckets and sorts the map
    ("lo", ">u8"),  # digest bytes 8-15, big-endian: bits 64-99 are stored, 100-127 dropped
])  # fmt: skip
"""One XXH3-128 digest in its canonical byte order, split into the two words callers pass."""

KAFKA_BYTES_PER_ENTRY = 24
"""SkimpyOffsetMap slot: 16-byte MD5 digest + 8-byte offset."""
KAFKA_MAX_MAP_MEMORY = 2**31 - 1
"""Kafka caps each cleaner thread's map memory at Integer.MAX_VALUE bytes."""
DEFAULT_LOAD_FACTOR = 0.9
"""``log.cleaner.io.buffer.load.factor`` default."""
IMPLIED_BITS = 12
"""Leading digest bits a run keeps in its bucket directory instead of in each key."""
STORED_BITS = 88
"""Digest bits stored a key after the implied ones (``key`` 64, ``mid`` 16, ``low`` 8)."""
COMPARED_BITS = IMPLIED_BITS + STORED_BITS
"""Digest bits that tell keys apart: keys equal on digest bits 0-99 are one key."""

_FLUSH_MIN_PUTS = 1 << 20  # pending puts before a flush; grows to size / _FLUSH_SHARE
_FLUSH_SHARE = 32
_BUCKET_KEYS = 4  # at least 4 keys a bucket on average: uint32 starts cost <= 1 byte a key
_LOOKUP_CHUNK = 8192  # queries per vectorised pass (cache-sized temporaries)
_WINDOW = 16  # keys of a bucket compared at once before bisecting the rest (a multiple of 8)
_WINDOW_QUERIES = 512  # lookups of more queries bisect (measured at 0.5M-10M keys)
_BYTE_SUM = np.uint64(0x0101010101010101)  # x * this >> 56: the sum of x's bytes (if < 256)
_MERGE_CHUNK = 1 << 16  # keys a merge moves at a time
_MERGE_RATIO = 4  # the newest run merges into the previous one once at least 1/4 its size
_MMAP_MIN_BYTES = 1 << 20  # merge outputs this big live in their own mapping (pages returnable)
_RELEASE_SHIFT = 21  # give memory back by whole 2 MiB (huge) pages
_OFFSET_DELTA_LIMIT = 2**32
_MADV_HUGEPAGE: int | None = getattr(mmap, "MADV_HUGEPAGE", None)  # Linux only
_MADV_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)

_hash128 = xxhash.xxh3_128_digest  # module global so tests can force collisions


def key_digests(keys: Sequence[bytes]) -> tuple[U64, U64]:
    """Hash keys into the map's 128-bit digests.

    Args:
        keys: the record keys (bytes or any buffer); never None.

    Returns:
        ``(hi, lo)``: two uint64 arrays, the digest's first and last 8 bytes read big-endian.
    """
    packed = np.frombuffer(b"".join(map(_hash128, keys)), dtype=DIGEST_LAYOUT)
    return packed["hi"].astype(np.uint64), packed["lo"].astype(np.uint64)


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


@dataclass(frozen=True, slots=True)
class _Query:
    """Digests split like a run's keys (``top``: digest bits 0-63, for the bucket)."""

    top: U64
    key: U64
    mid: U16
    low: U8

    @classmethod
    def of(cls, hi: U64, lo: U64) -> _Query:
        s = IMPLIED_BITS
        key = (hi << np.uint64(s)) | (lo >> np.uint64(64 - s))
        mid = ((lo >> np.uint64(48 - s)) & np.uint64(0xFFFF)).astype(np.uint16)
        low = ((lo >> np.uint64(40 - s)) & np.uint64(0xFF)).astype(np.uint8)
        return cls(hi, key, mid, low)

    def take(self, which: Mask | Index) -> _Query:
        return _Query(self.top[which], self.key[which], self.mid[which], self.low[which])


def _alloc(n: int, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """An uninitialised array; a big one in its own anonymous mapping (see ``_Run.release``)."""
    size = n * dtype.itemsize
    if size < max(_MMAP_MIN_BYTES, 1):
        return np.empty(n, dtype=dtype)
    mapping = mmap.mmap(-1, size)
    if _MADV_HUGEPAGE is not None:  # as numpy does for its big arrays: random gathers need it
        mapping.madvise(_MADV_HUGEPAGE)
    return np.frombuffer(mapping, dtype=dtype, count=n)


def _release_prefix(array: npt.NDArray[Any], done: int, end: int) -> None:
    """Give back to the system the whole huge pages of ``array[:end]`` not given back yet."""
    base = array.base
    while isinstance(base, np.ndarray):  # a view (``_Run.key`` of ``_Run.padded``)
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


def _directory_bits(n: int) -> int:
    return max(IMPLIED_BITS, (n // _BUCKET_KEYS).bit_length() - 1)


def _starts(counts: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.unsignedinteger[Any]]:
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return starts.astype(np.uint32 if starts[-1] < 2**32 else np.uint64)


class _Run:
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
    def encode(cls, hi: U64, lo: U64, offsets: I64, base: int) -> _Run:
        """A run of keys sorted by digest, without duplicates."""
        bits = _directory_bits(len(hi))
        counts = np.bincount((hi >> np.uint64(64 - bits)).astype(np.intp), minlength=1 << bits)
        q = _Query.of(hi, lo)
        delta = offsets - base
        narrow = bool(delta.min() >= 0 and delta.max() < _OFFSET_DELTA_LIMIT)
        rest = np.empty(len(hi), dtype=REST if narrow else REST_WIDE)
        rest["mid"], rest["low"], rest["off"] = q.mid, q.low, delta if narrow else offsets
        padded = np.empty(len(hi) + _WINDOW, dtype=np.uint64)
        padded[: len(hi)] = q.key
        return cls(padded, _void(rest), _starts(counts), base)

    def __len__(self) -> int:
        return len(self.key)

    def __reduce__(self) -> tuple[object, ...]:  # not ``windows``: a view, pickled as a copy
        return (_Run, (self.padded, self.rest, self.starts, self.base))

    @property
    def wide(self) -> bool:
        return _LAYOUTS[self.rest.dtype] is REST_WIDE

    def fields(self, at: Index | slice | None = None) -> npt.NDArray[np.void]:
        """``rest`` (at ``at``: a copy) viewed field by field."""
        if at is None:
            return self.rest.view(_LAYOUTS[self.rest.dtype])
        part = self.rest[at] if isinstance(at, slice) else np.take(self.rest, at)
        return part.view(_LAYOUTS[self.rest.dtype])

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

    def find(self, q: _Query) -> tuple[I64, Mask]:
        """Positions of the query keys and whether each is present."""
        pos, found, _ = self.lookup(q)
        return pos, found

    def find_sorted(self, q: _Query) -> tuple[I64, Mask]:
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

    def lookup(self, q: _Query) -> tuple[I64, Mask, npt.NDArray[np.void]]:
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


def _merge_runs(a: _Run, b: _Run) -> _Run:
    """Union of two runs without common keys, written front to back into a new run.

    Both are walked in chunks of ``b``: a chunk's keys are located in ``a`` (as lookups do), then
    the keys of ``a`` before the chunk's last and the chunk are woven into the output, and the
    pages both have given up are returned (``_Run.release``). The output's directory is counted
    from the digest prefixes of the keys as they go by.
    """
    n = len(a) + len(b)
    bits = _directory_bits(n)
    starts = np.zeros((1 << bits) + 1, dtype=np.uint32 if n < 2**32 else np.uint64)
    counts = starts[1:]  # bucket b's keys, summed into starts in place at the end
    for run in (a, b):  # a run with as many buckets or more: add them up, else count its keys
        if run.bits >= bits:
            np.add(counts, np.diff(run.starts[:: 1 << (run.bits - bits)]), out=counts)
    a_keys, b_keys = a.bits < bits, b.bits < bits
    rest = _alloc(n, a.rest.dtype if a.rest.dtype == b.rest.dtype else _VOID_WIDE)
    padded = _alloc(n + _WINDOW, np.dtype(np.uint64))
    out = _Run(padded, rest, np.zeros(2, dtype=np.uint32), a.base)
    done = taken = 0  # keys written, keys of ``a`` written
    for first in range(0, len(b), _MERGE_CHUNK):
        end = min(first + _MERGE_CHUNK, len(b))
        prefix = b.prefix(first, end)
        if b_keys:
            _count(counts, prefix, bits)
        buckets = (prefix >> np.uint64(64 - a.bits)).astype(np.intp)
        pos, _ = a.locate(buckets, b.key[first:end])  # b[first + j] goes before a[pos[j]]
        stop, k = int(pos[-1]), 0
        while True:  # a's keys up to the chunk's last, in pieces, with the chunk's keys among them
            piece_end = min(taken + _MERGE_CHUNK, stop)
            k_end = int(np.searchsorted(pos, piece_end)) if piece_end < stop else len(pos)
            if a_keys and piece_end > taken:
                _count(counts, a.prefix(taken, piece_end), bits)
            done = _weave(out, done, (a, taken, piece_end), (b, first + k, pos[k:k_end] - taken))
            taken, k = piece_end, k_end
            a.release(taken)
            if taken >= stop:
                break
        b.release(end)
    for first in range(taken, len(a), _MERGE_CHUNK):
        end = min(first + _MERGE_CHUNK, len(a))
        if a_keys:
            _count(counts, a.prefix(first, end), bits)
        done = _weave(out, done, (a, first, end), (b, len(b), np.empty(0, dtype=np.int64)))
        a.release(end)
    np.cumsum(starts, out=starts)  # one directory-sized array, no int64 copies (128 MiB at 100M)
    return _Run(padded, out.rest, starts, a.base)


def _count(counts: npt.NDArray[Any], prefix: U64, bits: int) -> None:
    """Add sorted digest prefixes to per-bucket counts (only the buckets they span)."""
    buckets = (prefix >> np.uint64(64 - bits)).astype(np.intp)
    first = int(buckets[0])
    found = np.bincount(buckets - first)
    part = counts[first : first + len(found)]
    np.add(part, found, out=part, casting="unsafe")


def _weave(
    out: _Run, done: int, a_part: tuple[_Run, int, int], b_part: tuple[_Run, int, I64]
) -> int:
    """Write ``a[first:end]`` and ``len(at)`` keys of ``b`` from ``b_first`` (key j before
    ``a[first + at[j]]``) to ``out`` from ``done``; return the new ``done``."""
    (a, first, end), (b, b_first, at) = a_part, b_part
    b_end = b_first + len(at)
    size = (end - first) + len(at)
    into_b = at + np.arange(len(at))
    from_a = np.ones(size, dtype=bool)
    from_a[into_b] = False
    keys = out.key[done : done + size]
    keys[into_b], keys[from_a] = b.key[b_first:b_end], a.key[first:end]
    rest = out.rest[done : done + size]
    a_rest, b_rest = a.rest[first:end], b.rest[b_first:b_end]
    if out.wide and not a.wide:
        a_rest = _void(_widen(a.fields(slice(first, end)), a.offsets(slice(first, end))))
    if out.wide and not b.wide:
        b_rest = _void(_widen(b.fields(slice(b_first, b_end)), b.offsets(slice(b_first, b_end))))
    rest[into_b], rest[from_a] = b_rest, a_rest
    return done + size


def _void(fields: npt.NDArray[np.void]) -> npt.NDArray[np.void]:
    return fields.view(f"V{fields.dtype.itemsize}")


def _widen(fields: npt.NDArray[np.void], offsets: I64) -> npt.NDArray[np.void]:
    """``REST`` items as ``REST_WIDE`` ones holding the absolute offsets."""
    wide = np.empty(len(fields), dtype=REST_WIDE)
    wide["mid"], wide["low"], wide["off"] = fields["mid"], fields["low"], offsets
    return wide


def _key_groups(hi: U64, lo: U64) -> tuple[Index, Index]:
    """An order sorting the keys by digest, and where each group of equal keys starts in it (the
    order inside a group is arbitrary: callers pick by put position, i.e. the order's values)."""
    order = np.argsort(hi)
    h, lo_sorted = hi[order], lo[order]
    same_hi = h[1:] == h[:-1]
    same = same_hi & (lo_sorted[1:] == lo_sorted[:-1])
    if not np.array_equal(same, same_hi):  # distinct keys share hi: sort on (hi, lo)
        order = np.lexsort((lo, hi))
        h, lo_sorted = hi[order], lo[order]
        same = (h[1:] == h[:-1]) & (lo_sorted[1:] == lo_sorted[:-1])
    starts = np.concatenate(([0], np.flatnonzero(~same) + 1))
    return order, starts


def _digest_columns(hi: object, lo: object) -> tuple[U64, U64]:
    h = np.ascontiguousarray(hi, dtype=np.uint64)
    lo_ = np.ascontiguousarray(lo, dtype=np.uint64)
    if h.ndim != 1 or h.shape != lo_.shape:
        raise ValueError(f"digest columns must be 1-D of one length; found {h.shape}, {lo_.shape}")
    return h, lo_


def _compared_bits() -> np.uint64:
    """The bits of ``lo`` the map compares: cleared, the others group keys equal on
    ``COMPARED_BITS`` as one key (``_Query`` never reads them)."""
    return np.uint64(2**64 - (1 << (40 - IMPLIED_BITS)))


class OffsetMap:
    """Key digest -> latest offset, built in increasing offset order, then queried in batches.

    Args:
        max_entries: Kafka's ``floor(slots * load_factor)``: before each put the map stops if it
            holds this many keys. None (default): unbounded, grows with memory.

    Raises:
        ConfigError: ``max_entries`` below 1 (the cleaner could never make progress).
    """

    def __init__(self, *, max_entries: int | None = None) -> None:
        if max_entries is not None and max_entries < 1:
            raise ConfigError(
                f"dedupe map capacity; expected at least 1 entry, found {max_entries}"
            )
        self.max_entries = max_entries
        self.slots: int | None = None
        self.latest_offset = -1
        self._runs: list[_Run] = []
        self._pending: list[tuple[U64, U64, I64]] = []
        self._pending_puts = 0
        self._size = 0  # distinct keys in the runs (pending not counted)
        self._base: int | None = None

    @classmethod
    def for_dedupe_buffer(
        cls, buffer_bytes: int, load_factor: float = DEFAULT_LOAD_FACTOR
    ) -> OffsetMap:
        """A map sized exactly as Kafka sizes one cleaner thread's SkimpyOffsetMap.

        Kafka's rule, not ours: the map holds as many keys as a broker's would in ``buffer_bytes``
        (24 bytes a slot), whatever this map's own bytes a key.

        Args:
            buffer_bytes: the thread's share, ``log.cleaner.dedupe.buffer.size / log.cleaner.threads``
                (capped at 2**31 - 1 bytes, as Kafka does).
            load_factor: ``log.cleaner.io.buffer.load.factor``.

        Returns:
            A map of ``slots = floor(buffer_bytes / 24)`` that stops at
            ``floor(slots * load_factor)`` entries.

        Raises:
            ConfigError: a load factor outside (0, 1] (above 1 Kafka's map throws once all slots
                are used), or a buffer that holds no key at all (Kafka's cleaner would never
                advance; its ``slots * load_factor > 1`` check is a Java ``assert``, off by default).
        """
        if not 0.0 < load_factor <= 1.0:
            raise ConfigError(
                f"log.cleaner.io.buffer.load.factor; expected a value in (0, 1], found {load_factor}"
            )
        slots = max(0, min(buffer_bytes, KAFKA_MAX_MAP_MEMORY)) // KAFKA_BYTES_PER_ENTRY
        if int(slots * load_factor) < 1:
            raise ConfigError(
                f"dedupe buffer too small to hold one key; expected floor(slots * load factor) >= 1, "
                f"found {slots} slots ({buffer_bytes} bytes) * {load_factor}"
            )
        offset_map = cls(max_entries=int(slots * load_factor))
        offset_map.slots = slots
        return offset_map

    @property
    def size(self) -> int:
        """Distinct keys in the map."""
        self._flush()
        return self._size

    @property
    def full(self) -> bool:
        """True once the next put would be refused (bounded maps only)."""
        return self.max_entries is not None and self.size >= self.max_entries

    def put_batch(self, hi: U64, lo: U64, offsets: I64) -> int:
        """Put keys in array order (a later put of a key overwrites its offset).

        Args:
            hi: first digest words (``key_digests``).
            lo: second digest words.
            offsets: the records' offsets, increasing across calls.

        Returns:
            How many leading puts were accepted: fewer than ``len(offsets)`` only when a bounded map
            filled up (Kafka checks ``size < max_entries`` before every put, even of a present key).
            ``latest_offset`` is set to the last accepted offset.

        Raises:
            ValueError: the three columns differ in length or are not 1-D.
        """
        h, lo_ = _digest_columns(hi, lo)
        off = np.ascontiguousarray(offsets, dtype=np.int64)
        if off.shape != h.shape:
            raise ValueError(f"one offset per digest expected; found {off.shape} for {h.shape}")
        if len(off) == 0:
            return 0
        limit = self.max_entries
        accepted = len(off) if limit is None else self._accept_count(h, lo_, limit)
        if accepted == 0:
            return 0
        self._pending.append((h[:accepted].copy(), lo_[:accepted].copy(), off[:accepted].copy()))
        self._pending_puts += accepted
        self.latest_offset = int(off[accepted - 1])
        if self._pending_puts >= max(_FLUSH_MIN_PUTS, self._size // _FLUSH_SHARE):
            self._flush()
        return accepted

    def get_batch(self, hi: U64, lo: U64) -> I64:
        """Latest offset of each key, -1 where the key is absent.

        Args:
            hi: first digest words.
            lo: second digest words.

        Returns:
            An int64 array, one offset per query.
        """
        query = _Query.of(*_digest_columns(hi, lo))
        self._flush()
        result = np.full(len(query.key), -1, dtype=np.int64)
        for run in self._runs:
            _, found, rest = run.lookup(query)
            np.copyto(result, run.offsets_of(rest), where=found)  # structured [mask] is slow
        return result

    def latest_offsets_sorted(self) -> I64:
        """Every key's latest offset, ascending (one per key)."""
        self._flush()
        if len(self._runs) == 1:
            latest = self._runs[0].offsets()
        else:
            latest = np.concatenate(
                [run.offsets() for run in self._runs] or [np.empty(0, np.int64)]
            )
        latest.sort()
        return latest

    def freeze(self) -> None:
        """End of build: merge everything into one run so lookups search once."""
        self._flush()
        self._merge_tail(everything=True)

    def memory_bytes(self) -> int:
        """Bytes of array data the map holds now (runs, directories, pending puts)."""
        pending = sum(h.nbytes + lo.nbytes + o.nbytes for h, lo, o in self._pending)
        return pending + sum(run.nbytes() for run in self._runs)

    def _accept_count(self, hi: U64, lo: U64, limit: int) -> int:
        """How many leading puts Kafka's check-before-put rule lets in."""
        if self._size + self._pending_puts + len(hi) <= limit:
            return len(hi)  # even if every put were a new key, none would be refused
        self._flush()
        order, starts = _key_groups(hi, lo & _compared_bits())
        new = np.zeros(len(hi), dtype=bool)
        new[np.minimum.reduceat(order, starts)] = True  # first put of each key in the batch
        query = _Query.of(hi, lo)
        for run in self._runs:
            new &= ~run.find(query)[1]
        new_before: I64 = np.cumsum(new) - new  # distinct new keys put before each position
        return int(np.searchsorted(new_before, limit - self._size, side="left"))

    def _flush(self) -> None:
        """Fold pending puts into the runs (last put of each key wins)."""
        if not self._pending:
            return
        hi, lo, off = (np.concatenate(cols) for cols in zip(*self._pending))
        self._pending, self._pending_puts = [], 0
        self._base = int(off[0]) if self._base is None else self._base
        lo &= _compared_bits()  # in place: the flush's temporaries are the build's peak
        order, starts = _key_groups(hi, lo)
        last = np.maximum.reduceat(order, starts)  # the latest put of each key, sorted by key
        del order, starts
        hi, lo, off = hi[last], lo[last], off[last]
        query = _Query.of(hi, lo)
        for run in self._runs:  # the queries are sorted: a big batch is cheaper to merge-join
            big = len(hi) * 8 >= len(run)
            pos, found = run.find_sorted(query) if big else run.find(query)
            if found.any():
                run.set_offsets(pos[found], off[found])
                keep = ~found
                hi, lo, off, query = hi[keep], lo[keep], off[keep], query.take(keep)
        if len(hi):
            self._runs.append(_Run.encode(hi, lo, off, self._base))
            self._size += len(hi)
        self._merge_tail(everything=False)

    def _merge_tail(self, *, everything: bool) -> None:
        runs = self._runs  # newest into previous while >= 1/_MERGE_RATIO of it
        while len(runs) > 1 and (everything or _MERGE_RATIO * len(runs[-1]) >= len(runs[-2])):
            newer = runs.pop()
            runs[-1] = _merge_runs(runs[-1], newer)
