"""Replicas that really diverge, through three brokers and Kafka's own cleaner.

A compacted topic with three replicas and a short ``delete.retention.ms``. One follower is stopped; the key
``k3`` it holds is deleted (a tombstone); the leader's cleaner removes the old value at once and, in a later
round past the tombstone's delete horizon, the tombstone itself. The follower restarts: its fetch resumes
at its own log end, which is below the removed tombstone, so it receives what the leader still has past
that point, never the tombstone, and keeps ``k3``'s old value for good. ``Cleaner.shouldRetainRecord`` does
not ask whether every replica has fetched a tombstone; on restart the follower's fetcher
(``AbstractFetcherThread``, truncation on fetch) resumes at its own log end with its last fetched leader
epoch, and the leader, whose epoch never moved (from metadata version 3.6 on, KRaft shrinks the ISR without a
new leader epoch: ``PartitionChangeBuilder.triggerLeaderEpochBumpForIsrShrinkIfNeeded``), reports no diverging
epoch: epochs and offsets are compared, never contents. What it receives first is the tombstone's
batch, emptied: the cleaner keeps a producer's last batch (its sequence state) without its records.

Then the leader stops: that follower, first in assignment order, leads, and a consumer gets the deleted key
back. A second tombstone (``k5``) is written and stamped by its cleaner while the first leader is away; all
three brokers stop. ``kcompact inspect replicas`` on the three log dirs names ``k3`` (the first leader and the
in-sync follower: absent; the other: its old value) and exits 3. A clean of a copy of the new leader's log
dir past ``k5``'s horizon removes that tombstone; with ``--replica-dirs`` naming the first leader's log dir it
keeps it (it lies at that replica's log end: removing it would make a second key come back), and nothing else.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.kafka.broker import KafkaCluster, KafkaNode
from tests.kafka.clients import Clients
from tests.kafka.conftest import Kafka
from tests.kafka.scenario import (
    batches,
    cleaner_checkpoint,
    copy_log_dir,
    kcompact,
    kcompact_json,
    latest_by_key,
)

pytestmark = pytest.mark.broker

TOPIC = "diverge"
TOPIC_TOOL = "org.apache.kafka.tools.TopicCommand"  # kafka-topics.sh
DELETE_RETENTION_MS = 2000
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
    "min.cleanable.dirty.ratio": "0.01",
    "internal.segment.bytes": "1024",
    "min.insync.replicas": "1",
}
CLUSTER_CONFIG = {"log.cleaner.backoff.ms": "200", "auto.leader.rebalance.enable": "false"}
ACKS_ALL = {"acks": "all"}
DESCRIBE_LINE = re.compile(r"Partition: 0\s+Leader: (\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]*)")
WAIT_S = 120.0
T = TypeVar("T")


def describe(clients: Clients, bootstrap: str) -> tuple[int, list[int], set[int]]:
    """The partition's leader, replicas and in-sync replicas, as ``kafka-topics --describe`` prints them."""
    done = clients.tool(TOPIC_TOOL, "--bootstrap-server", bootstrap, "--describe", "--topic", TOPIC)
    match = DESCRIBE_LINE.search(done.stdout)
    assert match is not None, done.stdout + done.stderr
    leader, replicas, isr = match.groups()
    return int(leader), [int(r) for r in replicas.split(",")], {int(r) for r in isr.split(",") if r}


def wait_isr(clients: Clients, cluster: KafkaCluster, isr: set[int]) -> tuple[int, list[int]]:
    """Waits until the in-sync replicas are ``isr``; the leader and the replicas in assignment order."""
    deadline = time.monotonic() + WAIT_S
    while True:
        leader, replicas, seen = describe(clients, cluster.bootstrap)
        if seen == isr:
            return leader, replicas
        assert time.monotonic() < deadline, f"ISR {seen}, waited for {isr}"
        time.sleep(0.5)


def send(clients: Clients, cluster: KafkaCluster, records: list[dict[str, Any]]) -> list[int]:
    return clients.produce(cluster.bootstrap, TOPIC, [{"send": records}], ACKS_ALL)


def fillers(round_: int, count: int = 5) -> list[dict[str, Any]]:
    return [{"key": f"f{(round_ * count + i) % 10}", "value": f"filler {round_}.{i} " * 4} for i in range(count)]


def key_records(partition_dir: Path, key: str) -> list[tuple[int, str | None]]:
    """(offset, value) of every record of ``key`` in the partition's segments (``kcompact inspect dump``)."""
    rows = kcompact_json("inspect", "dump", partition_dir, "--key", key)
    return [(row["offset"], None if row["value"] is None else base64.b64decode(row["value"]).decode())
            for row in rows if row.get("type") == "record"]


def while_running(read: Callable[[], T]) -> T:
    """``read`` of a running broker's partition, read again if a segment swap of its cleaner got in the way
    (``kcompact inspect dump`` then fails on a file that vanished)."""
    for _ in range(9):
        try:
            return read()
        except AssertionError:
            time.sleep(0.3)
    return read()


def records(partition_dir: Path) -> set[tuple[int, str, str | None]]:
    """(offset, key, value in base64) of every record in the partition's segments."""
    rows = kcompact_json("inspect", "dump", partition_dir, "--records")
    return {(row["offset"], base64.b64decode(row["key"]).decode(), row["value"])
            for row in rows if row.get("type") == "record"}


def wait_tombstone_removed(clients: Clients, cluster: KafkaCluster, leader: KafkaNode, key: str,
                           tombstone: int) -> int:
    """Writes fillers (each a new dirty segment for the cleaner) until the leader's cleaner has passed the
    tombstone and its segments hold no record of ``key``; the rounds of fillers written."""
    deadline = time.monotonic() + WAIT_S
    for round_ in range(1, 1000):
        send(clients, cluster, fillers(100 + round_))
        time.sleep(0.5)
        checkpoint = cleaner_checkpoint(leader.log_dir, TOPIC)
        if (checkpoint is not None and checkpoint > tombstone
                and not while_running(lambda: key_records(leader.log_dir / f"{TOPIC}-0", key))):
            return round_
        assert time.monotonic() < deadline, f"the leader still holds {key} (checkpoint {checkpoint})"
    raise AssertionError("unreachable")


def wait_stamped(clients: Clients, cluster: KafkaCluster, leader: KafkaNode, tombstone: int) -> None:
    """Writes fillers until a round of ``leader``'s cleaner has passed ``tombstone`` (stamping its delete
    horizon), then writes nothing more: no new dirty segment, no later round to remove it."""
    deadline = time.monotonic() + WAIT_S
    for round_ in range(1, 1000):
        send(clients, cluster, fillers(900 + round_))
        time.sleep(0.5)
        if (cleaner_checkpoint(leader.log_dir, TOPIC) or 0) > tombstone:
            return
        assert time.monotonic() < deadline, "the leader's cleaner did not pass the tombstone"


def test_a_follower_that_missed_a_removed_tombstone_keeps_the_old_value(kafka: Kafka, tmp_path: Path) -> None:
    began = time.monotonic()
    cluster = kafka.three(CLUSTER_CONFIG)
    clients = kafka.clients
    clients.create_topic(cluster.bootstrap, TOPIC, TOPIC_CONFIG, replication_factor=3)
    old = send(clients, cluster, [{"key": f"k{i}", "value": f"old value {i}"} for i in range(10)])
    send(clients, cluster, fillers(0))
    leader_id, replicas = wait_isr(clients, cluster, {1, 2, 3})
    nodes = {node.node_id: node for node in cluster.brokers}
    first = nodes[leader_id]
    # When the leader stops, the controller elects the first in-sync replica in assignment order
    # (PartitionChangeBuilder.electAnyLeader): that one is made to lag.
    lagging, in_sync = (nodes[i] for i in replicas if i != leader_id)

    cluster.stop([lagging])
    assert wait_isr(clients, cluster, {first.node_id, in_sync.node_id})[0] == first.node_id
    (tombstone,) = send(clients, cluster, [{"key": "k3", "value": None}])
    assert tombstone > old[3]
    rounds = wait_tombstone_removed(clients, cluster, first, "k3", tombstone)
    assert "k3" not in latest_by_key(clients.consume(cluster.bootstrap, TOPIC, "read_uncommitted"))

    cluster.start([lagging])
    assert wait_isr(clients, cluster, {1, 2, 3})[0] == first.node_id
    # It resumed at its own log end, the tombstone's offset, and got the tombstone's batch emptied.
    assert f"Follower {TOPIC}-0 starts at leader epoch 0 from offset {tombstone} " in lagging.server_log.read_text()
    (gap,) = [b for b in while_running(lambda: batches(lagging.log_dir / f"{TOPIC}-0"))
              if b["base_offset"] == tombstone]
    assert (gap["last_offset"], gap["count"]) == (tombstone, 0)
    lagging_k3 = while_running(lambda: key_records(lagging.log_dir / f"{TOPIC}-0", "k3"))
    assert lagging_k3 == [(old[3], "old value 3")]  # the tombstone never reached it
    assert while_running(lambda: key_records(in_sync.log_dir / f"{TOPIC}-0", "k3")) in ([], [(tombstone, None)])

    # The leader stops: the replica that missed the tombstone leads, and consumers get the deleted key back.
    cluster.stop([first])
    assert wait_isr(clients, cluster, {lagging.node_id, in_sync.node_id})[0] == lagging.node_id
    assert latest_by_key(clients.consume(cluster.bootstrap, TOPIC, "read_uncommitted"))["k3"] == "old value 3"

    # A second tombstone, stamped by the new leader's cleaner while the first leader is away.
    (fenced,) = send(clients, cluster, [{"key": "k5", "value": None}])
    wait_stamped(clients, cluster, lagging, fenced)
    cluster.stop()
    assert key_records(lagging.log_dir / f"{TOPIC}-0", "k5") == [(fenced, None)]

    dirs = [first.log_dir, in_sync.log_dir, lagging.log_dir]
    done = kcompact("inspect", "replicas", *dirs, "--topic", TOPIC, "--partition", "0", "--json")
    assert done.returncode == 3, done.stdout + done.stderr
    (report,) = kcompact_json("inspect", "replicas", *dirs, "--topic", TOPIC, "--partition", "0")
    assert report["agree"] is False and report["state_diverged"] is True
    # no offset holds different records: the log agrees, only what a consumer of each copy sees differs
    assert (report["log_diverged"], report["records"], report["epoch_divergence"]) == (False, [], [])
    assert report["divergent_keys"] == 1
    (k3,) = report["keys"]
    assert k3["key"] == "k3"
    assert [side["state"] for side in k3["sides"]] == ["absent", "absent", "value"]
    assert k3["sides"][2]["offset"] == old[3]
    assert report["limit"] == fenced  # compared below the first leader's log end: k5 is not (yet) divergent

    # The fence: k5's tombstone lies at or above the first leader's log end; past its horizon only the
    # unfenced clean of the new leader's copy removes it.
    now_ms = str(int(time.time() * 1000) + 10 * DELETE_RETENTION_MS)
    plain = copy_log_dir(lagging.log_dir, tmp_path / "plain")
    fenced_copy = copy_log_dir(lagging.log_dir, tmp_path / "fenced")
    for copy, extra in ((plain, ()), (fenced_copy, ("--replica-dirs", str(first.log_dir)))):
        # --roll: as the broker's next round would, once an append rolls the active segment
        done = kcompact("clean", copy / f"{TOPIC}-0", "--roll", "--now-ms", now_ms, "--json", *extra)
        assert done.returncode == 0, done.stdout + done.stderr
    assert key_records(plain / f"{TOPIC}-0", "k5") == []
    assert key_records(fenced_copy / f"{TOPIC}-0", "k5") == [(fenced, None)]
    assert records(fenced_copy / f"{TOPIC}-0") == records(plain / f"{TOPIC}-0") | {(fenced, "k5", None)}
    print(f"replicas scenario: {time.monotonic() - began:.1f}s; tombstone {tombstone}, filler rounds {rounds}, "
          f"k3 on the lagging replica {lagging_k3}; fenced tombstone {fenced}")
