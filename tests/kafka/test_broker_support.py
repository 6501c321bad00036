"""The support layer itself: a real broker starts, takes Kafka's Java producer's batches in every codec,
serves them to Kafka's Java consumer, stops clean, and starts again on the same log dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kafka.broker import CLEAN_SHUTDOWN_MARKER
from tests.kafka.clients import python_consume
from tests.kafka.conftest import Kafka

pytestmark = pytest.mark.broker

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def test_java_producer_in_every_codec_read_back_across_a_restart(kafka: Kafka, tmp_path: Path) -> None:
    broker = kafka.single(tmp_path / "logs")
    clients = kafka.clients
    clients.create_topic(broker.bootstrap, "codecs", {"cleanup.policy": "compact"})
    sent = []
    for codec in CODECS:
        records = [{"key": f"{codec}-{i}", "value": f"value {i} " * 20, "headers": [["codec", codec]]}
                   for i in range(50)]
        offsets = clients.produce(broker.bootstrap, "codecs", [{"send": records}],
                                  {"compression.type": codec})
        sent += [(offset, r["key"], r["value"], codec) for offset, r in zip(offsets, records, strict=True)]
    assert [offset for offset, *_ in sent] == list(range(250))

    def read() -> list[tuple[int, str | None, str | None, str | None]]:
        return [(r.offset, r.key, r.value, r.headers[0][1])
                for r in clients.consume(broker.bootstrap, "codecs", "read_committed")]

    assert read() == sent
    # kafka-python reads the same records, headers and timestamps as Kafka's own consumer, every codec
    assert python_consume(broker.bootstrap, "codecs", "read_committed") == clients.consume(
        broker.bootstrap, "codecs", "read_committed")
    broker.stop()
    assert (tmp_path / "logs" / CLEAN_SHUTDOWN_MARKER).exists()
    assert (tmp_path / "logs" / "codecs-0" / "00000000000000000000.log").stat().st_size > 0
    broker.start()
    assert read() == sent


def test_three_brokers_replicate_and_stop_clean(kafka: Kafka) -> None:
    cluster = kafka.three()
    clients = kafka.clients
    assert clients.run("admin", {"bootstrap": cluster.bootstrap, "brokers": 3}) == [{"brokers": 3}]
    clients.create_topic(cluster.bootstrap, "replicated", {"min.insync.replicas": "2"}, replication_factor=3)
    records = [{"key": f"k{i}", "value": f"v{i}"} for i in range(20)]
    clients.produce(cluster.bootstrap, "replicated", [{"send": records}], {"compression.type": "zstd", "acks": "all"})
    assert [(r.key, r.value) for r in clients.consume(cluster.bootstrap, "replicated", "read_committed")] == [
        (r["key"], r["value"]) for r in records]
    cluster.stop()
    for broker in cluster.brokers:  # each broker holds its own replica in its own log dir
        assert (broker.log_dir / "replicated-0" / "00000000000000000000.log").stat().st_size > 0
