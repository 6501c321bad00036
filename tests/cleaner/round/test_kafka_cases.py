"""Kafka's own cleaner edge cases (LogCleanerTest, LogCleanerManagerTest), end to end through ``clean_partition``.

Each test ports one case of Kafka's ``LogCleanerTest`` / ``LogCleanerManagerTest`` (named in its
docstring) onto a real partition directory: ``PartitionBuilder`` for one-shot layouts, and
``LogSim`` — a broker's append path in miniature — where Kafka's test appends between cleanings.
Keys and values are decimal strings as in Kafka's tests, and the assertions are Kafka's: keys in the
log (data records with a key and a value), offsets in the log (every record with a key and a value,
markers included), last offset per batch, last sequence per producer, the aborted transactions of
the ``.txnindex`` files.

Mapping Kafka's harness onto an offline clean:

* Kafka's ``LogToClean(firstDirty, activeBase)`` is a clean whose first dirty offset comes from
  ``cleaner-offset-checkpoint`` (written by the previous clean) with the high watermark at the log
  end.
* Kafka's ``FakeOffsetMap.clear()`` keeps the map's latest offset, so where Kafka re-cleans "from"
  the active segment's base (an empty dirty range) it re-filters the whole log with an empty map.
  The ports re-clean with ``from_start``: the earlier pass already removed every superseded record,
  so the survivors are the same, and the batch-level rules (markers, horizons, empty batches) are
  exercised over the whole log as in Kafka.
* Kafka's unit tests never run the producer-expiration check: every producer stays active. The
  transactional ports raise ``producer.id.expiration.ms`` to its maximum (24.8 days) so that two
  passes a day apart see the same producers.
* Kafka 4.1's rule of KAFKA-17076 (``Cleaner.cleanInto``'s ``checkBatchRetention``) applies throughout: the batch whose
next offset
  is the round's first uncleanable offset is kept, as an empty batch if nothing in it survives.

After every clean, :func:`clean` reads each segment back with kafka-python (every batch's CRC valid)
and checks that each inactive segment's ``.index`` and ``.timeindex`` equal what ``index_builder``
derives from its ``.log``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka.record import MemoryRecords

from kcompact.cleaner.round.options import CleanOptions, CleanResult
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import TopicConfig, defaults_with_overrides
from kcompact.errors import CorruptBatchError, CorruptDataError, TruncatedDataError
from kcompact.log.rules.ranges import (
    RULE_HIGH_WATERMARK,
    RULE_MIN_COMPACTION_LAG,
    RULE_OPEN_TRANSACTION,
)
from kcompact.records.batch import iter_batches
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.compression import compress
from kcompact.records.control import ControlRecordKey, ControlRecordType
from kcompact.records.record import Record
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from kcompact.segment.index_builder import build_indexes
from kcompact.segment.offset_index import encode_offset_index
from kcompact.segment.partition import open_partition
from kcompact.segment.time_index import encode_time_index
from kcompact.segment.txn_index import AbortedTxn, read_txn_index
from tests.builders import BASE_TS, PartitionBuilder
from tests.encoders import encode_control_batch, encode_legacy_message, encode_legacy_wrapper
from tests.segment_writer import write_segment

T0 = BASE_TS
NOW = T0 + 10_000_000  # ~2.8 h after the data: producers are active, no horizon has passed
DAY = 86_400_000  # delete.retention.ms default
NEVER_EXPIRE = {"producer.id.expiration.ms": str(2**31 - 1)}
MAGIC_POSITION = 16  # Kafka's Records.MAGIC_OFFSET


def topic_config(overrides: dict[str, str] | None = None) -> TopicConfig:
    """Kafka's defaults, cleanup.policy=compact, plus ``overrides``."""
    config = defaults_with_overrides({"cleanup.policy": "compact", **(overrides or {})})
    return config


# --- reading a partition back the way Kafka's test helpers do (through kafka-python) -------------


@dataclass(frozen=True)
class Seen:
    """One batch as kafka-python reads it, with its records."""

    batch: Any
    records: list[Any]


def log_batches(part: Path) -> list[Seen]:
    """Every batch of every segment, read with kafka-python; each must pass its CRC check."""
    out: list[Seen] = []
    for seg in open_partition(part).segments:
        records = MemoryRecords(seg.log_path.read_bytes())
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc(), (
                f"{seg.log_path}: batch at {batch.base_offset} fails its CRC"
            )
            out.append(Seen(batch, list(batch)))
    return out


def keys_in_log(part: Path) -> list[int]:
    """``LogTestUtils.keysInLog``: keys of data records that have a key and a value."""
    return [
        int(r.key)
        for x in log_batches(part)
        if not x.batch.is_control_batch
        for r in x.records
        if r.key is not None and r.value is not None
    ]


def offsets_in_log(part: Path) -> list[int]:
    """``offsetsInLog``: offsets of every record with a key and a value, transaction markers
    included."""
    return [
        r.offset
        for x in log_batches(part)
        for r in x.records
        if r.key is not None and r.value is not None
    ]


def last_offsets_per_batch(part: Path) -> list[int]:
    return [x.batch.last_offset for x in log_batches(part)]


def batch_base_offsets(part: Path) -> list[int]:
    return [x.batch.base_offset for x in log_batches(part)]


def last_sequences(part: Path) -> dict[int, int]:
    """``lastSequencesInLog``: per producer, the last sequence of its last data batch."""
    return {
        x.batch.producer_id: x.batch.last_sequence
        for x in log_batches(part)
        if not x.batch.is_control_batch and x.batch.has_producer_id()
    }


def aborted_txns(part: Path) -> list[AbortedTxn]:
    """``collectAbortedTransactions`` over the whole log: every ``.txnindex`` entry, segment by
    segment."""
    return [
        txn
        for seg in open_partition(part).segments
        if seg.txn_index_path is not None
        for txn in read_txn_index(seg.txn_index_path)
    ]


def check_segments(part: Path, config: TopicConfig) -> None:
    """Every batch CRC-valid for kafka-python; inactive segments' indexes as Kafka 4.1 builds."""
    log_batches(part)
    for seg in open_partition(part).segments[:-1]:
        with seg.open() as log:
            summaries = [
                (s.position, s.size_in_bytes, s.last_offset, s.max_timestamp)
                for s in log.summaries()
            ]
        offsets, times = build_indexes(
            summaries, base_offset=seg.base_offset, index_interval_bytes=config.index_interval_bytes
        )
        assert seg.index_path is not None and seg.time_index_path is not None
        assert seg.index_path.read_bytes() == encode_offset_index(offsets, seg.base_offset), (
            seg.index_path
        )
        assert seg.time_index_path.read_bytes() == encode_time_index(times, seg.base_offset), (
            seg.time_index_path
        )


def clean(part: Path, config: TopicConfig, now: int = NOW, **options: Any) -> CleanResult:
    """One clean, then the output checks of :func:`check_segments`."""
    result = clean_partition(part, config, CleanOptions(now_ms=now, **options))
    check_segments(part, config)
    return result


def checkpoint_of(part: Path) -> int | None:
    return read_offset_checkpoint(part.parent / "cleaner-offset-checkpoint").get(
        (part.name[:-2], 0)
    )


def segment_files(part: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(part.iterdir()) if p.is_file()}


def s(n: int | str) -> bytes:
    return str(n).encode()


# --- a broker's append path in miniature ---------------------------------------------------------


class LogSim:
    """Append batches to the active segment, roll, and keep the log dir's high watermark at the log
    end.

    Like ``UnifiedLog.appendAsLeader``: offsets are assigned in order, an ABORT marker adds the
    ``AbortedTxn`` Kafka writes to the active segment's ``.txnindex`` (its last stable offset is the
    first offset of the earliest transaction still open, else the marker's offset + 1), and with
    ``segment_bytes`` a batch that would overflow a non-empty active segment rolls it first. The
    cleaner never touches the active segment, so rewriting it keeps the simulation and the directory
    in step; appends are written out when the segment rolls or when :attr:`part` is asked for (the
    way every test reaches the directory).
    """

    def __init__(
        self, log_dir: Path, *, segment_bytes: int | None = None, topic: str = "test"
    ) -> None:
        self.log_dir = log_dir
        self._part = log_dir / f"{topic}-0"
        self._pending = False
        self.topic = topic
        self.segment_bytes = segment_bytes
        self.next_offset = 0
        self.active_base = 0
        self.bases = [0]
        self.active: list[bytes] = []
        self.active_aborted: list[AbortedTxn] = []
        self.open_txns: dict[int, int] = {}
        self.ts = T0
        self._flush()

    @property
    def part(self) -> Path:
        """The partition directory, with every append so far written out."""
        if self._pending:
            self._flush()
        return self._part

    @property
    def segment_count(self) -> int:
        return len(self.bases)

    def append(
        self,
        kvs: list[tuple[bytes | None, bytes | None]],
        *,
        producer_id: int = -1,
        producer_epoch: int = 0,
        sequence: int = -1,
        transactional: bool = False,
        timestamp: int | None = None,
        leader_epoch: int = 0,
    ) -> int:
        """Append one data batch; return its base offset."""
        base = self.next_offset
        ts = self.ts if timestamp is None else timestamp
        records = [Record(base + i, ts, k, v) for i, (k, v) in enumerate(kvs)]
        data = encode_batch(
            records,
            base_offset=base,
            producer_id=producer_id,
            producer_epoch=producer_epoch if producer_id >= 0 else -1,
            base_sequence=sequence,
            is_transactional=transactional,
            partition_leader_epoch=leader_epoch,
        )
        if transactional:
            self.open_txns.setdefault(producer_id, base)
        self._append(data, base + len(kvs))
        return base

    def record(self, key: int, value: int | None, **kw: Any) -> int:
        """Kafka's ``record(key, value)``: a one-record batch (value None: a tombstone)."""
        return self.append([(s(key), None if value is None else s(value))], **kw)

    def producer(
        self, producer_id: int, *, transactional: bool = False, producer_epoch: int = 0
    ) -> Any:
        """Kafka's ``appendIdempotentAsLeader``/``appendTransactionalAsLeader``: key = value,
        sequence from 0."""
        sequence = 0

        def send(keys: list[int]) -> int:
            nonlocal sequence
            base = self.append(
                [(s(k), s(k)) for k in keys],
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                sequence=sequence,
                transactional=transactional,
            )
            sequence += len(keys)
            return base

        return send

    def marker(
        self, producer_id: int, *, commit: bool, producer_epoch: int = 0, leader_epoch: int = 0
    ) -> int:
        offset = self.next_offset
        data = encode_control_batch(
            offset=offset,
            timestamp=self.ts,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            control_type=ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
            partition_leader_epoch=leader_epoch,
        )
        first = self.open_txns.pop(producer_id, None)
        if first is not None and not commit:
            lso = min(self.open_txns.values(), default=offset + 1)
            self.active_aborted.append(AbortedTxn(producer_id, first, offset, lso))
        self._append(data, offset + 1)
        return offset

    def roll(self) -> None:
        """Start a new, empty active segment at the log end (no-op when the active one is empty)."""
        if not self.active:
            return
        self._flush()
        self.active_base = self.next_offset
        self.bases.append(self.active_base)
        self.active, self.active_aborted = [], []
        self._flush()

    def _append(self, data: bytes, next_offset: int) -> None:
        size = sum(map(len, self.active))
        if self.segment_bytes is not None and self.active and size + len(data) > self.segment_bytes:
            self.roll()
        self.active.append(data)
        self.next_offset = next_offset
        self.ts += 1
        self._pending = True

    def _flush(self) -> None:
        self._pending = False
        write_segment(self._part, self.active_base, self.active, aborted=self.active_aborted)
        write_offset_checkpoint(
            self.log_dir / "replication-offset-checkpoint", {(self.topic, 0): self.next_offset}
        )


# --- basic key dedup & grouping -----------------------------------------------------------------


def test_clean_segments_drops_keys_superseded_later_and_reads_every_segment(tmp_path: Path) -> None:
    """testCleanSegments: keys that reappear later go from the older segments; bytes read = their
    sizes."""
    config = topic_config({"internal.segment.bytes": "1024"})
    log = LogSim(tmp_path, segment_bytes=1024)
    while log.segment_count < 4:
        log.record(log.next_offset, log.next_offset)
    first_keys = keys_in_log(log.part)
    superseded = [1, 3, 5, 7, 9]
    for k in superseded:
        log.record(k, 1000 + k)
    log.roll()
    sizes = sum(seg.size_in_bytes for seg in open_partition(log.part).segments[:-1])

    result = clean(log.part, config)

    assert keys_in_log(log.part) == [k for k in first_keys if k not in superseded] + superseded
    assert result.stats.bytes_read == sizes
    assert result.end_offset == log.active_base


def test_partial_segment_clean_makes_progress_one_key_at_a_time(tmp_path: Path) -> None:
    """testPartialSegmentClean: a one-entry map (2 slots × 0.9) ends each round after its key."""
    b = PartitionBuilder("test")
    for k in (0, 1, 0, 1, 0):
        b.batch([(s(k), s(k))])
    b.roll()
    part = b.write(tmp_path / "logdir", cleaner_checkpoint=2)
    config = topic_config()
    expected = [(3, [1, 0, 1, 0], [1, 2, 3, 4]), (4, [0, 1, 0], [2, 3, 4]), (5, [1, 0], [3, 4])]
    for end_offset, keys, offsets in expected:
        result = clean(part, config, dedupe_buffer_size=2 * 24)
        assert result.end_offset == end_offset
        assert checkpoint_of(part) == end_offset
        assert (keys_in_log(part), offsets_in_log(part)) == (keys, offsets)


def test_full_map_ends_the_round_inside_a_batch(tmp_path: Path) -> None:
    """``Cleaner.buildOffsetMap``: the map check runs before every put, so a round can end in the middle of a batch;
    records past the map's latest offset are kept, and the next round starts right there."""
    b = PartitionBuilder("test")
    b.batch([(b"k0", b"a"), (b"k1", b"a"), (b"k2", b"a"), (b"k0", b"b")]).roll()
    b.batch([(b"z", b"1")])
    part = b.write(tmp_path / "logdir")
    config = topic_config()

    first = clean(part, config, dedupe_buffer_size=3 * 24)  # 2 keys
    assert first.end_offset == 2
    assert offsets_in_log(part) == [0, 1, 2, 3, 4]

    second = clean(part, config, dedupe_buffer_size=3 * 24)
    assert second.end_offset == 4
    assert offsets_in_log(part) == [1, 2, 3, 4]
    assert (log_batches(part)[0].batch.base_offset, log_batches(part)[0].batch.last_offset) == (
        0,
        3,
    )


def test_cleaned_segment_is_trimmed_even_with_preallocate(tmp_path: Path) -> None:
    """testSizeTrimmedForPreallocatedAndCompactedTopic: the cleaned .log holds its batches and
    nothing more, whatever preallocate says."""
    b = PartitionBuilder("test")
    for k in (0, 1, 0, 1, 0):
        b.batch([(s(k), s(k))])
    b.roll()
    part = b.write(tmp_path / "logdir", cleaner_checkpoint=2)
    config = topic_config({"internal.segment.bytes": "1024", "preallocate": "true"})
    clean(part, config, dedupe_buffer_size=2 * 24)
    seg0 = open_partition(part).segments[0].log_path.read_bytes()
    assert len(seg0) == sum(x.size_in_bytes for x in iter_batches(seg0)) < 1024


def test_build_partial_offset_map_from_offset_two(tmp_path: Path) -> None:
    """testBuildPartialOffsetMap: 3 slots hold 2 keys; mapped from offset 2, the round ends at 4."""
    b = PartitionBuilder("test")
    for k in range(5):
        b.batch([(s(k), s(k))])
    b.roll()
    part = b.write(tmp_path / "logdir", cleaner_checkpoint=2)
    result = clean(part, topic_config(), dedupe_buffer_size=3 * 24)
    assert result.end_offset == 4
    assert result.stats.map_entries == 2
    assert keys_in_log(part) == [0, 1, 2, 3, 4]  # keys below offset 2 are not in the map: kept


def test_log_cleaner_stats(tmp_path: Path) -> None:
    """testLogCleanerStats: 4 slots hold 3 keys; 5 records read, 2 written, end offset 5."""
    b = PartitionBuilder("test")
    for k in (0, 1, 0, 1, 0):
        b.batch([(s(k), s(k))])
    b.roll()
    part = b.write(tmp_path / "logdir", cleaner_checkpoint=2)
    initial_size = open_partition(part).size_in_bytes

    result = clean(part, topic_config(), dedupe_buffer_size=4 * 24)

    stats = result.stats
    assert result.end_offset == 5
    assert (stats.records_read, stats.records_written, stats.invalid_records) == (5, 2, 0)
    assert stats.bytes_read == initial_size
    assert stats.bytes_written == open_partition(part).size_in_bytes
    assert stats.elapsed_s >= 0


@pytest.mark.parametrize(
    "layout",
    [
        ((0, range(10)), (11, range(11, 12))),
        ((0, range(10)), (15, range(15, 25)), (30, range(30, 31))),
    ],
    ids=["gap-9-to-11", "gaps-in-two-segments"],
)
def test_cleaning_beyond_missing_offsets(
    tmp_path: Path, layout: tuple[tuple[int, range], ...]
) -> None:
    """testCleaningBeyondMissingOffsets: the next dirty offset jumps the gaps to the active
    segment's base."""
    log_dir = tmp_path / "logdir"
    part = log_dir / "test-0"
    for base, offsets in layout:
        write_segment(
            part, base, [encode_batch([Record(o, T0, s(o), s(o))], base_offset=o) for o in offsets]
        )
    active_base = layout[-1][0]
    write_offset_checkpoint(
        log_dir / "replication-offset-checkpoint", {("test", 0): layout[-1][1][-1] + 1}
    )

    result = clean(part, topic_config())

    assert result.end_offset == active_base
    assert checkpoint_of(part) == active_base
    assert keys_in_log(part) == [o for _base, offsets in layout for o in offsets]


def test_cleaning_with_uncleanable_section_leaves_it_byte_for_byte(tmp_path: Path) -> None:
    """testCleaningWithUncleanableSection: segments at and after the first uncleanable offset are
    untouched."""
    n_keys, per_segment, n_segments = 10, 25, 7
    b = PartitionBuilder("test")
    for seg in range(n_segments - 1):
        for i in range(per_segment):
            offset = seg * per_segment + i
            b.batch([(s(offset % n_keys), s(offset))])
        b.roll()
    b.batch([(s(0), s("active"))])
    first_uncleanable = 2 * per_segment
    part = b.write(tmp_path / "logdir", high_watermark=first_uncleanable + 1)

    def distinct_values_by_segment() -> list[int]:
        return [
            len({r.value for x in iter_batches(seg.log_path.read_bytes()) for r in _records(x)})
            for seg in open_partition(part).segments
        ]

    before_values = distinct_values_by_segment()
    assert all(v > n_keys for v in before_values[:-1])  # every segment holds duplicates
    untouched = {
        name: data
        for name, data in segment_files(part).items()
        if int(name.split(".")[0]) >= first_uncleanable
    }

    segment_bytes = max(seg.size_in_bytes for seg in open_partition(part).segments)
    result = clean(
        part, topic_config({"internal.segment.bytes": str(segment_bytes)})
    )  # one group each

    assert result.range is not None and result.range.first_uncleanable_offset == first_uncleanable
    after_values = distinct_values_by_segment()
    assert all(after < before for before, after in zip(before_values[:2], after_values[:2], strict=True))
    assert after_values[2:] == before_values[2:]
    after_files = segment_files(part)
    assert {name: after_files[name] for name in untouched} == untouched


def _records(batch: Any) -> list[Record]:
    from kcompact.records.record import decode_records

    return decode_records(batch)


def test_segments_grouped_by_segment_bytes_into_several_outputs(tmp_path: Path) -> None:
    """groupSegmentsBySize end to end: small segment.bytes gives one output segment per group, none
    larger."""
    segment_bytes = 1024
    config = topic_config({"internal.segment.bytes": str(segment_bytes)})
    log = LogSim(tmp_path, segment_bytes=600)
    while log.segment_count < 8:
        log.record(log.next_offset % 15, log.next_offset)
    log.roll()
    sources = [
        (seg.base_offset, seg.size_in_bytes) for seg in open_partition(log.part).segments[:-1]
    ]

    result = clean(log.part, config)

    groups, current, size = [], [sources[0][0]], sources[0][1]
    for base, seg_size in sources[1:]:  # the greedy rule of Cleaner.groupSegmentsBySize (log sizes only bind here)
        if size + seg_size <= segment_bytes:
            current.append(base)
            size += seg_size
        else:
            groups.append(current)
            current, size = [base], seg_size
    groups.append(current)
    outputs = open_partition(log.part).segments[:-1]
    assert result.stats.groups == len(groups) > 1
    assert [seg.base_offset for seg in outputs] == [g[0] for g in groups]
    assert all(seg.size_in_bytes <= segment_bytes for seg in outputs)
    assert sorted(keys_in_log(log.part)) == list(range(15))


# --- tombstones, keyless records, large messages, corruption ------------------------------------


def test_cleaning_with_deletes_two_pass(tmp_path: Path) -> None:
    """testCleaningWithDeletes + two-pass clean: deleted keys lose their values at once, tombstones
    go later."""
    log = LogSim(tmp_path, segment_bytes=1024)
    while log.segment_count < 2:
        log.record(log.next_offset, log.next_offset)
    leo = log.next_offset
    for k in range(0, leo, 2):
        log.record(k, None)
    while log.segment_count < 4:
        log.record(log.next_offset, log.next_offset)
    log.roll()
    config = topic_config()

    clean(log.part, config)
    keys = set(keys_in_log(log.part))
    assert not keys & set(range(0, leo, 2))
    tombstones = [r.offset for x in log_batches(log.part) for r in x.records if r.value is None]
    assert len(tombstones) == len(range(0, leo, 2))  # kept until the horizon
    horizons = {
        x.batch.first_timestamp
        for x in log_batches(log.part)
        if any(r.value is None for r in x.records)
    }
    assert horizons == {NOW + DAY}

    clean(log.part, config, now=NOW + DAY + 1, from_start=True)
    assert not [r for x in log_batches(log.part) for r in x.records if r.value is None]
    assert set(keys_in_log(log.part)) == keys


def test_clean_tombstone_horizon_counts_from_cleaning_not_record_time(tmp_path: Path) -> None:
    """testCleanTombstone: a tombstone stamped long ago is still kept by the next cleans."""
    log = LogSim(tmp_path)
    log.append([(s(0), s(0))], timestamp=NOW + DAY + 10_000)
    log.roll()
    config = topic_config()
    clean(log.part, config)
    log.append([(s(0), None)], timestamp=NOW - DAY - 10_000)
    log.roll()
    clean(log.part, config)
    assert log_batches(log.part)[0].batch.last_offset == 1  # the tombstone is retained
    log.append([(s(1), s(1))], timestamp=NOW)
    log.roll()
    clean(log.part, config)
    assert log_batches(log.part)[0].batch.last_offset == 1


def test_cleaning_with_unkeyed_messages(tmp_path: Path) -> None:
    """testCleaningWithUnkeyedMessages: keyless records go, counted as invalid; only keyed bytes
    remain."""
    log = LogSim(tmp_path, segment_bytes=1024)
    while log.segment_count < 2:
        log.append([(None, s(log.next_offset))])
    unkeyed = log.next_offset
    size_unkeyed = sum(seg.size_in_bytes for seg in open_partition(log.part).segments)
    while log.segment_count < 3:
        log.record(log.next_offset, log.next_offset)
    log.roll()
    expected_size = open_partition(log.part).size_in_bytes - size_unkeyed

    result = clean(log.part, topic_config())

    assert not [r for x in log_batches(log.part) for r in x.records if r.key is None]
    assert open_partition(log.part).size_in_bytes == expected_size
    assert result.stats.invalid_records == unkeyed


def test_large_messages_bigger_than_max_message_bytes_are_cleaned(tmp_path: Path) -> None:
    """testLargeMessage / testMessageLargerThanMaxMessageSize: 1 MiB records, smaller buffers and
    limits."""
    big = bytes(1024 * 1024)
    b = PartitionBuilder("test")
    for k in range(4):
        b.batch([(s(k), big)])
    b.batch([(s(1), s("small"))]).batch([(s(3), s("small"))]).roll()
    part = b.write(tmp_path / "logdir")
    config = topic_config(
        {
            "max.message.bytes": str(512 * 1024),
            "message.max.bytes": "1024",
            "log.cleaner.io.buffer.size": "1024",
        }
    )

    clean(part, config)

    survivors = [(r.key, len(r.value)) for x in log_batches(part) for r in x.records]
    assert survivors == [(b"0", len(big)), (b"2", len(big)), (b"1", 5), (b"3", 5)]


def _big_partition(tmp_path: Path) -> Path:
    b = PartitionBuilder("test")
    for k in range(2):
        b.batch([(s(k), bytes(1024 * 1024))])
    b.roll().batch([(s(9), s(9))])
    return b.write(tmp_path / "logdir")


def test_corrupt_magic_fails_the_clean_and_changes_nothing(tmp_path: Path) -> None:
    """testMessageLargerThanMaxMessageSizeWithCorruptHeader: magic 0xff is a corrupt record, not a
    guess."""
    part = _big_partition(tmp_path)
    seg0 = open_partition(part).segments[0].log_path
    with open(seg0, "r+b") as fh:
        fh.seek(MAGIC_POSITION)
        fh.write(b"\xff")
    before = segment_files(part)
    with pytest.raises(CorruptBatchError, match="magic"):
        clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))
    assert segment_files(part) == before
    assert checkpoint_of(part) is None


def test_truncated_batch_fails_the_clean_and_changes_nothing(tmp_path: Path) -> None:
    """testCorruptMessageSizeLargerThanBytesAvailable: a batch longer than the file's remaining
    bytes."""
    part = _big_partition(tmp_path)
    seg0 = open_partition(part).segments[0].log_path
    with open(seg0, "r+b") as fh:
        fh.truncate(1024)
    before = segment_files(part)
    with pytest.raises(TruncatedDataError) as info:
        clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))
    assert isinstance(info.value, CorruptDataError) and info.value.path == str(seg0)
    assert segment_files(part) == before


def test_existing_delete_horizon_is_carried_over_without_a_tombstone(tmp_path: Path) -> None:
    """MemoryRecords.filterTo: a rebuilt batch keeps the horizon it already has, even
    when no tombstone is left in it."""
    log = LogSim(tmp_path)
    log.append([(b"a", None), (b"b", b"1")])
    log.roll()
    config = topic_config()
    clean(log.part, config)
    assert log_batches(log.part)[0].batch.first_timestamp == NOW + DAY
    log.append([(b"a", b"2")])  # the tombstone is superseded: the batch loses it, keeps the horizon
    log.roll()
    clean(log.part, config, now=NOW + 5)

    first = log_batches(log.part)[0]
    assert [(r.offset, r.key, r.value) for r in first.records] == [(1, b"b", b"1")]
    assert first.batch.attributes & 0x40 and first.batch.first_timestamp == NOW + DAY


def test_legacy_tombstones_follow_the_segment_mtime_rule(tmp_path: Path) -> None:
    """``Cleaner.doClean`` / ``shouldRetainRecord``: a v0/v1 tombstone survives while its segment's mtime is newer than
    the last clean segment's mtime - delete.retention.ms; no stored horizon applies to it."""
    log_dir = tmp_path / "logdir"
    part = log_dir / "test-0"
    clean_mtime = NOW - 3 * DAY
    write_segment(
        part,
        0,
        [encode_legacy_message(offset=0, magic=1, key=b"c", value=b"1", timestamp=T0)],
        mtime_ms=clean_mtime,
    )
    old = encode_legacy_message(offset=1, magic=1, key=b"old", value=None, timestamp=T0)
    recent = encode_legacy_message(offset=2, magic=1, key=b"recent", value=None, timestamp=T0)
    write_segment(part, 1, [old], mtime_ms=clean_mtime - DAY - 1)  # older than the legacy horizon
    write_segment(part, 2, [recent], mtime_ms=clean_mtime - DAY + 1)
    write_segment(part, 3, [encode_batch([Record(3, T0, b"z", b"1")], base_offset=3)])
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("test", 0): 4})
    write_offset_checkpoint(log_dir / "cleaner-offset-checkpoint", {("test", 0): 1})

    clean(part, topic_config())

    records = [(r.offset, r.key, r.value) for x in log_batches(part) for r in x.records]
    assert records == [(0, b"c", b"1"), (2, b"recent", None), (3, b"z", b"1")]


# --- idempotent producers -----------------------------------------------------------------------


def test_log_cleaner_retains_producer_last_sequence(tmp_path: Path) -> None:
    """testLogCleanerRetainsProducerLastSequence: a producer's last batch stays, maybe emptied."""
    log = LogSim(tmp_path)
    log.record(0, 0)
    log.record(0, 1, producer_id=1, sequence=0)
    log.record(0, 2, producer_id=2, sequence=0)
    log.record(0, 3, producer_id=3, sequence=0)
    log.record(1, 1, producer_id=2, sequence=1)
    log.roll()

    clean(log.part, topic_config())

    assert last_offsets_per_batch(log.part) == [1, 3, 4]
    assert last_sequences(log.part) == {1: 0, 2: 1, 3: 0}
    assert keys_in_log(log.part) == [0, 1]
    assert offsets_in_log(log.part) == [3, 4]


def test_empty_batch_removal_with_sequence_reuse(tmp_path: Path) -> None:
    """testEmptyBatchRemovalWithSequenceReuse (KAFKA-8335): only the batch at the producer's last
    offset stays."""
    log = LogSim(tmp_path)
    log.producer(1, transactional=True)([1])
    log.marker(1, commit=True)
    log.producer(1, transactional=True)(
        [2]
    )  # a coordinator-style producer starts again at sequence 0
    log.marker(1, commit=True)
    log.record(1, 1)
    log.record(2, 1)
    log.roll()
    config = topic_config(NEVER_EXPIRE)

    clean(log.part, config)
    assert offsets_in_log(log.part) == [1, 3, 4, 5]
    assert last_offsets_per_batch(log.part) == [1, 2, 3, 4, 5]

    clean(log.part, config, from_start=True)  # the first marker gets its horizon ...
    clean(log.part, config, now=NOW + DAY + 1, from_start=True)  # ... and goes after it
    assert offsets_in_log(log.part) == [3, 4, 5]
    assert last_offsets_per_batch(log.part) == [2, 3, 4, 5]


def test_last_batch_of_the_round_is_kept_empty(tmp_path: Path) -> None:
    """testCleanSegmentsRetainingLastEmptyBatch (KAFKA-17076): with every record gone, the batch
    ending at the first uncleanable offset stays as an empty batch, so the offset before it is not
    lost."""
    config = topic_config({"internal.segment.bytes": "1024"})
    log = LogSim(tmp_path, segment_bytes=1024)
    while log.segment_count < 4:
        log.record(log.next_offset, log.next_offset)
    keys = keys_in_log(log.part)
    log.append([(s(k), None) for k in keys])  # delete every key in one batch
    log.roll()
    clean(log.part, config)
    clean(log.part, config, now=NOW + DAY, from_start=True)  # the tombstones' horizon has passed

    seen = log_batches(log.part)
    assert len(seen) == 1
    assert seen[0].batch.last_offset == log.active_base - 1
    assert seen[0].records == [] and seen[0].batch.records_count == 0


def test_duplicate_check_after_cleaning_keeps_offsets_and_sequences(tmp_path: Path) -> None:
    """testDuplicateCheckAfterCleaning: rebuilt and emptied batches keep base/last offsets,
    sequences, epoch, so a reloaded broker still detects the producers' retries as duplicates."""
    log = LogSim(tmp_path, segment_bytes=2048)
    log.producer(1)([1, 2, 3])
    log.producer(2)([3, 1, 4])
    log.producer(3)([1, 4])
    log.roll()
    config = topic_config(NEVER_EXPIRE)

    clean(log.part, config)
    assert last_offsets_per_batch(log.part) == [2, 5, 7]
    assert last_sequences(log.part) == {1: 2, 2: 2, 3: 1}
    assert keys_in_log(log.part) == [2, 3, 1, 4]
    assert offsets_in_log(log.part) == [1, 3, 6, 7]
    # what duplicate detection compares: (first offset, last offset, base sequence, epoch) per
    # producer
    assert _producer_batches(log.part) == [(1, 0, 2, 0, 0), (2, 3, 5, 0, 0), (3, 6, 7, 0, 0)]

    log.producer(4)([2])
    log.roll()
    clean(log.part, config, from_start=True)
    assert last_sequences(log.part) == {1: 2, 2: 2, 3: 1, 4: 0}
    assert last_offsets_per_batch(log.part) == [2, 5, 7, 8]
    assert keys_in_log(log.part) == [3, 1, 4, 2]
    assert offsets_in_log(log.part) == [3, 6, 7, 8]
    assert _producer_batches(log.part)[0] == (1, 0, 2, 0, 0)  # now an empty batch, same identity
    assert log_batches(log.part)[0].batch.records_count == 0


def _producer_batches(part: Path) -> list[tuple[int, int, int, int, int]]:
    return [
        (
            x.batch.producer_id,
            x.batch.base_offset,
            x.batch.last_offset,
            x.batch.base_sequence,
            x.batch.producer_epoch,
        )
        for x in log_batches(part)
        if x.batch.has_producer_id()
    ]


# --- transactions -------------------------------------------------------------------------------


def test_basic_transaction_aware_cleaning(tmp_path: Path) -> None:
    """testBasicTransactionAwareCleaning: aborted data goes, committed data is deduplicated, the
    aborted transactions of the txn index are unchanged."""
    log = LogSim(tmp_path, segment_bytes=2048)
    p1, p2 = log.producer(1, transactional=True), log.producer(2, transactional=True)
    p1([1, 2])
    p2([2, 3])
    p1([3, 4])
    log.marker(1, commit=False)
    log.marker(2, commit=True)
    p1([2])
    log.marker(1, commit=True)
    aborted = aborted_txns(log.part)
    assert aborted == [AbortedTxn(1, 0, 6, 2)]
    log.roll()

    clean(log.part, topic_config(NEVER_EXPIRE))

    assert keys_in_log(log.part) == [3, 2]
    assert offsets_in_log(log.part) == [3, 6, 7, 8, 9]
    assert aborted_txns(log.part) == aborted


def test_multi_pass_cleaning_with_aborted_transactions(tmp_path: Path) -> None:
    """testMultiPassSegmentCleaningWithAbortedTransactions: a 3-key map (4 slots) cleans in three
    rounds; aborted data goes in the first, the index entries in the second, the ABORT markers after
    the horizon."""
    log = LogSim(tmp_path)
    p1, p2 = log.producer(1, transactional=True), log.producer(2, transactional=True)
    p1([1, 2])  # [0, 1]
    p2([2, 3])  # [2, 3]
    p1([3, 4])  # [4, 5]
    log.marker(1, commit=True)  # 6
    log.marker(2, commit=True)  # 7
    p1([2, 3])  # [8, 9]
    log.marker(1, commit=False)  # 10
    p2([4, 5])  # [11, 12]
    p1([5, 6])  # [13, 14]
    log.marker(1, commit=True)  # 15
    log.marker(2, commit=False)  # 16
    p2([6, 7])  # [17, 18]
    log.marker(2, commit=True)  # 19
    log.roll()
    expected_aborted = [AbortedTxn(1, 8, 10, 11), AbortedTxn(2, 11, 16, 17)]
    assert aborted_txns(log.part) == expected_aborted
    retention = 50_000
    config = topic_config({"delete.retention.ms": str(retention), **NEVER_EXPIRE})
    slots = 4 * 24

    assert clean(log.part, config, dedupe_buffer_size=slots).end_offset == 4
    assert batch_base_offsets(log.part) == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert offsets_in_log(log.part) == [0, 2, 3, 4, 5, 6, 7, 10, 13, 14, 15, 16, 17, 18, 19]
    assert aborted_txns(log.part) == expected_aborted

    assert clean(log.part, config, dedupe_buffer_size=slots).end_offset == 14
    assert batch_base_offsets(log.part) == [0, 2, 4, 6, 7, 10, 13, 15, 16, 17, 19]
    assert offsets_in_log(log.part) == [0, 2, 4, 5, 6, 7, 10, 13, 14, 15, 16, 17, 18, 19]
    assert aborted_txns(log.part) == []

    assert clean(log.part, config, now=NOW + retention, dedupe_buffer_size=slots).end_offset == 20
    assert batch_base_offsets(log.part) == [0, 2, 4, 6, 7, 13, 15, 17, 19]
    assert offsets_in_log(log.part) == [0, 2, 4, 5, 6, 7, 13, 15, 17, 18, 19]
    assert aborted_txns(log.part) == []


def test_clean_with_transactions_spanning_segments(tmp_path: Path) -> None:
    """testCleanWithTransactionsSpanningSegments: the first clean covers the first segment only; the
    next removes the aborted data of both."""
    log = LogSim(tmp_path, segment_bytes=1024)
    p1, p2, p3 = (log.producer(p, transactional=True) for p in (1, 2, 3))
    p1([1, 2])
    p3([2, 3])
    p2([3, 4])
    log.roll()
    p2([5, 6])
    p3([6, 7])
    p1([7, 8])
    log.marker(2, commit=False)
    p3([8, 9])
    log.marker(3, commit=True)
    p1([9, 10])
    log.marker(1, commit=False)
    config = topic_config(NEVER_EXPIRE)

    assert clean(log.part, config).end_offset == 6
    assert keys_in_log(log.part) == [2, 3, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10]

    log.roll()
    p2([11])
    p1([12])
    clean(log.part, config)
    assert keys_in_log(log.part) == [2, 3, 6, 7, 8, 9, 11, 12]


def test_commit_marker_removal(tmp_path: Path) -> None:
    """testCommitMarkerRemoval: a COMMIT marker stays while its transaction has data, then gets a
    horizon, and goes only once the horizon has passed (a re-clean at the same time keeps it)."""
    log = LogSim(tmp_path, segment_bytes=256)
    producer = log.producer(1, transactional=True)
    producer([1])
    producer([2, 3])
    log.marker(1, commit=True)
    producer([2])
    log.marker(1, commit=True)
    log.roll()
    config = topic_config({"internal.segment.bytes": "256", **NEVER_EXPIRE})

    clean(log.part, config)
    assert keys_in_log(log.part) == [1, 3, 2]
    assert offsets_in_log(log.part) == [0, 2, 3, 4, 5]

    producer([1, 3])
    log.marker(1, commit=True)
    log.roll()
    clean(log.part, config)
    assert keys_in_log(log.part) == [2, 1, 3]
    assert offsets_in_log(log.part) == [3, 4, 5, 6, 7, 8]

    clean(log.part, config, from_start=True)
    assert offsets_in_log(log.part) == [3, 4, 5, 6, 7, 8]
    (marker,) = [x.batch for x in log_batches(log.part) if x.batch.base_offset == 3]
    assert marker.attributes & 0x40 and marker.first_timestamp == NOW + DAY  # stamped, not removed

    clean(log.part, config, now=NOW + DAY - 1, from_start=True)
    assert offsets_in_log(log.part) == [3, 4, 5, 6, 7, 8]

    clean(log.part, config, now=NOW + DAY, from_start=True)
    assert keys_in_log(log.part) == [2, 1, 3]
    assert offsets_in_log(log.part) == [4, 5, 6, 7, 8]


def test_abort_marker_removal(tmp_path: Path) -> None:
    """testAbortMarkerRemoval: aborted records go at once, the ABORT marker after two passes."""
    log = LogSim(tmp_path, segment_bytes=256)
    producer = log.producer(1, transactional=True)
    producer([1])
    producer([2, 3])
    log.marker(1, commit=False)
    producer([3])
    log.marker(1, commit=True)
    log.roll()
    config = topic_config({"internal.segment.bytes": "256", **NEVER_EXPIRE})

    clean(log.part, config)
    assert keys_in_log(log.part) == [3]
    assert offsets_in_log(log.part) == [3, 4, 5]

    clean(log.part, config, from_start=True)
    clean(log.part, config, now=NOW + DAY + 1, from_start=True)
    assert keys_in_log(log.part) == [3]
    assert offsets_in_log(log.part) == [4, 5]


def test_abort_marker_retention_with_empty_batch(tmp_path: Path) -> None:
    """testAbortMarkerRetentionWithEmptyBatch: the producer's emptied aborted batch keeps the ABORT
    marker and its index entry alive until the producer writes again; then the marker gets a horizon
    and goes.

    Kafka's test leaves the producer's new transaction open (its harness hands the cleaner the
    range); offline, an open transaction caps the range at its first offset (the last stable
    offset), so the port commits it.
    """
    log = LogSim(tmp_path, segment_bytes=256)
    producer = log.producer(1, transactional=True)
    producer([2, 3])
    log.marker(1, commit=False)
    log.roll()
    config = topic_config({"internal.segment.bytes": "256", **NEVER_EXPIRE})
    indexed = [AbortedTxn(1, 0, 2, 3)]
    assert aborted_txns(log.part) == indexed

    clean(log.part, config)
    assert aborted_txns(log.part) == indexed
    assert (keys_in_log(log.part), offsets_in_log(log.part)) == ([], [2])
    assert last_offsets_per_batch(log.part) == [1, 2]  # the emptied batch holds the last sequence

    clean(log.part, config, from_start=True)
    clean(log.part, config, now=NOW + DAY + 1, from_start=True)
    assert aborted_txns(log.part) == indexed
    assert (keys_in_log(log.part), offsets_in_log(log.part)) == ([], [2])
    assert last_offsets_per_batch(log.part) == [1, 2]

    producer([1])
    log.marker(1, commit=True)
    log.roll()
    clean(log.part, config)
    assert aborted_txns(log.part) == indexed  # the marker stays: this pass read the emptied batch
    assert (keys_in_log(log.part), offsets_in_log(log.part)) == ([1], [2, 3, 4])
    assert last_offsets_per_batch(log.part) == [2, 3, 4]  # but the emptied batch is gone

    clean(log.part, config, from_start=True)
    clean(log.part, config, now=NOW + DAY + 1, from_start=True)
    assert (keys_in_log(log.part), offsets_in_log(log.part)) == ([1], [3, 4])
    assert last_offsets_per_batch(log.part) == [3, 4]
    assert aborted_txns(log.part) == []


def test_log_cleaner_retains_last_sequence_even_if_transaction_aborted(tmp_path: Path) -> None:
    """testLogCleanerRetainsLastSequenceEvenIfTransactionAborted: the aborted batch holding the
    producer's last sequence stays empty, and goes once the producer has written a newer batch
    (committed in the port, see test_abort_marker_retention_with_empty_batch)."""
    log = LogSim(tmp_path)
    producer = log.producer(1, transactional=True)
    producer([1])
    producer([2, 3])
    log.marker(1, commit=False)
    log.roll()
    config = topic_config(NEVER_EXPIRE)

    clean(log.part, config)
    assert last_offsets_per_batch(log.part) == [2, 3]
    assert last_sequences(log.part) == {1: 2}
    assert (keys_in_log(log.part), offsets_in_log(log.part)) == ([], [3])

    producer([1, 5])
    log.marker(1, commit=True)
    log.roll()
    clean(log.part, config, from_start=True)
    assert last_offsets_per_batch(log.part) == [3, 5, 6]
    assert last_sequences(log.part) == {1: 4}
    assert (keys_in_log(log.part), offsets_in_log(log.part)) == ([1, 5], [3, 4, 5, 6])


def test_deleted_batches_with_no_messages_read(tmp_path: Path) -> None:
    """testDeletedBatchesWithNoMessagesRead: whole batches dropped without reading their records
    (aborted data) still move the cleaner on; the ABORT marker goes after a two-pass clean."""
    log = LogSim(tmp_path)
    producer = log.producer(1, transactional=True)
    producer([1])
    log.marker(1, commit=False)
    producer([2])
    producer([2])
    log.marker(1, commit=True)
    log.roll()
    config = topic_config({"max.message.bytes": "100", **NEVER_EXPIRE})

    clean(log.part, config)
    assert (keys_in_log(log.part), offsets_in_log(log.part)) == ([2], [1, 3, 4])

    clean(log.part, config, from_start=True)
    clean(log.part, config, now=NOW + DAY + 1, from_start=True)
    assert (keys_in_log(log.part), offsets_in_log(log.part)) == ([2], [3, 4])


def test_commit_marker_retention_with_empty_batch(tmp_path: Path) -> None:
    """testCommitMarkerRetentionWithEmptyBatch: a producer's emptied last batch stays across passes
    and goes once it writes again; other producers' COMMIT markers follow the two-pass rule."""
    log = LogSim(tmp_path, segment_bytes=256)
    producer1, producer2 = log.producer(1, transactional=True), log.producer(2, transactional=True)
    producer1([2, 3])  # 0, 1
    log.roll()
    producer2([2, 3])  # 2, 3
    log.marker(2, commit=True)  # 4
    log.roll()
    log.record(2, 2)  # 5
    log.record(3, 3)  # 6
    log.marker(1, commit=True)  # 7
    log.roll()
    config = topic_config({"internal.segment.bytes": "256", **NEVER_EXPIRE})

    for _ in range(2):  # the empty batches stay while they hold their producers' last sequence
        clean(log.part, config, from_start=True)
        assert keys_in_log(log.part) == [2, 3]
        assert offsets_in_log(log.part) == [4, 5, 6, 7]
        assert last_offsets_per_batch(log.part) == [1, 3, 4, 5, 6, 7]

    producer2([1])  # 8
    log.marker(2, commit=True)  # 9
    log.roll()
    clean(log.part, config)
    assert keys_in_log(log.part) == [2, 3, 1]
    assert offsets_in_log(log.part) == [4, 5, 6, 7, 8, 9]
    assert last_offsets_per_batch(log.part) == [1, 4, 5, 6, 7, 8, 9]

    clean(log.part, config, from_start=True)
    clean(log.part, config, now=NOW + DAY + 1, from_start=True)
    assert keys_in_log(log.part) == [2, 3, 1]
    assert offsets_in_log(log.part) == [5, 6, 7, 8, 9]
    assert last_offsets_per_batch(log.part) == [1, 5, 6, 7, 8, 9]


def _marker_only_log(tmp_path: Path) -> tuple[LogSim, TopicConfig]:
    log = LogSim(tmp_path, segment_bytes=256)
    log.marker(1, commit=True)  # 0: a COMMIT without data
    log.record(2, 2)  # 1
    log.record(3, 3)  # 2
    log.roll()
    return log, topic_config({"internal.segment.bytes": "256", **NEVER_EXPIRE})


def test_marker_without_data_is_emptied_but_kept_for_the_epoch(tmp_path: Path) -> None:
    """testCleanEmptyControlBatch, first part: a two-pass clean empties the marker (its horizon
    passed) but keeps the empty control batch, the producer's latest-epoch entry."""
    log, config = _marker_only_log(tmp_path)
    clean(log.part, config)
    clean(log.part, config, now=NOW + DAY + 1, from_start=True)
    assert keys_in_log(log.part) == [2, 3]
    assert offsets_in_log(log.part) == [1, 2]
    assert last_offsets_per_batch(log.part) == [0, 1, 2]
    empty = log_batches(log.part)[0].batch
    assert empty.is_control_batch and empty.records_count == 0


def test_clean_empty_control_batch_again(tmp_path: Path) -> None:
    """testCleanEmptyControlBatch, second part: cleaning the empty control batch again is no error
    and keeps it while it is the producer's last entry."""
    log, config = _marker_only_log(tmp_path)
    clean(log.part, config)
    clean(log.part, config, now=NOW + DAY + 1, from_start=True)
    clean(log.part, config, now=NOW + 3 * DAY, from_start=True)
    assert offsets_in_log(log.part) == [1, 2]
    assert last_offsets_per_batch(log.part) == [0, 1, 2]


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "aborted"])
def test_transaction_spanning_segments(tmp_path: Path, commit: bool) -> None:
    """testCommittedTransactionSpanningSegments / testAbortedTransactionSpanningSegments: a
    one-record transaction in one segment, its marker in the next. Committed: both stay. Aborted:
    the data batch stays empty (the producer's last) and so does the marker (data of its transaction
    was seen)."""
    log = LogSim(tmp_path, segment_bytes=128)
    log.producer(1, transactional=True)([1])
    log.roll()
    log.marker(1, commit=commit)
    log.roll()
    config = topic_config({"internal.segment.bytes": "128", **NEVER_EXPIRE})

    clean(log.part, config)
    clean(log.part, config, now=NOW + DAY + 1, from_start=True)

    assert offsets_in_log(log.part) == ([0, 1] if commit else [1])
    assert last_offsets_per_batch(log.part) == [0, 1]
    assert len(open_partition(log.part).segments) == 3  # the two small segments stayed apart


def test_keys_equal_to_a_commit_marker_key_do_not_confuse_the_cleaner(tmp_path: Path) -> None:
    """testCleaningWithKeysConflictingWithTxnMarkerKeys: control records never go into or out of the
    map."""
    log = LogSim(tmp_path)
    log.producer(1, transactional=True)([1])
    log.marker(1, commit=True, leader_epoch=5)
    commit_key = ControlRecordKey(0, ControlRecordType.COMMIT).encode()
    log.append(
        [(commit_key, b"foo")], producer_id=2, sequence=0, transactional=True, leader_epoch=5
    )
    log.marker(2, commit=True, leader_epoch=5)
    log.roll()
    assert offsets_in_log(log.part) == [0, 1, 2, 3]

    clean(log.part, topic_config(NEVER_EXPIRE))

    assert last_offsets_per_batch(log.part) == [0, 1, 2, 3]
    assert offsets_in_log(log.part) == [0, 1, 2, 3]


def test_undecided_transactional_data_not_cleanable(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testUndecidedTransactionalDataNotCleanable: an open transaction caps
    the range at its first offset; after its ABORT the first segment is cleanable, the marker's
    after min.compaction.lag.ms."""
    lag = 60 * 60 * 1000
    config = topic_config({"min.compaction.lag.ms": str(lag)})
    log = LogSim(tmp_path)
    log.append([(b"1", b"a"), (b"2", b"b")], producer_id=15, sequence=0, transactional=True)
    log.append([(b"3", b"c")], producer_id=15, sequence=2, transactional=True)
    log.roll()
    now = log.ts + lag + 1

    result = clean(log.part, config, now=now)
    assert result.range is not None
    assert (result.range.first_dirty_offset, result.range.first_uncleanable_dirty_offset) == (0, 0)
    assert result.range.blocking_rule == RULE_OPEN_TRANSACTION
    assert result.end_offset is None and result.skipped_reason

    log.ts = now
    log.marker(15, commit=False)
    log.roll()
    result = clean(log.part, config, now=now)
    assert result.range is not None
    assert (result.range.first_dirty_offset, result.range.first_uncleanable_dirty_offset) == (0, 3)
    assert result.end_offset == 3
    assert last_offsets_per_batch(log.part) == [
        2,
        3,
    ]  # aborted data gone; the producer's last batch emptied

    result = clean(log.part, config, now=now + lag + 1, from_start=True)
    assert result.range is not None and result.range.first_uncleanable_dirty_offset == 4
    assert last_offsets_per_batch(log.part) == [2, 3]


# --- timestamps, legacy formats, the range caps ---------------------------------------------------


def test_log_append_time_batches_keep_their_append_time(tmp_path: Path) -> None:
    """MemoryRecordsTest.testFilterToPreservesLogAppendTime: a rebuilt LogAppendTime batch keeps its
    type and its max timestamp (every record reads as the append time), even with a delete horizon
    stamped."""
    append_time = T0 + 5_000
    log_dir = tmp_path / "logdir"
    part = log_dir / "test-0"
    first = encode_batch(
        [
            Record(0, T0, b"a", b"1"),
            Record(1, T0 + 1, b"b", b"1"),
            Record(2, T0 + 2, b"a", b"2"),
            Record(3, T0 + 3, b"c", None),
        ],
        base_offset=0,
        timestamp_type=1,
        max_timestamp=append_time,
    )
    untouched = encode_batch(
        [Record(4, T0, b"d", b"1")], base_offset=4, timestamp_type=1, max_timestamp=append_time + 1
    )
    write_segment(part, 0, [first, untouched])
    write_segment(part, 5, [encode_batch([Record(5, T0, b"z", b"1")], base_offset=5)])
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("test", 0): 6})

    clean(part, topic_config())

    rebuilt, copied = (x for x in log_batches(part) if x.batch.base_offset < 5)
    assert (rebuilt.batch.timestamp_type, rebuilt.batch.max_timestamp) == (1, append_time)
    assert (rebuilt.batch.base_offset, rebuilt.batch.last_offset) == (0, 3)
    assert rebuilt.batch.first_timestamp == NOW + DAY  # the tombstone's horizon
    assert [(r.offset, r.key, r.value, r.timestamp, r.timestamp_type) for r in rebuilt.records] == [
        (1, b"b", b"1", append_time, 1),
        (2, b"a", b"2", append_time, 1),
        (3, b"c", None, append_time, 1),
    ]
    assert [(r.offset, r.timestamp) for r in copied.records] == [(4, append_time + 1)]
    seg0 = open_partition(part).segments[0].log_path.read_bytes()
    assert seg0.endswith(untouched)  # nothing removed, no horizon needed: copied byte for byte


def test_legacy_v0_v1_entries_are_rewritten_as_v2(tmp_path: Path) -> None:
    """Kafka >= 4.0 (KAFKA-13093): every legacy entry the cleaner meets comes out as a v2
    batch: same codec, base offset = first survivor, v0 -> CreateTime with timestamps -1, v1 keeps
    its type."""
    entries = [
        encode_legacy_message(offset=0, magic=0, key=b"k0", value=b"a"),
        encode_legacy_message(offset=1, magic=0, key=b"k1", value=b"b"),
        encode_legacy_message(offset=2, magic=1, key=b"k0", value=b"c", timestamp=T0 + 2),
        encode_legacy_wrapper(
            [
                Record(3, T0 + 3, b"k2", b"d"),
                Record(4, T0 + 4, b"k1", b"e"),
                Record(5, T0 + 5, b"k3", b"f"),
            ],
            magic=1,
            compression=1,
        ),
        encode_legacy_wrapper(
            [Record(6, -1, b"k4", None), Record(7, -1, b"k5", b"g")], magic=0, compression=1
        ),
        encode_legacy_message(
            offset=8, magic=1, key=b"k6", value=b"h", timestamp=T0 + 8, timestamp_type=1
        ),
    ]
    log_dir = tmp_path / "logdir"
    part = log_dir / "test-0"
    write_segment(part, 0, entries)
    write_segment(part, 9, [encode_batch([Record(9, T0, b"z", b"1")], base_offset=9)])
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("test", 0): 10})

    clean(part, topic_config())

    got = [
        (
            x.batch.magic,
            x.batch.base_offset,
            x.batch.last_offset,
            x.batch.compression_type,
            x.batch.timestamp_type,
            x.batch.producer_id,
            x.batch.is_transactional,
            [(r.offset, r.key, r.value, r.timestamp) for r in x.records],
        )
        for x in log_batches(part)
    ]
    assert got == [
        (2, 2, 2, 0, 0, -1, False, [(2, b"k0", b"c", T0 + 2)]),
        (
            2,
            3,
            5,
            1,
            0,
            -1,
            False,
            [(3, b"k2", b"d", T0 + 3), (4, b"k1", b"e", T0 + 4), (5, b"k3", b"f", T0 + 5)],
        ),
        (2, 6, 7, 1, 0, -1, False, [(6, b"k4", None, -1), (7, b"k5", b"g", -1)]),
        (2, 8, 8, 0, 1, -1, False, [(8, b"k6", b"h", T0 + 8)]),
        (2, 9, 9, 0, 0, -1, False, [(9, b"z", b"1", T0)]),
    ]
    horizons = [x.batch.first_timestamp for x in log_batches(part) if x.batch.base_offset == 6]
    assert horizons == [NOW + DAY]  # the surviving legacy tombstone's batch gets a v2 horizon


def _v1_wrapper_of_v0_messages(first_offset: int, kvs: list[tuple[int, int]]) -> bytes:
    """What old cleaners wrote (KAFKA-4298): a v1 gzip wrapper around v0 messages with relative
    offsets."""
    inner = b"".join(
        encode_legacy_message(offset=i, magic=0, key=s(k), value=s(v))
        for i, (k, v) in enumerate(kvs)
    )
    return encode_legacy_message(
        offset=first_offset + len(kvs) - 1,
        magic=1,
        key=None,
        value=compress(1, inner, magic=1),
        timestamp=-1,
        compression=1,
    )


def test_clean_corrupt_message_set_kafka_4298(tmp_path: Path) -> None:
    """testCleanCorruptMessageSet: v0 messages inside a v1 wrapper are rewritten with every record's
    offset intact (values equal offsets) and the record format equal to its batch's."""
    log_dir = tmp_path / "logdir"
    part = log_dir / "test-0"
    dup_keys = [0, 1, 0, 1]
    write_segment(
        part,
        0,
        [
            _v1_wrapper_of_v0_messages(25, [(k, 25 + i) for i, k in enumerate(dup_keys)]),
            _v1_wrapper_of_v0_messages(50, [(3, 50), (4, 51)]),
        ],
    )
    write_segment(part, 52, [])
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("test", 0): 52})

    clean(part, topic_config())

    seen = log_batches(part)
    assert {x.batch.magic for x in seen} == {2}
    records = [(r.offset, int(r.key), int(r.value)) for x in seen for r in x.records]
    assert records == [(27, 0, 27), (28, 1, 28), (50, 3, 50), (51, 4, 51)]


def test_high_watermark_caps_the_cleaned_range(tmp_path: Path) -> None:
    """testCleanableOffsetsForNone: data at or above the high watermark
    (replication-offset-checkpoint) is never cleaned; the cap rounds down to the base of the segment
    holding it."""
    b = PartitionBuilder("test")
    for seg in range(3):
        b.batch([(s(k), s(seg)) for k in range(5)]).roll()
    b.batch([(s(0), s("active"))])
    part = b.write(tmp_path / "logdir", high_watermark=12)
    kept = {n: d for n, d in segment_files(part).items() if int(n.split(".")[0]) >= 10}

    result = clean(part, topic_config())

    assert result.range is not None and result.range.blocking_rule == RULE_HIGH_WATERMARK
    assert (
        result.range.high_watermark,
        result.range.first_uncleanable_offset,
        result.end_offset,
    ) == (12, 10, 10)
    assert {n: d for n, d in segment_files(part).items() if int(n.split(".")[0]) >= 10} == kept
    assert [r.offset for x in log_batches(part) for r in x.records] == list(range(5, 16))


def test_missing_high_watermark_is_taken_as_the_log_end_and_said(tmp_path: Path) -> None:
    """kcompact's documented difference (README, Safety): without a replication-offset-checkpoint entry
    the log end stands in for the high watermark, and the result says so."""
    b = PartitionBuilder("test")
    b.batch([(b"a", b"1"), (b"a", b"2")]).roll().batch([(b"b", b"1")])
    part = b.write(tmp_path / "logdir", high_watermark=None)
    result = clean(part, topic_config())
    assert result.end_offset == 2
    assert any("high watermark" in w for w in result.warnings)
    assert [r.offset for x in log_batches(part) for r in x.records] == [1, 2]


def test_min_compaction_lag_caps_the_cleaned_range(tmp_path: Path) -> None:
    """testCleanableOffsetsForTime: the first segment holding data younger than
    min.compaction.lag.ms, and everything after it, stays dirty."""
    hour = 3_600_000
    b = PartitionBuilder("test")
    for seg in range(3):
        b.ts = T0 + seg * hour
        b.batch([(s(k), s(seg)) for k in range(5)]).roll()
    b.batch([(s(0), s("active"))])
    part = b.write(tmp_path / "logdir")
    kept = {n: d for n, d in segment_files(part).items() if int(n.split(".")[0]) >= 5}
    config = topic_config({"min.compaction.lag.ms": str(hour + hour // 2)})

    result = clean(part, config, now=T0 + 2 * hour + 10)

    assert result.range is not None and result.range.blocking_rule == RULE_MIN_COMPACTION_LAG
    assert (
        result.range.lag_boundary_offset,
        result.range.first_uncleanable_offset,
        result.end_offset,
    ) == (5, 5, 5)
    assert {n: d for n, d in segment_files(part).items() if int(n.split(".")[0]) >= 5} == kept
    result = clean(part, config, now=T0 + 4 * hour)
    assert result.end_offset == 15


def test_checkpoint_past_the_log_end_is_reset_to_the_log_start(tmp_path: Path) -> None:
    """LogCleanerManagerTest.testDirtyOffsetResetIfLargerThanEndOffset: a checkpoint of 200 on a
    10-record log restarts cleaning from the log start, and the new checkpoint replaces it."""
    b = PartitionBuilder("test")
    b.batch([(s(k % 3), s(k)) for k in range(8)]).roll().batch([(b"x", b"1"), (b"y", b"1")])
    part = b.write(tmp_path / "logdir", cleaner_checkpoint=200)

    result = clean(part, topic_config())

    assert result.range is not None
    assert (result.range.checkpoint_reset, result.range.first_dirty_offset) == ("past-log-end", 0)
    assert result.checkpoint_before == 200 and checkpoint_of(part) == 8
    assert [r.offset for x in log_batches(part) for r in x.records] == [5, 6, 7, 8, 9]


def test_invalid_checkpoint_is_rewritten_even_when_nothing_is_cleaned(tmp_path: Path) -> None:
    """testCheckpointUpdatedForInvalidOffsetNoCleaning: a log with only its active segment cleans
    nothing, but the out-of-range checkpoint is still reset."""
    b = PartitionBuilder("test")
    b.batch([(b"a", b"1"), (b"a", b"2")])
    part = b.write(tmp_path / "logdir", cleaner_checkpoint=200)
    result = clean(part, topic_config())
    assert result.end_offset is None and result.skipped_reason
    assert result.checkpoint_written and checkpoint_of(part) == 0


def test_build_offset_map_across_a_huge_offset_gap(tmp_path: Path) -> None:
    """testBuildOffsetMapFakeLarge: offsets 0 and 7206178 in adjacent batches; the round still ends
    at the segment's end."""
    log_dir = tmp_path / "logdir"
    part = log_dir / "test-0"
    far = 7_206_178
    write_segment(
        part,
        0,
        [
            encode_batch([Record(0, T0, b"0", b"0")], base_offset=0),
            encode_batch([Record(far, T0, b"1", b"1")], base_offset=far),
        ],
    )
    write_segment(part, far + 1, [])
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("test", 0): far + 1})
    result = clean(part, topic_config())
    assert (result.end_offset, result.stats.map_entries) == (far + 1, 2)
    assert offsets_in_log(part) == [0, far]
