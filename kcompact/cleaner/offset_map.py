"""The cleaner's dedupe map: key digest -> latest offset over the dirty range (spec §6.6, §9).

Same semantics as Kafka's ``SkimpyOffsetMap`` (a later put of a key wins, every put sets
``latest_offset``, Kafka's capacity rule on request), but fed whole batches: all per-key work is
numpy, with no Python object per key.

Digest: XXH3-128 (seed 0) of the key, canonical big-endian, split per ``DIGEST_LAYOUT`` into ``hi``
and ``lo`` (uint64). All 128 bits are stored and compared, so keys collide only on a full 128-bit
match, as with Kafka's MD5 (whose engineered collisions are therefore not reproduced). Per key from
Python (1M keys; 100-byte keys in brackets): ``md5(k).digest()`` 340 ns (383), ``blake2b`` with
``digest_size=16`` 359 (375), ``xxh3_128_intdigest`` 100 (102; Python ints), ``xxh3_128_digest``
mapped and joined 114 (127), 119 (130) with the split into arrays: that is ``key_digests``.

Layout: a few *runs*, each three arrays sorted by ``hi`` (keys sharing ``hi`` stay adjacent and are
told apart by ``lo``), no key in two runs. ``off`` is ``offset - base`` as uint32 (``base``: first
offset put) while that fits, else int64: 20 bytes per key (24 if offsets span 2**32; 16 would need
32 digest bits implied by position, a 2**32-entry directory). Puts append to a *pending* list. A
flush (at max(2**18, size / 4) puts) argsorts it, keeps each key's last put, overwrites in place the
offsets of keys a run holds, and makes a run of the new keys; runs merge (the smaller woven into
the larger at its ``searchsorted`` positions) while the newer is at least half the older. Lookups
find ``hi`` via a per-run *directory* (start of each top-k-bit bucket of ~8-16 keys, <= 1 byte per
key, built on first use) plus fixed vectorised bisection steps over 8192-query chunks: 56 ns per
query (10M keys, batches of 1000) where ``np.searchsorted`` takes 500.

Capacity: Kafka checks ``entries < floor(slots * load_factor)`` before every put, even of a key it
holds. ``put_batch`` takes a batch blind while ``size + pending + len(batch) <= max_entries``, else
it flushes, counts the new keys before each position and accepts the prefix Kafka would.

``scripts/bench_offset_map.py N`` (random digests, batches of 1000; after ``freeze`` every key and
as many absent ones are looked up; hashing, 7.6-9.6M keys/s, excluded; shared 2-core VM)::

    keys   bytes/key (frozen)   put keys/s   freeze    get keys/s   peak RSS
    1M     20.5                 8.8M         0.04 s    8.6M         108 MiB
    10M    20.8                 3.4M         0.3 s     5.4M         582 MiB
    100M   20.7                 1.4M         17 s      3.2M         4.4 GiB

Bounded maps cost the same; updates to a map 500 keys short of full (each batch counted exactly)
run at 2M keys/s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import xxhash

from kcompact.errors import ConfigError

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
Index = npt.NDArray[np.intp]
Mask = npt.NDArray[np.bool_]

DIGEST_LAYOUT = np.dtype([
    ("hi", ">u8"),  # digest bytes 0-7, big-endian: sorts and buckets the map
    ("lo", ">u8"),  # digest bytes 8-15, big-endian: tells apart keys sharing ``hi``
])  # fmt: skip
"""One XXH3-128 digest in its canonical byte order, split into the two stored words."""

KAFKA_BYTES_PER_ENTRY = 24
"""SkimpyOffsetMap slot: 16-byte MD5 digest + 8-byte offset."""
KAFKA_MAX_MAP_MEMORY = 2**31 - 1
"""Kafka caps each cleaner thread's map memory at Integer.MAX_VALUE bytes."""
DEFAULT_LOAD_FACTOR = 0.9
"""``log.cleaner.io.buffer.load.factor`` default."""

_FLUSH_MIN_PUTS = 1 << 18  # pending puts before a flush; grows to size / 4
_DIRECTORY_MIN_KEYS = 1 << 16  # smaller runs fit in cache: plain searchsorted
_BUCKET_KEYS = 8  # directory buckets hold 8-16 keys
_LOOKUP_CHUNK = 8192  # queries per vectorised bisection pass (cache-sized temporaries)
_OFFSET_DELTA_LIMIT = 2**32

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


@dataclass(frozen=True, slots=True)
class _Directory:
    """Where each bucket of keys sharing their top ``64 - shift`` bits starts in a run."""

    starts: I64  # 2**k + 1 entries; bucket b is run[starts[b]:starts[b + 1]]
    shift: np.uint64
    steps: int  # bisection steps that cover the largest bucket


def _build_directory(hi: U64) -> _Directory:
    bits = max(1, (len(hi) // _BUCKET_KEYS).bit_length() - 1)
    shift = np.uint64(64 - bits)
    starts = np.empty((1 << bits) + 1, dtype=np.int64)
    starts[:-1] = np.searchsorted(hi, np.arange(1 << bits, dtype=np.uint64) << shift)
    starts[-1] = len(hi)
    return _Directory(starts, shift, int(np.diff(starts).max()).bit_length())


def _directory_search(d: _Directory, hi: U64, queries: U64) -> I64:
    """Leftmost position with ``hi >= query`` (== ``np.searchsorted(hi, queries)``)."""
    out = np.empty(len(queries), dtype=np.int64)
    last = len(hi) - 1
    for at in range(0, len(queries), _LOOKUP_CHUNK):
        q = queries[at : at + _LOOKUP_CHUNK]
        bucket = (q >> d.shift).astype(np.intp)
        low, high = d.starts[bucket], d.starts[bucket + 1]
        for _ in range(d.steps):
            mid = (low + high) >> 1
            right = (mid < high) & (hi[np.minimum(mid, last)] < q)
            low = np.where(right, mid + 1, low)
            high = np.where(right, high, mid)
        out[at : at + len(q)] = low
    return out


class _Run:
    """Sorted, duplicate-free keys with their latest offsets (offsets mutable, keys not)."""

    __slots__ = ("_directory", "base", "hi", "lo", "off")

    def __init__(self, hi: U64, lo: U64, off: npt.NDArray[np.uint32] | I64, base: int) -> None:
        self.hi, self.lo, self.off, self.base = hi, lo, off, base
        self._directory: _Directory | None = None

    @classmethod
    def encode(cls, hi: U64, lo: U64, offsets: I64, base: int) -> _Run:
        delta = offsets - base
        if len(delta) and delta.min() >= 0 and delta.max() < _OFFSET_DELTA_LIMIT:
            return cls(hi, lo, delta.astype(np.uint32), base)
        return cls(hi, lo, offsets.astype(np.int64), base)

    def __len__(self) -> int:
        return len(self.hi)

    def nbytes(self) -> int:
        directory = 0 if self._directory is None else self._directory.starts.nbytes
        return self.hi.nbytes + self.lo.nbytes + self.off.nbytes + directory

    def offsets(self, pos: Index | None = None) -> I64:
        """Absolute offsets at ``pos`` (all of them when None)."""
        raw = self.off if pos is None else self.off[pos]
        if raw.dtype == np.uint32:
            return raw.astype(np.int64) + self.base
        return raw.astype(np.int64, copy=pos is None)

    def set_offsets(self, pos: Index, offsets: I64) -> None:
        if self.off.dtype == np.uint32:
            delta = offsets - self.base
            if len(delta) and (delta.min() < 0 or delta.max() >= _OFFSET_DELTA_LIMIT):
                self.off = self.offsets()
            else:
                self.off[pos] = delta
                return
        self.off[pos] = offsets

    def find(self, hi: U64, lo: U64, presorted: bool = False) -> tuple[I64, Mask]:
        """Positions of the query keys and whether each is present."""
        n = len(self.hi)
        if n == 0:
            return np.zeros(len(hi), dtype=np.int64), np.zeros(len(hi), dtype=bool)
        pos = self._locate(hi, presorted)
        at = np.minimum(pos, n - 1)
        same_hi = self.hi[at] == hi
        found = same_hi & (self.lo[at] == lo)
        for i in np.flatnonzero(same_hi & ~found).tolist():  # hi shared by several keys
            j = int(pos[i]) + 1
            while j < n and self.hi[j] == hi[i] and not found[i]:
                pos[i], found[i] = j, self.lo[j] == lo[i]
                j += 1
        return pos, found

    def _locate(self, hi: U64, presorted: bool) -> I64:
        n = len(self.hi)
        if n < _DIRECTORY_MIN_KEYS or (presorted and len(hi) * 8 >= n):
            return np.searchsorted(self.hi, hi).astype(np.int64, copy=False)
        if self._directory is None:
            self._directory = _build_directory(self.hi)
        return _directory_search(self._directory, self.hi, hi)


def _merge_runs(a: _Run, b: _Run) -> _Run:
    """Union of two runs without common keys, by weaving the smaller into the larger."""
    if len(a) < len(b):
        a, b = b, a
    at = np.searchsorted(a.hi, b.hi) + np.arange(len(b))
    from_a = np.ones(len(a) + len(b), dtype=bool)
    from_a[at] = False
    a_off, b_off = (a.off, b.off) if a.off.dtype == b.off.dtype else (a.offsets(), b.offsets())

    def weave(x: npt.NDArray[np.generic], y: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
        out = np.empty(len(from_a), dtype=x.dtype)
        out[at] = y
        out[from_a] = x
        return out

    return _Run(weave(a.hi, b.hi), weave(a.lo, b.lo), weave(a_off, b_off), a.base)  # type: ignore[arg-type]


def _key_groups(hi: U64, lo: U64) -> tuple[Index, Index]:
    """An order sorting the keys, and where each group of equal keys starts in it (the order
    inside a group is arbitrary: callers pick by put position, i.e. the order's values)."""
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
        if self._pending_puts >= max(_FLUSH_MIN_PUTS, self._size // 4):
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
        h, lo_ = _digest_columns(hi, lo)
        self._flush()
        result = np.full(len(h), -1, dtype=np.int64)
        for run in self._runs:
            pos, found = run.find(h, lo_)
            result[found] = run.offsets(pos[found])
        return result

    def latest_offsets_sorted(self) -> I64:
        """Every key's latest offset, ascending (one per key)."""
        self._flush()
        if not self._runs:
            return np.empty(0, dtype=np.int64)
        return np.sort(np.concatenate([run.offsets() for run in self._runs]))

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
        order, starts = _key_groups(hi, lo)
        new = np.zeros(len(hi), dtype=bool)
        new[np.minimum.reduceat(order, starts)] = True  # first put of each key in the batch
        for run in self._runs:
            new &= ~run.find(hi, lo)[1]
        new_before: I64 = np.cumsum(new) - new  # distinct new keys put before each position
        return int(np.searchsorted(new_before, limit - self._size, side="left"))

    def _flush(self) -> None:
        """Fold pending puts into the runs (last put of each key wins)."""
        if not self._pending:
            return
        hi, lo, off = (np.concatenate(cols) for cols in zip(*self._pending))
        self._pending, self._pending_puts = [], 0
        self._base = int(off[0]) if self._base is None else self._base
        order, starts = _key_groups(hi, lo)
        last = np.maximum.reduceat(order, starts)  # the latest put of each key, sorted by key
        hi, lo, off = hi[last], lo[last], off[last]
        for run in self._runs:
            pos, found = run.find(hi, lo, presorted=True)
            if found.any():
                run.set_offsets(pos[found], off[found])
                keep = ~found
                hi, lo, off = hi[keep], lo[keep], off[keep]
        if len(hi):
            self._runs.append(_Run.encode(hi, lo, off, self._base))
            self._size += len(hi)
        self._merge_tail(everything=False)

    def _merge_tail(self, *, everything: bool) -> None:
        runs = self._runs  # merge the newest run into the previous one while >= half its size
        while len(runs) > 1 and (everything or 2 * len(runs[-1]) >= len(runs[-2])):
            newer = runs.pop()
            runs[-1] = _merge_runs(runs[-1], newer)
