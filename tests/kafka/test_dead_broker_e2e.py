"""A dead broker's leftovers, through a real broker: one KRaft node, a compacted topic of two partitions with one
replica each, its cleaner off (as when the cleaner thread died), killed (``kill -9``) a few seconds after its
high-watermark checkpoint thread wrote ``replication-offset-checkpoint``, so that the checkpoint lags the log
ends. On a copy, partition 1's active segment is given a torn append (a batch cut short, as a full volume leaves it).

``clean --dry-run`` plans partition 0 up to its log end's active segment, not the stale checkpoint, and says why
(the KRaft metadata names this node its only replica); it fails partition 1 naming the torn bytes and the repair.
Then ``repair --backup-dir`` cuts the torn bytes, ``clean`` cleans both, and Kafka started on the cleaned copy
(the second and last start) serves every key's latest value under read_committed, as the uncleaned log holds
them, with its high watermark at the log end at once (``Partition.maybeIncrementLeaderHW``: no other replica to
wait for; and min.insync.replicas=2 does not hold it back: the effective min ISR is min(it, replicas) = 1).
Where Kafka's own recovery cuts a torn tail is refereed by Kafka's log loader in
``test_loaded_log_end.py`` ("torn tail")."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kcompact.records.batch import iter_batches
from kcompact.segment.checkpoint import read_offset_checkpoint
from tests.kafka.conftest import Kafka
from tests.kafka.scenario import active_base_offset, copy_log_dir, kcompact, kcompact_json, latest_by_key

pytestmark = pytest.mark.broker

TOPIC = "leftovers"
PARTITIONS = (0, 1)
TORN = 1  # the partition whose copy ends in a torn append
CHECKPOINT_INTERVAL_MS = 20000  # replica.high.watermark.checkpoint.interval.ms: the window to die in
OVERRIDES = {"log.cleaner.enable": "false",
             "replica.high.watermark.checkpoint.interval.ms": str(CHECKPOINT_INTERVAL_MS)}
# segments of a few batches; min.insync.replicas above the one replica bounds nothing (Partition.effectiveMinIsr:
# min(min.insync.replicas, replicas)), neither the producer's acks=all nor the leader's high watermark
TOPIC_CONFIG = {"cleanup.policy": "compact", "internal.segment.bytes": "2048", "min.insync.replicas": "2"}
WAIT_S = 60.0


def updates(partition: int, round_: int, steps: int) -> list[dict[str, object]]:
    return [{"send": [{"key": f"k{(3 * step + i) % 12}", "value": f"p{partition} r{round_} s{step} i{i} " * 6}
                      for i in range(4)], "partition": partition} for step in range(steps)]


def sent_values(steps: list[dict[str, object]]) -> list[tuple[str, str]]:
    return [(str(r["key"]), str(r["value"])) for step in steps for r in step["send"]]  # type: ignore[attr-defined]


def wait_checkpointed(log_dir: Path, ends: dict[int, int]) -> None:
    """Waits until ``replication-offset-checkpoint`` holds ``ends`` (the high watermark of each partition)."""
    path = log_dir / "replication-offset-checkpoint"
    deadline = time.monotonic() + WAIT_S
    while True:
        seen = read_offset_checkpoint(path) if path.exists() else {}
        if all(seen.get((TOPIC, p)) == end for p, end in ends.items()):
            return
        assert time.monotonic() < deadline, f"checkpointed {seen}, waited for {ends}"
        time.sleep(0.2)


def tear(partition_dir: Path) -> tuple[Path, int]:
    """Appends a torn batch to the active segment: its last batch again, based at the log end, cut short.
    Returns the segment and the position the torn bytes start at."""
    segment = partition_dir / f"{active_base_offset(partition_dir):020d}.log"
    data = segment.read_bytes()
    last = list(iter_batches(data))[-1]
    whole = bytearray(data[last.position:last.position + last.size_in_bytes])
    whole[0:8] = (last.last_offset + 1).to_bytes(8, "big")
    with segment.open("ab") as active:
        active.write(bytes(whole[: len(whole) - 20]))
    return segment, len(data)


def test_a_dead_sole_replica_broker_is_cleaned_to_its_log_end(kafka: Kafka, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    broker = kafka.single(log_dir, OVERRIDES)
    clients = kafka.clients
    clients.create_topic(broker.bootstrap, TOPIC, TOPIC_CONFIG, partitions=len(PARTITIONS))
    sent: dict[int, list[tuple[str, str]]] = {p: [] for p in PARTITIONS}
    ends: dict[int, int] = {}
    for p in PARTITIONS:
        steps = updates(p, 0, 12)
        ends[p] = clients.produce(broker.bootstrap, TOPIC, steps)[-1] + 1
        sent[p] += sent_values(steps)
    wait_checkpointed(log_dir, ends)  # the checkpoint thread just ran: the next run is ~20 s away
    for p in PARTITIONS:
        steps = updates(p, 1, 24)
        clients.produce(broker.bootstrap, TOPIC, steps)
        sent[p] += sent_values(steps)
    broker.kill()
    stale = read_offset_checkpoint(log_dir / "replication-offset-checkpoint")
    assert {p: stale[(TOPIC, p)] for p in PARTITIONS} == ends  # the checkpoint lags: it holds the first round only

    copy = copy_log_dir(log_dir, tmp_path / "copy")
    segment, torn_at = tear(copy / f"{TOPIC}-{TORN}")
    dry = kcompact("clean", copy, "--dry-run", "--json")
    assert dry.returncode == 2, dry.stdout + dry.stderr  # a partition failed: the torn one
    report = json.loads(dry.stdout)
    (planned,) = report["results"]
    log_end = len(sent[0])
    active = active_base_offset(copy / f"{TOPIC}-0")
    assert planned["partition"] == 0 and planned["high_watermark"] == log_end > ends[0]
    assert planned["end_offset"] == active > ends[0]  # past the stale checkpoint, up to the active segment
    assert planned["high_watermark_note"] == (
        f"high watermark taken as the log end {log_end}: this broker (node 1) is the partition's only replica "
        f"(KRaft metadata), and Kafka's leader sets it there on start (Partition.maybeIncrementLeaderHW); "
        f"the replication-offset-checkpoint's {ends[0]} is stale")
    ratio = kcompact("inspect", "dirty-ratio", copy / f"{TOPIC}-0", "--json")  # the read-only view agrees
    (row,) = json.loads(ratio.stdout)
    assert (row["high_watermark"], row["first_uncleanable_offset"], row["high_watermark_note"]) == (
        planned["high_watermark"], planned["first_uncleanable_offset"], planned["high_watermark_note"])
    (failure,) = report["failures"]
    size = segment.stat().st_size
    assert failure["error"].startswith(
        f"{segment} at position {torn_at}: a torn append: the last {size - torn_at} bytes of the partition's last "
        f"segment (positions {torn_at} to {size}) are an entry cut short")
    assert (f"Kafka's recovery truncates the segment at position {torn_at} on its next start (LogSegment.recover); "
            f"cut it there first with `kcompact repair {copy / f'{TOPIC}-{TORN}'} --backup-dir <a directory on "
            f"another volume>`") in failure["error"]

    repaired = kcompact("repair", copy / f"{TOPIC}-{TORN}", "--backup-dir", tmp_path / "elsewhere")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert segment.stat().st_size == torn_at  # cut where Kafka's recovery cuts it
    (cleaned,) = kcompact_json("clean", copy)
    assert cleaned["failures"] == []
    assert {row["partition"]: row["end_offset"] for row in cleaned["results"]} == {
        p: active_base_offset(copy / f"{TOPIC}-{p}") for p in PARTITIONS}
    assert all(row["superseded_removed"] > 0 for row in cleaned["results"])

    restarted = kafka.on(copy)
    assert clients.end_positions(restarted.bootstrap, TOPIC, "read_uncommitted", PARTITIONS) == {
        p: len(sent[p]) for p in PARTITIONS}  # the high watermark is the log end at once
    served = clients.consume(restarted.bootstrap, TOPIC, "read_committed", PARTITIONS)
    for p in PARTITIONS:
        records = [r for r in served if r.partition == p]
        assert latest_by_key(records) == dict(sent[p])
        assert len(records) < len(sent[p])  # compacted past the stale checkpoint
