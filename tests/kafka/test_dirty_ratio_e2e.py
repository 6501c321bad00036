"""The broker's own view of the dirty ratio, against ``kcompact inspect dirty-ratio`` on the stopped log dir.

Kafka's cleaner thread computes, at every check (``LogCleaner.CleanerThread`` →
``LogCleanerManager.grabFilthiestCompactedLog``), each compacted non-empty partition's ``LogToClean.cleanableRatio``
(dirty bytes over clean + dirty) and publishes the largest, whether or not any partition is above its
``min.cleanable.dirty.ratio``, as the gauge ``kafka.log:type=LogCleanerManager,name=max-dirty-percent``
(``(int) (100 * ratio)``). A partition never cleaned has no clean bytes (ratio 1.0, above any minimum), so the
scenario first lets the cleaner clean three partitions, then restarts the broker with
``log.cleaner.min.cleanable.ratio=0.99`` (the cleaner still checks, but cleans none), writes a different amount
of dirty data into each, and reads the gauge over JMX with Kafka's ``JmxTool``. Stopped, the log dir's
``kcompact inspect dirty-ratio --json`` must give the same maximum, and none eligible. Restarted with a low
minimum, the broker's cleaner cleans them in its pick order (highest ratio first): the order of its
``Beginning cleaning of log`` lines and each round's ``dirty section = [first, end]`` must be kcompact's
``cleaner_rank`` order and each row's ``first_dirty_offset``/``first_uncleanable_offset``; ``kcompact clean``
of a copy of the log dir taken before that restart writes the same segment files and checkpoints.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.kafka.broker import KafkaCluster, free_port
from tests.kafka.conftest import Kafka
from tests.kafka.jmx import jmx_options, read_gauge
from tests.kafka.scenario import (
    active_base_offset,
    cleaner_checkpoint,
    copy_log_dir,
    kcompact,
    kcompact_json,
    segment_files,
)

pytestmark = pytest.mark.broker

TOPIC = "ratios"
PARTITIONS = (0, 1, 2)
MAX_DIRTY_PERCENT = "kafka.log:type=LogCleanerManager,name=max-dirty-percent"
BACKOFF = {"log.cleaner.backoff.ms": "200"}
CLEANS_AT_ONCE = {**BACKOFF, "log.cleaner.min.cleanable.ratio": "0.01"}
CLEANS_NONE = {**BACKOFF, "log.cleaner.min.cleanable.ratio": "0.99"}
# Updates sent per partition after the first clean: three ratios apart from each other, all under 0.99.
DIRTY_STEPS = {0: 2, 1: 6, 2: 14}
CLEANED_LINE = re.compile(r"cleaned log (\S+)-(\d+) \(dirty section = \[(\d+), (\d+)\]\)")


def updates(partition: int, round_: int, count: int) -> list[dict[str, object]]:
    return [{"send": [{"key": f"k{(5 * step + i) % 20}", "value": f"p{partition} r{round_} s{step} " * 12}
                      for i in range(5)], "partition": partition} for step in range(count)]


def wait_cleaned_to_active(log_dir: Path, timeout_s: float = 120.0) -> dict[int, int]:
    """Waits until the cleaner's checkpoint of every partition is its active segment's base offset."""
    deadline = time.monotonic() + timeout_s
    while True:
        checkpoints = {p: cleaner_checkpoint(log_dir, TOPIC, p) for p in PARTITIONS}
        actives = {p: active_base_offset(log_dir / f"{TOPIC}-{p}") for p in PARTITIONS}
        if all(checkpoints[p] == actives[p] and actives[p] > 0 for p in PARTITIONS):
            return {p: actives[p] for p in PARTITIONS}
        if time.monotonic() > deadline:
            raise AssertionError(f"not cleaned to the active segments in {timeout_s:.0f}s: "
                                 f"checkpoints {checkpoints}, active segments {actives}")
        time.sleep(0.3)


def start_with(broker: KafkaCluster, overrides: dict[str, str]) -> None:
    broker.overrides.update(overrides)
    broker.start()


def test_max_dirty_percent_and_pick_order_agree_with_kcompact(kafka: Kafka, tmp_path: Path) -> None:
    began = time.monotonic()
    log_dir = tmp_path / "logs"
    broker = kafka.single(log_dir, CLEANS_AT_ONCE)
    clients = kafka.clients
    clients.create_topic(broker.bootstrap, TOPIC, {"cleanup.policy": "compact", "internal.segment.bytes": "2048"},
                         partitions=len(PARTITIONS))
    for p in PARTITIONS:
        clients.produce(broker.bootstrap, TOPIC, updates(p, 0, 8))
    wait_cleaned_to_active(log_dir)
    broker.stop()

    # The cleaner checks every partition every 200 ms, and cleans none of them.
    (node,) = broker.nodes
    jmx_port = free_port()
    node.jvm_options = jmx_options(jmx_port)
    start_with(broker, CLEANS_NONE)
    checkpoints = {p: cleaner_checkpoint(log_dir, TOPIC, p) for p in PARTITIONS}
    for p, steps in DIRTY_STEPS.items():
        clients.produce(broker.bootstrap, TOPIC, updates(p, 1, steps))
    time.sleep(2.0)  # several checks after the last write
    work = tmp_path / "jmx"
    gauge = int(read_gauge(kafka.classpath, jmx_port, MAX_DIRTY_PERCENT, work))
    assert int(read_gauge(kafka.classpath, jmx_port, MAX_DIRTY_PERCENT, work)) == gauge  # settled
    broker.stop()
    assert {p: cleaner_checkpoint(log_dir, TOPIC, p) for p in PARTITIONS} == checkpoints  # nothing cleaned

    server_properties = node.run_dir / "server.properties"
    rows = {row["partition"]: row for row in kcompact_json(
        "inspect", "dirty-ratio", log_dir, "--topic", TOPIC, "--server-properties", server_properties)}
    assert sorted(rows) == list(PARTITIONS)
    ratios = {p: rows[p]["dirty_ratio"] for p in PARTITIONS}
    assert all(rows[p]["first_dirty_offset"] == checkpoints[p] for p in PARTITIONS)
    assert all(rows[p]["min_cleanable_dirty_ratio"] == 0.99 and not rows[p]["eligible"] for p in PARTITIONS)
    assert all(rows[p]["blocking_rule"] == "below-dirty-ratio" for p in PARTITIONS)
    assert ratios[0] < ratios[1] < ratios[2] < 0.99
    assert gauge == int(100 * max(ratios.values())), (gauge, ratios)

    # With a low minimum again, every partition is eligible: the broker cleans them filthiest first.
    low = kcompact_json("inspect", "dirty-ratio", log_dir, "--topic", TOPIC, "--server-properties",
                        server_properties, "--config", "min.cleanable.dirty.ratio=0.01")
    order = [row["partition"] for row in sorted(low, key=lambda row: row["cleaner_rank"])]
    sections = {row["partition"]: (row["first_dirty_offset"], row["first_uncleanable_offset"]) for row in low}
    assert order == [2, 1, 0]
    ours = copy_log_dir(log_dir, tmp_path / "kcompact")
    start_with(broker, CLEANS_AT_ONCE)
    wait_cleaned_to_active(log_dir)
    broker.stop()
    # kcompact's round on a copy of the same stopped log dir: the broker's bytes, the broker's checkpoints
    done = kcompact("clean", ours, "--topic", TOPIC, "--server-properties", server_properties,
                    "--config", "min.cleanable.dirty.ratio=0.01")
    assert done.returncode == 0, done.stdout + done.stderr
    for p in PARTITIONS:
        assert segment_files(ours / f"{TOPIC}-{p}") == segment_files(log_dir / f"{TOPIC}-{p}"), p
        assert cleaner_checkpoint(ours, TOPIC, p) == cleaner_checkpoint(log_dir, TOPIC, p) == sections[p][1]
    cleaned = [(int(p), (int(first), int(end))) for topic, p, first, end
               in CLEANED_LINE.findall(node.server_log.read_text()) if topic == TOPIC]
    assert [p for p, _ in cleaned] == order
    assert dict(cleaned) == sections
    print(f"dirty-ratio scenario: {time.monotonic() - began:.1f}s; max-dirty-percent {gauge}, ratios {ratios}")
