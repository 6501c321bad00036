"""A hanging transaction, through a real broker: a transactional producer writes and is killed (``kill -9``)
before it commits. On the stopped log dir ``kcompact inspect transactions`` names it — the producer, the first
offset, the last stable offset it pins, the dirty bytes it holds back — and prints the abort line; that line,
run through Kafka's own ``kafka-transactions`` tool on the restarted broker, aborts it, and a read_committed
consumer moves past it."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest

from tests.kafka.conftest import Kafka
from tests.kafka.scenario import batches, kcompact_json

pytestmark = pytest.mark.broker

TOPIC = "stuck"
TRANSACTIONS_TOOL = "org.apache.kafka.tools.TransactionsCommand"  # kafka-transactions.sh
MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms, Kafka's default


def records(start: int, count: int) -> list[dict[str, str]]:
    return [{"key": f"k{i % 7}", "value": f"value {i} " * 8} for i in range(start, start + count)]


def test_a_producer_killed_mid_transaction_is_found_and_its_abort_line_ends_it(
        kafka: Kafka, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    broker = kafka.single(log_dir, {"log.cleaner.enable": "false"})
    clients = kafka.clients
    clients.create_topic(broker.bootstrap, TOPIC, {"cleanup.policy": "compact", "internal.segment.bytes": "1024"})
    committed = clients.produce(broker.bootstrap, TOPIC, [{"send": records(0, 5)}, {"send": records(5, 5)}],
                                {"compression.type": "lz4"})
    # the coordinator would abort it itself after transaction.timeout.ms: the longest allowed, past the test
    hung, open_offsets = clients.produce_then_hang(
        broker.bootstrap, TOPIC, [{"begin": True}, {"send": records(100, 4)}],
        {"transactional.id": "stuck-producer", "transaction.timeout.ms": str(MAX_TIMEOUT_MS),
         "compression.type": "zstd"})
    hung.kill()
    hung.wait()
    after = clients.produce(broker.bootstrap, TOPIC, [{"send": records(10 + 4 * i, 4)} for i in range(8)],
                            {"compression.type": "gzip"})
    first_open = open_offsets[0]
    assert clients.end_positions(broker.bootstrap, TOPIC, "read_committed") == {0: first_open}
    address = broker.bootstrap
    broker.stop()

    partition = log_dir / f"{TOPIC}-0"
    producer_id = next(b["producer_id"] for b in batches(partition) if b["base_offset"] == first_open)
    now_ms = int(time.time() * 1000) + MAX_TIMEOUT_MS + 60_000  # past transaction.max.timeout.ms: hanging
    (row,) = kcompact_json("inspect", "transactions", partition, "--now-ms", str(now_ms),
                           "--bootstrap-server", address)
    assert row["last_stable_offset"] == first_open
    (hanging,) = row["hanging"]
    assert hanging["producer_id"] == producer_id
    assert hanging["start_offset"] == first_open
    assert hanging["pins_last_stable_offset"] is True
    assert hanging["last_stable_offset"] == first_open
    closed_segments = sorted(partition.glob("*.log"))[:-1]
    held_back_at_most = sum(p.stat().st_size for p in closed_segments)
    assert 0 < hanging["dirty_bytes_held_back"] <= held_back_at_most
    command = shlex.split(hanging["abort_command"])
    assert command == ["kafka-transactions.sh", "--bootstrap-server", address, "abort", "--topic", TOPIC,
                       "--partition", "0", "--start-offset", str(first_open)]

    broker.start(same_ports=True)  # the address the line names
    assert clients.end_positions(broker.bootstrap, TOPIC, "read_committed") == {0: first_open}  # still pinned
    done = clients.tool(TRANSACTIONS_TOOL, *command[1:])
    assert done.returncode == 0, done.stdout + done.stderr
    read = clients.consume(broker.bootstrap, TOPIC, "read_committed")
    assert [r.offset for r in read] == committed + after  # past the transaction, without its records
    end = clients.end_positions(broker.bootstrap, TOPIC, "read_committed")[0]
    assert end > after[-1]
    broker.stop()
