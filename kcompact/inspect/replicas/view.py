"""One replica's copy of a partition as the comparison needs it: offsets, records, transactions, keys.

Why: replicas are compared on what they hold (records at the same offset), and on what a consumer of
each would see (the latest value per key, read_committed). Compaction makes the bytes of equivalent
replicas differ (each cleans on its own clock), so the consumer's view is the one that tells real
divergence from legitimate difference; it is computed here, one walk over the replica's records.

The walk reads every record up to the replica's own high watermark (its ``replication-offset-checkpoint``
entry; the log end when it has none, with a note). Below the comparison limit (the lowest high watermark
of all replicas) it keeps:

* a digest of each record (offset, timestamp, key, value, headers; for a control record its type), for
  the record-by-record comparison;
* each transactional data record's outcome: committed, aborted, or open (a transaction whose marker is not
  in the log: a read_committed consumer stops before it, at the last stable offset). The transactions are
  the spans :func:`kcompact.log.state.log_state.load_log_state` finds (first data batch to marker),
  as ``spark export``'s read_committed reader uses them;
* the latest committed record of each key (read_committed: no aborted or open data, no control records):
  its offset and its value's digest, None for a tombstone (a consumer sees the key absent either way).

At or above the limit it notes only which keys have a record there: the replica's cleaner (bounded by its
own high watermark, ``UnifiedLog.lastStableOffset``) may have removed that key's older records below the
limit because of it, so its state at the limit cannot be told and the key is not compared for it.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import field
from pathlib import Path

from kcompact.config.topic_config import TopicConfig
from kcompact.errors import CorruptDataError
from kcompact.log.state.log_state import TxnSpan, load_log_state
from kcompact.records.batch_header import RecordBatch
from kcompact.records.legacy import LegacyEntry, legacy_records
from kcompact.records.record import Record, decode_records
from kcompact.segment.checkpoint import read_leader_epoch_checkpoint
from kcompact.segment.partition import Partition
from kcompact.value import frozen, mutable

__all__ = [
    "ABORTED",
    "COMMITTED",
    "OPEN",
    "KeyState",
    "ReplicaFacts",
    "ReplicaView",
    "read_facts",
    "read_view",
    "value_digest",
]

COMMITTED, ABORTED, OPEN = "committed", "aborted", "open"  # a transactional record's outcome
DIGEST_BYTES = 8


def value_digest(value: bytes | None) -> str | None:
    """A short digest of a record value (BLAKE2b, 8 bytes, hex); None for a tombstone."""
    return None if value is None else hashlib.blake2b(value, digest_size=DIGEST_BYTES).hexdigest()


@frozen
class KeyState:
    """A key's latest committed record on one replica: its offset and value digest (None: tombstone)."""

    offset: int
    value_digest: str | None


@frozen
class ReplicaFacts:
    """What the report shows of one replica before comparing (read from headers and checkpoints)."""

    path: str
    log_start_offset: int
    log_end_offset: int
    high_watermark: int | None  # its replication-offset-checkpoint entry; None when it has none
    leader_epochs: tuple[tuple[int, int], ...]  # leader-epoch-checkpoint: (epoch, start offset)
    last_stable_offset: int  # the high watermark, or the first offset of the earliest open transaction
    open_transactions: tuple[tuple[int, int], ...]  # (producer id, first offset) below the high watermark
    warnings: tuple[str, ...] = ()

    @property
    def readable_end(self) -> int:
        """How far its consumers read: the high watermark (at most the log end, as Kafka clamps it on
        load), or the log end without one."""
        if self.high_watermark is None:
            return self.log_end_offset
        return min(self.high_watermark, self.log_end_offset)


@mutable
class ReplicaView:
    """One replica's records below the comparison limit (see the module docstring)."""

    records: dict[int, bytes] = field(default_factory=dict)  # offset -> record digest
    outcomes: dict[int, tuple[int, str]] = field(default_factory=dict)  # offset -> (producer id, outcome)
    latest: dict[bytes, KeyState] = field(default_factory=dict)  # read_committed, latest per key
    later_keys: set[bytes] = field(default_factory=set)  # keys with a record at or above the limit


def read_facts(partition: Partition) -> tuple[ReplicaFacts, list[TxnSpan]]:
    """The replica's offsets, high watermark, lineage, transactions (one walk over batch headers).

    Raises:
        KcompactError: a segment, checkpoint or marker that does not parse (names file and position).
    """
    state = load_log_state(partition, TopicConfig.defaults())
    hw = partition.checkpointed(partition.log_dir.replication_checkpoint)
    readable = state.log_end_offset if hw is None else min(hw, state.log_end_offset)
    open_txns = tuple(sorted((s.producer_id, s.first_offset) for s in state.transactions
                             if s.marker_offset is None and s.first_offset < readable))
    lso = min([readable, *(first for _pid, first in open_txns)])
    no_hw = (f"{partition.path}: no replication-offset-checkpoint entry; its log end stands for its "
             "high watermark")
    warnings = () if hw is not None else (no_hw,)
    epochs = read_leader_epoch_checkpoint(partition.path / "leader-epoch-checkpoint")
    facts = ReplicaFacts(str(partition.path), state.log_start_offset, state.log_end_offset, hw,
                         tuple(epochs), lso, open_txns, warnings)
    return facts, state.transactions


def read_view(partition: Partition, facts: ReplicaFacts, spans: list[TxnSpan], start: int,
              limit: int) -> ReplicaView:
    """Walk the replica's records from ``start`` up to its readable end; keep what the comparison needs.

    Args:
        partition: the replica's partition directory.
        facts: from :func:`read_facts`.
        spans: the transactions :func:`read_facts` found.
        start: where the comparison starts (the highest log start of all replicas: below it, one of
            them deleted the records by retention, which is no divergence).
        limit: the comparison limit (the lowest readable end of all replicas).

    Returns:
        The view.

    Raises:
        CorruptDataError: a batch that fails its CRC (``BatchCrcError``), or a batch or record that
            does not parse (names the file and position).
    """
    view = ReplicaView()
    outcome_of = _Outcomes(spans)
    for segment in partition.segments:
        with segment.open() as log:
            for batch in log.iter_batches():
                if batch.next_offset <= start:
                    continue
                if batch.base_offset >= facts.readable_end:
                    return view
                log.check_crc(batch)  # a flipped byte is corruption, never a divergence
                _add_batch(view, batch, _records(batch, log.path), outcome_of(batch), start, limit)
    return view


def _add_batch(view: ReplicaView, batch: RecordBatch | LegacyEntry, records: list[Record],
               outcome: str, start: int, limit: int) -> None:
    for record in records:
        if record.offset < start:
            continue
        if record.offset >= limit:
            if not batch.is_control and record.key is not None:
                view.later_keys.add(record.key)
            continue
        view.records[record.offset] = _record_digest(record, batch.is_control)
        if batch.is_control:
            continue
        if batch.is_transactional:
            view.outcomes[record.offset] = (batch.producer_id, outcome)
        if outcome == COMMITTED and record.key is not None:
            view.latest[record.key] = KeyState(record.offset, value_digest(record.value))


def _record_digest(record: Record, is_control: bool) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(b"c" if is_control else b"d")
    h.update(record.timestamp.to_bytes(8, "big", signed=True))
    for part in (record.key, record.value, *(x for hd in record.headers for x in (hd.key, hd.value))):
        h.update(b"\x00" if part is None else len(part).to_bytes(4, "big") + part)
    return h.digest()


class _Outcomes:
    """A data batch's outcome from the transactions of the log (``spark export``'s read_committed rule)."""

    def __init__(self, spans: list[TxnSpan]) -> None:
        self._by_producer: dict[int, list[TxnSpan]] = {}
        for span in sorted(spans, key=lambda s: s.first_offset):
            self._by_producer.setdefault(span.producer_id, []).append(span)
        self._firsts = {pid: [s.first_offset for s in found] for pid, found in self._by_producer.items()}

    def __call__(self, batch: RecordBatch | LegacyEntry) -> str:
        if batch.is_control or not batch.is_transactional or batch.producer_id < 0:
            return COMMITTED
        spans = self._by_producer.get(batch.producer_id, [])
        i = bisect.bisect_right(self._firsts.get(batch.producer_id, []), batch.base_offset) - 1
        if i < 0:
            return COMMITTED  # begun before anything left in the log: its marker went with it
        span = spans[i]
        if span.marker_offset is None:
            return OPEN
        if batch.base_offset > span.marker_offset:
            return COMMITTED  # after its own marker: a transaction whose start was compacted away
        return ABORTED if span.aborted else COMMITTED


def _records(batch: RecordBatch | LegacyEntry, path: Path) -> list[Record]:
    try:
        if isinstance(batch, LegacyEntry):
            return legacy_records(batch)
        return decode_records(batch)
    except CorruptDataError as err:
        raise (err.located(path, batch.position) if err.path is None else err) from err
