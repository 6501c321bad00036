"""``inspect dump`` for the files of a log dir that are not segments: producer snapshots and checkpoints.

``kafka-dump-log`` reads producer ``<offset>.snapshot`` files (``DumpLogSegments.dumpProducerIdSnapshot``);
the checkpoint files Kafka keeps beside the segments are dumped here as well, each entry one item:

* ``<offset>.snapshot`` — ``producer_snapshot_entry``: ``file, producer_id, producer_epoch,
  coordinator_epoch, current_txn_first_offset`` (null: none), ``last_timestamp``, then the entry's batch
  metadata as Kafka's ``ProducerStateManager.readSnapshot`` rebuilds it (null fields when its
  ``last_offset`` is -1): ``first_sequence, last_sequence, last_offset, offset_delta, timestamp``;
* ``leader-epoch-checkpoint`` — ``leader_epoch_entry``: ``file, epoch, start_offset``;
* ``cleaner-offset-checkpoint``, ``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``,
  ``log-start-offset-checkpoint`` — ``offset_checkpoint_entry``: ``file, topic, partition, offset``;
* ``partition.metadata`` — ``partition_metadata``: ``file, version, topic_id``;
* ``quorum-state`` (KRaft's vote state, in ``__cluster_metadata-0``) and a log dir's ``meta.properties`` —
  ``property``: ``file, key, value``, one per JSON field or property, as the file holds them.

Each file starts with a ``file`` item (``base_offset`` the snapshot's offset, null for the others); a file
that does not decode gives a ``problem`` item naming the position, as Kafka's readers refuse it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from kcompact.config.server_properties import decode_properties
from kcompact.errors import CorruptDataError, KcompactError
from kcompact.inspect.dump.items import Item, file_item, problem_item
from kcompact.records.varint import INT32_MAX
from kcompact.segment.checkpoint import decode_leader_epoch_checkpoint, decode_offset_checkpoint
from kcompact.segment.metadata_files import PARTITION_METADATA_FILE, read_partition_metadata
from kcompact.segment.partition import (
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_CHECKPOINT,
)
from kcompact.segment.snapshot import ProducerSnapshotEntry, decode_producer_snapshot

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
OFFSET_CHECKPOINTS = (CLEANER_CHECKPOINT, REPLICATION_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                      LOG_START_CHECKPOINT)
QUORUM_STATE = "quorum-state"
META_PROPERTIES = "meta.properties"
NAMED_FILES = (LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA_FILE, QUORUM_STATE, META_PROPERTIES,
               *OFFSET_CHECKPOINTS)
"""Files recognised by their whole name (a snapshot by its ``.snapshot`` suffix)."""


def dump_named_file(path: Path) -> Iterator[Item]:
    """Dump a checkpoint file or ``partition.metadata`` (one of :data:`NAMED_FILES`).

    Args:
        path: the file.

    Yields:
        A ``file`` item, then one item per entry, or a ``problem`` item.
    """
    if path.name == LEADER_EPOCH_CHECKPOINT:
        yield from _dump(path, "leader-epoch-checkpoint", None, _leader_epochs)
    elif path.name == PARTITION_METADATA_FILE:
        yield from _dump(path, "partition-metadata", None, _partition_metadata)
    elif path.name == QUORUM_STATE:
        yield from _dump(path, "quorum-state", None, _quorum_state)
    elif path.name == META_PROPERTIES:
        yield from _dump(path, "meta-properties", None, _meta_properties)
    else:
        yield from _dump(path, "offset-checkpoint", None, _offsets)


def dump_producer_snapshot(path: Path, offset: int) -> Iterator[Item]:
    """Dump a producer ``<offset>.snapshot`` as ``kafka-dump-log`` does.

    Args:
        path: the file.
        offset: the offset in its name.

    Yields:
        A ``file`` item, then one ``producer_snapshot_entry`` per producer, or a ``problem`` item.
    """
    yield from _dump(path, "snapshot", offset, _snapshot_entries)


def _dump(path: Path, kind: str, offset: int | None,
          entries: Callable[[Path, bytes], list[Item]]) -> Iterator[Item]:
    try:
        data = path.read_bytes()
    except OSError as err:
        yield problem_item(path, None, f"cannot read the file: {err.strerror or err}")
        return
    yield file_item(path, kind, offset, len(data))
    try:
        yield from entries(path, data)
    except CorruptDataError as err:
        yield problem_item(path, err.position, err.message)
    except KcompactError as err:
        yield problem_item(path, None, str(err).removeprefix(f"{path}: "))


def _snapshot_entries(path: Path, data: bytes) -> list[Item]:
    return [_snapshot_item(path, entry) for entry in decode_producer_snapshot(data)]


def _snapshot_item(path: Path, e: ProducerSnapshotEntry) -> Item:
    batch = e.last_offset >= 0  # ProducerStateManager.readSnapshot: no batch metadata without one
    return {
        "type": "producer_snapshot_entry", "file": str(path), "producer_id": e.producer_id,
        "producer_epoch": e.producer_epoch, "coordinator_epoch": e.coordinator_epoch,
        "current_txn_first_offset": e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None,
        "last_timestamp": e.timestamp,
        "first_sequence": decrement_sequence(e.last_sequence, e.offset_delta) if batch else None,
        "last_sequence": e.last_sequence if batch else None,
        "last_offset": e.last_offset if batch else None,
        "offset_delta": e.offset_delta if batch else None,
        "timestamp": e.timestamp if batch else None,
    }


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's ``DefaultRecordBatch.decrementSequence``: the inverse of the wrap at 2**31 - 1."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _leader_epochs(path: Path, data: bytes) -> list[Item]:
    return [{"type": "leader_epoch_entry", "file": str(path), "epoch": epoch, "start_offset": start}
            for epoch, start in decode_leader_epoch_checkpoint(data)]


def _offsets(path: Path, data: bytes) -> list[Item]:
    return [{"type": "offset_checkpoint_entry", "file": str(path), "topic": topic, "partition": partition,
             "offset": offset} for (topic, partition), offset in decode_offset_checkpoint(data).items()]


def _partition_metadata(path: Path, _data: bytes) -> list[Item]:
    topic_id = read_partition_metadata(path)  # the one reader: it checks the version and the id
    return [{"type": "partition_metadata", "file": str(path), "version": 0, "topic_id": topic_id}]


def _quorum_state(path: Path, data: bytes) -> list[Item]:
    """KRaft's ``quorum-state`` (``FileQuorumStateStore``): one JSON object, each field a ``property``."""
    try:
        state = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise CorruptDataError(f"not JSON ({err}); expected KRaft's quorum state object", path=path,
                               position=getattr(err, "pos", None)) from err
    if not isinstance(state, dict):
        raise CorruptDataError(f"expected a JSON object, found {type(state).__name__}", path=path, position=0)
    return [_property(path, key, value) for key, value in state.items()]


def _meta_properties(path: Path, data: bytes) -> list[Item]:
    """A log dir's ``meta.properties`` (``MetaProperties``): each property, as Java reads the file."""
    try:
        properties = decode_properties(data.decode("latin-1"))
    except KcompactError as err:
        raise CorruptDataError(str(err), path=path) from err
    return [_property(path, key, value) for key, value in properties.items()]


def _property(path: Path, key: str, value: object) -> Item:
    return {"type": "property", "file": str(path), "key": key, "value": value}
