"""Rebuild the parts of a KRaft cluster's metadata that decide a topic's configuration.

Why: a KRaft broker keeps topic ids, topic config overrides and dynamic broker configs only in the
metadata partition ``__cluster_metadata-0``. kcompact replays it offline, as the broker's
``MetadataDelta`` does, to learn which overrides apply to a partition directory it is asked to clean.

Where the state comes from, in order:

1. the newest KRaft snapshot ``<20-digit end offset>-<10-digit epoch>.checkpoint`` of the directory:
   v2 batches like a segment, framed by a SNAPSHOT_HEADER and a SNAPSHOT_FOOTER control batch, holding
   the whole state as of ``end offset`` (exclusive);
2. then every record of the ``.log`` segments at or after that offset, in offset order.

Control batches are skipped. Records between a BeginTransactionRecord and its EndTransactionRecord
are applied at the end; those before an AbortTransactionRecord (or an unterminated transaction at the
tail) are dropped, as KIP-868 says. Replay rules: a TopicRecord adds a topic; a RemoveTopicRecord
retires the id and its name's config overrides (a name re-created later gets a new id); a
ConfigRecord sets a key for resource TOPIC (2, by topic name) or BROKER (4, by node id; the empty
name is the cluster-wide default), a null value removing it; a later record wins. A PartitionRecord sets a
partition's replicas, ISR and leader (``MetadataState.assignments``); a PartitionChangeRecord changes those it
carries (None / -2: unchanged).

The history is complete only when it is proven at both ends. If no snapshot covers the start and the
log does not start at offset 0 - retention deleted segments that a snapshot had replaced, and the
snapshot is gone (``kraft37-cleaned-logdir``) - or the replay ends before the log end the partition's
own files show (a producer snapshot, an index whose ``.log`` is gone, a leader epoch, a checkpoint
entry past it: :func:`_tail_missing`), the history is incomplete: the state is still returned, with
``complete`` False and ``unresolved_reason`` saying why.

:func:`cached_metadata_state` replays a directory once per listing (names, sizes, mtimes), so the
configs of thousands of partitions come from one replay.

How the files are read: a metadata log is mostly records no rule here applies (the NoOpRecords
``QuorumController`` appends every ``metadata.max.idle.interval.ms``: 4,801 of the 4,928 records of
``kraft37-consumer-offsets``). :func:`accel.metadata_rows` walks each file's batches
and the frames of their records' values in C and returns a row only for the records the replay
decodes (:data:`READ_API_KEYS`) and the api keys of those it only counts, so no Python call is made
per record; a batch the kernel does not take (compressed, one the reference refuses, a gap, a
snapshot's control batch) is read by the reference walk, with its errors, and the kernel goes on after it.
"""

from __future__ import annotations

import functools
import os
from array import array
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import field
from pathlib import Path

from kcompact.config.kraft import record_types as rt
from kcompact.config.kraft import records as kr
from kcompact.errors import (
    ConfigError,
    CorruptBatchError,
    CorruptDataError,
    CorruptRecordError,
    KcompactError,
)
from kcompact.records.batch_header import LOG_OVERHEAD, RecordBatch
from kcompact.records.control import ControlRecordKey, ControlRecordType
from kcompact.records.record import decode_records
from kcompact.records.scan import accel
from kcompact.records.varint import INT64_MAX, INT64_MIN, Buffer
from kcompact.segment.checkpoint import read_leader_epoch_checkpoint, read_offset_checkpoint
from kcompact.segment.log_file import HEADER_WINDOW, LogFile
from kcompact.segment.names import parse_partition_dir_name, parse_segment_file_name
from kcompact.value import frozen

BEGIN_TRANSACTION_API_KEY = 23
END_TRANSACTION_API_KEY = 24
ABORT_TRANSACTION_API_KEY = 25
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
NO_LEADER_CHANGE = -2  # PartitionChangeRecord.leader: unchanged (Kafka's NO_LEADER_CHANGE)
STATE_CACHE_SIZE = 8  # metadata directories kept replayed (one per cluster in practice)
# The records the replay decodes: those a rule below applies (TopicRecord 2, PartitionRecord 3, ConfigRecord 4,
# PartitionChangeRecord 5, RemoveTopicRecord 9, FeatureLevelRecord 12) and the transaction markers that say
# when they apply. Every other record is only counted when ``records`` keeps it generic (NoOpRecord, ...), or
# passed over unread when ``records`` would type it but no rule applies it (RegisterBrokerRecord).
READ_API_KEYS = (2, 3, 4, 5, 9, 12, BEGIN_TRANSACTION_API_KEY, END_TRANSACTION_API_KEY,
                 ABORT_TRANSACTION_API_KEY)
READ, PASSED, COUNTED = 255, 1, 0  # a record's kind (READ is also its byte in KINDS)
METADATA_ROW = 7  # int64 a row of accel.metadata_rows


@frozen
class PartitionAssignment:
    """Where a partition lives, as its PartitionRecord and the PartitionChangeRecords after it leave it.

    Attributes:
        replicas: the broker ids of its replicas.
        isr: its in-sync replicas.
        leader: its leader's broker id (-1: none).
        offset: the metadata offset of the record that last changed it.
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    offset: int


@frozen
class MetadataState:
    """Topics and dynamic configs as of the end of a metadata partition.

    Attributes:
        topics_by_id: live topic id (Kafka's base64 form) -> topic name.
        topics_by_name: live topic name -> id.
        topic_configs: topic name -> its config overrides (Kafka key -> value).
        broker_configs: BROKER resource name (a node id, or "" for the cluster default) -> configs.
        partition_counts: live topic id -> number of partitions seen (PartitionRecords).
        feature_levels: finalized features, e.g. ``{"metadata.version": 19}``.
        snapshot: the snapshot file the replay started from, if any.
        end_offset: the offset after the last record read.
        complete: False when the history does not reach back to the start of the cluster.
        unresolved_reason: why it is incomplete (None when complete).
        later_records_missing: True when records may be missing or unread *after* records that were
            read (a gap past the first record, a snapshot without its footer, a missing tail, a
            config-shaping record kcompact does not read): then what was read is only as of
            ``end_offset - 1``, and a later record may have changed it. False when the history is
            complete or misses only its beginning (what was read is then the latest word on it).
        unknown_record_counts: api-key name -> how many records were kept generic.
        assignments: (live topic id, partition) -> its replicas, ISR and leader.
    """

    topics_by_id: Mapping[str, str]
    topics_by_name: Mapping[str, str]
    topic_configs: Mapping[str, Mapping[str, str]]
    broker_configs: Mapping[str, Mapping[str, str]]
    partition_counts: Mapping[str, int]
    feature_levels: Mapping[str, int]
    snapshot: Path | None
    end_offset: int
    complete: bool
    unresolved_reason: str | None
    unknown_record_counts: Mapping[str, int] = field(default_factory=dict)
    later_records_missing: bool = False
    assignments: Mapping[tuple[str, int], PartitionAssignment] = field(default_factory=dict)

    def topic_config_overrides(self, topic: str) -> dict[str, str]:
        """The dynamic config of a topic (empty when it has none)."""
        return dict(self.topic_configs.get(topic, {}))

    def broker_config(self, node_id: int | None) -> dict[str, str]:
        """The dynamic config of one broker (``node_id``), empty for None or an unknown id."""
        return {} if node_id is None else dict(self.broker_configs.get(str(node_id), {}))

    def cluster_default_config(self) -> dict[str, str]:
        """The cluster-wide dynamic broker default (BROKER resource with the empty name)."""
        return dict(self.broker_configs.get("", {}))


class _UnknownRun:
    """Records kept generic, counted at once (api key -> how many), held like a record in a transaction."""

    __slots__ = ("counts",)

    def __init__(self, counts: Mapping[int, int]) -> None:
        self.counts = counts


class _Replayer:
    """Mutable state while records are applied; frozen into a :class:`MetadataState` at the end."""

    def __init__(self) -> None:
        self.topics_by_id: dict[str, str] = {}
        self.topics_by_name: dict[str, str] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.partition_counts: dict[str, int] = {}
        self.assignments: dict[tuple[str, int], PartitionAssignment] = {}
        self.feature_levels: dict[str, int] = {}
        self.unknown: dict[str, int] = {}
        self.pending: list[tuple[rt.MetadataRecord | _UnknownRun, int]] | None = None
        self.problems: list[str] = []

    def offer_unknown(self, counts: Mapping[int, int]) -> None:
        """Count records kept generic (api key -> how many), now or when their transaction ends."""
        if self.pending is not None:
            self.pending.append((_UnknownRun(counts), -1))
        else:
            self._count(counts)

    def _count(self, counts: Mapping[int, int]) -> None:
        for api_key, count in counts.items():
            name = rt.API_KEY_NAMES.get(api_key) or f"api key {api_key}"
            self.unknown[name] = self.unknown.get(name, 0) + count

    def offer(self, record: rt.MetadataRecord, offset: int = -1) -> None:
        """Apply a record now, or hold it while a metadata transaction is open."""
        if isinstance(record, rt.UnknownMetadataRecord):
            if record.api_key == BEGIN_TRANSACTION_API_KEY:
                self.pending = []
                return
            if record.api_key in (END_TRANSACTION_API_KEY, ABORT_TRANSACTION_API_KEY):
                held, self.pending = self.pending or [], None
                if record.api_key == END_TRANSACTION_API_KEY:
                    for item, at in held:
                        if isinstance(item, _UnknownRun):
                            self._count(item.counts)
                        else:
                            self.apply(item, at)
                return
        if self.pending is not None:
            self.pending.append((record, offset))
        else:
            self.apply(record, offset)

    def apply(self, record: rt.MetadataRecord, offset: int = -1) -> None:
        if isinstance(record, rt.TopicRecord):
            self.topics_by_id[record.topic_id] = record.name
            self.topics_by_name[record.name] = record.topic_id
        elif isinstance(record, rt.RemoveTopicRecord):
            name = self.topics_by_id.pop(record.topic_id, None)
            self.partition_counts.pop(record.topic_id, None)
            self.assignments = {k: v for k, v in self.assignments.items() if k[0] != record.topic_id}
            if name is not None and self.topics_by_name.get(name) == record.topic_id:
                del self.topics_by_name[name]
                self.configs.pop((rt.RESOURCE_TYPE_TOPIC, name), None)
        elif isinstance(record, rt.ConfigRecord):
            configs = self.configs.setdefault((record.resource_type, record.resource_name), {})
            if record.value is None:
                configs.pop(record.name, None)
            else:
                configs[record.name] = record.value
        elif isinstance(record, rt.PartitionRecord):
            count = self.partition_counts.get(record.topic_id, 0)
            self.partition_counts[record.topic_id] = max(count, record.partition_id + 1)
            self.assignments[(record.topic_id, record.partition_id)] = PartitionAssignment(
                record.replicas, record.isr, record.leader, offset)
        elif isinstance(record, rt.PartitionChangeRecord):
            self._change(record, offset)
        elif isinstance(record, rt.FeatureLevelRecord):
            self.feature_levels[record.name] = record.feature_level
        elif isinstance(record, rt.UnknownMetadataRecord):
            self._unknown(record)

    def _change(self, record: rt.PartitionChangeRecord, offset: int) -> None:
        """A PartitionChangeRecord's fields over the partition's state (None / -2: unchanged)."""
        key = (record.topic_id, record.partition_id)
        now = self.assignments.get(key)
        if now is None:
            return  # a partition whose PartitionRecord is not in the history read: nothing to change
        self.assignments[key] = PartitionAssignment(
            now.replicas if record.replicas is None else record.replicas,
            now.isr if record.isr is None else record.isr,
            now.leader if record.leader == NO_LEADER_CHANGE else record.leader, offset)

    def _unknown(self, record: rt.UnknownMetadataRecord) -> None:
        self._count({record.api_key: 1})
        if record.api_key in (2, 4, 9):  # a newer version of a record that shapes configs
            name = record.name or f"api key {record.api_key}"
            self.problems.append(f"{name} version {record.version} is newer than kcompact reads")

    def freeze(self, snapshot: Path | None, end_offset: int, gap: str | None,
               later_missing: bool = False) -> MetadataState:
        reasons = ([gap] if gap else []) + self.problems
        if self.pending is not None:
            self.pending = None  # an unterminated transaction at the tail is not applied
        return MetadataState(
            topics_by_id=dict(self.topics_by_id), topics_by_name=dict(self.topics_by_name),
            topic_configs={n: dict(c) for (t, n), c in self.configs.items()
                           if t == rt.RESOURCE_TYPE_TOPIC and c},
            broker_configs={n: dict(c) for (t, n), c in self.configs.items()
                            if t == rt.RESOURCE_TYPE_BROKER and c},
            partition_counts=dict(self.partition_counts), feature_levels=dict(self.feature_levels),
            assignments=dict(self.assignments),
            snapshot=snapshot, end_offset=end_offset, complete=not reasons,
            unresolved_reason="; ".join(reasons) or None, unknown_record_counts=dict(self.unknown),
            later_records_missing=later_missing or bool(self.problems),
        )  # fmt: skip


def _kinds() -> bytes:
    """What :func:`accel.metadata_rows` does with a record, by api key: 255 the replay reads it; ``v`` it is
    passed over below version ``v`` (a kind ``records`` decodes but no rule of the replay applies, e.g. a
    RegisterBrokerRecord), counted in ``unknown_record_counts`` from ``v`` on (0: every version)."""
    table = bytearray(256)
    for api_key, highest in kr.DECODED_VERSIONS.items():
        table[api_key] = highest + 1
    for api_key in READ_API_KEYS:
        table[api_key] = READ
    return bytes(table)


KINDS = _kinds()


def _kind(api_key: int, version: int) -> int:
    """READ, PASSED or COUNTED: :data:`KINDS`' verdict on one record, for the reference walk."""
    kind = KINDS[api_key] if api_key < len(KINDS) else 0
    return READ if kind == READ else PASSED if version < kind else COUNTED


def _value_error(err: CorruptRecordError, path: Path, batch_position: int, offset: int) -> CorruptRecordError:
    return CorruptRecordError(f"record value at position {err.position}: {err.message}",
                              path=path, position=batch_position, offset=offset)  # fmt: skip


def _decode_value(path: Path, batch_position: int, offset: int, value: Buffer | None) -> rt.MetadataRecord:
    try:
        return kr.decode_metadata_record(value)
    except CorruptRecordError as err:
        raise _value_error(err, path, batch_position, offset) from err


def _read_batch(path: Path, batch: RecordBatch, start: int, replayer: _Replayer) -> None:
    """The records at or after ``start`` of a data batch :func:`accel.metadata_rows` did not take
    (compressed, or one the reference refuses with its error), offered as the kernel's rows would be."""
    try:
        records = decode_records(batch)
    except CorruptDataError as err:
        raise err.located(path, batch.position) from err
    for record in records:
        try:
            api_key, version, _ = kr.decode_metadata_frame(record.value)
        except CorruptRecordError as err:
            raise _value_error(err, path, batch.position, record.offset) from err
        kind = _kind(api_key, version)
        if record.offset < start or kind == PASSED:
            continue
        if kind == COUNTED:
            replayer.offer_unknown({api_key: 1})
        else:
            replayer.offer(_decode_value(path, batch.position, record.offset, record.value), record.offset)


def _offer_rows(log: LogFile, rows_bytes: bytes, unknown_bytes: bytes, replayer: _Replayer) -> None:
    """The rows of :func:`accel.metadata_rows` offered in order: each read record decoded, the unknown
    records between two of them counted at once (they share one transaction state)."""
    rows, unknown, counted = array("q", rows_bytes), array("q", unknown_bytes), 0
    for at in range(0, len(rows), METADATA_ROW):
        offset, _, _, value_start, value_end, before, batch_position = rows[at : at + METADATA_ROW]
        if before > counted:
            replayer.offer_unknown(Counter(unknown[counted:before]))
            counted = before
        replayer.offer(_decode_value(log.path, batch_position, offset, log.buffer[value_start:value_end]),
                       offset)
    if len(unknown) > counted:
        replayer.offer_unknown(Counter(unknown[counted:]))


class _Walk:
    """Where a replay of one file stands: the kernel's arguments, and what the batches read so far moved."""

    __slots__ = ("control_stops", "next_offset", "read_before", "start")

    def __init__(self, start: int, next_offset: int, control_stops: bool, read_before: bool) -> None:
        self.start, self.next_offset = start, next_offset
        self.control_stops, self.read_before = control_stops, read_before


def _other_batches(log: LogFile, walk: _Walk, replayer: _Replayer) -> Iterator[RecordBatch]:
    """Replay through :func:`accel.metadata_rows` what it takes of ``log``, a window of bytes at a time (the
    pages behind let go, as :meth:`LogFile.walk_headers`); yield each batch it stops at, read by the reference
    (all of them where the kernel is off), for the caller to replay. Only v2 batches: a metadata log holds
    nothing else."""
    position, size = 0, log.size_in_bytes
    while position < size:
        window_end = min(size, position + HEADER_WINDOW)
        found = accel.metadata_rows(log.buffer, position, window_end, walk.start, walk.next_offset,
                                    walk.control_stops, KINDS)  # fmt: skip
        if found is not None:
            position, walk.next_offset, taken, rows, unknown = found
            walk.read_before = walk.read_before or taken > 0
            _offer_rows(log, rows, unknown, replayer)
            log.forget_before(position)
            if position >= window_end:
                continue
        for batch in log.iter_batches(position):
            if not isinstance(batch, RecordBatch):
                raise CorruptBatchError(
                    f"metadata log entry has magic {batch.magic}; expected 2, found {batch.magic}",
                    path=log.path, position=batch.position)
            yield batch
            position = batch.position + batch.batch_length + LOG_OVERHEAD
            if found is not None:
                break  # the kernel again from the next batch
        else:
            return  # the end of the file (or a tail of zero bytes)


def _files(directory: Path, kind: str) -> list[tuple[int, Path]]:
    """Live files of one kind, in offset order (``.deleted``/``.cleaned``/``.swap`` left out)."""
    found = []
    for entry in directory.iterdir():
        parsed = parse_segment_file_name(entry.name)
        if parsed is not None and parsed.kind == kind and parsed.temp_suffix is None:
            found.append((parsed.base_offset, entry.name, entry))
    return [(offset, path) for offset, _, path in sorted(found)]


def _read_snapshot(path: Path, replayer: _Replayer) -> bool:
    """Replay a snapshot file; True when it ends with its SNAPSHOT_FOOTER control record."""
    footer, walk = False, _Walk(INT64_MIN, INT64_MAX, control_stops=True, read_before=False)
    with LogFile(path) as log:
        for batch in _other_batches(log, walk, replayer):
            if walk.read_before:  # data batches the kernel took since the last control batch
                footer, walk.read_before = False, False
            if batch.is_control:
                try:
                    keys = [ControlRecordKey.parse(r.key).type for r in decode_records(batch)]
                except CorruptDataError as err:
                    raise err.located(path, batch.position) from err
                footer = ControlRecordType.SNAPSHOT_FOOTER in keys
                continue
            footer = False
            _read_batch(path, batch, INT64_MIN, replayer)
    return footer and not walk.read_before


def _replay_log(
    segments: list[tuple[int, Path]], start: int, replayer: _Replayer, *, read_before: bool = False
) -> tuple[int, str | None, bool]:
    """Replay segment records at or after ``start``; returns the end offset, the first gap found, and
    whether a gap follows records already read (a snapshot's, with ``read_before``, or the log's)."""
    walk = _Walk(start, start, control_stops=False, read_before=read_before)
    gap, later_gap = None, False
    for _, path in segments:
        with LogFile(path) as log:
            for batch in _other_batches(log, walk, replayer):
                if batch.last_offset < start:
                    continue  # already in the snapshot
                if batch.base_offset > walk.next_offset:
                    later_gap = later_gap or walk.read_before
                    if gap is None:
                        gap = (f"the metadata log jumps from offset {walk.next_offset} to "
                               f"{batch.base_offset} in {path.name}; records in between are unknown")  # fmt: skip
                walk.read_before = True
                walk.next_offset = max(walk.next_offset, batch.next_offset)
                if not batch.is_control:
                    _read_batch(path, batch, start, replayer)
    return walk.next_offset, gap, later_gap


def load_metadata_state(metadata_partition_dir: str | os.PathLike[str]) -> MetadataState:
    """Replay a ``__cluster_metadata-0`` directory: newest snapshot, then the log after it.

    Args:
        metadata_partition_dir: the metadata partition directory (under ``metadata.log.dir``).

    Returns:
        The state; ``complete`` is False (with ``unresolved_reason``) when the history is cut:
        no snapshot and a log that does not start at offset 0, a gap, a snapshot without its
        footer, or a config-shaping record of a version kcompact does not read.

    Raises:
        ConfigError: the directory does not exist.
        CorruptDataError: (a subclass) a batch or record that does not parse, naming the file.
    """
    directory = Path(metadata_partition_dir)
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a directory; expected the __cluster_metadata-0 dir")
    replayer = _Replayer()
    snapshots = _files(directory, "checkpoint")
    start, snapshot, problem = 0, None, None
    if snapshots:
        start, snapshot = snapshots[-1]
        if not _read_snapshot(snapshot, replayer):
            problem = f"snapshot {snapshot.name} does not end with a SNAPSHOT_FOOTER"
    segments = _files(directory, "log")
    end_offset, gap, later_gap = _replay_log(segments, start, replayer, read_before=snapshot is not None)
    if not snapshots and not segments:
        gap = "no snapshot and no log segment; nothing to replay"
    elif not snapshots and gap and segments[0][0] > 0:
        gap = (f"no snapshot and the metadata log starts at offset {segments[0][0]}, not 0; "
               f"topics and configs set before it are unknown")  # fmt: skip
    short = _tail_missing(directory, segments, end_offset)
    reason = "; ".join(p for p in (problem, gap, short) if p) or None
    return replayer.freeze(snapshot, end_offset, reason, later_missing=bool(problem or short or later_gap))


def _tail_missing(directory: Path, segments: list[tuple[int, Path]],
                  end_offset: int) -> str | None:
    """Why the snapshot and the segments present fall short of the log end the log's own files show.

    A broker's ``UnifiedLog`` leaves traces of how far its log went beside the segments: an index
    (``.index``, ``.timeindex``, ``.txnindex``) is named by its segment's base offset, a producer
    snapshot (``.snapshot``, ``ProducerStateManager.takeSnapshot`` at every roll and at shutdown) by
    the log end offset it was taken at, ``leader-epoch-checkpoint`` holds the start offset of each
    leader epoch, and the log dir's ``replication-offset-checkpoint`` /
    ``recovery-point-offset-checkpoint`` may hold an offset of the partition. Each is an offset the
    log reached; an index past the last ``.log`` present is the last segment, gone (a missing
    segment before a present one is a gap :func:`_replay_log` reports). ``quorum-state`` holds votes
    and epochs, no offset, so it proves nothing here.

    Returns:
        None when every trace is within ``end_offset`` (the replay reached the log's end), else why not.
    """
    last_log = segments[-1][0] if segments else -1
    furthest, evidence = end_offset, ""
    for kind in ("index", "timeindex", "txnindex", "snapshot"):
        for base, path in _files(directory, kind):
            if kind != "snapshot" and base > last_log:  # an earlier one is a gap the replay reports
                return (f"{path.name} is here but its segment {base:020d}.log is not: the metadata "
                        f"records from offset {base} on are unknown")  # fmt: skip
            if base > furthest:
                furthest, evidence = base, path.name
    traces, unreadable = _checkpoint_traces(directory)
    if unreadable is not None:
        return f"{unreadable}: where the metadata log ends is not proven"
    for offset, name in traces:
        if offset > furthest:
            furthest, evidence = offset, name
    if furthest <= end_offset:
        return None
    return (f"{evidence} shows the metadata log reached offset {furthest}, but the snapshot and the "
            f"log segments present end at {end_offset}: the records in between are unknown")


def _checkpoint_traces(directory: Path) -> tuple[list[tuple[int, str]], str | None]:
    """Offsets of the metadata partition in its checkpoint files: ``(offset, what says so)`` pairs,
    and why one of those files that is there cannot be read (None when all could)."""
    traces: list[tuple[int, str]] = []
    name = parse_partition_dir_name(directory.name)
    try:
        epochs = read_leader_epoch_checkpoint(directory / LEADER_EPOCH_CHECKPOINT)
        traces += [(offset, f"{LEADER_EPOCH_CHECKPOINT} (epoch {epoch})") for epoch, offset in epochs]
        if name is not None:
            for file in (REPLICATION_CHECKPOINT, RECOVERY_POINT_CHECKPOINT):
                offset = read_offset_checkpoint(directory.parent / file).get((name.topic, name.partition))
                traces += [] if offset is None else [(offset, f"{directory.parent.name}/{file}")]
    except KcompactError as err:
        return traces, str(err)
    return traces, None


@functools.lru_cache(maxsize=STATE_CACHE_SIZE)
def _replay_once(directory: Path, _listing: tuple[tuple[str, int, int], ...]) -> MetadataState:
    return load_metadata_state(directory)


def cached_metadata_state(metadata_partition_dir: str | os.PathLike[str]) -> MetadataState:
    """:func:`load_metadata_state`, replayed again only when a file of the directory changed.

    Args:
        metadata_partition_dir: a ``__cluster_metadata-0`` directory.

    Returns:
        The state, shared between callers (its mappings must not be changed).

    Raises:
        ConfigError: the directory does not exist or cannot be listed.
        CorruptDataError: (a subclass) a batch or record that does not parse, naming the file.
    """
    directory = Path(metadata_partition_dir).absolute()
    try:
        listing = tuple(sorted(
            (entry.name, stat.st_size, stat.st_mtime_ns)
            for entry in os.scandir(directory) for stat in (entry.stat(),)))  # fmt: skip
    except OSError as err:
        raise ConfigError(f"{directory}: not a directory; expected the __cluster_metadata-0 dir "
                          f"({err.strerror})") from err  # fmt: skip
    return _replay_once(directory, listing)
