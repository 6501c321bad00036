"""inspect dump as data: the item interface, real broker segments, generated partitions, corruption.

The CLI's rendering and exit codes are tested in tests/cli/test_dump_cli.py; here the items themselves.
"""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from kcompact.errors import KcompactError
from kcompact.inspect import dump as dump_module
from kcompact.inspect.dump import dump_path
from kcompact.records.batch_encoding import encode_batch, encode_records_batch
from kcompact.records.control import ControlRecordType
from kcompact.records.record import Header, Record, encode_record
from kcompact.segment.offset_index import OffsetIndexEntry, encode_offset_index
from kcompact.segment.txn_index import AbortedTxn, encode_txn_index
from tests.builders import BASE_TS, PartitionBuilder
from tests.conftest import REAL_FIXTURES, real_fixture
from tests.encoders import encode_control_batch, encode_legacy_message, encode_legacy_wrapper
from tests.segment_writer import write_segment

Item = dict[str, Any]

BATCH_KEYS = [
    "type", "file", "position", "base_offset", "last_offset", "count", "magic", "compression",
    "timestamp_type", "is_control", "is_transactional", "producer_id", "producer_epoch",
    "base_sequence", "partition_leader_epoch", "max_timestamp", "delete_horizon_ms",
    "size_in_bytes", "crc", "crc_valid",
]
RECORD_KEYS = ["type", "offset", "timestamp", "key", "value", "headers", "control",
               "coordinator_epoch"]
LOG = "00000000000000000000.log"


def items(path: Path, *, records: bool = False, verify_index: bool = False) -> list[Item]:
    return list(dump_path(path, records=records, verify_index=verify_index))


def of_type(found: list[Item], kind: str) -> list[Item]:
    return [item for item in found if item["type"] == kind]


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def segment(directory: Path, batches: list[bytes], **options: Any) -> Path:
    """A partition directory ``t-0`` holding one segment made of ``batches``, in the log dir of a broker that
    shut down cleanly (:func:`shut_down_cleanly`)."""
    part = directory / "t-0"
    write_segment(part, 0, batches, **options)
    shut_down_cleanly(directory)
    return part


def shut_down_cleanly(log_dir: Path) -> None:
    """The marker a broker leaves at a clean shutdown: the next start recovers no segment and trusts every
    index as it is (``LogLoader.recoverLog``), so what ``--verify-index`` finds in one is a problem."""
    (log_dir / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":1}')


def records(first: int, count: int, *, ts: int = BASE_TS) -> list[Record]:
    """``count`` records from offset ``first``, timestamped ``ts + offset``."""
    return [Record(o, ts + o, f"k{o}".encode(), f"v{o}".encode())
            for o in range(first, first + count)]


def three_batches(directory: Path) -> Path:
    """Three uncompressed batches of 1, 2 and 3 records (offsets 0..5)."""
    return segment(directory, [encode_batch(records(0, 1), base_offset=0),
                               encode_batch(records(1, 2), base_offset=1),
                               encode_batch(records(3, 3), base_offset=3)])


# ---------------------------------------------------------------------------------------------
# The interface: exact item shapes on a small partition


def test_small_partition_dumps_exactly(tmp_path: Path) -> None:
    part = (PartitionBuilder("t", 0).batch([(b"k1", b"v1")], headers=(Header(b"h", b"x"),))
            .batch([(b"k2", None)], producer_id=7, transactional=True)
            .marker(7, commit=False).write(tmp_path))
    log = str(part / LOG)
    common = {"type": "batch", "file": log, "magic": 2, "compression": "none",
              "timestamp_type": "CreateTime", "partition_leader_epoch": -1,
              "delete_horizon_ms": None, "crc_valid": True}
    found = items(part, records=True)
    assert found == [
        {"type": "file", "file": log, "kind": "log", "base_offset": 0, "size_in_bytes": 224},
        {**common, "position": 0, "base_offset": 0, "last_offset": 0, "count": 1,
         "is_control": False, "is_transactional": False, "producer_id": -1, "producer_epoch": -1,
         "base_sequence": -1, "max_timestamp": BASE_TS, "size_in_bytes": 76, "crc": 3549958330},
        {"type": "record", "offset": 0, "timestamp": BASE_TS, "key": "azE=", "value": "djE=",
         "headers": [{"key": "h", "value": "eA=="}], "control": None, "coordinator_epoch": None},
        {**common, "position": 76, "base_offset": 1, "last_offset": 1, "count": 1,
         "is_control": False, "is_transactional": True, "producer_id": 7, "producer_epoch": 0,
         "base_sequence": 0, "max_timestamp": BASE_TS + 1, "size_in_bytes": 70, "crc": 641821834},
        {"type": "record", "offset": 1, "timestamp": BASE_TS + 1, "key": "azI=", "value": None,
         "headers": [], "control": None, "coordinator_epoch": None},
        {**common, "position": 146, "base_offset": 2, "last_offset": 2, "count": 1,
         "is_control": True, "is_transactional": True, "producer_id": 7, "producer_epoch": 0,
         "base_sequence": -1, "max_timestamp": BASE_TS + 2, "size_in_bytes": 78,
         "crc": 2909926046},
        {"type": "record", "offset": 2, "timestamp": BASE_TS + 2, "key": "AAAAAA==",
         "value": "AAAAAAAB", "headers": [], "control": "ABORT", "coordinator_epoch": 1},
    ]
    assert [list(i) for i in of_type(found, "batch")] == [BATCH_KEYS] * 3
    assert [list(i) for i in of_type(found, "record")] == [RECORD_KEYS] * 3


def test_a_preallocated_index_dumps_its_entries_and_counts_its_zero_slots(tmp_path: Path) -> None:
    """A crashed broker's active segment keeps its 10 MiB preallocated indexes: their real entries, then one
    warning counting the zero slots (kafka-dump-log stops there too), not a million zero entries."""
    part = (PartitionBuilder("t", 0).batch([(b"a", b"1")] * 3).batch([(b"b", b"2")]).batch([(b"c", b"3")])
            .write(tmp_path, index_interval_bytes=1))
    index, timeindex = (part / f"00000000000000000000.{kind}" for kind in ("index", "timeindex"))
    index.write_bytes(index.read_bytes() + bytes(10 * 1024 * 1024 - index.stat().st_size))
    timeindex.write_bytes(timeindex.read_bytes() + bytes(10485756 - timeindex.stat().st_size))
    found = items(index)
    assert [(i["offset"], i["position"]) for i in of_type(found, "offset_index_entry")] == [(3, 88), (4, 158)]
    assert of_type(found, "warning") == [{"type": "warning", "file": str(index), "message": (
        "1310718 trailing zero-filled slots not shown (a preallocated index that was never trimmed: its "
        "broker stopped without a clean shutdown)")}]
    found = items(timeindex)
    assert [i["offset"] for i in of_type(found, "time_index_entry")] == [3, 4]
    assert [w["message"].split()[0] for w in of_type(found, "warning")] == ["873811"]
    zeros = part / "00000000000000000000.index"
    zeros.write_bytes(bytes(16))  # all zero: the first slot is an entry whatever it holds, as Kafka reads it
    found = items(zeros)
    assert [(i["offset"], i["position"]) for i in of_type(found, "offset_index_entry")] == [(0, 0)]
    assert [w["message"].split()[0] for w in of_type(found, "warning")] == ["1"]


def test_without_records_only_batches_are_listed(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    assert [i["type"] for i in items(part)] == ["file", "batch", "batch", "batch"]


def test_index_files_dump_their_entries(tmp_path: Path) -> None:
    part = (PartitionBuilder("t", 0).batch([(b"a", b"1")] * 3).batch([(b"b", b"2")])
            .batch([(b"c", b"3")], producer_id=9, transactional=True).marker(9, commit=False)
            .write(tmp_path, index_interval_bytes=1))
    index, timeindex, txnindex = (part / f"00000000000000000000.{kind}"
                                  for kind in ("index", "timeindex", "txnindex"))
    file = {"type": "file", "base_offset": 0}
    assert items(index) == [
        {**file, "file": str(index), "kind": "index", "size_in_bytes": 24},
        *({"type": "offset_index_entry", "file": str(index), "offset": o, "position": p}
          for o, p in ((3, 88), (4, 158), (5, 228))),
    ]
    assert items(timeindex) == [
        {**file, "file": str(timeindex), "kind": "timeindex", "size_in_bytes": 36},
        *({"type": "time_index_entry", "file": str(timeindex), "timestamp": BASE_TS + o,
           "offset": o} for o in (3, 4, 5)),
    ]
    assert items(txnindex) == [
        {**file, "file": str(txnindex), "kind": "txnindex", "size_in_bytes": 34},
        {"type": "aborted_txn", "file": str(txnindex), "version": 0, "producer_id": 9,
         "first_offset": 4, "last_offset": 5, "last_stable_offset": 6},
    ]


def test_not_a_segment_file_or_partition_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "logdir").mkdir()
    with pytest.raises(KcompactError, match="not a segment file; expected <offset>.log"):
        items(tmp_path / "notes.txt")
    with pytest.raises(KcompactError, match="not a partition directory; expected"):
        items(tmp_path / "logdir")


def test_empty_log_is_a_file_without_batches(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    (part / LOG).write_bytes(b"")
    assert items(part / LOG, records=True) == [
        {"type": "file", "file": str(part / LOG), "kind": "log", "base_offset": 0,
         "size_in_bytes": 0}]


# ---------------------------------------------------------------------------------------------
# Generated partitions: every codec, headers, nulls, transactions, horizons, legacy formats


@pytest.mark.parametrize("codec, label", [(0, "none"), (1, "gzip"), (2, "snappy"), (3, "lz4"),
                                          (4, "zstd")])
def test_every_codec_round_trips_keys_values_and_headers(tmp_path: Path, codec: int,
                                                         label: str) -> None:
    headers = (Header(b"trace", b"\x00\xff"), Header(b"empty", None))
    kvs: list[tuple[bytes | None, bytes | None]] = [
        (b"k", b"v" * 300), (None, b"no key"), (b"tomb", None), (bytes(range(256)), b"")]
    part = PartitionBuilder("t", 0).batch(kvs, compression=codec, headers=headers).write(tmp_path)
    found = items(part, records=True)
    (batch,) = of_type(found, "batch")
    assert (batch["compression"], batch["count"], batch["crc_valid"]) == (label, 4, True)
    dumped = of_type(found, "record")
    assert [(r["offset"], r["key"], r["value"]) for r in dumped] == [
        (offset, b64(key), b64(value)) for offset, (key, value) in enumerate(kvs)]
    assert [base64.b64decode(r["value"] or "") for r in dumped] == [v or b"" for _k, v in kvs]
    assert {str(r["headers"]) for r in dumped} == {
        str([{"key": "trace", "value": "AP8="}, {"key": "empty", "value": None}])}


def test_transactions_show_markers_with_coordinator_epoch(tmp_path: Path) -> None:
    part = (PartitionBuilder("t", 0)
            .batch([(b"a", b"1")], producer_id=3, producer_epoch=2, transactional=True)
            .marker(3, commit=True, producer_epoch=2)
            .batch([(b"b", b"2")], producer_id=4, transactional=True)
            .marker(4, commit=False).write(tmp_path))
    found = items(part, records=True, verify_index=True)
    batches = of_type(found, "batch")
    assert [(b["is_transactional"], b["is_control"], b["producer_id"], b["producer_epoch"])
            for b in batches] == [(True, False, 3, 2), (True, True, 3, 2),
                                  (True, False, 4, 0), (True, True, 4, 0)]
    assert [(r["offset"], r["control"], r["coordinator_epoch"])
            for r in of_type(found, "record")] == [
        (0, None, None), (1, "COMMIT", 1), (2, None, None), (3, "ABORT", 1)]
    assert of_type(found, "problem") == []
    assert [c["problems"] for c in of_type(found, "index_check")] == [0, 0, 0]


def test_other_control_records_are_named(tmp_path: Path) -> None:
    key = struct.pack(">hh", 0, ControlRecordType.LEADER_CHANGE)
    batch = encode_batch([Record(0, BASE_TS, key, b"\x00\x00")], base_offset=0, is_control=True)
    found = items(segment(tmp_path, [batch]), records=True)
    assert [(r["control"], r["coordinator_epoch"]) for r in of_type(found, "record")] == [
        ("LEADER_CHANGE", None)]


def test_tombstone_with_delete_horizon(tmp_path: Path) -> None:
    horizon = BASE_TS + 86_400_000
    tomb = encode_batch([Record(5, BASE_TS + 7, b"gone", None)], base_offset=5,
                        delete_horizon_ms=horizon)
    found = items(segment(tmp_path, [tomb]), records=True)
    (batch,) = of_type(found, "batch")
    assert (batch["delete_horizon_ms"], batch["base_offset"], batch["max_timestamp"]) == (
        horizon, 5, BASE_TS + 7)
    assert of_type(found, "record") == [
        {"type": "record", "offset": 5, "timestamp": BASE_TS + 7, "key": b64(b"gone"),
         "value": None, "headers": [], "control": None, "coordinator_epoch": None}]


def test_log_append_time_batch(tmp_path: Path) -> None:
    batch = encode_batch(records(0, 2), base_offset=0, timestamp_type=1, max_timestamp=BASE_TS + 99)
    found = items(segment(tmp_path, [batch]), records=True)
    assert of_type(found, "batch")[0]["timestamp_type"] == "LogAppendTime"
    assert [r["timestamp"] for r in of_type(found, "record")] == [BASE_TS + 99] * 2


def test_legacy_magic_0_and_1_entries(tmp_path: Path) -> None:
    entries = [
        encode_legacy_message(offset=0, magic=0, key=b"k0", value=b"v0"),
        encode_legacy_message(offset=1, magic=1, key=None, value=b"v1", timestamp=BASE_TS),
        encode_legacy_wrapper(records(2, 3), magic=1, compression=1),
        encode_legacy_wrapper(records(5, 2), magic=0, compression=2),
    ]
    found = items(segment(tmp_path, entries), records=True, verify_index=True)
    assert [(b["magic"], b["base_offset"], b["last_offset"], b["count"], b["compression"],
             b["timestamp_type"], b["max_timestamp"], b["crc_valid"], b["delete_horizon_ms"])
            for b in of_type(found, "batch")] == [
        (0, 0, 0, 1, "none", "NoTimestampType", -1, True, None),
        (1, 1, 1, 1, "none", "CreateTime", BASE_TS, True, None),
        (1, 2, 4, 3, "gzip", "CreateTime", BASE_TS + 4, True, None),
        (0, 5, 6, 2, "snappy", "NoTimestampType", -1, True, None),
    ]
    assert [(r["offset"], r["timestamp"], r["key"], r["value"])
            for r in of_type(found, "record")] == [
        (0, -1, b64(b"k0"), b64(b"v0")), (1, BASE_TS, None, b64(b"v1")),
        *((o, BASE_TS + o, b64(f"k{o}".encode()), b64(f"v{o}".encode())) for o in (2, 3, 4)),
        *((o, -1, b64(f"k{o}".encode()), b64(f"v{o}".encode())) for o in (5, 6)),
    ]
    assert of_type(found, "problem") == []


# ---------------------------------------------------------------------------------------------
# Real broker-written segments, cross-checked with kafka-python

REAL_LOGS = sorted(REAL_FIXTURES.glob("*/*/*.log")) if REAL_FIXTURES.exists() else []


def kafka_python_batches(data: bytes) -> list[list[tuple[int, str | None, str | None]]]:
    """Every batch of a segment as kafka-python reads it: (offset, key, value) per record."""
    memory = MemoryRecords(data)
    out = []
    while (batch := memory.next_batch()) is not None:
        out.append([(r.offset, b64(r.key), b64(r.value)) for r in batch])
    return out


@pytest.mark.parametrize("log", REAL_LOGS or [None],
                         ids=lambda p: "/".join(p.parts[-3:]) if p else "absent")
def test_real_segments_dump_valid_and_agree_with_kafka_python(log: Path | None) -> None:
    if log is None:
        real_fixture("absent")
        return
    found = items(real_fixture(*log.parts[-3:]), records=True)
    assert of_type(found, "problem") == []
    batches = of_type(found, "batch")
    assert all(b["crc_valid"] for b in batches)
    ours: list[list[tuple[int, str | None, str | None]]] = []
    for item in found[1:]:
        if item["type"] == "batch":
            ours.append([])
        else:
            ours[-1].append((item["offset"], item["key"], item["value"]))
    assert ours == kafka_python_batches(log.read_bytes())
    assert [b["count"] for b in batches] == [len(b) for b in ours]


def index_files() -> list[Path]:
    if not REAL_FIXTURES.exists():
        return []
    return sorted(p for kind in ("index", "timeindex", "txnindex")
                  for p in REAL_FIXTURES.glob(f"*/*/*.{kind}"))


@pytest.mark.parametrize("index", index_files() or [None],
                         ids=lambda p: "/".join(p.parts[-3:]) if p else "absent")
def test_every_real_index_verifies(index: Path | None) -> None:
    """Broker-written indexes have no problem, with their .log or (orphans) on their own rules."""
    if index is None:
        real_fixture("absent")
        return
    found = items(index, verify_index=True)
    (check,) = of_type(found, "index_check")
    has_log = index.with_name(index.name.split(".")[0] + ".log").exists()
    assert check == {"type": "index_check", "file": str(index),
                     "log_file": str(index.with_suffix(".log")) if has_log else None,
                     "problems": 0}
    assert of_type(found, "problem") == []


def test_real_partitions_report_missing_and_orphaned_indexes() -> None:
    root = real_fixture()
    checked, warned = set(), set()
    for part in sorted(p for p in root.glob("*/*") if p.is_dir()):
        found = items(part, verify_index=True)
        assert of_type(found, "problem") == []
        checked |= {Path(c["file"]).relative_to(root).as_posix()
                    for c in of_type(found, "index_check")}
        warned |= {(Path(w["file"]).relative_to(root).as_posix(), w["message"].split(":")[0])
                    for w in of_type(found, "warning")}
    assert "kraft37-consumer-offsets/__consumer_offsets-6/00000000000000000000.index" in checked
    assert "kraft37-consumer-offsets/__consumer_offsets-6/00000000000000000000.timeindex" in checked
    assert ("kraft37-cleaned-logdir/__cluster_metadata-0/00000000000000839130.index",
            "index file without its .log (an orphan a broker deletes at startup); not checked"
            ) in warned
    assert ("bitnami2024-rolled-logdir/__consumer_offsets-0/00000000000000000000.log",
            "no .index") in warned
    logs_with_index = {p.with_suffix(".log").relative_to(root).as_posix()
                       for p in root.glob("*/*/*.index") if p.with_suffix(".log").exists()}
    missing = {f for f, message in warned if message == "no .index"}
    assert missing == {p.relative_to(root).as_posix() for p in root.glob("*/*/*.log")} - logs_with_index


def test_trimmed_real_index_entries() -> None:
    part = real_fixture("kraft37-consumer-offsets", "__consumer_offsets-6")
    assert len(of_type(items(part / "00000000000000000000.index"), "offset_index_entry")) == 2
    assert len(of_type(items(part / "00000000000000000000.timeindex"), "time_index_entry")) == 3


# ---------------------------------------------------------------------------------------------
# Corruption: problems name the file and position, and the walk goes on where the frame allows


def corrupt(part: Path, position: int, patch: bytes) -> Path:
    log = part / LOG
    data = bytearray(log.read_bytes())
    data[position : position + len(patch)] = patch
    log.write_bytes(bytes(data))
    return log


def positions(part: Path) -> list[int]:
    return [b["position"] for b in of_type(items(part), "batch")]


def test_crc_failure_marks_the_batch_and_the_dump_goes_on(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    p = positions(part)
    log = corrupt(part, p[1] + 17, b"\x00\x00\x00\x00")
    found = items(log)
    assert [(b["position"], b["crc_valid"]) for b in of_type(found, "batch")] == [
        (p[0], True), (p[1], False), (p[2], True)]
    assert of_type(found, "problem") == []


def test_truncated_tail_is_a_problem_after_the_whole_batches(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    p = positions(part)
    log = part / LOG
    log.write_bytes(log.read_bytes()[: p[2] + 30])
    found = items(log, records=True)
    assert [b["position"] for b in of_type(found, "batch")] == p[:2]
    (problem,) = of_type(found, "problem")
    assert problem["file"] == str(log) and problem["position"] == p[2]
    assert "but only 30 remain; expected the whole entry inside the data" in problem["message"]


@pytest.mark.parametrize("patch_at, patch, message, later_batch", [
    (8, struct.pack(">i", 10), "expected >= 14, found 10", False),
    (8, struct.pack(">i", -1), "expected >= 14, found -1", False),
    (8, struct.pack(">i", 2**31 - 1), "expected the whole entry inside the data", False),
    (16, b"\x07", "invalid magic byte; expected 0, 1 or 2, found 7", False),
    (22, b"\x05", "unknown compression codec; expected 0..4, found 5", True),
    (21, b"\x80", "unknown attribute bits; expected 0 in bits 7-15, found attributes 0x8000", True),
    (8, struct.pack(">i", 20), ("batch length smaller than an empty v2 batch; expected >= 49, "
                               "found 20"), False),
])
def test_bad_frame_or_header_in_the_middle(tmp_path: Path, patch_at: int, patch: bytes,
                                           message: str, later_batch: bool) -> None:
    part = three_batches(tmp_path)
    p = positions(part)
    log = corrupt(part, p[1] + patch_at, patch)
    found = items(log, records=True)
    (problem,) = of_type(found, "problem")
    assert (problem["file"], problem["position"]) == (str(log), p[1])
    assert problem["message"].endswith(message), problem["message"]
    assert [b["position"] for b in of_type(found, "batch")] == ([p[0], p[2]] if later_batch
                                                               else [p[0]])


def test_record_count_mismatch_is_a_problem_for_that_batch(tmp_path: Path) -> None:
    raw = encode_record(0, 0, b"a", b"1") + encode_record(1, 1, b"b", b"2")
    short = encode_records_batch(raw, count=3, base_offset=1, last_offset_delta=2,
                                 base_timestamp=BASE_TS, max_timestamp=BASE_TS + 1)
    part = segment(tmp_path, [encode_batch(records(0, 1), base_offset=0), short,
                              encode_batch(records(4, 1), base_offset=4)])
    found = items(part, records=True)
    p = [b["position"] for b in of_type(found, "batch")]
    assert [b["crc_valid"] for b in of_type(found, "batch")] == [True, True, True]
    (problem,) = of_type(found, "problem")
    assert problem["position"] == p[1] + 61 + len(raw)
    assert problem["message"] == ("Incorrect declared batch size, premature EOF reached; expected "
                                  "3 records, found 2")
    assert [r["offset"] for r in of_type(found, "record")] == [0, 4]
    assert [i["type"] for i in found] == ["file", "batch", "record", "batch", "problem", "batch",
                                          "record"]


def test_broken_marker_value_is_a_problem(tmp_path: Path) -> None:
    key = struct.pack(">hh", 0, ControlRecordType.COMMIT)
    marker = encode_batch([Record(0, BASE_TS, key, None)], base_offset=0, producer_id=1,
                          producer_epoch=0, is_transactional=True, is_control=True)
    found = items(segment(tmp_path, [marker]), records=True)
    (problem,) = of_type(found, "problem")
    assert "control record at offset 0: invalid end transaction marker value size" in problem[
        "message"]
    assert of_type(found, "record")[0]["control"] is None


def test_legacy_wrapper_that_does_not_decompress(tmp_path: Path) -> None:
    wrapper = encode_legacy_message(offset=3, magic=1, key=None, value=b"not gzip at all",
                                    timestamp=BASE_TS, compression=1)
    found = items(segment(tmp_path, [wrapper], with_indexes=False))
    (batch,) = of_type(found, "batch")
    assert (batch["base_offset"], batch["count"], batch["last_offset"]) == (None, None, 3)
    (problem,) = of_type(found, "problem")
    assert problem["position"] == 0 and "gzip payload does not decompress" in problem["message"]


def test_legacy_codec_outside_magic_0_1_is_refused(tmp_path: Path) -> None:
    entry = bytearray(encode_legacy_message(offset=0, magic=1, key=None, value=b"x",
                                            timestamp=BASE_TS))
    entry[17] = 4  # zstd in a v1 message (the CRC is not what the walk looks at first)
    found = items(segment(tmp_path, [bytes(entry)], with_indexes=False))
    assert of_type(found, "batch") == []
    (problem,) = of_type(found, "problem")
    assert problem["message"] == ("unknown compression codec for a magic 1 message; expected "
                                  "0..3, found 4")


def test_odd_length_index_is_a_problem(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    index = part / "00000000000000000000.index"
    index.write_bytes(bytes(range(13)))
    found = items(index, verify_index=True)
    problems = of_type(found, "problem")
    assert problems[0] == {"type": "problem", "file": str(index), "position": 8, "message": (
        "offset index size is not a whole number of entries; expected a multiple of 8 bytes, "
        "found 13 bytes")}
    assert [p["message"] for p in problems[1:]] == [problems[0]["message"]]
    assert of_type(found, "index_check")[0]["problems"] == 1


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture],
          deadline=None)
@given(data=st.data())
def test_damaged_segments_never_raise(tmp_path: Path, data: st.DataObject) -> None:
    part = tmp_path / "t-0"
    if not part.exists():
        PartitionBuilder("t", 0).batch([(b"k", b"v")] * 3, compression=1).batch(
            [(b"x", None)], producer_id=2, transactional=True).marker(2, commit=False).batch(
            [(None, b"y")]).write(tmp_path, index_interval_bytes=1)
        (part / "pristine").write_bytes((part / LOG).read_bytes())
    original = (part / "pristine").read_bytes()
    damaged = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(damaged)))
    (part / LOG).write_bytes(bytes(damaged[:cut]))
    found = items(part, records=True, verify_index=True)
    assert {i["type"] for i in found} <= {"file", "batch", "record", "problem", "warning",
                                          "index_check"}
    for problem in of_type(found, "problem"):
        assert problem["file"].startswith(str(part)) and problem["message"]


# ---------------------------------------------------------------------------------------------
# --verify-index


def with_index(part: Path, kind: str, data: bytes) -> Path:
    path = part / f"00000000000000000000.{kind}"
    path.write_bytes(data)
    return path


def verify(path: Path) -> list[str]:
    return [p["message"] for p in of_type(items(path, verify_index=True), "problem")]


def test_verify_catches_a_wrong_position(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    p = positions(part)
    index = with_index(part, "index", encode_offset_index(
        [OffsetIndexEntry(2, p[1]), OffsetIndexEntry(5, p[2] + 1)], 0))
    assert verify(index) == [(f"entry does not point at a batch start: entry 1 points at position "
                             f"{p[2] + 1}")]
    assert verify(part) == verify(index)


def test_verify_catches_an_offset_that_is_not_the_batch_last(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    p = positions(part)
    index = with_index(part, "index", encode_offset_index([OffsetIndexEntry(1, p[1])], 0))
    assert verify(index) == [(f"entry's offset is not the last offset of its batch: entry 0 at "
                             f"position {p[1]}: expected offset 2, found 1")]


def test_verify_catches_a_trailing_zero_slot(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    p = positions(part)
    good = encode_offset_index([OffsetIndexEntry(2, p[1])], 0)
    index = with_index(part, "index", good + bytes(8))
    assert verify(index) == [("1 trailing zero-filled slots (a preallocated index that was never "
                             "trimmed; Kafka would read them as entries), from entry 1")]
    timeindex = with_index(part, "timeindex", bytes(12) * 2)
    assert verify(timeindex)[0].startswith("2 trailing zero-filled slots")


def test_preallocated_active_index_is_fine_while_a_broker_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = three_batches(tmp_path)
    p = positions(part)
    with_index(part, "index", encode_offset_index([OffsetIndexEntry(2, p[1])], 0) + bytes(800))
    with_index(part, "timeindex", struct.pack(">qi", BASE_TS + 5, 5) + bytes(1200))
    zero_slots = ("100 trailing zero-filled slots (a preallocated index that was never trimmed; "
                  "Kafka would read them as entries), from entry 1")
    assert verify(part) == [zero_slots, ("last timestamp 0 is below the first 1700000000005 "
                            "(Kafka's sanity check fails: CorruptIndexException)"), zero_slots]
    monkeypatch.setattr(dump_module, "broker_holds_lock", lambda log_dir: True)
    found = items(part, verify_index=True)
    assert of_type(found, "problem") == []
    assert of_type(found, "warning") == [{
        "type": "warning", "file": str(tmp_path / ".lock"), "message": (
            "held by a running Kafka broker: the active segment may change while it is read "
            "(a partial last batch, preallocated indexes)")}]


def test_partial_tail_of_a_live_active_segment_is_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builder = PartitionBuilder("t", 0).batch([(b"a", b"1")] * 2).batch([(b"b", b"2")])
    part = builder.roll().batch([(b"c", b"3")]).batch([(b"d", b"4")] * 5).write(
        tmp_path, index_interval_bytes=1)
    shut_down_cleanly(tmp_path)
    old, active = sorted(part.glob("*.log"))
    old.write_bytes(old.read_bytes()[:-20])  # a torn closed segment is always a problem
    appending = encode_batch(records(9, 4), base_offset=9)[:40]  # what a broker is writing
    active.write_bytes(active.read_bytes() + appending)
    end = active.stat().st_size - 40
    torn_closed = [(old.name, 79), ("00000000000000000000.index", None),
                   ("00000000000000000000.timeindex", None)]
    torn_active = [(active.name, end), ("00000000000000000003.index", None),
                   ("00000000000000000003.timeindex", None)]
    found = items(part, verify_index=True)
    assert [(Path(p["file"]).name, p["position"]) for p in of_type(found, "problem")] == (
        torn_closed + torn_active)
    monkeypatch.setattr(dump_module, "broker_holds_lock", lambda log_dir: True)
    for target, problems in ((part, torn_closed), (active, []), (old, torn_closed[:1])):
        found = items(target, verify_index=target != old)
        assert [(Path(p["file"]).name, p["position"])
                for p in of_type(found, "problem")] == problems
    assert of_type(items(active), "warning")[-1] == {
        "type": "warning", "file": str(active), "message": (
            f"ends in a partial entry at position {end}, which the running broker may be "
            "writing; stopped there")}


def test_unreadable_lock_is_a_warning_not_a_refusal(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(log_dir: Path) -> bool:
        raise KcompactError("cannot check it: Permission denied")

    part = three_batches(tmp_path)
    monkeypatch.setattr(dump_module, "broker_holds_lock", refuse)
    found = items(part)
    assert len(of_type(found, "batch")) == 3
    assert [w["message"] for w in of_type(found, "warning")] == [
        ("cannot tell whether a broker holds this lock (cannot check it: Permission denied); if "
        "one runs, the active segment may change while it is read")]


def test_verify_catches_txn_entries_below_the_base_or_off_their_marker(tmp_path: Path) -> None:
    builder = (PartitionBuilder("t", 0).batch([(b"a", b"1")]).roll()
               .batch([(b"b", b"2")], producer_id=5, transactional=True).marker(5, commit=False)
               .batch([(b"c", b"3")], producer_id=6, transactional=True).marker(6, commit=True))
    part = builder.write(tmp_path)
    shut_down_cleanly(tmp_path)
    txnindex = part / "00000000000000000001.txnindex"
    assert verify(txnindex) == []
    txnindex.write_bytes(encode_txn_index([
        AbortedTxn(5, 0, 0, 1), AbortedTxn(5, 1, 2, 3), AbortedTxn(6, 3, 4, 5),
        AbortedTxn(5, 3, 2, 5)]))
    # an entry ending below the base: TransactionIndex.sanityCheck throws, the loader recovers the segment and
    # rebuilds the index, so what is wrong with it is a warning (Kafka settles it), not a problem
    found = items(txnindex, verify_index=True)
    assert of_type(found, "problem") == []
    rebuilt = ("; a broker starting on this log dir recovers this segment and rebuilds this index from the log "
               "(LogSegment.recover), never reading it")
    assert [w["message"] for w in of_type(found, "warning")] == [problem + rebuilt for problem in (
        ("last offset below the segment's base offset (Kafka recovers the segment): entry 0 has "
         "last offset 0 < 1"),
        "last offsets not strictly increasing: entry 3 has last offset 2 after 4",
        "first offset after last offset: entry 3 has first offset 3 > last offset 2",
        ("last offset is not an ABORT marker of the entry's producer in this segment (2 entries), "
         "first: entry 0: no control batch at offset 0"),
    )]
    txnindex.write_bytes(encode_txn_index([
        AbortedTxn(5, 1, 2, 3), AbortedTxn(6, 3, 4, 5), AbortedTxn(5, 3, 2, 5)]))
    assert verify(txnindex) == [  # the loader trusts this one: its problems are the broker's
        "last offsets not strictly increasing: entry 2 has last offset 2 after 4",
        "first offset after last offset: entry 2 has first offset 3 > last offset 2",
        ("last offset is not an ABORT marker of the entry's producer in this segment: entry 1 at offset 4: "
         "expected an ABORT marker of producer 6, found COMMIT of producer 6"),
    ]
    txnindex.write_bytes(encode_txn_index([AbortedTxn(5, 1, 4, 5)]))
    assert verify(txnindex) == [
        ("last offset is not an ABORT marker of the entry's producer in this segment: entry 0 at "
        "offset 4: expected an ABORT marker of producer 5, found COMMIT of producer 6")]


def test_verify_against_a_log_that_cannot_be_walked(tmp_path: Path) -> None:
    part = three_batches(tmp_path)
    p = positions(part)
    corrupt(part, p[1] + 16, b"\x09")
    found = verify(part / "00000000000000000000.timeindex")
    assert found == [(f"not compared with {LOG}, which cannot be walked: {part / LOG} at position "
                     f"{p[1]}: invalid magic byte; expected 0, 1 or 2, found 9")]


def test_dump_is_read_only(tmp_path: Path) -> None:
    part = (PartitionBuilder("t", 0).batch([(b"a", b"1")], producer_id=1, transactional=True)
            .marker(1, commit=False).write(tmp_path))
    corrupt(part, 20, b"\xff")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in part.iterdir()}
    items(part, records=True, verify_index=True)
    for path in part.iterdir():
        items(path, records=True, verify_index=True)
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in part.iterdir()} == before


def test_control_batch_encoder_matches_what_the_dump_reads(tmp_path: Path) -> None:
    marker = encode_control_batch(offset=0, timestamp=BASE_TS, producer_id=8, producer_epoch=1,
                                  control_type=ControlRecordType.ABORT, coordinator_epoch=42)
    found = items(segment(tmp_path, [marker]), records=True)
    assert [(r["control"], r["coordinator_epoch"]) for r in of_type(found, "record")] == [
        ("ABORT", 42)]


def test_verify_from_a_log_file_checks_its_own_indexes(tmp_path: Path) -> None:
    part = (PartitionBuilder("t", 0).batch([(b"a", b"1")]).batch([(b"b", b"2")])
            .write(tmp_path, index_interval_bytes=1))
    found = items(part / LOG, verify_index=True)
    assert [(Path(c["file"]).name, c["problems"]) for c in of_type(found, "index_check")] == [
        ("00000000000000000000.index", 0), ("00000000000000000000.timeindex", 0)]
    for path in part.iterdir():
        path.rename(path.with_name(path.name + ".cleaned"))
    (part / "00000000000000000000.index.cleaned").write_bytes(struct.pack(">ii", 0, 5))
    found = items(part / (LOG + ".cleaned"), verify_index=True)
    assert [(Path(c["file"]).name, Path(c["log_file"]).name, c["problems"])
            for c in of_type(found, "index_check")] == [
        ("00000000000000000000.index.cleaned", "00000000000000000000.log.cleaned", 1),
        ("00000000000000000000.timeindex.cleaned", "00000000000000000000.log.cleaned", 0)]
