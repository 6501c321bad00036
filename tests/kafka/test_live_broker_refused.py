"""A running broker's log dir is refused: every command that writes exits 2 with one line and changes nothing
(the sha256 of every file the broker does not itself keep rewriting, before and after)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.kafka.conftest import Kafka
from tests.kafka.scenario import digests, kcompact

pytestmark = pytest.mark.broker

TOPIC = "live"

# What the broker rewrites on its own while it runs: the KRaft metadata log (no-op records) is left out; its
# checkpoint timers are set past the test, so that only a command could change them.
BROKER_OWNED = ("__cluster_metadata-0/",)
QUIET_CHECKPOINTS = {
    "log.cleaner.enable": "false",
    "replica.high.watermark.checkpoint.interval.ms": "3600000",
    "log.flush.offset.checkpoint.interval.ms": "3600000",
    "log.flush.start.offset.checkpoint.interval.ms": "3600000",
}

WRITING_COMMANDS = (
    ("clean", "{log_dir}"),
    ("clean", "{partition}"),
    ("clean", "--roll", "{partition}"),
    ("clean", "--from-start", "--roll", "{log_dir}"),
    ("repair", "{log_dir}"),
    ("repair", "{partition}"),
    ("repair", "--clean", "{partition}"),
    ("repair", "--clean", "{log_dir}"),
    ("spark", "clean", "{log_dir}"),
)


def watched(log_dir: Path) -> dict[str, str]:
    return {name: digest for name, digest in digests(log_dir).items() if not name.startswith(BROKER_OWNED)}


def test_every_writing_command_refuses_a_running_brokers_log_dir(kafka: Kafka, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    broker = kafka.single(log_dir, QUIET_CHECKPOINTS)
    clients = kafka.clients
    clients.create_topic(broker.bootstrap, TOPIC, {"cleanup.policy": "compact", "internal.segment.bytes": "1024"})
    records = [{"key": f"k{i % 5}", "value": os.urandom(60).hex()} for i in range(60)]
    clients.produce(broker.bootstrap, TOPIC, [{"send": records[i:i + 6]} for i in range(0, 60, 6)],
                    {"compression.type": "zstd"})
    partition = log_dir / f"{TOPIC}-0"
    assert len(list(partition.glob("*.log"))) > 3  # something a clean would change
    time.sleep(1)  # the broker's own start-up writes are done
    before = watched(log_dir)

    outcomes = {}
    for command in WRITING_COMMANDS:
        args = [arg.format(log_dir=log_dir, partition=partition) for arg in command]
        started = time.monotonic()
        done = kcompact(*args)
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        outcomes[" ".join(command)] = (done.returncode, len(lines), lines[:3], round(time.monotonic() - started, 1))

    wrong = {command: outcome for command, outcome in outcomes.items() if outcome[:2] != (2, 1)}
    assert wrong == {}, "expected exit 2 and one line from each"
    assert watched(log_dir) == before
    assert broker.brokers[0].running
    assert len(clients.consume(broker.bootstrap, TOPIC, "read_committed")) == 60  # the broker never noticed
