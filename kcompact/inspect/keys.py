"""``inspect keys``: a partition's keys, duplicates, tombstones and transactions, and what a clean
would do.

Why: before cleaning (or sizing a broker's dedupe buffer) an operator wants to know how many keys
there are, how much of the log is superseded, when tombstones can go and how many passes the cleaner
needs; after a surprise, which keys dominate and whether producers used the default partitioner.

How. Records are read with the cleaner's own columnar scan (``records.scan``) and aborted
transactions are told apart with its ``CleanedTransactionMetadata``, in two passes over every
segment:

1. key digest -> latest offset over the whole log (the cleaner's :class:`OffsetMap`, about 16 bytes a key;
   no Python object per key), and, when the keys to map exceed one map, the broker's passes emulated
   with maps sized exactly like its SkimpyOffsetMap (``log.cleaner.dedupe.buffer.size /
   log.cleaner.threads``, 24 bytes an entry, ``floor(slots * load factor)`` keys, room checked
   before every put);
2. every record again, in chunks of :data:`CHUNK_RECORDS` handled with numpy: a keyed record is a
   duplicate when its offset is below its key's latest; counts, bytes (a record's uncompressed size
   in its batch), tombstones by delete horizon, consumer-visible counts, misplaced keys, and exact
   duplicate counts per digest (24 bytes a duplicated key) for the top keys, whose bytes are then
   read back from the few batches holding their latest offsets.

The *projection* is not estimated: it is :func:`kcompact.cleaner.cleaner.clean_partition` run with
``dry_run=True`` (every decision of a real clean, nothing written), so it equals what ``clean`` then
does.

Populations: *live* records are data records outside aborted transactions (open ones included); key
counts are over live keyed records. ``keys_to_map`` counts the keys of the cleanable range
``[first dirty, first uncleanable)``; ``dirty_distinct_keys`` those whose latest record lies at or
after the first dirty offset. The default partitioner is Kafka's
``toPositive(murmur2(key)) % partitions``.

For a ``__consumer_offsets`` partition, pass 2 also names each keyed record's consumer group (its key
decoded by :mod:`kcompact.config.offsets_records`) and totals records and bytes per group, all and
duplicate, with the group's live offset-commit keys (committed offsets whose latest record is not a
tombstone): ``consumer_groups`` says which groups dominate a bloated offsets partition. That section
is absent from :meth:`KeysReport.as_dict` for every other topic.
Field names of :class:`KeysReport` are the ``--json`` interface (tests/inspect/test_keys.py fixes
them).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import time
from array import array
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kcompact.cleaner.cleaner import CleanOptions, CleanResult, clean_partition
from kcompact.cleaner.log_state import LogState, load_log_state, read_control
from kcompact.cleaner.offset_map import (
    KAFKA_BYTES_PER_ENTRY,
    KAFKA_MAX_MAP_MEMORY,
    OffsetMap,
    key_digests,
)
from kcompact.cleaner.ranges import CleanableRange, compute_cleanable_range
from kcompact.cleaner.run import ConfigSources, not_compacted
from kcompact.cleaner.transactions import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    CleanedTransactionMetadata,
)
from kcompact.config.effective import EffectiveConfig
from kcompact.config.offsets_records import GroupMetadataKey, OffsetCommitKey, decode_offsets_key
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import ConfigError, CorruptDataError, RefusedError
from kcompact.records.batch import TimestampType
from kcompact.records.legacy import (
    LOG_OVERHEAD,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    legacy_records,
)
from kcompact.records.record import records_bytes
from kcompact.records.scan import scan_keys, scan_records
from kcompact.segment.partition import open_partition
from kcompact.segment.txn_index import AbortedTxn

U64 = npt.NDArray[np.uint64]
DEFAULT_TOP = 10
CHUNK_RECORDS = 1 << 16  # records handled per numpy step of pass 2
KEY_DISPLAY_BYTES = 256  # a top key longer than this is shown cut
MURMUR2_SEED = 0x9747B28C  # Kafka's Utils.murmur2 seed and mixing constants
MURMUR2_M = 0x5BD1E995
MURMUR2_R = 24
_MASK32 = 0xFFFFFFFF
_DATA, _ABORTED, _CONTROL = "data", "aborted", "control"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
GROUP_KEY_CACHE = 1 << 16  # decoded offsets keys remembered (a group commits the same keys again)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``: the hash its default partitioner uses.

    Args:
        data: the serialized key.

    Returns:
        The hash as Java's signed 32-bit int.
    """
    length, m = len(data), MURMUR2_M
    h = (MURMUR2_SEED ^ length) & _MASK32
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * m) & _MASK32
        k = ((k ^ (k >> MURMUR2_R)) * m) & _MASK32
        h = ((h * m) & _MASK32) ^ k
    tail = length - whole
    if tail:  # Java's switch falls through: 3 -> 2 -> 1
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h = ((h ^ data[whole]) * m) & _MASK32
    h = ((h ^ (h >> 13)) * m) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def default_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a key: ``(murmur2 & 0x7fffffff) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def printable(key: bytes) -> str:
    """A key as text: UTF-8, with undecodable bytes and unprintable characters as ``\\xNN`` escapes.

    Args:
        key: the key bytes.

    Returns:
        Text safe to print in a terminal (``key_hex`` keeps the exact bytes).
    """
    text = key.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


@dataclass(frozen=True, slots=True)
class RecordCounts:
    """Exact record counts (``records`` counts every record of every batch, markers too)."""

    batches: int
    records: int
    data_records: int
    control_records: int
    keyless_records: int  # live data records without a key (a clean drops them)
    read_uncommitted: int  # data records a read_uncommitted consumer sees: [log start, HW)
    read_committed: int  # ... a read_committed one: [log start, LSO) without aborted data


@dataclass(frozen=True, slots=True)
class KeyCounts:
    """Distinct keys and duplicates among live keyed records."""

    distinct_keys: int
    dirty_distinct_keys: int
    cleanable_distinct_keys: int
    keyed_records: int
    duplicate_records: int  # a later record has the same key
    duplicate_bytes: int


@dataclass(frozen=True, slots=True)
class TombstoneGroup:
    """Tombstones that become removable together.

    ``kind``: ``superseded`` (a later record has the key: the next clean covering them drops them),
    ``horizon`` (the latest for their key, batch delete horizon ``delete_horizon_ms``),
    ``no-horizon`` (the latest, never cleaned yet: the clean that first covers them stamps
    now + delete.retention.ms, so ``removable_at_ms`` is the earliest, for a clean now).
    """

    kind: str
    tombstones: int
    delete_horizon_ms: int | None
    removable_at_ms: int | None
    removable_now: bool


@dataclass(frozen=True, slots=True)
class TombstoneReport:
    tombstones: int
    oldest_offset: int | None
    oldest_timestamp_ms: int | None
    with_delete_horizon: int
    groups: list[TombstoneGroup]


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    producer_id: int
    producer_epoch: int
    first_offset: int
    last_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class TransactionReport:
    commit_markers: int
    abort_markers: int
    other_control_records: int
    aborted_transactions: int
    aborted_records: int
    open_transactions: list[OpenTransaction]


@dataclass(frozen=True, slots=True)
class Projection:
    """What one clean now would leave (the cleaner's dry run; the whole log, not just the range)."""

    cleanable: bool
    skipped_reason: str | None
    end_offset: int | None  # the cleaner checkpoint it would write
    records_before: int
    records_after: int
    size_in_bytes_before: int
    size_in_bytes_after: int
    superseded_removed: int
    tombstones_removed: int
    keyless_removed: int
    aborted_records_removed: int
    markers_removed: int


@dataclass(frozen=True, slots=True)
class DedupePlan:
    """The broker's dedupe buffer against the keys of the cleanable range."""

    dedupe_buffer_size: int
    cleaner_threads: int
    load_factor: float
    keys_per_pass: int  # floor(floor(buffer / threads / 24) * load factor); 0 without threads
    keys_to_map: int
    passes: int | None  # None: no cleaner thread, or a buffer that holds no key
    # room for keys_to_map + 1 entries a thread (Kafka checks for room before every put, even of
    # a key it holds: one entry more than needed only when the range's last put is a new key);
    # None: beyond Kafka's 2 GiB per thread
    one_pass_dedupe_buffer_size: int | None


@dataclass(frozen=True, slots=True)
class KeyCount:
    key: str  # printable(): UTF-8, other bytes as \xNN escapes; cut at KEY_DISPLAY_BYTES
    key_hex: str
    key_size_in_bytes: int
    records: int
    latest_offset: int


@dataclass(frozen=True, slots=True)
class PartitionerCheck:
    """Live keyed records the default partitioner would send to another of the partitions."""

    partitions: int
    partition: int
    misplaced_keys: int
    misplaced_records: int
    misplaced_bytes: int


@dataclass(frozen=True, slots=True)
class GroupCount:
    """One consumer group's records in a ``__consumer_offsets`` partition (live keyed records)."""

    group: str
    offset_commit_keys: int  # committed offsets it holds: latest of their key and not a tombstone
    records: int  # offset commits and group metadata
    size_in_bytes: int
    duplicate_records: int
    duplicate_bytes: int


@dataclass(frozen=True, slots=True)
class ConsumerGroups:
    """The groups of a ``__consumer_offsets`` partition, the top ones by bytes."""

    groups: int
    # keyed records whose key is neither an offset commit nor a group's metadata (the newer
    # coordinator's records, kept undecoded) or does not decode
    other_records: int
    other_bytes: int
    top: list[GroupCount]


@dataclass(slots=True)
class KeysReport:
    """The ``inspect keys`` report (the ``--json`` object)."""

    topic: str
    partition: int
    partition_dir: str
    now_ms: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    size_in_bytes: int
    records: RecordCounts
    keys: KeyCounts
    tombstones: TombstoneReport
    transactions: TransactionReport
    projection: Projection
    dedupe: DedupePlan
    top_duplicated_keys: list[KeyCount]
    partitioner: PartitionerCheck | None
    consumer_groups: ConsumerGroups | None = None  # for __consumer_offsets only
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` object (without ``consumer_groups`` for other topics than
        ``__consumer_offsets``)."""
        out = asdict(self)
        if out["consumer_groups"] is None:
            del out["consumer_groups"]
        return out


def keys_report(
    path: str | Path,
    *,
    cli_overrides: Mapping[str, str],
    now_ms: int | None = None,
    partitions: int | None = None,
    top: int = DEFAULT_TOP,
    server_properties: str | Path | None = None,
    metadata_dir: str | Path | None = None,
) -> KeysReport:
    """Read every record of one partition and report on its keys (see the module docstring).

    Args:
        path: the partition directory.
        cli_overrides: ``--config`` pairs (Kafka names, topic and cleaner settings).
        now_ms: the clock of the time rules (default: now).
        partitions: the topic's partition count, to check keys against the default partitioner.
        top: how many of the most duplicated keys (and, for ``__consumer_offsets``, of the
            groups with the most bytes) to list.
        server_properties: the broker's server.properties (default:
            ``$KCOMPACT_SERVER_PROPERTIES``).
        metadata_dir: ``metadata.log.dir`` or its ``__cluster_metadata-0`` (default: as
            ``kcompact.config.effective.partition_config`` finds it).

    Returns:
        The report.

    Raises:
        ConfigError: ``partitions`` or ``top`` out of range, or a bad configuration source.
        KcompactError: the path is not a partition directory, or its data does not parse.
    """
    if (partitions is not None and partitions < 1) or top < 0:
        raise ConfigError(f"--partitions / --top; expected >= 1 / >= 0, found {partitions} / {top}")
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    partition = open_partition(path)
    effective = ConfigSources(cli_overrides, server_properties, metadata_dir).for_partition(
        partition.path)
    config = effective.config
    state = load_log_state(partition, config)
    rng = compute_cleanable_range(state.range_inputs(config, now))
    dry = _dry_run(state, effective, now)
    warnings = [*effective.notes, *state.warnings]
    plan, emulate = _plan(config, dry.stats.map_entries, warnings)
    log_map = _map_keys(state, rng, emulate)
    census = _Census(state, rng, log_map, partitions)
    for item in _iter_batches(state):
        census.add(*item)
    census.flush()
    if emulate is not None:
        plan = dataclasses.replace(plan, passes=emulate.passes)
    size = sum(s.size_in_bytes for s in state.segments)
    return KeysReport(
        state.partition.topic, state.partition.partition, str(state.partition.path), now,
        rng.log_start_offset, rng.log_end_offset, rng.high_watermark, rng.last_stable_offset,
        rng.first_dirty_offset, rng.first_uncleanable_offset, size,
        census.record_counts(),
        census.key_counts(dry.stats.map_entries),
        census.tombstone_report(now, config.delete_retention_ms),
        census.transaction_report(state),
        _projection(dry, census.records, size),
        plan,
        _top_keys(state, log_map, census.top(top)),
        census.partitioner(),
        None if census.groups is None else census.groups.report(top),
        warnings,
    )


# --- the broker's dedupe buffer ------------------------------------------------------------------


class _Passes:
    """The broker's cleaning passes over the cleanable range: a bounded map, renewed when full."""

    def __init__(self, buffer_per_thread: int, load_factor: float) -> None:
        self.passes = 0
        self._buffer, self._load_factor = buffer_per_thread, load_factor
        self._map: OffsetMap | None = None

    def put(self, hi: U64, lo: U64, offsets: npt.NDArray[np.int64]) -> None:
        while len(offsets):
            if self._map is None:
                self._map = OffsetMap.for_dedupe_buffer(self._buffer, self._load_factor)
                self.passes += 1
            accepted = self._map.put_batch(hi, lo, offsets)
            if accepted == len(offsets):
                return
            self._map = None  # full: the round ends here, the next starts at the refused record
            hi, lo, offsets = hi[accepted:], lo[accepted:], offsets[accepted:]


def _plan(config: TopicConfig, keys: int, warnings: list[str]) -> tuple[DedupePlan, _Passes | None]:
    """The plan, and a :class:`_Passes` to feed when the keys may not fit one map."""
    threads, load_factor = config.cleaner_threads, config.dedupe_load_factor
    per_thread = min(config.dedupe_buffer_size // threads, KAFKA_MAX_MAP_MEMORY) if threads else 0
    capacity = int(per_thread // KAFKA_BYTES_PER_ENTRY * load_factor)
    plan = DedupePlan(config.dedupe_buffer_size, threads, load_factor, capacity, keys, None,
                      _one_pass_buffer(keys + 1, threads, load_factor))
    if threads < 1:
        warnings.append("log.cleaner.threads is 0: the broker runs no cleaner")
        return plan, None
    if keys < capacity:  # every put finds room: at most `keys` entries before any put
        return dataclasses.replace(plan, passes=1 if keys else 0), None
    if capacity < 1:
        warnings.append(f"a cleaner thread's dedupe buffer ({per_thread} bytes) holds no key: "
                        "the broker's cleaner would never get past the first dirty offset")
        return plan, None
    return plan, _Passes(per_thread, load_factor)


def _one_pass_buffer(entries: int, threads: int, load_factor: float) -> int | None:
    """The smallest dedupe buffer (all threads) whose per-thread map takes ``entries`` keys."""
    if threads < 1 or not 0 < load_factor <= 1:
        return None
    slots = max(math.ceil(entries / load_factor) - 1, 1)
    while int(slots * load_factor) < entries:
        slots += 1
    per_thread = slots * KAFKA_BYTES_PER_ENTRY
    return per_thread * threads if per_thread <= KAFKA_MAX_MAP_MEMORY else None


def _dry_run(state: LogState, effective: EffectiveConfig, now: int) -> CleanResult:
    """The cleaner's dry run, or an empty result saying why no clean would run."""
    reason = not_compacted(effective)
    if state.partition.is_metadata_log:
        reason = "__cluster_metadata is KRaft's own log; no cleaner touches it"
    if reason is None:
        try:
            options = CleanOptions(now_ms=now, dry_run=True)
            return clean_partition(state.partition.path, effective.config, options)
        except RefusedError as err:  # tiered storage
            reason = str(err)
    result = CleanResult(str(state.partition.path), state.partition.topic,
                         state.partition.partition, now, True)
    result.skipped_reason = reason
    return result


def _projection(dry: CleanResult, records: int, size: int) -> Projection:
    s = dry.stats
    return Projection(
        dry.end_offset is not None, dry.skipped_reason, dry.end_offset,
        records, records - s.records_read + s.records_written,
        size, size - s.bytes_read + s.bytes_written,
        s.superseded_removed, s.tombstones_removed, s.invalid_records, s.aborted_records_removed,
        s.markers_removed,
    )


# --- reading records -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Records:
    """One batch's records as columns (``sizes``, ``tombstones``, ``timestamps`` when asked)."""

    offsets: array[int]
    keys: list[bytes | None]
    tombstones: bytearray = field(default_factory=bytearray)
    sizes: array[int] = field(default_factory=lambda: array("q"))
    timestamps: array[int] = field(default_factory=lambda: array("q"))


def _iter_batches(state: LogState) -> Iterator[tuple[Any, Path, str, int | None]]:
    """Every batch in log order with its kind (data, aborted data, control) and control type."""
    txn: CleanedTransactionMetadata[AbortedTxn] = CleanedTransactionMetadata(
        collect_index_entries=False
    )
    txn.add_aborted(t for _base, entries in state.aborted_by_segment for t in entries)
    for seg in state.segments:
        with seg.files.open() as log:
            for batch in log.iter_batches():
                if batch.is_control:
                    control_type, _ts = read_control(batch, log.path)
                    txn.on_control_batch_read(batch, control_type)
                    yield batch, log.path, _CONTROL, control_type
                else:
                    yield batch, log.path, _ABORTED if txn.on_batch_read(batch) else _DATA, None


def _batch_records(batch: Any, path: Path, *, full: bool) -> _Records:
    """The records of a data batch (v2 by ``records.scan``, legacy by its deep iterator)."""
    try:
        if batch.magic < 2:
            return _legacy_records(batch)
        data = records_bytes(batch)
        if not full:
            offsets, keys = scan_keys(data, base_offset=batch.base_offset,
                                      count=batch.records_count)
            return _Records(offsets, keys)
        log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
        append_time = batch.max_timestamp if log_append else None
        cols = scan_records(data, base_offset=batch.base_offset, count=batch.records_count,
                            base_timestamp=batch.base_timestamp, log_append_time=append_time)
    except CorruptDataError as err:
        raise (err.located(path, batch.position) if err.path is None else err) from err
    sizes = array("q", (end - start for start, end in zip(cols.record_starts, cols.record_ends)))
    return _Records(cols.offsets, [cols.key(i) for i in range(cols.count)], cols.value_null, sizes,
                    cols.timestamps)


def _legacy_records(entry: Any) -> _Records:
    overhead = LOG_OVERHEAD + (RECORD_OVERHEAD_V0 if entry.magic == 0 else RECORD_OVERHEAD_V1)
    out = _Records(array("q"), [])
    for r in legacy_records(entry):
        out.offsets.append(r.offset)
        out.keys.append(None if r.key is None else bytes(r.key))
        out.tombstones.append(r.value is None)
        out.sizes.append(overhead + len(r.key or b"") + len(r.value or b""))
        out.timestamps.append(r.timestamp)
    return out


def _map_keys(state: LogState, rng: CleanableRange, passes: _Passes | None) -> OffsetMap:
    """Pass 1: the latest offset of every live key, and the broker's passes when asked."""
    log_map = OffsetMap()
    offsets: array[int] = array("q")
    keys: list[bytes] = []
    for batch, path, kind, _type in _iter_batches(state):
        if kind != _DATA:
            continue
        recs = _batch_records(batch, path, full=False)
        for offset, key in zip(recs.offsets, recs.keys):
            if key is not None:
                offsets.append(offset)
                keys.append(key)
        if len(keys) >= CHUNK_RECORDS:
            _put_keys(log_map, passes, rng, offsets, keys)
            offsets, keys = array("q"), []
    _put_keys(log_map, passes, rng, offsets, keys)
    log_map.freeze()
    return log_map


def _put_keys(log_map: OffsetMap, passes: _Passes | None, rng: CleanableRange,
              offsets: array[int], keys: list[bytes]) -> None:
    if not keys:
        return
    hi, lo = key_digests(keys)
    offs = np.frombuffer(offsets, dtype=np.int64)
    log_map.put_batch(hi, lo, offs)
    if passes is not None:
        mask = (offs >= rng.first_dirty_offset) & (offs < rng.first_uncleanable_offset)
        passes.put(hi[mask], lo[mask], offs[mask])


def _top_keys(
    state: LogState, log_map: OffsetMap, top: list[tuple[int, int, int]]
) -> list[KeyCount]:
    """The top keys' bytes, read back from the few batches holding their latest offsets."""
    if not top:
        return []
    hi = np.array([t[0] for t in top], dtype=np.uint64)
    lo = np.array([t[1] for t in top], dtype=np.uint64)
    latest = log_map.get_batch(hi, lo).tolist()
    latest_set = set(latest)
    wanted = sorted(latest_set)
    bases = [s.base_offset for s in state.segments]
    found: dict[int, bytes | None] = {}
    for index in sorted({bisect.bisect_right(bases, o) - 1 for o in wanted}):
        with state.segments[index].files.open() as log:
            for batch in log.iter_batches():
                at = bisect.bisect_left(wanted, batch.base_offset if batch.magic >= 2 else 0)
                if not batch.is_control and at < len(wanted) and wanted[at] <= batch.last_offset:
                    recs = _batch_records(batch, log.path, full=False)
                    found.update((o, k) for o, k in zip(recs.offsets, recs.keys) if o in latest_set)
    out = []
    for (_hi, _lo, duplicates), offset in zip(top, latest):
        key = found.get(offset) or b""
        shown = key[:KEY_DISPLAY_BYTES]
        out.append(KeyCount(printable(shown), shown.hex(), len(key), duplicates + 1, offset))
    return sorted(out, key=lambda k: (-k.records, k.latest_offset))


# --- pass 2: the census --------------------------------------------------------------------------


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
                        self._counts[order].tolist()))

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


class _Census:
    """Pass 2: every count of the report, with numpy over chunks of :data:`CHUNK_RECORDS`."""

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
        self._buf, self._horizons = _Records(array("q"), []), array("q")

    @property
    def records(self) -> int:
        return self.n["records"]

    def add(self, batch: Any, path: Path, kind: str, control_type: int | None) -> None:
        n = self.n
        n["batches"] += 1
        if kind == _CONTROL:
            count = batch.records_count
            n["records"] += count
            n["control_records"] += count
            kinds = {CONTROL_TYPE_COMMIT: "commit_markers", CONTROL_TYPE_ABORT: "abort_markers"}
            if control_type is not None:  # None: a marker a clean already emptied
                n[kinds.get(control_type, "other_control_records")] += count
            return
        recs = _batch_records(batch, path, full=True)
        n["records"] += len(recs.offsets)
        n["data_records"] += len(recs.offsets)
        if kind == _ABORTED:
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
        self._buf, self._horizons = _Records(array("q"), []), array("q")
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
        for horizon, count in zip(values.tolist(), counts.tolist()):
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
        for key, size, is_dup, is_tomb in zip(keys, sizes.tolist(), dup.tolist(), tomb.tolist()):
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
