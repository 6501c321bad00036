"""``inspect keys``: counts against a plain model read with kafka-python, the projection against what
``clean`` then really does, the broker's dedupe passes against bounded real cleans, murmur2 against
Kafka's own vectors and kafka-python, and the JSON field names."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from kafka.record import MemoryRecords

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import defaults_with_overrides
from kcompact.errors import ConfigError, KcompactError
from kcompact.inspect.keys import keys_report
from kcompact.inspect.keys.model import KeysReport
from kcompact.inspect.keys.partitioner import default_partition, murmur2
from kcompact.records.batch import iter_batches
from kcompact.segment.partition import open_partition
from tests.builders import BASE_TS, PartitionBuilder
from tests.conftest import real_fixture
from tests.encoders import encode_legacy_message

NOW = BASE_TS + 10_000_000
DAY = 86_400_000
COMPACT = {"cleanup.policy": "compact"}

TOP_FIELDS = [
    "topic", "partition", "partition_dir", "now_ms", "log_start_offset", "log_end_offset",
    "high_watermark", "last_stable_offset", "first_dirty_offset", "first_uncleanable_offset",
    "size_in_bytes", "records", "keys", "tombstones", "transactions", "projection", "dedupe",
    "top_duplicated_keys", "partitioner", "warnings", "corrupt_batches", "crc_error",
]
NESTED_FIELDS = {
    "records": ["batches", "records", "data_records", "control_records", "keyless_records",
                "read_uncommitted", "read_committed"],
    "keys": ["distinct_keys", "dirty_distinct_keys", "cleanable_distinct_keys", "keyed_records",
             "duplicate_records", "duplicate_bytes"],
    "tombstones": ["tombstones", "oldest_offset", "oldest_timestamp_ms", "with_delete_horizon",
                   "groups"],
    "transactions": ["commit_markers", "abort_markers", "other_control_records",
                     "aborted_transactions", "aborted_records", "open_transactions"],
    "projection": ["cleanable", "skipped_reason", "end_offset", "records_before", "records_after",
                   "size_in_bytes_before", "size_in_bytes_after", "superseded_removed",
                   "tombstones_removed", "keyless_removed", "aborted_records_removed",
                   "markers_removed"],
    "dedupe": ["dedupe_buffer_size", "cleaner_threads", "load_factor", "keys_per_pass",
               "keys_to_map", "passes", "one_pass_dedupe_buffer_size"],
    "partitioner": ["partitions", "partition", "misplaced_keys", "misplaced_records",
                    "misplaced_bytes"],
}
GROUP_FIELDS = ["kind", "tombstones", "delete_horizon_ms", "removable_at_ms", "removable_now"]
TOP_KEY_FIELDS = ["key", "key_hex", "key_size_in_bytes", "records", "latest_offset", "decoded"]
OPEN_TXN_FIELDS = ["producer_id", "producer_epoch", "first_offset", "last_timestamp_ms"]


def kv(*keys: str, value: bytes | None = b"value") -> list[tuple[bytes | None, bytes | None]]:
    return [(None if k == "-" else k.encode(), value) for k in keys]


def mixed(*, codec: int = 0) -> PartitionBuilder:
    """Every kind of record: duplicates, keyless, tombstones, an idempotent producer, a committed,
    an aborted and an open transaction, over three closed segments and an active one."""
    b = PartitionBuilder()
    b.batch(kv(*(f"k{i}" for i in range(10))), compression=codec)
    b.batch(kv("k0", "k1", "k2", "-"), compression=codec)
    b.batch(kv("k3", "k4"), producer_id=3)
    b.batch(kv("k5", "t1"), producer_id=7, transactional=True).marker(7, commit=True)
    b.batch(kv("k6", "a1", "a2"), producer_id=8, transactional=True).marker(8, commit=False)
    b.batch(kv("k1", value=None)).roll()
    b.batch(kv("k5", "k6", "k7", "k8", "k9"), compression=codec)
    b.batch(kv("k2", "k1", value=None), compression=codec).batch(kv("k3")).roll()
    b.batch(kv("k0", "-")).batch(kv("o1", "o2"), producer_id=9, transactional=True).roll()
    return b.batch(kv("k12"))


@dataclasses.dataclass
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    size: int
    timestamp: int
    control: bool
    producer_id: int
    transactional: bool
    horizon: int | None


def varint_size(n: int) -> int:
    zigzag, size = (n << 1) ^ (n >> 63), 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def read_with_kafka_python(part: Path) -> list[Rec]:
    """Every record of every batch, read by kafka-python (an independent reader)."""
    out = []
    for seg in open_partition(part).segments:
        records = MemoryRecords(seg.log_path.read_bytes())
        while (batch := records.next_batch()) is not None:
            horizon = batch.first_timestamp if batch.attributes & 0x40 else None
            for r in batch:
                out.append(Rec(r.offset, r.key, r.value, r.size_in_bytes + varint_size(r.size_in_bytes),
                               r.timestamp, batch.is_control_batch, batch.producer_id,
                               batch.is_transactional, horizon))
    return out


def aborted_offsets(recs: list[Rec]) -> set[int]:
    aborted: set[int] = set()
    open_txns: dict[int, list[int]] = {}
    for r in recs:
        if r.control:
            data = open_txns.pop(r.producer_id, [])
            if r.key is not None and r.key[2:4] == b"\x00\x00":  # ABORT
                aborted.update(data)
        elif r.transactional:
            open_txns.setdefault(r.producer_id, []).append(r.offset)
    return aborted


def report(part: Path, **kwargs: object) -> KeysReport:
    overrides = {**COMPACT, **kwargs.pop("config", {})}  # type: ignore[dict-item]
    return keys_report(part, cli_overrides=overrides, now_ms=kwargs.pop("now_ms", NOW), **kwargs)  # type: ignore[arg-type]


def log_totals(part: Path) -> tuple[int, int]:
    """(records in every batch, .log bytes) of a partition as it is on disk."""
    records = size = 0
    for seg in open_partition(part).segments:
        data = seg.log_path.read_bytes()
        size += len(data)
        records += sum(b.records_count for b in iter_batches(data))
    return records, size


# -- murmur2 and the default partitioner --


@pytest.mark.parametrize(("data", "expected"), [  # Kafka's UtilsTest.testMurmur2
    (b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971), (b"abc", 479470107),
])
def test_murmur2_matches_kafkas_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@given(st.binary(max_size=64), st.integers(1, 1000))
def test_murmur2_and_partition_match_kafka_python(data: bytes, partitions: int) -> None:
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)
    assert default_partition(data, partitions) == (kafka_python_murmur2(data) & 0x7FFFFFFF) % partitions


# -- the report against a plain model --


def test_json_field_names_are_fixed(tmp_path: Path) -> None:
    got = report(mixed().write(tmp_path / "logdir"), partitions=4).as_dict()
    assert list(got) == TOP_FIELDS
    for name, fields in NESTED_FIELDS.items():
        assert list(got[name]) == fields, name
    assert all(list(g) == GROUP_FIELDS for g in got["tombstones"]["groups"])
    assert list(got["top_duplicated_keys"][0]) == TOP_KEY_FIELDS
    assert list(got["transactions"]["open_transactions"][0]) == OPEN_TXN_FIELDS


@pytest.mark.parametrize("codec", [0, 1, 3, 4])
def test_counts_match_a_model_read_with_kafka_python(tmp_path: Path, codec: int) -> None:
    part = mixed(codec=codec).write(tmp_path / "logdir", cleaner_checkpoint=10)
    got = report(part, partitions=4)
    recs = read_with_kafka_python(part)
    aborted = aborted_offsets(recs)
    data = [r for r in recs if not r.control]
    live = [r for r in data if r.offset not in aborted]
    keyed = [r for r in live if r.key is not None]
    latest = {r.key: r.offset for r in keyed}
    dups = [r for r in keyed if r.offset < latest[r.key]]
    lso = got.last_stable_offset
    assert lso == min(r.offset for r in data if r.producer_id == 9)  # the open transaction
    assert (got.records.records, got.records.data_records) == (len(recs), len(data))
    assert got.records.control_records == len(recs) - len(data)
    assert got.records.keyless_records == len(live) - len(keyed)
    assert got.records.read_uncommitted == len(data)
    assert got.records.read_committed == sum(1 for r in live if r.offset < lso)
    assert dataclasses.astuple(got.keys) == (
        len(latest), sum(1 for o in latest.values() if o >= 10),
        len({r.key for r in keyed if 10 <= r.offset < got.first_uncleanable_offset}),
        len(keyed), len(dups), sum(r.size for r in dups),
    )
    tombstones = [r for r in keyed if r.value is None]
    assert (got.tombstones.tombstones, got.tombstones.oldest_offset) == (
        len(tombstones), tombstones[0].offset)
    assert got.tombstones.oldest_timestamp_ms == tombstones[0].timestamp
    misplaced = [r for r in keyed if r.key is not None and (kafka_python_murmur2(r.key) & 0x7FFFFFFF) % 4 != 0]
    assert got.partitioner is not None
    assert (got.partitioner.misplaced_records, got.partitioner.misplaced_bytes) == (
        len(misplaced), sum(r.size for r in misplaced))
    assert got.partitioner.misplaced_keys == len({r.key for r in misplaced})


def test_transactions_markers_and_open_transactions(tmp_path: Path) -> None:
    got = report(mixed().write(tmp_path / "logdir"))
    txn = got.transactions
    assert (txn.commit_markers, txn.abort_markers, txn.other_control_records) == (1, 1, 0)
    assert (txn.aborted_transactions, txn.aborted_records) == (1, 3)
    assert [(t.producer_id, t.producer_epoch, t.first_offset) for t in txn.open_transactions] == [
        (9, 0, 34)]
    assert got.last_stable_offset == 34 and got.first_uncleanable_offset == 32


def test_top_duplicated_keys_in_order_with_their_bytes(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch(kv("hot", "warm", "hot", "cold", "hot", "warm"))
    b.batch([(b"\xff\x00bin", b"1"), (b"\xff\x00bin", b"2")]).roll().batch(kv("x"))
    got = report(b.write(tmp_path / "logdir"), top=3)
    assert [(k.key, k.records, k.latest_offset) for k in got.top_duplicated_keys] == [
        ("hot", 3, 4), ("warm", 2, 5), ("\\xff\\x00bin", 2, 7),  # ties: older latest offset first
    ]
    top = {k.key_hex: (k.records, k.key_size_in_bytes) for k in got.top_duplicated_keys}
    assert top == {b"hot".hex(): (3, 3), b"\xff\x00bin".hex(): (2, 5), b"warm".hex(): (2, 4)}
    assert report(b.write(tmp_path / "other"), top=0).top_duplicated_keys == []


def test_tombstone_groups_before_and_after_a_clean(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch(kv("a", "b")).batch(kv("b", value=None)).batch(kv("a", value=None)).roll()
    b.batch(kv("c"))
    part = b.write(tmp_path / "logdir")
    before = report(part).tombstones
    assert (before.tombstones, before.with_delete_horizon, before.oldest_offset) == (2, 0, 2)
    assert [dataclasses.astuple(g) for g in before.groups] == [
        ("no-horizon", 2, None, NOW + DAY, False)]
    config = defaults_with_overrides(COMPACT)
    clean_partition(part, config, CleanOptions(now_ms=NOW))
    after = report(part, now_ms=NOW + 1).tombstones
    assert after.with_delete_horizon == 2
    assert [dataclasses.astuple(g) for g in after.groups] == [
        ("horizon", 2, NOW + DAY, NOW + DAY, False)]
    due = report(part, now_ms=NOW + DAY).tombstones
    assert due.groups[0].removable_now


def test_superseded_tombstones_form_their_own_group(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch(kv("a", value=None)).batch(kv("a")).roll().batch(kv("c"))
    groups = report(b.write(tmp_path / "logdir")).tombstones.groups
    assert [dataclasses.astuple(g) for g in groups] == [("superseded", 1, None, None, True)]


def test_legacy_entries_are_counted(tmp_path: Path) -> None:
    b = PartitionBuilder()
    for key, value in ((b"a", b"1"), (b"a", b"2"), (None, b"x"), (b"b", None)):
        b.segments[-1].batches.append(encode_legacy_message(
            offset=b.next_offset, magic=1, key=key, value=value, timestamp=b.ts))
        b.next_offset += 1
    b.roll().batch(kv("c"))
    got = report(b.write(tmp_path / "logdir"))
    assert (got.records.records, got.records.keyless_records, got.tombstones.tombstones) == (5, 1, 1)
    # a legacy record's bytes: 12 (offset, size) + 22 (v1 message header) + key + value
    assert (got.keys.duplicate_records, got.keys.duplicate_bytes) == (1, 12 + 22 + 2)
    assert got.projection.records_after == 3  # a@1, b (tombstone), c


# -- the projection is what clean then does --


def scenario(tmp_path: Path, name: str) -> tuple[Path, dict[str, str]]:
    if name == "mixed":
        return mixed().write(tmp_path / "logdir"), {}
    if name == "mixed-lz4-checkpoint":
        return mixed(codec=3).write(tmp_path / "logdir", cleaner_checkpoint=22), {}
    if name == "zstd-high-watermark":
        return mixed(codec=4).write(tmp_path / "logdir", high_watermark=27), {}
    b = PartitionBuilder()  # "idempotent": the producer's last batch stays as an empty shell
    b.batch(kv("a"), producer_id=1).batch(kv("a")).batch(kv("-")).roll().batch(kv("q"))
    return b.write(tmp_path / "logdir"), {}


@pytest.mark.parametrize("name", ["mixed", "mixed-lz4-checkpoint", "zstd-high-watermark", "idempotent"])
def test_projection_equals_what_clean_does(tmp_path: Path, name: str) -> None:
    part, config = scenario(tmp_path, name)
    got = report(part, config=config)
    assert (got.projection.records_before, got.projection.size_in_bytes_before) == log_totals(part)
    topic_config = defaults_with_overrides({**COMPACT, **config})
    result = clean_partition(part, topic_config, CleanOptions(now_ms=NOW))
    p = got.projection
    assert (p.records_after, p.size_in_bytes_after) == log_totals(part)
    assert p.cleanable and p.end_offset == result.end_offset
    s = result.stats
    assert (p.superseded_removed, p.tombstones_removed, p.keyless_removed,
            p.aborted_records_removed, p.markers_removed) == (
        s.superseded_removed, s.tombstones_removed, s.invalid_records, s.aborted_records_removed,
        s.markers_removed)
    assert got.keys.cleanable_distinct_keys == s.map_entries


def test_nothing_cleanable_projects_no_change(tmp_path: Path) -> None:
    part = PartitionBuilder().batch(kv("a", "a")).write(tmp_path / "logdir")
    p = report(part).projection
    assert (p.cleanable, p.end_offset, p.records_after, p.size_in_bytes_after) == (
        False, None, 2, log_totals(part)[1])
    assert p.skipped_reason is not None and p.skipped_reason.startswith("the active segment")


def test_a_topic_without_compact_projects_no_clean(tmp_path: Path) -> None:
    p = report(mixed().write(tmp_path / "logdir"), config={"cleanup.policy": "delete"}).projection
    assert not p.cleanable and "cleanup.policy=delete" in (p.skipped_reason or "")


# -- the broker's dedupe buffer --


def many_keys() -> PartitionBuilder:
    b = PartitionBuilder()
    for round_ in range(3):
        for start in range(0, 30, 6):
            b.batch(kv(*(f"key{(start + i) * 7 % 30}" for i in range(6)), value=b"r%d" % round_))
        b.roll()
    return b.batch(kv("active"))


def test_default_dedupe_buffer_figures(tmp_path: Path) -> None:
    plan = report(many_keys().write(tmp_path / "logdir")).dedupe
    assert (plan.dedupe_buffer_size, plan.cleaner_threads, plan.load_factor) == (2**27, 1, 0.9)
    assert (plan.keys_per_pass, plan.keys_to_map, plan.passes) == (5_033_164, 30, 1)
    assert plan.one_pass_dedupe_buffer_size == 35 * 24  # 35 slots * 0.9 = 31 keys: 30 and a put


def test_dedupe_passes_equal_the_rounds_of_a_bounded_clean(tmp_path: Path) -> None:
    part = many_keys().write(tmp_path / "logdir")
    per_thread = 12 * 24  # 12 slots, 10 keys a pass
    config = {"log.cleaner.dedupe.buffer.size": str(2 * per_thread), "log.cleaner.threads": "2"}
    plan = report(part, config=config).dedupe
    assert (plan.keys_per_pass, plan.keys_to_map) == (10, 30)
    assert plan.passes is not None and plan.passes > 3

    def rounds(buffer: int) -> int:
        copy = shutil.copytree(part.parent, tmp_path / f"copy-{buffer}") / part.name
        topic_config = defaults_with_overrides(COMPACT)
        count = 0
        while clean_partition(copy, topic_config, CleanOptions(
                now_ms=NOW, dedupe_buffer_size=buffer)).end_offset is not None:
            count += 1
        return count

    assert rounds(per_thread) == plan.passes
    assert plan.one_pass_dedupe_buffer_size is not None
    assert rounds(plan.one_pass_dedupe_buffer_size // 2) == 1


def test_no_cleaner_thread_means_no_passes(tmp_path: Path) -> None:
    got = report(many_keys().write(tmp_path / "logdir"), config={"log.cleaner.threads": "0"})
    assert (got.dedupe.passes, got.dedupe.keys_per_pass) == (None, 0)
    assert any("log.cleaner.threads is 0" in w for w in got.warnings)


def test_a_buffer_without_room_for_a_key_means_no_passes(tmp_path: Path) -> None:
    config = {"log.cleaner.dedupe.buffer.size": "47"}  # one 24-byte slot * 0.9: no key
    got = report(many_keys().write(tmp_path / "logdir"), config=config)
    assert (got.dedupe.passes, got.dedupe.keys_per_pass, got.dedupe.keys_to_map) == (None, 0, 30)
    assert any("(47 bytes) holds no key" in w for w in got.warnings)


# -- the broker's own log, refusals --


def test_broker_written_consumer_offsets() -> None:
    got = report(real_fixture("kraft37-cleaned-logdir", "__consumer_offsets-44"))
    assert (got.first_dirty_offset, got.first_uncleanable_offset) == (9, 9)
    assert (got.records.records, got.keys.distinct_keys, got.keys.duplicate_records) == (4, 2, 2)
    assert (got.tombstones.tombstones, got.tombstones.oldest_offset) == (2, 9)
    assert not got.projection.cleanable and got.dedupe.passes == 0


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    part = mixed().write(tmp_path / "logdir")
    with pytest.raises(ConfigError, match="--partitions"):
        report(part, partitions=0)
    with pytest.raises(KcompactError, match="not a partition directory"):
        report(tmp_path / "logdir")
