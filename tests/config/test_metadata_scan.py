"""The metadata replay through the C scan (``accel.metadata_rows``): the same state as the reference walk,
and only the records that can change a topic decoded."""

from __future__ import annotations

import random
import struct
from collections import Counter
from pathlib import Path

import pytest

from kcompact.config.kraft import records as kr
from kcompact.config.kraft.metadata_state import READ_API_KEYS, load_metadata_state
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.batch_header import RecordBatch
from kcompact.records.control import ControlRecordType
from kcompact.records.record import Record, decode_records
from kcompact.segment.log_file import LogFile
from tests.config.test_kraft_records import encode_config, encode_topic, frame, uuid_bytes
from tests.config.test_metadata_state import ABORT_TXN, BEGIN_TXN, END_TXN, TOPIC, batch, control
from tests.conftest import real_fixture
from tests.records.scan.accel_compare import Outcome, accel_switched, needs_c, outcome

REAL_METADATA = ["kraft37-consumer-offsets", "kraft37-cleaned-logdir", "bitnami2024-rolled-logdir"]
NO_OP = frame(20, 0, b"\x00")
REGISTER_BROKER_V9 = frame(0, 9, b"\x00")  # a version records.py keeps generic: counted


def replayed_both_ways(directory: Path) -> tuple[Outcome, Outcome]:
    with accel_switched(False):
        reference = outcome(lambda: load_metadata_state(directory))
    with accel_switched(True):
        scanned = outcome(lambda: load_metadata_state(directory))
    return reference, scanned


@needs_c
@pytest.mark.parametrize("folder", REAL_METADATA)
def test_broker_written_metadata_replays_alike_with_the_scan(folder: str) -> None:
    directory = real_fixture(folder, "__cluster_metadata-0")
    reference, scanned = replayed_both_ways(directory)
    assert scanned == reference and reference[0] == "returned"


@pytest.mark.parametrize("scan", [True, False], ids=["scan", "reference"])
def test_only_records_that_can_change_a_topic_are_decoded(monkeypatch: pytest.MonkeyPatch, scan: bool) -> None:
    directory = real_fixture("kraft37-consumer-offsets", "__cluster_metadata-0")
    frames: Counter[int] = Counter()
    with LogFile(directory / f"{0:020d}.log") as log:
        for found in log.iter_batches():
            if isinstance(found, RecordBatch) and not found.is_control:
                frames.update(kr.decode_metadata_frame(r.value)[0] for r in decode_records(found))
    decoded: Counter[int] = Counter()
    real_decode = kr.decode_metadata_record

    def counting(value: bytes) -> object:
        decoded[kr.decode_metadata_frame(value)[0]] += 1
        return real_decode(value)

    monkeypatch.setattr(kr, "decode_metadata_record", counting)
    with accel_switched(scan):
        state = load_metadata_state(directory)
    assert state.topic_config_overrides("__consumer_offsets")["cleanup.policy"] == "compact"
    assert state.unknown_record_counts["NoOpRecord"] == frames[20] > 4000
    assert decoded == Counter({k: n for k, n in frames.items() if k in READ_API_KEYS})
    assert sum(decoded.values()) < 150  # of 4,928 records: NoOpRecords and broker registrations not decoded


def records_at(offset: int, values: list[bytes], compression: int = 0) -> bytes:
    return encode_batch([Record(offset + i, 1000, None, v) for i, v in enumerate(values)],
                        base_offset=offset, compression=compression)  # fmt: skip


@needs_c
def test_transactions_gaps_and_compressed_batches_replay_alike(tmp_path: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    log = (records_at(0, [NO_OP, BEGIN_TXN, NO_OP, encode_topic("kept", uuid_bytes(1)), NO_OP, END_TXN])
           + records_at(6, [BEGIN_TXN, REGISTER_BROKER_V9, NO_OP]) + records_at(9, [ABORT_TXN, NO_OP])
           + control(11, ControlRecordType.LEADER_CHANGE)
           + records_at(12, [encode_config(TOPIC, "kept", "segment.ms", "5"), NO_OP], compression=1)  # gzip
           + records_at(20, [REGISTER_BROKER_V9, frame(21, 0, b"\x00")])  # a gap: 14..19 missing
           + records_at(22, [BEGIN_TXN, NO_OP, encode_topic("open", uuid_bytes(2))]))  # fmt: skip
    (directory / f"{0:020d}.log").write_bytes(log)
    reference, scanned = replayed_both_ways(directory)
    assert scanned == reference
    state = load_metadata_state(directory)
    assert set(state.topics_by_name) == {"kept"} and state.topic_config_overrides("kept") == {"segment.ms": "5"}
    assert state.unknown_record_counts == {"NoOpRecord": 5, "RegisterBrokerRecord": 1,
                                           "ZkMigrationStateRecord": 1}  # fmt: skip
    assert "jumps from offset 14 to 20" in (state.unresolved_reason or "")


@needs_c
@pytest.mark.parametrize("bad", [b"\x01\x02\x00\x05ab", b"\x02\x14\x00", b""], ids=["body", "frame", "empty"])
def test_a_corrupt_record_fails_alike_with_the_scan(tmp_path: Path, bad: bytes) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    (directory / f"{0:020d}.log").write_bytes(
        batch(0, [NO_OP, encode_topic("t", uuid_bytes(1))]) + batch(2, [NO_OP, bad]))
    reference, scanned = replayed_both_ways(directory)
    assert scanned == reference and reference[0] == "raised"
    assert "record value at position" in str(reference[2])


@needs_c
def test_damaged_snapshots_and_logs_replay_or_fail_alike_with_the_scan(tmp_path: Path) -> None:
    """Bytes changed or cut anywhere in a snapshot or the log after it: the same state, or the same error
    (class, message, position, offset), with and without the scan."""
    snapshot = (control(0, ControlRecordType.SNAPSHOT_HEADER)
                + records_at(1, [encode_topic("t", uuid_bytes(1)), encode_config(TOPIC, "t", "segment.ms", "1"), NO_OP])
                + records_at(4, [NO_OP, encode_config(TOPIC, "t", "retention.ms", "2")])
                + control(6, ControlRecordType.SNAPSHOT_FOOTER))  # fmt: skip
    log = (records_at(5, [NO_OP, encode_config(TOPIC, "t", "segment.ms", "9"), BEGIN_TXN])
           + records_at(8, [NO_OP, END_TXN]) + control(10, ControlRecordType.LEADER_CHANGE)
           + records_at(11, [encode_topic("u", uuid_bytes(2)), REGISTER_BROKER_V9]))  # fmt: skip
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    rng, seen = random.Random(7), Counter[str]()
    for _ in range(300):
        files = [bytearray(snapshot), bytearray(log)]
        damaged = files[rng.randrange(2)]
        for _ in range(rng.choice([1, 1, 2])):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        if rng.random() < 0.15:
            del damaged[rng.randrange(len(damaged)):]
        (directory / f"{7:020d}-{1:010d}.checkpoint").write_bytes(files[0])
        (directory / f"{5:020d}.log").write_bytes(files[1])
        reference, scanned = replayed_both_ways(directory)
        assert scanned == reference
        seen[str(reference[0])] += 1
    assert seen["returned"] > 50 and seen["raised"] > 50  # both kinds of outcome were compared


@needs_c
@pytest.mark.parametrize("damage", ["trailing byte", "negative header count", "headers past the record"])
def test_a_record_the_reference_refuses_is_refused_alike_with_the_scan(tmp_path: Path, damage: str) -> None:
    one = bytearray(records_at(2, [NO_OP]))  # its record starts at byte 61: length, attributes, ...
    if damage == "trailing byte":  # one byte more in the record than its fields: "invalid record size"
        one[61] += 2  # the zig-zag length varint, one more
        one.append(0)
        struct.pack_into(">i", one, 8, len(one) - 12)  # the batch length (the replay checks no CRC)
    else:  # the headers count, the record's last byte
        one[-1] = 1 if damage == "negative header count" else 8
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    (directory / f"{0:020d}.log").write_bytes(records_at(0, [NO_OP, NO_OP]) + bytes(one))
    reference, scanned = replayed_both_ways(directory)
    assert scanned == reference and reference[0] == "raised"
