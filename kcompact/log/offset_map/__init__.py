"""The cleaner's dedupe map: key digest -> latest offset over the dirty range (``Cleaner.buildOffsetMap``).

Same semantics as Kafka's ``SkimpyOffsetMap`` (a later put of a key wins, every put sets
``latest_offset``, Kafka's capacity rule on request), but fed whole batches: all per-key work is
numpy, with no Python object per key. ``key_digests`` hashes keys with XXH3-128 (seed 0; per key
from Python, 119 ns where ``md5(k).digest()`` takes 340) into ``hi``/``lo``: digest bits 0-63 and
64-127, read big-endian per ``DIGEST_LAYOUT``. Pass 1 hashes in C instead, inside the record scan
(``records.scan.scan_key_digests``, the vendored xxHash: a few ns a key), to the same digests.

Storage (``runs``: what a run is and how two merge): 15 bytes a key plus a directory of at most 1 (at most 16 in
all), in a few *runs* (no key in two), each sorted by digest under a bucket directory that implies
the first ``IMPLIED_BITS`` digest bits, keeping ``STORED_BITS`` more and the offset a key.

Collisions: a lookup compares ``COMPARED_BITS`` = 100 digest bits (12 implied + 88 stored), so
keys whose XXH3-128 digests agree on bits 0-99 are one key (the later put wins), where Kafka's MD5
map needs all 128 bits to agree. 16 bytes cannot hold keys as distinct as 128-bit digests in a
layout one can search: N random 128-bit digests carry ``log2 C(2**128, N) / N ~ 129.44 - log2 N``
bits a key and which key has which offset at least ``log2(N!) / N ~ log2 N - 1.44`` more, i.e.
128 bits a key with perfect entropy coding and no room for a directory, fixed-width fields or the
offsets' own spread. We chose 16 bytes (the design goal) and 100 bits. Chance that two distinct
keys of one pass's map are taken for one (~ N**2 / 2 / 2**bits; the older one's records go)::

    keys    100 bits (this map)   96 bits (12-byte digest + offset)   128 bits (Kafka's MD5)
    5M      9.9e-18               1.6e-16                             3.7e-26
    100M    3.9e-15               6.3e-14                             1.5e-23

and a key only in the clean part of the log is dropped with chance N / 2**100 each (8e-23 at 100M
map keys). Both sit far below the chance that such a pass meets an unrecoverable disk read error
(~1e-15 a bit read: ~1e-3 over 100 GB) and the 2**-32 chance that CRC32C misses a corrupted
batch, which Kafka accepts. (The previous layout kept all 128 bits, at 20.5-21 bytes a key.)

Build: puts append to a *pending* list (the caller's arrays when it gives them up, else copies); a
flush (at max(2**20, size / 32) puts, which bounds its temporaries, 18 bytes a put to sort and 27 a
key for the result, to ~1.5 bytes a key) keeps each key's last put (``_flush_columns``: a C bucket
sort on the top bits of ``hi`` reading the pending chunks where they are, numpy's argsort as the
reference), overwrites in place the offsets of keys a run holds (``_fold_into``: a bisection of each
key's bucket in C, find/find_sorted as the reference) and makes a run of the new keys; the newest run
merges into the previous one while at least a quarter its size (``merge_runs``: front to back in C,
giving the inputs' consumed pages back as it goes; numpy's weave as the reference). ``freeze`` merges
all runs into one. Each C kernel (``_runs.c``, through :mod:`~kcompact.log.offset_map.accel`) writes what its
reference writes, or declines before writing anything.

Capacity: Kafka checks ``entries < floor(slots * load_factor)`` before every put, even of a key it
holds. ``put_batch`` takes a batch blind while ``size + pending + len(batch) <= max_entries``, else
it flushes, counts the new keys before each position and accepts the prefix Kafka would.

``scripts/bench_offset_map.py N`` (random digests, batches of 1000, put time includes ``freeze``;
then every key and as many absent ones looked up; hashing excluded; build peak: RSS growth to the
end of ``freeze`` over the frozen map, which includes ~100 MiB of flush floor, allocator and bench
chunks, whatever the map's size; shared 2-core VM)::

    keys   bytes/key   put keys/s   freeze   get keys/s   build peak / map   peak RSS
    1M     15.52       19M          0.04 s   7.1M         4.8                108 MiB
    10M    15.84       5.7M         0.24 s   6.1M         1.64               465 MiB
    100M   15.67       4.4M         1.2 s    5.4M         1.27               4.0 GiB

Same day, before the flush, fold and merge kernels: 1M put at 7.3M/s (0.12 s freeze), build peak 5.8,
123 MiB; 10M at 3.4M/s (0.27 s), build peak 1.76, 479 MiB (10M's peak RSS is
``latest_offsets_sorted``'s, after the build, and varies by ~30 MiB between runs); 100M at 1.9M/s
(1.6 s freeze), build peak 1.31. The runs' big arrays live in *private* anonymous mappings: the 1.31
was measured when they were shared, where the pages a merge gives back left the process's RSS but not
the machine's memory; the 1.27 above is with private ones, which give them back for real (the 100M
peak RSS is the lookups', after the build).
The previous layout (all 128 bits): 100M keys at 20.67 bytes a key, put at 1.8M/s (9.8 s freeze),
got at 5.3M/s, build peak 2.36, peak RSS 4.4 GiB. The clean bench's map work (``--clean-shape``: 2M
records over 500k keys, 200 a batch): put 0.13 s, get 0.61 s (0.19 s and 0.62 s before the kernels,
same day).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import xxhash

from kcompact.errors import ConfigError
from kcompact.log.offset_map import accel, runs
from kcompact.log.offset_map.runs import (
    I64,
    U64,
    Index,
    Query,
    Run,
    compared_mask,
    merge_runs,
)
from kcompact.records.varint import INT32_MAX

__all__ = [
    "DEFAULT_LOAD_FACTOR",
    "DIGEST_LAYOUT",
    "KAFKA_BYTES_PER_ENTRY",
    "KAFKA_MAX_MAP_MEMORY",
    "OffsetMap",
    "digest_bytes",
    "key_digests",
    "thread_buffer",
]

DIGEST_LAYOUT = np.dtype([
    ("hi", ">u8"),  # digest bytes 0-7, big-endian: buckets and sorts the map
    ("lo", ">u8"),  # digest bytes 8-15, big-endian: bits 64-99 are stored, 100-127 dropped
])  # fmt: skip
"""One XXH3-128 digest in its canonical byte order, split into the two words callers pass."""

KAFKA_BYTES_PER_ENTRY = 24
"""SkimpyOffsetMap slot: 16-byte MD5 digest + 8-byte offset."""
KAFKA_MAX_MAP_MEMORY = INT32_MAX
"""Kafka caps each cleaner thread's map memory at Integer.MAX_VALUE bytes."""
DEFAULT_LOAD_FACTOR = 0.9
"""``log.cleaner.io.buffer.load.factor`` default."""



def thread_buffer(dedupe_buffer_size: int, cleaner_threads: int) -> int:
    """One cleaner thread's dedupe buffer, as Kafka's LogCleaner sizes it: the total over
    ``log.cleaner.threads``, at most :data:`KAFKA_MAX_MAP_MEMORY`. With no thread (``threads=0``: the
    broker never cleans; kcompact still may) the whole buffer is the one map's."""
    share = dedupe_buffer_size // cleaner_threads if cleaner_threads > 0 else dedupe_buffer_size
    return min(share, KAFKA_MAX_MAP_MEMORY)


_FLUSH_MIN_PUTS = 1 << 20  # pending puts before a flush; grows to size / _FLUSH_SHARE
_FLUSH_SHARE = 32
_MERGE_RATIO = 4  # the newest run merges into the previous one once at least 1/4 its size

_hash128 = xxhash.xxh3_128_digest  # module global so tests can force collisions


def digest_bytes(keys: Sequence[bytes | memoryview]) -> bytes:
    """The keys' digests back to back, 16 bytes each in :data:`DIGEST_LAYOUT` (what the C scan
    ``records.scan.scan_key_digests`` returns for a batch's keys).

    Args:
        keys: the record keys (bytes or any buffer); never None.
    """
    return b"".join(map(_hash128, keys))


def key_digests(keys: Sequence[bytes | memoryview]) -> tuple[U64, U64]:
    """Hash keys into the map's 128-bit digests.

    Args:
        keys: the record keys (bytes or any buffer); never None.

    Returns:
        ``(hi, lo)``: two uint64 arrays, the digest's first and last 8 bytes read big-endian.
    """
    packed = np.frombuffer(digest_bytes(keys), dtype=DIGEST_LAYOUT)
    return packed["hi"].astype(np.uint64), packed["lo"].astype(np.uint64)


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


RunParts = Callable[[list[Callable[[], Any]]], list[Any]]
"""Runs tasks at once and returns their results in order (``OffsetMap.run_parts``: the round's threads)."""

SPLIT_FLUSH_PUTS = 1 << 18
"""Pending puts from which a map with ``run_parts`` flushes in :data:`FLUSH_PARTS` parts at once."""
FLUSH_PARTS = 2
_FLUSH_DTYPES = (np.uint64, np.uint64, np.uint16, np.uint8, np.int64)  # flush_puts' columns


def _flush_columns(pending: list[tuple[U64, U64, I64]], run_parts: RunParts | None = None) -> tuple[Query, I64]:
    """For each distinct key of the pending puts (equal on the compared bits), in ascending digest
    order, its digest (as a ``Query``) and the offset of its last put; empties ``pending``. The C
    kernel (``_runs.c`` ``flush_puts``: a bucket sort on the top bits of ``hi``, reading
    the chunks where they are) when enabled, else :func:`_flush_columns_reference`; the two are
    equal on every input. With ``run_parts`` and enough puts, the kernel sorts the keys of each
    top-bit half at once (each part's keys all sort before the next part's: the columns join in order)."""
    bits = runs.IMPLIED_BITS  # read late: tests shrink it
    if run_parts is not None and sum(len(chunk[2]) for chunk in pending) >= SPLIT_FLUSH_PUTS:
        parts = run_parts([partial(accel.flush_puts, pending, bits, part, FLUSH_PARTS)
                           for part in range(FLUSH_PARTS)])
        if all(part is not None for part in parts):
            pending.clear()  # the puts go before the joined columns come: the build's peak stays where it was
            return _flush_result(tuple(b"".join(part[j] for part in parts) for j in range(len(_FLUSH_DTYPES))))
    found = accel.flush_puts(pending, bits)
    if found is None:
        return _flush_columns_reference(pending)
    pending.clear()
    return _flush_result(found)


def _flush_result(columns: Sequence[bytes]) -> tuple[Query, I64]:
    """``flush_puts``' native columns as the flush's query and offsets (no copy)."""
    hi, key, mid, low, off = (np.frombuffer(column, dtype=dtype) for column, dtype in zip(columns, _FLUSH_DTYPES,
                                                                                           strict=True))
    return Query(hi, key, mid, low), off


def _flush_columns_reference(pending: list[tuple[U64, U64, I64]]) -> tuple[Query, I64]:
    """:func:`_flush_columns` in numpy."""
    empty = (np.empty(0, np.uint64), np.empty(0, np.uint64), np.empty(0, np.int64))
    hi, lo, off = (np.concatenate(cols) for cols in zip(empty, *pending, strict=True))
    pending.clear()  # the chunks go before the sort's temporaries come: the build's peak
    lo &= compared_mask()
    last = _last_puts_reference(hi, lo)
    return Query.of(hi[last], lo[last]), off[last]


def _fold_into(run: Run, query: Query, off: I64) -> tuple[Query, I64]:
    """Give the keys ``run`` holds their new offsets; the other keys (``query`` sorted, without
    duplicates), with their offsets. The C kernel (``fold_into_run``: a bisection of each key's
    bucket) when enabled and the run can hold the offsets as they are, else
    :func:`_fold_into_reference`."""
    folded = accel.fold_into_run(run.columns(), (query.top, query.key, query.mid, query.low), off)
    if folded is None:
        return _fold_into_reference(run, query, off)
    _, top, key, mid, low, rest_off = folded
    rest = Query(
        np.frombuffer(top, dtype=np.uint64), np.frombuffer(key, dtype=np.uint64),
        np.frombuffer(mid, dtype=np.uint16), np.frombuffer(low, dtype=np.uint8),
    )
    return rest, np.frombuffer(rest_off, dtype=np.int64)


def _fold_into_reference(run: Run, query: Query, off: I64) -> tuple[Query, I64]:
    """:func:`_fold_into` in numpy (sorted queries: a big batch is cheaper to merge-join)."""
    big = len(off) * 8 >= len(run)
    pos, found = run.find_sorted(query) if big else run.find(query)
    if found.any():
        run.set_offsets(pos[found], off[found])
        keep = ~found
        off, query = off[keep], query.take(keep)
    return query, off


def _last_puts_reference(hi: U64, lo: U64) -> Index:
    """For each distinct key, in ascending ``(hi, lo)`` order, the position of its last put."""
    if len(hi) == 0:
        return np.empty(0, dtype=np.int64)
    order, starts = _key_groups(hi, lo)
    last: Index = np.maximum.reduceat(order, starts)
    return last


_DENSE_SPAN = 16  # a span of offsets up to this many times their count is sorted by marking it


def _sorted_distinct(offsets: I64) -> I64:
    """``offsets`` ascending; when they are distinct and dense (a map's latest offsets mostly are:
    one per key, a record per offset) by marking a byte per offset of their span, several times
    faster than a sort. Sorts in place otherwise."""
    if len(offsets):
        low, span = int(offsets.min()), int(offsets.max()) - int(offsets.min()) + 1
        if span <= _DENSE_SPAN * len(offsets):
            seen = np.zeros(span, dtype=bool)
            seen[offsets - low] = True
            marked: I64 = np.flatnonzero(seen).astype(np.int64)
            if len(marked) == len(offsets):  # distinct; else a repeated offset: sort them
                marked += low
                return marked
    offsets.sort()
    return offsets


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
        self._runs: list[Run] = []
        self._pending: list[tuple[U64, U64, I64]] = []
        self._pending_puts = 0  # sum of the pending columns' lengths
        self.run_parts: RunParts | None = None  # how a large flush runs its parts at once; None: one part, here

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
        return self._stored

    @property
    def _stored(self) -> int:
        """Distinct keys in the runs (pending puts not counted)."""
        return sum(map(len, self._runs))

    @property
    def full(self) -> bool:
        """True once the next put would be refused (bounded maps only)."""
        return self.max_entries is not None and self.size >= self.max_entries

    def put_batch(self, hi: U64, lo: U64, offsets: I64, *, owned: bool = False) -> int:
        """Put keys in array order (a later put of a key overwrites its offset).

        Args:
            hi: first digest words (``key_digests``).
            lo: second digest words.
            offsets: the records' offsets, increasing across calls.
            owned: the caller gives the three arrays up (never writes them again): the map keeps
                them until its next flush instead of a copy.

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
        kept = (h[:accepted], lo_[:accepted], off[:accepted])
        self._pending.append(kept if owned else (kept[0].copy(), kept[1].copy(), kept[2].copy()))
        self._pending_puts += accepted
        self.latest_offset = int(off[accepted - 1])
        if self._pending_puts >= max(_FLUSH_MIN_PUTS, self._stored // _FLUSH_SHARE):
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
        query = Query.of(*_digest_columns(hi, lo))
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
        return _sorted_distinct(latest)

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
        if self._stored + self._pending_puts + len(hi) <= limit:
            return len(hi)  # even if every put were a new key, none would be refused
        self._flush()
        order, starts = _key_groups(hi, lo & compared_mask())
        new = np.zeros(len(hi), dtype=bool)
        new[np.minimum.reduceat(order, starts)] = True  # first put of each key in the batch
        query = Query.of(hi, lo)
        for run in self._runs:
            new &= ~run.find(query)[1]
        new_before: I64 = np.cumsum(new) - new  # distinct new keys put before each position
        return int(np.searchsorted(new_before, limit - self._stored, side="left"))

    def _flush(self) -> None:
        """Fold pending puts into the runs (last put of each key wins)."""
        if not self._pending:
            return
        pending, self._pending, self._pending_puts = self._pending, [], 0
        base = self._runs[0].base if self._runs else int(pending[0][2][0])  # every run shares the first's
        query, off = _flush_columns(pending, self.run_parts)  # the latest put of each key, sorted by key
        for run in self._runs:
            query, off = _fold_into(run, query, off)
        if len(off):
            self._runs.append(Run.encode(query, off, base))
        self._merge_tail(everything=False)

    def _merge_tail(self, *, everything: bool) -> None:
        runs = self._runs  # newest into previous while >= 1/_MERGE_RATIO of it
        while len(runs) > 1 and (everything or _MERGE_RATIO * len(runs[-1]) >= len(runs[-2])):
            newer = runs.pop()
            runs[-1] = merge_runs(runs[-1], newer)
