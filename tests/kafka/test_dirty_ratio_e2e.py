"""The broker's own view of the dirty ratio, against ``kcompact inspect dirty-ratio`` on the stopped log dir.

Kafka's cleaner thread computes, at every check (``LogCleaner.CleanerThread`` →
``LogCleanerManager.grabFilthiestCompactedLog``), each compacted non-empty partition's ``LogToClean.cleanableRatio``
(dirty bytes over clean + dirty) and publishes the largest, whether or not any partition is above its
``min.cleanable.dirty.ratio``, as the gauge ``kafka.log:type=LogCleanerManager,name=max-dirty-percent``
(``(int) (100 * ratio)``). A partition never cleaned has no clean bytes (ratio 1.0, above any minimum), so the
scenario first lets the cleaner clean four partitions — one of them only up to an open transaction, whose
producer is then killed — and restarts the broker with ``log.cleaner.min.cleanable.ratio=0.99``: the cleaner
still checks, but cleans none. Step by step one more partition gets dirty (updates, or for the pinned one
the abort, through ``kafka-transactions``, that releases its last stable offset), each time the new largest
ratio, and the gauge is read over JMX with Kafka's ``JmxTool``. Stopped, the log dir's ``kcompact inspect
dirty-ratio --json`` gives every partition's ratio the gauge showed, and none eligible. Restarted with a low
minimum, the broker cleans them in its pick order (highest ratio first): the order of its ``Beginning
cleaning of log`` lines and each round's ``dirty section = [first, end]`` must be kcompact's ``cleaner_rank``
order and each row's ``first_dirty_offset``/``first_uncleanable_offset``; ``kcompact clean`` of a copy of the
log dir taken before that restart writes the same segment files and checkpoints.
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
    batches,
    cleaner_checkpoint,
    copy_log_dir,
    kcompact,
    kcompact_json,
    segment_files,
)

pytestmark = pytest.mark.broker

TOPIC = "ratios"
PARTITIONS = (0, 1, 2, 3)
PINNED = 3  # its first clean stops at an open transaction
MAX_DIRTY_PERCENT = "kafka.log:type=LogCleanerManager,name=max-dirty-percent"
TRANSACTIONS_TOOL = "org.apache.kafka.tools.TransactionsCommand"  # kafka-transactions.sh
MAX_TIMEOUT_MS = "900000"  # transaction.max.timeout.ms: the coordinator never aborts it during the test
BACKOFF = {"log.cleaner.backoff.ms": "200"}
CLEANS_AT_ONCE = {**BACKOFF, "log.cleaner.min.cleanable.ratio": "0.01"}
CLEANS_NONE = {**BACKOFF, "log.cleaner.min.cleanable.ratio": "0.99"}
# Updates sent per partition after the first clean: ratios apart from each other, all under 0.99. The pinned
# partition's aborted transaction comes between 1 and 2: each step makes the largest ratio so far its own.
DIRTY_STEPS = {0: 2, 1: 6, PINNED: 0, 2: 14}
CLEANED_LINE = re.compile(r"cleaned log (\S+)-(\d+) \(dirty section = \[(\d+), (\d+)\]\)")


def updates(partition: int, round_: int, count: int) -> list[dict[str, object]]:
    return [{"send": [{"key": f"k{(5 * step + i) % 20}", "value": f"p{partition} r{round_} s{step} " * 12}
                      for i in range(5)], "partition": partition} for step in range(count)]


def wait_cleaned(log_dir: Path, pinned: dict[int, int], timeout_s: float = 120.0) -> None:
    """Waits until the cleaner's checkpoint of every partition is its active segment's base offset, or for a
    partition in ``pinned``, the base offset of the segment holding the offset given (an open transaction's
    first offset, the last stable offset: ``LogToClean`` rounds the first uncleanable offset down to its
    segment, ``LogCleanerManager.calculateCleanableBytes``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        checkpoints = {p: cleaner_checkpoint(log_dir, TOPIC, p) for p in PARTITIONS}
        wanted = {p: active_base_offset(log_dir / f"{TOPIC}-{p}") if p not in pinned
                  else segment_base(log_dir / f"{TOPIC}-{p}", pinned[p]) for p in PARTITIONS}
        if checkpoints == wanted and all(wanted.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not cleaned in {timeout_s:.0f}s: checkpoints {checkpoints}, wanted {wanted}")
        time.sleep(0.3)


def segment_base(partition_dir: Path, offset: int) -> int:
    """The base offset of the segment holding ``offset``."""
    return max(base for base in (int(path.stem) for path in partition_dir.glob("*.log")) if base <= offset)


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
        clients.produce(broker.bootstrap, TOPIC, updates(p, 0, 8 if p != PINNED else 4))
    hung, (first_open,) = clients.produce_then_hang(
        broker.bootstrap, TOPIC, [{"begin": True}, {"send": [{"key": "k0", "value": "open"}], "partition": PINNED}],
        {"transactional.id": "pinning", "transaction.timeout.ms": MAX_TIMEOUT_MS})
    hung.kill()
    hung.wait()
    clients.produce(broker.bootstrap, TOPIC, updates(PINNED, 0, 6))
    wait_cleaned(log_dir, {PINNED: first_open})
    broker.stop()
    pinned_dir = log_dir / f"{TOPIC}-{PINNED}"
    assert cleaner_checkpoint(log_dir, TOPIC, PINNED) == segment_base(pinned_dir, first_open) < first_open

    # The cleaner checks every partition every 200 ms, and cleans none of them. Each step makes one more
    # partition dirty: updates, or for the pinned one the abort that releases its last stable offset.
    (node,) = broker.nodes
    jmx_port = free_port()
    node.jvm_options = jmx_options(jmx_port)
    start_with(broker, CLEANS_NONE)
    checkpoints = {p: cleaner_checkpoint(log_dir, TOPIC, p) for p in PARTITIONS}
    work = tmp_path / "jmx"

    def gauge_settled() -> int:
        time.sleep(2.0)  # several checks after the last write
        return int(read_gauge(kafka.classpath, jmx_port, MAX_DIRTY_PERCENT, work))

    gauges: list[tuple[frozenset[int], int]] = [(frozenset(), gauge_settled())]
    for p, steps in DIRTY_STEPS.items():
        if p == PINNED:
            done = clients.tool(TRANSACTIONS_TOOL, "--bootstrap-server", broker.bootstrap, "abort", "--topic",
                                TOPIC, "--partition", str(PINNED), "--start-offset", str(first_open))
            assert done.returncode == 0, done.stdout + done.stderr
        else:
            clients.produce(broker.bootstrap, TOPIC, updates(p, 1, steps))
        gauges.append((gauges[-1][0] | {p}, gauge_settled()))
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
    assert all(0 < ratio < 0.99 for ratio in ratios.values()) and len(set(ratios.values())) == len(PARTITIONS)
    # the gauge after each step: the largest ratio of the partitions made dirty so far (0 before any); rising
    # at every step, so each partition's ratio is checked on its own
    assert gauges == [(dirty, int(100 * max((ratios[p] for p in dirty), default=0.0))) for dirty, _ in gauges], (
        gauges, ratios)
    assert [gauge for _, gauge in gauges] == sorted({gauge for _, gauge in gauges}), gauges
    # the gauge is over every compacted partition of the log dir: __transaction_state too (only an active
    # segment: no bytes in the ratio, so the broker skips it, and kcompact counts it 0)
    every = kcompact_json("inspect", "dirty-ratio", log_dir, "--server-properties", server_properties)
    compacted = {(row["topic"], row["partition"]): row["dirty_ratio"] for row in every
                 if "compact" in row["cleanup_policy"]}
    assert ("__transaction_state", 0) in compacted
    assert gauges[-1][1] == int(100 * max(compacted.values()))

    # With a low minimum again, every partition is eligible: the broker cleans them filthiest first.
    low = kcompact_json("inspect", "dirty-ratio", log_dir, "--topic", TOPIC, "--server-properties",
                        server_properties, "--config", "min.cleanable.dirty.ratio=0.01")
    order = [row["partition"] for row in sorted(low, key=lambda row: row["cleaner_rank"])]
    sections = {row["partition"]: (row["first_dirty_offset"], row["first_uncleanable_offset"]) for row in low}
    assert order == sorted(PARTITIONS, key=lambda p: -ratios[p])
    ours = copy_log_dir(log_dir, tmp_path / "kcompact")
    start_with(broker, CLEANS_AT_ONCE)
    wait_cleaned(log_dir, {})
    broker.stop()
    cleaned = [(int(p), (int(first), int(end))) for topic, p, first, end
               in CLEANED_LINE.findall(node.server_log.read_text()) if topic == TOPIC]
    assert [p for p, _ in cleaned] == order
    assert dict(cleaned) == sections
    # The abort marker waits in the active segment: nothing was stamped with a delete horizon, and the
    # aborted record is gone (its batch kept empty, its producer's last). kcompact's round on a copy of the
    # same stopped log dir: the broker's bytes, the broker's checkpoints.
    assert not [b for b in batches(pinned_dir) if b["delete_horizon_ms"] is not None]
    (aborted,) = [b for b in batches(pinned_dir) if b["base_offset"] == first_open]
    assert (aborted["is_transactional"], aborted["count"]) == (True, 0)
    done = kcompact("clean", ours, "--topic", TOPIC, "--server-properties", server_properties,
                    "--config", "min.cleanable.dirty.ratio=0.01")
    assert done.returncode == 0, done.stdout + done.stderr
    for p in PARTITIONS:
        assert segment_files(ours / f"{TOPIC}-{p}") == segment_files(log_dir / f"{TOPIC}-{p}"), p
        assert cleaner_checkpoint(ours, TOPIC, p) == cleaner_checkpoint(log_dir, TOPIC, p) == sections[p][1]
    print(f"dirty-ratio scenario: {time.monotonic() - began:.1f}s; max-dirty-percent after each step {gauges}, "
          f"ratios {ratios}")
