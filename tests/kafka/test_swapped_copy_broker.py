"""A broker started on a copy holding an interrupted swap serves the log end ``clean --replica-dirs`` fences
that copy at: Kafka 4.1 writes a partition, a copy of its log dir gets a ``.log.swap`` over its active
segment (its first three batches, as an interrupted clean leaves one), and the broker started on the copy
(``LogLoader.load`` completes the swap) ends the partition where kcompact said, below what the ``.log`` said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.records.batch import iter_batches
from kcompact.segment.partition import open_partition
from tests.kafka.conftest import Kafka
from tests.kafka.scenario import copy_log_dir

pytestmark = pytest.mark.broker

TOPIC = "fenced"


def test_the_broker_serves_the_swapped_log_end_the_fence_uses(kafka: Kafka, tmp_path: Path) -> None:
    log_dir = tmp_path / "produced"
    broker = kafka.single(log_dir, {"log.cleaner.enable": "false"})
    kafka.clients.create_topic(broker.bootstrap, TOPIC, {"cleanup.policy": "compact"})
    kafka.clients.produce(broker.bootstrap, TOPIC, [{"send": [{"key": f"k{i % 3}", "value": f"v{i}"}]}
                                                    for i in range(8)])
    broker.stop()
    copy = copy_log_dir(log_dir, tmp_path / "copy") / f"{TOPIC}-0"
    log = copy / f"{0:020d}.log"
    data = log.read_bytes()
    batches = list(iter_batches(data))
    assert len(batches) >= 5
    third = batches[2]
    (copy / f"{log.name}.swap").write_bytes(data[:third.position + third.size_in_bytes])
    swapped_end, header_end = third.last_offset + 1, open_partition(copy).log_end_offset()

    runner = CliRunner(catch_exceptions=False, env={"KCOMPACT_SERVER_PROPERTIES": None})
    done = runner.invoke(cli, ["clean", str(log_dir / f"{TOPIC}-0"), "--replica-dirs", str(copy), "--roll",
                               "--dry-run", "--json", "--config", "cleanup.policy=compact"])
    (row,) = json.loads(done.stdout)["results"]
    on_copy = kafka.on(copy.parent, {"log.cleaner.enable": "false"})
    served = kafka.clients.end_positions(on_copy.bootstrap, TOPIC, "read_uncommitted")

    assert swapped_end < header_end
    assert (row["fence"]["offset"], row["fence"]["why"]) == (swapped_end, "completed swap")
    assert served == {0: swapped_end}
