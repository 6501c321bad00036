"""``inspect dump`` of kafka-dump-log's other files, ``__transaction_state`` records, and the selections.

Every expectation is computed independently of kcompact: the broker-written snapshot and checkpoint files
are parsed here with ``struct`` and ``str.split`` following Kafka's layouts, ``__transaction_state`` records
are encoded here by hand from Kafka's ``TransactionLogKey.json`` / ``TransactionLogValue.json``, and the
records a selection should show come from kafka-python's own decoder.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kafka.record import MemoryRecords

from kcompact.cli.main import cli
from kcompact.inspect.dump import dump_path
from kcompact.inspect.dump.window import DumpFilter
from tests.conftest import real_fixture
from tests.partition_builder import BASE_TS, PartitionBuilder

BITNAMI = "bitnami2024-rolled-logdir"


def run_json(*args: str) -> tuple[int, list[dict[str, Any]]]:
    done = CliRunner().invoke(cli, ["inspect", "dump", *args, "--json"])
    return done.exit_code, [json.loads(line) for line in done.stdout.splitlines()]


def run_text(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(cli, ["inspect", "dump", *args])
    return done.exit_code, done.stdout


# -- producer snapshots and checkpoints (broker-written) --

def snapshot_entries(data: bytes) -> list[tuple[int, ...]]:
    """ProducerSnapshot v1 by hand: int16 version, uint32 crc, int32 count, 46-byte entries."""
    (count,) = struct.unpack_from(">i", data, 6)
    return [struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i) for i in range(count)]


def test_producer_snapshot_as_kafka_dump_log_prints_it() -> None:
    path = real_fixture(BITNAMI, "sensor-data-topic-0", "00000000000000000035.snapshot")
    expected = snapshot_entries(path.read_bytes())
    code, items = run_json(str(path))
    assert code == 0
    assert items[0] == {"type": "file", "file": str(path), "kind": "snapshot", "base_offset": 35,
                        "size_in_bytes": path.stat().st_size}
    got = [(i["producer_id"], i["producer_epoch"], i["last_sequence"], i["last_offset"], i["offset_delta"],
            i["timestamp"], i["coordinator_epoch"], -1 if i["current_txn_first_offset"] is None
            else i["current_txn_first_offset"]) for i in items[1:]]
    assert got == expected and len(got) == 3
    code, text = run_text(str(path))
    lines = text.splitlines()
    assert lines[0] == f"Dumping {path}"
    pid, epoch, last_seq, last_offset, delta, ts, coord, _first = expected[0]
    assert lines[1] == (  # DumpLogSegments.dumpProducerIdSnapshot
        f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coord} currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {ts} firstSequence: {last_seq - delta} lastSequence: {last_seq} "
        f"lastOffset: {last_offset} offsetDelta: {delta} timestamp: {ts}")


def test_a_corrupt_snapshot_is_a_problem_naming_the_crc(tmp_path: Path) -> None:
    source = real_fixture(BITNAMI, "sensor-data-topic-0", "00000000000000000035.snapshot")
    data = bytearray(source.read_bytes())
    data[20] ^= 0xFF
    bad = tmp_path / "orders-0" / "00000000000000000035.snapshot"
    bad.parent.mkdir()
    bad.write_bytes(bytes(data))
    code, items = run_json(str(bad))
    assert code == 2
    assert items[-1]["type"] == "problem" and items[-1]["position"] == 2
    assert "CRC-32C" in items[-1]["message"]


def checkpoint_lines(path: Path) -> list[list[str]]:
    lines = path.read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2
    return [line.split() for line in lines[2:]]


def test_leader_epoch_checkpoint_as_a_table() -> None:
    path = real_fixture(BITNAMI, "__cluster_metadata-0", "leader-epoch-checkpoint")
    expected = [(int(e), int(o)) for e, o in checkpoint_lines(path)]
    code, items = run_json(str(path))
    assert code == 0
    assert [(i["epoch"], i["start_offset"]) for i in items if i["type"] == "leader_epoch_entry"] == expected
    code, text = run_text(str(path))
    rows = [line.split() for line in text.splitlines()[1:]]
    assert rows[0] == ["epoch", "startOffset"]
    assert [(int(e), int(o)) for e, o in rows[1:]] == expected


@pytest.mark.parametrize("name", ["cleaner-offset-checkpoint", "replication-offset-checkpoint",
                                  "recovery-point-offset-checkpoint", "log-start-offset-checkpoint"])
def test_offset_checkpoints_as_tables(name: str) -> None:
    path = real_fixture("kraft37-cleaned-logdir", name)
    expected = [(t, int(p), int(o)) for t, p, o in checkpoint_lines(path)]
    assert expected or name == "log-start-offset-checkpoint"  # the broker wrote that one empty
    code, items = run_json(str(path))
    assert code == 0
    assert items[0]["kind"] == "offset-checkpoint"
    assert [(i["topic"], i["partition"], i["offset"]) for i in items[1:]] == expected
    code, text = run_text(str(path))
    rows = [line.split() for line in text.splitlines()[1:]]
    if expected:
        assert rows[0] == ["topic", "partition", "offset"]
    assert [(t, int(p), int(o)) for t, p, o in rows[1:]] == expected


def test_partition_metadata() -> None:
    path = real_fixture(BITNAMI, "sensor-data-topic-0", "partition.metadata")
    topic_id = path.read_text().splitlines()[1].split(": ")[1]
    code, items = run_json(str(path))
    assert code == 0
    assert items[1] == {"type": "partition_metadata", "file": str(path), "version": 0, "topic_id": topic_id}


# -- __transaction_state (TransactionLogKey / TransactionLogValue, encoded here by hand) --

def classic_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def compact_string(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def txn_key(transactional_id: str) -> bytes:
    return struct.pack(">h", 0) + classic_string(transactional_id)


def txn_value_v0(pid: int, epoch: int, timeout: int, status: int, parts: dict[str, list[int]] | None,
                 updated: int, started: int) -> bytes:
    body = struct.pack(">qhib", pid, epoch, timeout, status)
    if parts is None:
        body += struct.pack(">i", -1)
    else:
        body += struct.pack(">i", len(parts))
        for topic, ids in parts.items():
            body += classic_string(topic) + struct.pack(">i", len(ids)) + b"".join(struct.pack(">i", i) for i in ids)
    return struct.pack(">h", 0) + body + struct.pack(">qq", updated, started)


def txn_value_v1(pid: int, epoch: int, timeout: int, status: int, parts: dict[str, list[int]],
                 updated: int, started: int, previous: int, client_version: int) -> bytes:
    body = struct.pack(">qhib", pid, epoch, timeout, status) + bytes([len(parts) + 1])
    for topic, ids in parts.items():
        body += compact_string(topic) + bytes([len(ids) + 1]) + b"".join(struct.pack(">i", i) for i in ids)
        body += b"\x00"  # the struct's tagged fields
    body += struct.pack(">qq", updated, started)
    body += bytes([2]) + bytes([0, 8]) + struct.pack(">q", previous) + bytes([2, 2]) + struct.pack(">h", client_version)
    return struct.pack(">h", 1) + body


def transaction_state_partition(log_dir: Path) -> Path:
    b = PartitionBuilder("__transaction_state", 7)
    b.batch([(txn_key("app-1"), txn_value_v0(4000, 3, 60000, 1, {"orders": [0, 2]}, BASE_TS + 5, BASE_TS))])
    b.batch([(txn_key("app-2"), txn_value_v1(4001, 0, 30000, 4, {"pay": [1]}, BASE_TS + 9, BASE_TS + 2,
                                             previous=3999, client_version=2))])
    b.batch([(txn_key("app-3"), txn_value_v0(4002, 1, 60000, 0, None, BASE_TS + 11, -1))])
    b.batch([(txn_key("app-1"), None)])
    return b.write(log_dir)


def test_transaction_state_records_are_decoded(tmp_path: Path) -> None:
    part = transaction_state_partition(tmp_path / "logdir")
    code, items = run_json(str(part), "--records")
    assert code == 0
    decoded = [i["decoded"] for i in items if i["type"] == "record"]
    assert [d["key"] for d in decoded] == [{"version": 0, "data": {"transactionalId": t}}
                                           for t in ("app-1", "app-2", "app-3", "app-1")]
    first, second, third, tombstone = (d["value"] for d in decoded)
    assert first == {"version": 0, "data": {
        "producerId": 4000, "previousProducerId": -1, "nextProducerId": -1, "producerEpoch": 3,
        "transactionTimeoutMs": 60000, "transactionStatus": 1, "transactionState": "Ongoing",
        "transactionPartitions": [{"topic": "orders", "partitionIds": [0, 2]}],
        "transactionLastUpdateTimestampMs": BASE_TS + 5, "transactionStartTimestampMs": BASE_TS,
        "clientTransactionVersion": 0}}
    assert (second["version"], second["data"]["previousProducerId"], second["data"]["nextProducerId"],
            second["data"]["clientTransactionVersion"], second["data"]["transactionState"],
            second["data"]["transactionPartitions"]) == (
        1, 3999, -1, 2, "CompleteCommit", [{"topic": "pay", "partitionIds": [1]}])
    assert third["data"]["transactionPartitions"] is None and third["data"]["transactionState"] == "Empty"
    assert tombstone is None
    code, text = run_text(str(part), "--records")
    records = [line for line in text.splitlines() if line.startswith("| offset:")]
    # TransactionLog.formatRecordKeyAndValue
    assert records[0].endswith(
        "key: transaction_metadata::transactionalId=app-1 payload: producerId:4000,producerEpoch:3,"
        f"state=Ongoing,partitions=[orders-0,orders-2],txnLastUpdateTimestamp={BASE_TS + 5},txnTimeoutMs=60000")
    assert records[2].endswith("state=Empty,partitions=[],"
                               f"txnLastUpdateTimestamp={BASE_TS + 11},txnTimeoutMs=60000")
    assert records[3].endswith("key: transaction_metadata::transactionalId=app-1 payload: <DELETE>")


def test_an_unknown_transaction_state_value_version_is_a_problem(tmp_path: Path) -> None:
    b = PartitionBuilder("__transaction_state", 0)
    b.batch([(txn_key("x"), struct.pack(">h", 9) + b"\x00" * 40)])
    code, items = run_json(str(b.write(tmp_path / "logdir")), "--records")
    assert code == 2
    assert any(i["type"] == "problem" and "unknown TransactionLogValue version" in i["message"]
               for i in items)


# -- selections: offsets, times, keys, max bytes --

def segmented(log_dir: Path) -> Path:
    """Three segments of 40 one-record batches each, keys k0..k4 in turn, timestamps BASE_TS + offset."""
    b = PartitionBuilder("orders", 0)
    for offset in range(120):
        if offset and offset % 40 == 0:
            b.roll()
        b.batch([(f"k{offset % 5}".encode(), f"v{offset}".encode())])
    return b.write(log_dir, index_interval_bytes=200)


def kafka_python_records(part: Path) -> list[tuple[int, int, bytes | None, int]]:
    """(offset, timestamp, key, file) of every record, read by kafka-python; file = segment number."""
    found = []
    for number, log in enumerate(sorted(part.glob("*.log"))):
        records = MemoryRecords(log.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            found += [(r.offset, r.timestamp, r.key, number) for r in batch]
    return found


def shown_offsets(items: list[dict[str, Any]]) -> list[int]:
    return [i["offset"] for i in items if i["type"] == "record"]


def break_frame_at(part: Path, offset: int) -> None:
    """Give the batch at ``offset`` an unknown magic: a walk that reads it stops there with a problem."""
    for log in sorted(part.glob("*.log")):
        data = bytearray(log.read_bytes())
        position = 0
        while position < len(data):
            base, size = struct.unpack_from(">qi", data, position)
            if base == offset:
                data[position + 16] = 7
                log.write_bytes(bytes(data))
                return
            position += 12 + size
    raise AssertionError(offset)


def test_offset_range_is_found_through_the_index_not_a_scan(tmp_path: Path) -> None:
    part = segmented(tmp_path / "logdir")
    expected = [o for o, _t, _k, _f in kafka_python_records(part) if 55 <= o <= 85]
    break_frame_at(part, 41)  # a walk of segment 40 from its start meets it; the index jumps past it
    assert run_json(str(part))[0] == 2
    code, items = run_json(str(part), "--records", "--from-offset", "55", "--to-offset", "85")
    assert code == 0
    assert shown_offsets(items) == expected
    assert [i["file"] for i in items if i["type"] == "file"] == [
        str(p) for p in sorted(part.glob("*.log"))[1:3]]  # segment 0 is not even opened


def test_time_range_starts_through_the_time_index(tmp_path: Path) -> None:
    part = segmented(tmp_path / "logdir")
    every = kafka_python_records(part)
    start, end = BASE_TS + 50, BASE_TS + 90
    expected = [o for o, t, _k, _f in every if start <= t <= end]  # timestamps rise with offsets here
    break_frame_at(part, 42)
    code, items = run_json(str(part), "--records", "--from-time", str(start), "--to-time", str(end))
    assert code == 0
    assert shown_offsets(items) == expected


def test_key_selects_that_keys_records(tmp_path: Path) -> None:
    part = segmented(tmp_path / "logdir")
    expected = [o for o, _t, k, _f in kafka_python_records(part) if k == b"k3"]
    code, items = run_json(str(part), "--key", "k3")
    assert code == 0
    assert shown_offsets(items) == expected
    assert [i["base_offset"] for i in items if i["type"] == "batch"] == expected
    code, items = run_json(str(part), "--key", "base64:azM=", "--from-offset", "60")
    assert shown_offsets(items) == [o for o in expected if o >= 60]


def test_max_bytes_reads_the_head_of_each_log_as_kafka_dump_log(tmp_path: Path) -> None:
    part = segmented(tmp_path / "logdir")
    limit = 500
    expected = []
    for log in sorted(part.glob("*.log")):
        records = MemoryRecords(log.read_bytes()[:limit])  # FileRecords.slice(0, maxBytes)
        while records.has_next():
            expected += [r.offset for r in records.next_batch()]
    code, items = run_json(str(part), "--records", "--max-bytes", str(limit))
    assert code == 0
    assert shown_offsets(items) == expected and 0 < len(expected) < 120


def test_selection_of_a_lone_log_file_and_the_library(tmp_path: Path) -> None:
    part = segmented(tmp_path / "logdir")
    log = sorted(part.glob("*.log"))[1]
    code, items = run_json(str(log), "--records", "--from-offset", "70", "--to-offset", "72")
    assert (code, shown_offsets(items)) == (0, [70, 71, 72])
    library = list(dump_path(part, records=True, selection=DumpFilter(from_offset=118)))
    assert shown_offsets(library) == [118, 119]


def test_a_selection_on_a_file_without_records_is_refused(tmp_path: Path) -> None:
    part = segmented(tmp_path / "logdir")
    index = min(part.glob("*.index"))
    done = CliRunner().invoke(cli, ["inspect", "dump", str(index), "--from-offset", "3"])
    assert done.exit_code == 2
    assert str(index) in done.stderr and "--from-offset" in done.stderr


def index_entries(index: Path) -> list[tuple[int, int]]:
    """(relative offset, position) of every slot of an offset index."""
    data = index.read_bytes()
    return [struct.unpack_from(">ii", data, at) for at in range(0, len(data), 8)]


def set_index_entry(index: Path, number: int, relative_offset: int, position: int) -> None:
    data = bytearray(index.read_bytes())
    struct.pack_into(">ii", data, number * 8, relative_offset, position)
    index.write_bytes(bytes(data))


@pytest.mark.parametrize("wrong", ["into a batch", "past the offset"])
def test_a_wrong_index_entry_is_not_followed(tmp_path: Path, wrong: str) -> None:
    part = segmented(tmp_path / "logdir")
    index = sorted(part.glob("*.index"))[1]  # segment 40
    entries = index_entries(index)
    relative, position = entries[1]
    if wrong == "into a batch":
        set_index_entry(index, 1, relative, position + 5)
    else:  # the next entry's batch: the records between the two would be skipped unseen
        set_index_entry(index, 1, relative, entries[2][1])
    start = 40 + relative + 1
    expected = [o for o, _t, _k, _f in kafka_python_records(part) if start <= o <= 79]
    done = CliRunner().invoke(cli, ["inspect", "dump", str(part), "--records", "--from-offset", str(start),
                                    "--to-offset", "79", "--json"])
    assert done.exit_code == 0, done.stderr
    assert shown_offsets([json.loads(line) for line in done.stdout.splitlines()]) == expected
    note = [line for line in done.stderr.splitlines() if str(index) in line]
    assert len(note) == 1
    followed = position + 5 if wrong == "into a batch" else entries[2][1]
    assert f"entry 1 (offset {40 + relative}, position {followed})" in note[0]
    assert "from its start" in note[0]


def test_a_range_ending_before_it_starts_is_refused(tmp_path: Path) -> None:
    part = segmented(tmp_path / "logdir")
    for bounds in (["--from-offset", "100", "--to-offset", "5"], ["--from-time", "9", "--to-time", "8"]):
        done = CliRunner().invoke(cli, ["inspect", "dump", str(part), *bounds])
        assert done.exit_code == 2
        assert done.stdout == ""
        assert done.stderr.count("\n") == 1
        assert str(part) in done.stderr
        assert f"{bounds[0]} {bounds[1]} is after {bounds[2]} {bounds[3]}" in done.stderr
