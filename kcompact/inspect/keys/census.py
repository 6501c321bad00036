"""Pass 2 of ``inspect keys``: every count of the report, with numpy over chunks of records.

Why: counting in Python per record is too slow for a log of tens of millions of records, so live
data records are buffered as columns (:class:`kcompact.inspect.keys.batches.BatchRecords`) and
counted :data:`~kcompact.inspect.keys.batches.CHUNK_RECORDS` at a time. A keyed record is a
duplicate when its offset is below its key's latest in pass 1's map
(:func:`kcompact.inspect.keys.key_map.map_keys`). Counted: records and batches, consumer-visible
records (read_uncommitted: ``[log start, HW)``; read_committed: ``[log start, LSO)`` without
aborted data), keys and duplicates with their bytes, tombstones by delete horizon, transaction
markers, keys the default partitioner would place elsewhere, and exact duplicate counts per key
digest (24 bytes a duplicated key) for the top keys.

For a ``__consumer_offsets`` partition each keyed record's consumer group is named by decoding its
key (:mod:`kcompact.records.messages.consumer_offsets`), and records and bytes, all and duplicate, and live
offset-commit keys are totalled per group.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kcompact.errors import CorruptDataError
from kcompact.inspect.context import CrcTally
from kcompact.inspect.keys.batches import (
    ABORTED,
    CHUNK_RECORDS,
    CONTROL,
    BatchRecords,
    batch_records,
)
from kcompact.inspect.keys.model import (
    ConsumerGroups,
    GroupCount,
    KeyCounts,
    OpenTransaction,
    PartitionerCheck,
    RecordCounts,
    TombstoneGroup,
    TombstoneReport,
    TransactionReport,
)
from kcompact.inspect.keys.partitioner import default_partition
from kcompact.log.offset_map import OffsetMap, key_digests
from kcompact.log.rules.ranges import CleanableRange
from kcompact.log.rules.transactions import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT
from kcompact.log.state.log_state import LogState
from kcompact.records.messages.consumer_offsets import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_offsets_key,
)

U64 = npt.NDArray[np.uint64]
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
GROUP_KEY_CACHE = 1 << 16  # decoded offsets keys remembered (a group commits the same keys again)


class _DigestCounter:
    """Exact occurrences per key digest: sorted ``hi``, ``lo``, ``counts`` (24 bytes a key),
    merged in batches of at least a million digests so the sorting stays O(n log n) overall."""

    def __init__(self) -> None:
        self._hi, self._lo = np.empty(0, np.uint64), np.empty(0, np.uint64)
        self._counts = np.empty(0, np.int64)
        self._pending: list[tuple[U64, U64]] = []
        self._pending_count = 0

    def add(self, hi: U64, lo: U64) -> None:
        if len(hi):
            self._pending.append((hi, lo))
            self._pending_count += len(hi)
            if self._pending_count >= max(1 << 20, len(self._hi)):
                self._merge()

    def top(self, n: int) -> list[tuple[int, int, int]]:
        """The ``n`` most frequent digests as (hi, lo, count), ties in digest order."""
        self._merge()
        order = np.lexsort((self._lo, self._hi, -self._counts))[:n]
        return list(zip(self._hi[order].tolist(), self._lo[order].tolist(),
                        self._counts[order].tolist(), strict=True))

    def _merge(self) -> None:
        if not self._pending:
            return
        hi = np.concatenate([self._hi, *(p[0] for p in self._pending)])
        lo = np.concatenate([self._lo, *(p[1] for p in self._pending)])
        counts = np.concatenate([self._counts, np.ones(self._pending_count, np.int64)])
        self._pending, self._pending_count = [], 0
        order = np.lexsort((lo, hi))
        hi, lo, counts = hi[order], lo[order], counts[order]
        starts = np.flatnonzero(np.r_[True, (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])])
        self._hi, self._lo = hi[starts], lo[starts]
        self._counts = np.add.reduceat(counts, starts)


class Census:
    """Pass 2: every count of the report, with numpy over chunks of :data:`CHUNK_RECORDS`.

    Feed every batch of :func:`kcompact.inspect.keys.batches.iter_batches` to :meth:`add`, then call
    :meth:`flush` once, then read the report parts.

    Args:
        state: the loaded partition.
        rng: its cleanable range (log start, HW, LSO and first dirty offset).
        log_map: pass 1's map of key digest -> latest offset.
        partitions: the topic's partition count for the partitioner check, or None.
    """

    def __init__(self, state: LogState, rng: CleanableRange, log_map: OffsetMap,
                 partitions: int | None) -> None:
        self.rng, self.log_map, self.partitions = rng, log_map, partitions
        self.target = state.partition.partition
        self.n: dict[str, int] = defaultdict(int)
        self.oldest: tuple[int, int] | None = None  # first tombstone: offset, timestamp
        self.by_horizon: dict[int, int] = defaultdict(int)  # latest tombstones by horizon, -1 none
        self.counter = _DigestCounter()
        offsets_topic = state.partition.topic == CONSUMER_OFFSETS_TOPIC
        self.groups = _GroupTally() if offsets_topic else None
        self._buf, self._horizons = BatchRecords(array("q"), []), array("q")
        self.crc = CrcTally()  # every batch passes through add(): its CRC is checked there

    @property
    def records(self) -> int:
        return self.n["records"]

    def add(self, batch: Any, path: Path, kind: str, control_type: int | None) -> None:
        n = self.n
        n["batches"] += 1
        self.crc.check(path, batch)
        if kind == CONTROL:
            count = batch.records_count
            n["records"] += count
            n["control_records"] += count
            kinds = {CONTROL_TYPE_COMMIT: "commit_markers", CONTROL_TYPE_ABORT: "abort_markers"}
            if control_type is not None:  # None: a marker a clean already emptied
                n[kinds.get(control_type, "other_control_records")] += count
            return
        recs = batch_records(batch, path, full=True)
        n["records"] += len(recs.offsets)
        n["data_records"] += len(recs.offsets)
        if kind == ABORTED:
            n["aborted_records"] += len(recs.offsets)
            rng = self.rng
            n["read_uncommitted"] += sum(
                rng.log_start_offset <= o < rng.high_watermark for o in recs.offsets)
            return
        buf = self._buf
        buf.offsets.extend(recs.offsets)
        buf.keys.extend(recs.keys)
        buf.tombstones.extend(recs.tombstones)
        buf.sizes.extend(recs.sizes)
        buf.timestamps.extend(recs.timestamps)
        horizon = batch.delete_horizon_ms if batch.has_delete_horizon else -1
        self._horizons.extend(array("q", [horizon]) * len(recs.offsets))
        if len(buf.keys) >= CHUNK_RECORDS:
            self.flush()

    def flush(self) -> None:
        """Count the buffered live records."""
        recs, horizons = self._buf, self._horizons
        self._buf, self._horizons = BatchRecords(array("q"), []), array("q")
        if not recs.keys:
            return
        n, rng = self.n, self.rng
        offs = np.frombuffer(recs.offsets, dtype=np.int64)
        visible = offs >= rng.log_start_offset
        n["read_uncommitted"] += int(np.count_nonzero(visible & (offs < rng.high_watermark)))
        n["read_committed"] += int(np.count_nonzero(visible & (offs < rng.last_stable_offset)))
        keyed = np.fromiter((k is not None for k in recs.keys), dtype=bool, count=len(recs.keys))
        keys = [k for k in recs.keys if k is not None]
        n["keyless_records"] += len(recs.keys) - len(keys)
        if not keys:
            return
        hi, lo = key_digests(keys)
        offs, sizes = offs[keyed], np.frombuffer(recs.sizes, dtype=np.int64)[keyed]
        dup = offs < self.log_map.get_batch(hi, lo)
        n["keyed_records"] += len(keys)
        n["duplicate_records"] += int(np.count_nonzero(dup))
        n["duplicate_bytes"] += int(sizes[dup].sum())
        n["dirty_distinct_keys"] += int(np.count_nonzero(~dup & (offs >= rng.first_dirty_offset)))
        self.counter.add(hi[dup], lo[dup])
        tomb = np.frombuffer(recs.tombstones, dtype=np.uint8)[keyed].astype(bool)
        if self.groups is not None:
            self.groups.add(keys, sizes, dup, tomb)
        if tomb.any():
            stamps = np.frombuffer(recs.timestamps, dtype=np.int64)[keyed]
            marks = np.frombuffer(horizons, dtype=np.int64)[keyed]
            self._tombstones(tomb, dup, offs, stamps, marks)
        if self.partitions is not None:
            away = np.fromiter((default_partition(k, self.partitions) != self.target for k in keys),
                               dtype=bool, count=len(keys))
            n["misplaced_records"] += int(np.count_nonzero(away))
            n["misplaced_bytes"] += int(sizes[away].sum())
            n["misplaced_keys"] += int(np.count_nonzero(away & ~dup))

    def _tombstones(self, tomb: Any, dup: Any, offs: Any, stamps: Any, horizons: Any) -> None:
        n = self.n
        n["tombstones"] += int(np.count_nonzero(tomb))
        if self.oldest is None:
            first = int(np.argmax(tomb))
            self.oldest = (int(offs[first]), int(stamps[first]))
        n["with_delete_horizon"] += int(np.count_nonzero(tomb & (horizons >= 0)))
        n["superseded_tombstones"] += int(np.count_nonzero(tomb & dup))
        values, counts = np.unique(horizons[tomb & ~dup], return_counts=True)
        for horizon, count in zip(values.tolist(), counts.tolist(), strict=True):
            self.by_horizon[max(horizon, -1)] += count

    def record_counts(self) -> RecordCounts:
        n = self.n
        return RecordCounts(n["batches"], n["records"], n["data_records"], n["control_records"],
                            n["keyless_records"], n["read_uncommitted"], n["read_committed"])

    def key_counts(self, cleanable_distinct_keys: int) -> KeyCounts:
        n = self.n
        return KeyCounts(self.log_map.size, n["dirty_distinct_keys"], cleanable_distinct_keys,
                         n["keyed_records"], n["duplicate_records"], n["duplicate_bytes"])

    def tombstone_report(self, now_ms: int, delete_retention_ms: int) -> TombstoneReport:
        groups = []
        if self.n["superseded_tombstones"]:
            superseded = self.n["superseded_tombstones"]
            groups.append(TombstoneGroup("superseded", superseded, None, None, True))
        for horizon, count in sorted(self.by_horizon.items()):
            if horizon < 0:
                earliest = now_ms + delete_retention_ms
                groups.append(TombstoneGroup("no-horizon", count, None, earliest, False))
            else:
                groups.append(TombstoneGroup("horizon", count, horizon, horizon, now_ms >= horizon))
        oldest_offset, oldest_ms = self.oldest if self.oldest else (None, None)
        return TombstoneReport(self.n["tombstones"], oldest_offset, oldest_ms,
                               self.n["with_delete_horizon"], groups)

    def transaction_report(self, state: LogState) -> TransactionReport:
        aborted = {(t.producer_id, t.first_offset)
                   for _base, entries in state.aborted_by_segment for t in entries}
        open_txns = [
            OpenTransaction(t.producer_id, t.producer_epoch, t.first_offset, t.last_timestamp)
            for t in state.producers.open_transactions()
        ]
        n = self.n
        return TransactionReport(n["commit_markers"], n["abort_markers"],
                                 n["other_control_records"], len(aborted), n["aborted_records"],
                                 open_txns)

    def partitioner(self) -> PartitionerCheck | None:
        if self.partitions is None:
            return None
        n = self.n
        return PartitionerCheck(self.partitions, self.target, n["misplaced_keys"],
                                n["misplaced_records"], n["misplaced_bytes"])

    def top(self, count: int) -> list[tuple[int, int, int]]:
        return self.counter.top(count) if count else []


class _GroupTally:
    """Per consumer group of a ``__consumer_offsets`` partition: records and bytes, all and
    duplicate, and live offset-commit keys."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}  # group -> [commit keys, records, bytes, dup, dup bytes]
        self.other = [0, 0]  # records, bytes
        self._cache: dict[bytes, tuple[str, bool] | None] = {}

    def add(self, keys: list[bytes], sizes: Any, dup: Any, tomb: Any) -> None:
        for key, size, is_dup, is_tomb in zip(keys, sizes.tolist(), dup.tolist(), tomb.tolist(), strict=True):
            found = self._group(key)
            if found is None:
                self.other[0] += 1
                self.other[1] += size
                continue
            c = self.counts.setdefault(found[0], [0, 0, 0, 0, 0])
            c[1] += 1
            c[2] += size
            if is_dup:
                c[3] += 1
                c[4] += size
            elif found[1] and not is_tomb:
                c[0] += 1

    def _group(self, key: bytes) -> tuple[str, bool] | None:
        """The key's group and whether it is an offset commit; None for other or bad keys."""
        if key in self._cache:
            return self._cache[key]
        try:
            decoded = decode_offsets_key(key)
        except CorruptDataError:
            decoded = None
        found = None
        if isinstance(decoded, OffsetCommitKey | GroupMetadataKey):
            found = (decoded.group, isinstance(decoded, OffsetCommitKey))
        if len(self._cache) >= GROUP_KEY_CACHE:
            self._cache.clear()
        self._cache[key] = found
        return found

    def report(self, top: int) -> ConsumerGroups:
        ranked = sorted(self.counts.items(), key=lambda item: (-item[1][2], item[0]))[:top]
        return ConsumerGroups(len(self.counts), self.other[0], self.other[1],
                              [GroupCount(group, *c) for group, c in ranked])
