"""``inspect transactions``: the producer state a broker loads, and find-hanging's verdict, offline.

The hanging verdict is checked against an independent model of ``kafka-transactions.sh find-hanging``
(``TransactionsCommand.collectCandidateOpenTransactions``: an active producer with a
``currentTransactionStartOffset`` whose ``now - lastTimestamp > maxTransactionTimeoutMs``), fed by
kafka-python's own batch decoder; the producer state is checked against a broker-written producer
snapshot.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from click.testing import CliRunner
from kafka.record.default_records import DefaultRecordBatch

from kcompact.cli.main import cli
from kcompact.inspect.transactions import transactions_report
from kcompact.segment.snapshot import read_producer_snapshot
from tests.conftest import copy_tree_writable, real_fixture
from tests.partition_builder import BASE_TS, PartitionBuilder

DEFAULT_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms default
HOUR = 3_600_000


def committed_aborted_open(log_dir: Path) -> Path:
    """Transactions of three producers: 7 commits, 8 aborts, 9 (epoch 2) is left open; 5 is idempotent."""
    b = PartitionBuilder("orders", 3)
    b.batch([(b"a", b"1")] * 3).roll()
    b.batch([(b"c", b"1")], producer_id=7, transactional=True).marker(7, commit=True)
    b.batch([(b"d", b"1")], producer_id=8, transactional=True).marker(8, commit=False)
    b.batch([(b"o", b"1"), (b"p", b"2")], producer_id=9, producer_epoch=2, transactional=True).roll()
    b.batch([(b"x", b"1")] * 4, producer_id=5).roll()
    b.batch([(b"y", b"1")])
    return b.write(log_dir)


def find_hanging_model(part: Path, now_ms: int, timeout_ms: int) -> list[tuple[int, int]]:
    """(producer id, transaction start offset) find-hanging would list, from kafka-python's decoding."""
    opened: dict[int, int] = {}
    last_ts: dict[int, int] = {}
    for log in sorted(part.glob("*.log")):
        data = log.read_bytes()
        position = 0
        while position < len(data):
            size = struct.unpack_from(">i", data, position + 8)[0] + 12
            batch = DefaultRecordBatch(data[position:position + size])
            position += size
            if batch.producer_id < 0:
                continue
            last_ts[batch.producer_id] = batch.max_timestamp
            if batch.is_control_batch:
                opened.pop(batch.producer_id, None)
            elif batch.is_transactional:
                opened.setdefault(batch.producer_id, batch.base_offset)
    return sorted((pid, start) for pid, start in opened.items() if now_ms - last_ts[pid] > timeout_ms)


def test_the_open_transaction_hangs_as_find_hanging_says(tmp_path: Path) -> None:
    part = committed_aborted_open(tmp_path / "logdir")
    now = BASE_TS + HOUR
    (row,) = transactions_report([part], cli_overrides={}, now_ms=now)
    expected = find_hanging_model(part, now, DEFAULT_TIMEOUT_MS)
    assert expected == [(9, 7)]
    assert [(t.producer_id, t.start_offset) for t in row.hanging] == expected
    (txn,) = row.hanging
    assert txn.producer_epoch == 2
    assert txn.pins_last_stable_offset and txn.last_stable_offset == 7 == row.last_stable_offset
    assert txn.abort_command == (
        "kafka-transactions.sh --bootstrap-server <broker:9092> abort --topic orders --partition 3 "
        "--start-offset 7")
    # aborted, the cleaner could take the segments before the active one: those from 3 on are held back
    sizes = {int(p.stem): p.stat().st_size for p in part.glob("*.log")}
    assert txn.dirty_bytes_held_back == sizes[3] + sizes[9]
    by_id = {p.producer_id: p for p in row.producers}
    assert sorted(by_id) == [5, 7, 8, 9]
    assert by_id[7].current_transaction_start_offset is None and by_id[7].coordinator_epoch == 1
    assert (by_id[9].current_transaction_start_offset, by_id[9].last_sequence) == (7, 1)
    assert (by_id[5].last_sequence, by_id[5].coordinator_epoch) == (3, -1)


def test_hanging_is_strictly_older_than_the_timeout(tmp_path: Path) -> None:
    part = committed_aborted_open(tmp_path / "logdir")
    (row,) = transactions_report([part], cli_overrides={}, now_ms=BASE_TS)
    last = next(p.last_timestamp for p in row.producers if p.producer_id == 9)
    at_limit = last + DEFAULT_TIMEOUT_MS
    for now, hanging in ((at_limit, []), (at_limit + 1, [9])):
        (row,) = transactions_report([part], cli_overrides={}, now_ms=now)
        assert [t.producer_id for t in row.hanging] == hanging
        assert [pid for pid, _ in find_hanging_model(part, now, DEFAULT_TIMEOUT_MS)] == hanging
    # the resolved transaction.max.timeout.ms decides, not Kafka's default
    (row,) = transactions_report([part], cli_overrides={"transaction.max.timeout.ms": "1000"},
                                 now_ms=last + 1001)
    assert [t.producer_id for t in row.hanging] == [9]
    assert row.transaction_max_timeout_ms == 1000
    properties = tmp_path / "server.properties"
    properties.write_text("transaction.max.timeout.ms=2000\n")
    (row,) = transactions_report([part], cli_overrides={}, now_ms=last + 1001,
                                 server_properties=properties)
    assert (row.transaction_max_timeout_ms, row.hanging) == (2000, [])


def test_producer_state_from_an_older_broker_snapshot_plus_the_log_matches_the_newer_one(
    tmp_path: Path,
) -> None:
    source = real_fixture("bitnami2024-rolled-logdir", "sensor-data-topic-0")
    log_dir = tmp_path / "logdir"
    log_dir.mkdir()
    part = copy_tree_writable(source, log_dir / source.name)
    newest = read_producer_snapshot(part / "00000000000000000035.snapshot")
    (part / "00000000000000000035.snapshot").unlink()  # load from snapshot 34 plus the log after it
    now = max(e.timestamp for e in newest) + 1000
    (row,) = transactions_report([part], cli_overrides={}, now_ms=now)
    assert row.snapshot_offset == 34
    got = {(p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch,
            p.current_transaction_start_offset) for p in row.producers}
    assert got == {(e.producer_id, e.producer_epoch, e.last_sequence, e.timestamp, e.coordinator_epoch,
                    None) for e in newest}
    assert row.hanging == []


def test_expired_producers_are_left_out_as_kafka_loads_them(tmp_path: Path) -> None:
    source = real_fixture("bitnami2024-rolled-logdir", "sensor-data-topic-0")
    (row,) = transactions_report([source], cli_overrides={}, now_ms=1728493031796 + 24 * HOUR - 1)
    assert [p.producer_id for p in row.producers] == [3000]  # idle < 1 day; 2000 and 1001 expired
    assert row.expired_producers == 2


def test_cli_text_json_and_log_dir(tmp_path: Path) -> None:
    part = committed_aborted_open(tmp_path / "logdir")
    shutil.copytree(part, tmp_path / "logdir" / "orders-4")
    PartitionBuilder("orders", 5).batch([(b"k", b"v")]).write(tmp_path / "logdir")  # no producer
    runner = CliRunner()
    now = str(BASE_TS + HOUR)
    text = runner.invoke(cli, ["inspect", "transactions", str(tmp_path / "logdir"), "--now-ms", now,
                               "--bootstrap-server", "kafka1:9092"])
    assert text.exit_code == 0, text.output
    for number in (3, 4):
        assert (f"kafka-transactions.sh --bootstrap-server kafka1:9092 abort --topic orders --partition "
                f"{number} --start-offset 7") in text.stdout
    assert "hanging transaction of producer 9 (epoch 2) from offset 7" in text.stdout
    assert "1 partition without an active producer" in text.stdout
    assert "orders-5" not in text.stdout
    done = runner.invoke(cli, ["inspect", "transactions", str(part), "--now-ms", now, "--json"])
    assert done.exit_code == 0, done.output
    (row,) = json.loads(done.stdout)
    assert [(t["producer_id"], t["start_offset"]) for t in row["hanging"]] == [(9, 7)]
    assert {p["producer_id"]: p["current_transaction_start_offset"] for p in row["producers"]} == {
        5: None, 7: None, 8: None, 9: 7}


def test_cli_bad_segment_exits_2_naming_the_file(tmp_path: Path) -> None:
    part = committed_aborted_open(tmp_path / "logdir")
    log = part / "00000000000000000003.log"
    log.write_bytes(log.read_bytes()[:-5])
    done = CliRunner().invoke(cli, ["inspect", "transactions", str(part), "--now-ms", "0"])
    assert done.exit_code == 2
    assert str(log) in done.stderr


def test_dirty_ratio_points_an_open_transaction_to_inspect_transactions(tmp_path: Path) -> None:
    committed_aborted_open(tmp_path / "logdir")
    done = CliRunner().invoke(cli, ["inspect", "dirty-ratio", str(tmp_path / "logdir" / "orders-3"),
                                    "--config", "cleanup.policy=compact", "--json"])
    (row,) = json.loads(done.stdout)
    assert row["blocking_rule"] == "open-transaction"
    assert "producer id 9 (epoch 2) beginning at offset 7" in row["blocking_detail"]
    assert "`kcompact inspect transactions`" in row["blocking_detail"]
