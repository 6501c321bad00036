"""An unclean failover through three brokers, and a fenced clean of the replicas' copies that serves the same.

A compacted topic, three replicas, ``min.insync.replicas=1``, ``unclean.leader.election.enable=true``, producers
with ``acks=1``. Offsets 0..39 reach every replica. Both followers are killed (``kill -9``); the leader alone
writes 40..62 (new values nobody copies) and is killed. A follower is started and the controller elects it
uncleanly (``PartitionChangeBuilder.electAnyLeader``, ``Election.UNCLEAN`` from the topic's config when the
broker is unfenced); it writes its own 40..81, two tombstones among them (43 and 44); the third broker follows
it. Everything stops; the three log dirs (and the controller's) are copied.

Restarted on a copy — the followers first, the old leader last, then a preferred election gives the old leader
the lead back — the old leader truncates to 40 (where its leader-epoch lineage parts from the new leader's:
``LeaderEpochFileCache.endOffsetFor`` answers its ``OffsetsForLeaderEpoch``) and fetches the new leader's 40..81.
A consumer reads each replica in turn (``client.rack`` and ``RackAwareReplicaSelector``: the leader names the
follower in the consumer's rack as its preferred read replica), the baseline of what each serves. Restarted with
the old leader first instead, the controller elects it uncleanly in its turn, and the other two truncate to 40 and
take its 40..62: either copy may lose what it holds from 40 on.

On another copy, ``kcompact clean --replica-dirs`` cleans the new leader's copy and the old leader's, two rounds
each, the second past the delete horizon. The new leader's fence is 40, set by the old leader's copy (lineage):
the tombstones stay, or the old leader, resuming at 40, would never receive them and would serve the deleted keys
again. Each copy's clean stops below 40 (its ``clean_limit``): records from 40 on supersede values below 40 that a
truncation to 40 takes back, so cleaning past 40 would lose keys the copy holds below 40. Restarted either way,
every replica serves what it served uncleaned.

Kafka's own cleaner is off (``log.cleaner.enable=false``) on every broker: what is cleaned is kcompact's work.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kcompact.segment.checkpoint import read_offset_checkpoint
from tests.kafka.broker import KafkaCluster, KafkaNode
from tests.kafka.clients import Clients, Record
from tests.kafka.conftest import Kafka
from tests.kafka.jars import kafka_classpath
from tests.kafka.scenario import kcompact, kcompact_json

pytestmark = pytest.mark.broker

TOPIC = "failover"
PARTITION_DIR = f"{TOPIC}-0"
TOPIC_TOOL = "org.apache.kafka.tools.TopicCommand"  # kafka-topics.sh
ELECTION_TOOL = "org.apache.kafka.tools.LeaderElectionCommand"  # kafka-leader-election.sh
DELETE_RETENTION_MS = 2000
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
    "internal.segment.bytes": "1024",  # segments of a few batches (segment.bytes may not go below 1 MiB)
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "true",
}
CLUSTER_CONFIG = {
    "log.cleaner.enable": "false",
    "auto.leader.rebalance.enable": "false",
    # a killed broker is fenced (and leaves the ISR) within 2 s of its last heartbeat
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "2000",
    "replica.high.watermark.checkpoint.interval.ms": "500",
    # a consumer in a broker's rack reads from that broker (KIP-392's follower fetching)
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
}
ACKS_1 = {"acks": "1", "enable.idempotence": "false"}
DIVERGED_AT = 40
DESCRIBE_LINE = re.compile(r"Partition: 0\s+Leader: (\d+|none)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]*)")
WAIT_S = 90.0

Pair = tuple[str, str | None]


def pairs(keys: list[str], value: str | None) -> list[Pair]:
    """(key, ``value`` + key) for each key; ``value`` ``None``: tombstones."""
    return [(key, None if value is None else f"{value} {key}") for key in keys]


def keys(prefix: str, numbers: range | tuple[int, ...]) -> list[str]:
    return [f"{prefix}{i}" for i in numbers]


# What each phase writes, in batches of five records.
COMMON = pairs(keys("k", range(20)), "a") + pairs(keys("k", range(20)), "b")  # 0..39, on every replica
LOST = pairs(keys("k", range(10)), "lost") + pairs(keys("x", range(13)), "lost")  # 40..62, the old leader alone
DELETED = ("k10", "k11")
NEW = (pairs(keys("k", (5, 6, 7)), "c") + pairs(list(DELETED), None)  # 40..81, the new leader
       + pairs(keys("k", range(12, 20)), "c") + pairs(keys("n", range(29)), "c"))


def expected_view(above_40: list[Pair] = NEW) -> dict[str, str]:
    """What every replica serves after the failover: the common prefix, then the leader's 40.. (by default the
    new leader's 40..81)."""
    view: dict[str, str | None] = dict(COMMON)
    view.update(above_40)
    return {key: value for key, value in view.items() if value is not None}


def served_view(records: list[Record]) -> dict[str, str]:
    """Each key's latest value as a consumer of a compacted topic sees it (a tombstone: the key is gone)."""
    latest: dict[str, str | None] = {}
    for record in records:
        assert record.key is not None
        latest[record.key] = record.value
    return {key: value for key, value in latest.items() if value is not None}


def send(clients: Clients, cluster: KafkaCluster, records: list[Pair]) -> list[int]:
    """Produces ``records`` (acks=1) in batches of five; the offset of each."""
    steps = [{"send": [{"key": key, "value": value} for key, value in records[i:i + 5]]}
             for i in range(0, len(records), 5)]
    return clients.produce(cluster.bootstrap, TOPIC, steps, ACKS_1)


def describe(clients: Clients, cluster: KafkaCluster) -> tuple[int | None, list[int], set[int]]:
    """The partition's leader (``None``: none), replicas and in-sync replicas, as ``kafka-topics`` prints them."""
    done = clients.tool(TOPIC_TOOL, "--bootstrap-server", cluster.bootstrap, "--describe", "--topic", TOPIC)
    match = DESCRIBE_LINE.search(done.stdout)
    assert match is not None, done.stdout + done.stderr
    leader, replicas, isr = match.groups()
    return (None if leader == "none" else int(leader), [int(r) for r in replicas.split(",")],
            {int(r) for r in isr.split(",") if r})


def wait_for(clients: Clients, cluster: KafkaCluster, leader: int | None, isr: set[int]) -> list[int]:
    """Waits until ``leader`` (``None``: any broker) leads with the in-sync replicas ``isr``; the replicas in
    assignment order."""
    deadline = time.monotonic() + WAIT_S
    while True:
        seen = describe(clients, cluster)
        if seen[0] is not None and leader in (None, seen[0]) and seen[2] == isr:
            return seen[1]
        assert time.monotonic() < deadline, f"leader {seen[0]} ISR {seen[2]}; waited for {leader} {isr}"
        time.sleep(0.5)


def rack(node: KafkaNode) -> str:
    return f"rack-{node.node_id}"


def with_racks(cluster: KafkaCluster) -> KafkaCluster:
    for node in cluster.brokers:
        node.own_properties["broker.rack"] = rack(node)
    return cluster


@dataclass(frozen=True, slots=True)
class Failover:
    """The stopped cluster's log dirs (``root/<id>/logs``, id 0 the controller) and the brokers' roles."""

    root: Path
    old_leader: int
    new_leader: int
    third: int
    controller_log: Path

    @property
    def everyone(self) -> set[int]:
        return {self.old_leader, self.new_leader, self.third}


@dataclass(frozen=True, slots=True)
class Served:
    """What each broker served after a restart (by node id), and the log dirs once stopped again."""

    records: dict[int, list[Record]]
    root: Path

    def log_dir(self, node_id: int) -> Path:
        return self.root / str(node_id) / "logs"


@pytest.fixture(scope="module")
def kafka_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kafka]:
    """Kafka nodes shared by this module's tests (every node killed at the end if still running)."""
    started = Kafka(kafka_classpath(), tmp_path_factory.mktemp("failover") / "kafka")
    yield started
    started.kill_all()


@pytest.fixture(autouse=True)
def _report_kafka_logs(request: pytest.FixtureRequest, kafka_module: Kafka) -> None:
    request.node._kcompact_kafka = kafka_module  # a failing test's report gets the nodes' log tails


@pytest.fixture(scope="module")
def failover(kafka_module: Kafka) -> Failover:
    began = time.monotonic()
    cluster = with_racks(kafka_module.three(CLUSTER_CONFIG))
    clients = kafka_module.clients
    clients.create_topic(cluster.bootstrap, TOPIC, TOPIC_CONFIG, replication_factor=3)
    nodes = {node.node_id: node for node in cluster.brokers}
    old_leader, replicas, _ = describe(clients, cluster)
    assert old_leader == replicas[0]  # the preferred replica leads a new topic
    # With acks=1 a write is acknowledged before any follower has it: wait until every replica holds 0..39.
    assert send(clients, cluster, COMMON) == list(range(DIVERGED_AT))
    wait_high_watermark(clients, cluster, DIVERGED_AT)
    new_leader, third = replicas[1], replicas[2]

    cluster.kill([nodes[new_leader], nodes[third]])
    # Alone in the ISR once the controller fenced the others, its high watermark follows its log end: its
    # cleaner may clean all it writes now (LogCleanerManager.cleanableOffsets stops at the last stable offset).
    wait_for(clients, cluster, old_leader, {old_leader})
    assert send(clients, cluster, LOST) == list(range(DIVERGED_AT, DIVERGED_AT + len(LOST)))
    wait_checkpointed_high_watermark(nodes[old_leader], DIVERGED_AT + len(LOST))
    cluster.kill([nodes[old_leader]])

    cluster.start([nodes[new_leader]])
    wait_for(clients, cluster, new_leader, {new_leader})
    assert send(clients, cluster, NEW) == list(range(DIVERGED_AT, DIVERGED_AT + len(NEW)))
    cluster.start([nodes[third]])
    wait_for(clients, cluster, new_leader, {new_leader, third})
    cluster.stop()
    print(f"failover scenario: {time.monotonic() - began:.1f}s")
    return Failover(cluster.nodes[0].log_dir.parent.parent, old_leader, new_leader, third,
                    cluster.nodes[0].server_log)


def wait_checkpointed_high_watermark(node: KafkaNode, offset: int) -> None:
    """Waits until the broker's ``replication-offset-checkpoint`` holds ``offset`` for the partition."""
    path = node.log_dir / "replication-offset-checkpoint"
    deadline = time.monotonic() + WAIT_S
    while (seen := read_offset_checkpoint(path).get((TOPIC, 0)) if path.exists() else None) != offset:
        assert time.monotonic() < deadline, f"checkpointed high watermark {seen}, waited for {offset}"
        time.sleep(0.2)


def wait_high_watermark(clients: Clients, cluster: KafkaCluster, offset: int) -> None:
    """Waits until the partition's high watermark (every in-sync replica has fetched below it) is ``offset``."""
    deadline = time.monotonic() + WAIT_S
    while (end := clients.end_positions(cluster.bootstrap, TOPIC, "read_uncommitted")[0]) < offset:
        assert time.monotonic() < deadline, f"high watermark {end}, waited for {offset}"
        time.sleep(0.3)


def copy_cluster(source: Path, target: Path) -> Path:
    """A copy of every node's log dir (file times kept) under ``target/<id>/logs``."""
    for node_id in (0, 1, 2, 3):
        shutil.copytree(source / str(node_id) / "logs", target / str(node_id) / "logs", symlinks=True)
    return target


def restart_and_read(kafka: Kafka, failover: Failover, root: Path, old_leader_first: bool = False) -> Served:
    """Starts the cluster on the log dirs under ``root``, reads every replica from offset 0 (read_committed)
    and stops the cluster.

    By default the controller and the followers start first, the old leader last; a preferred election then
    gives the old leader the lead back. ``old_leader_first``: the controller and the old leader alone first
    (nobody in the ISR is alive: the controller elects it uncleanly), then the others.
    """
    cluster = with_racks(kafka.three_on(root, CLUSTER_CONFIG))
    clients = kafka.clients
    nodes = {node.node_id: node for node in cluster.nodes}
    old, others = nodes[failover.old_leader], [nodes[failover.new_leader], nodes[failover.third]]
    if old_leader_first:
        cluster.start([nodes[0], old])
        wait_for(clients, cluster, old.node_id, {old.node_id})
        cluster.start(others)
    else:
        cluster.start([nodes[0], *others])
        cluster.start([old])
        wait_for(clients, cluster, None, failover.everyone)
        done = clients.tool(ELECTION_TOOL, "--bootstrap-server", cluster.bootstrap, "--election-type",
                            "preferred", "--topic", TOPIC, "--partition", "0")
        assert done.returncode == 0, done.stdout + done.stderr
    wait_for(clients, cluster, old.node_id, failover.everyone)
    served = {node_id: clients.consume(cluster.bootstrap, TOPIC, "read_committed",
                                       config={"client.rack": rack(nodes[node_id])})
              for node_id in sorted(failover.everyone)}
    cluster.stop()
    return Served(served, root)


def partition(root: Path, node_id: int) -> Path:
    return root / str(node_id) / "logs" / PARTITION_DIR


def record_offsets(partition_dir: Path) -> list[int]:
    """The offset of every record in the partition's segments (``kcompact inspect dump``)."""
    return [row["offset"] for row in kcompact_json("inspect", "dump", partition_dir, "--records")
            if row.get("type") == "record"]


@pytest.fixture(scope="module")
def uncleaned(kafka_module: Kafka, failover: Failover, tmp_path_factory: pytest.TempPathFactory) -> Served:
    return restart_and_read(kafka_module, failover, copy_cluster(failover.root, tmp_path_factory.mktemp("uncleaned")))


@pytest.fixture(scope="module")
def uncleaned_old_leader_first(kafka_module: Kafka, failover: Failover,
                               tmp_path_factory: pytest.TempPathFactory) -> Served:
    root = copy_cluster(failover.root, tmp_path_factory.mktemp("uncleaned-old-first"))
    return restart_and_read(kafka_module, failover, root, old_leader_first=True)


@dataclass(frozen=True, slots=True)
class Cleaned:
    """The copies after kcompact's rounds, and each round's JSON report by (node id, round)."""

    root: Path
    reports: dict[tuple[int, int], dict[str, Any]]


@pytest.fixture(scope="module")
def cleaned(failover: Failover, tmp_path_factory: pytest.TempPathFactory) -> Cleaned:
    """Two rounds of ``kcompact clean --replica-dirs`` over the new leader's copy and the old leader's, each
    naming the other two copies; the second round past the tombstones' delete horizon."""
    root = copy_cluster(failover.root, tmp_path_factory.mktemp("cleaned"))
    far_ahead = str(int(time.time() * 1000) + 10 * DELETE_RETENTION_MS)
    reports = {}
    for round_, extra in ((1, ()), (2, ("--now-ms", far_ahead, "--roll"))):
        for node_id in (failover.new_leader, failover.old_leader):
            copies = [arg for other in sorted(failover.everyone) if other != node_id
                      for arg in ("--replica-dirs", str(partition(root, other)))]
            done = kcompact("clean", partition(root, node_id), *copies, *extra, "--json")
            assert done.returncode == 0, done.stdout + done.stderr
            reports[(node_id, round_)] = json.loads(done.stdout)
    return Cleaned(root, reports)


@pytest.fixture(scope="module")
def cleaned_served(kafka_module: Kafka, failover: Failover, cleaned: Cleaned,
                   tmp_path_factory: pytest.TempPathFactory) -> Served:
    return restart_and_read(kafka_module, failover, copy_cluster(cleaned.root, tmp_path_factory.mktemp("cleaned-run")))


@pytest.fixture(scope="module")
def cleaned_old_leader_first(kafka_module: Kafka, failover: Failover, cleaned: Cleaned,
                             tmp_path_factory: pytest.TempPathFactory) -> Served:
    root = copy_cluster(cleaned.root, tmp_path_factory.mktemp("cleaned-old-first"))
    return restart_and_read(kafka_module, failover, root, old_leader_first=True)


def dump(partition_dir: Path) -> list[tuple[int, str, str | None]]:
    """(offset, key, value) of every record in the partition's segments (``kcompact inspect dump``)."""
    rows = kcompact_json("inspect", "dump", partition_dir, "--records")
    return [(row["offset"], base64.b64decode(row["key"]).decode(), _text(row["value"]))
            for row in rows if row.get("type") == "record"]


def _text(encoded: str | None) -> str | None:
    return None if encoded is None else base64.b64decode(encoded).decode()


def segment_bases(partition_dir: Path) -> list[int]:
    return sorted(int(path.stem) for path in partition_dir.glob("*.log"))


def lineage(partition_dir: Path) -> list[tuple[int, int]]:
    """(leader epoch, start offset) of each entry of the partition's ``leader-epoch-checkpoint``."""
    version, count, *entries = (partition_dir / "leader-epoch-checkpoint").read_text().splitlines()
    assert (version, int(count)) == ("0", len(entries))
    return [(int(epoch), int(offset)) for epoch, offset in (entry.split() for entry in entries)]


def names(path: str, root: Path, node_id: int) -> bool:
    """Whether ``path`` (a copy as a report names it) is node ``node_id``'s copy under ``root``."""
    return Path(path).resolve() in (partition(root, node_id).resolve(), partition(root, node_id).parent.resolve())


def test_the_failover_leaves_two_histories_that_part_at_40(failover: Failover) -> None:
    old = dump(partition(failover.root, failover.old_leader))
    new = dump(partition(failover.root, failover.new_leader))
    assert old[:DIVERGED_AT] == new[:DIVERGED_AT] == [(i, k, v) for i, (k, v) in enumerate(COMMON)]
    assert old[DIVERGED_AT:] == [(DIVERGED_AT + i, k, v) for i, (k, v) in enumerate(LOST)]
    assert new[DIVERGED_AT:] == [(DIVERGED_AT + i, k, v) for i, (k, v) in enumerate(NEW)]
    assert [(offset, key) for offset, key, value in new if value is None] == [(43, "k10"), (44, "k11")]
    assert dump(partition(failover.root, failover.third)) == new
    # Segments of 1024 bytes: the old leader's second one holds 35..39 and its own 40..62, across the divergence.
    for node_id in (failover.old_leader, failover.new_leader):
        assert segment_bases(partition(failover.root, node_id))[:2] == [0, 35]
    # The old leader wrote 40..62 in the epoch it led from 0; the new leader's epoch begins at 40.
    assert lineage(partition(failover.root, failover.old_leader)) == [(0, 0)]
    ((first, zero), (epoch, start)) = lineage(partition(failover.root, failover.new_leader))
    assert (first, zero, start) == (0, 0, DIVERGED_AT) and epoch > 0
    assert lineage(partition(failover.root, failover.third)) == [(0, 0), (epoch, DIVERGED_AT)]
    assert f"partition 0 to {failover.new_leader} using an unclean election" in failover.controller_log.read_text()
    # kcompact's own view of the three copies: the old leader's lineage parts from the new leader's at 40
    dirs = [failover.root / str(node_id) / "logs"
            for node_id in (failover.new_leader, failover.old_leader, failover.third)]
    done = kcompact("inspect", "replicas", *dirs, "--topic", TOPIC, "--partition", "0", "--json")
    assert done.returncode == 3, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["epoch_divergence"] == [{"replica": 1, "offset": DIVERGED_AT}], report


def test_restarted_uncleaned_every_replica_serves_the_new_leaders_history(
        failover: Failover, uncleaned: Served) -> None:
    for node_id, records in uncleaned.records.items():
        assert served_view(records) == expected_view(), f"broker {node_id}"
        assert [r.offset for r in records] == record_offsets(partition(uncleaned.root, node_id)), f"broker {node_id}"
    # the old leader truncated its 40..62 and fetched the new leader's 40..81
    old = uncleaned.records[failover.old_leader]
    assert [(r.key, r.value) for r in old if r.offset >= DIVERGED_AT] == NEW
    dirs = [uncleaned.log_dir(node_id) for node_id in (1, 2, 3)]
    done = kcompact("inspect", "replicas", *dirs, "--topic", TOPIC, "--partition", "0")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_fenced_clean_reports_its_fence_and_its_limit(failover: Failover, cleaned: Cleaned) -> None:
    old, new, third = failover.old_leader, failover.new_leader, failover.third
    for round_ in (1, 2):
        (row,) = cleaned.reports[(new, round_)]["results"]
        fence = row["fence"]
        assert (fence["offset"], fence["why"]) == (DIVERGED_AT, "lineage"), fence
        assert names(fence["set_by"], cleaned.root, old), fence
        copies = {copy["path"]: copy for copy in fence["copies"]}
        (old_copy,) = [copy for path, copy in copies.items() if names(path, cleaned.root, old)]
        (third_copy,) = [copy for path, copy in copies.items() if names(path, cleaned.root, third)]
        assert (old_copy["log_end"], old_copy["lineage_parts_at"], old_copy["fence"]) == (63, 40, 40)
        assert (third_copy["log_end"], third_copy["lineage_parts_at"], third_copy["fence"]) == (82, None, 82)
        # cleaned only below 40 as well: were the old leader elected, this copy would be truncated there
        limit = row["clean_limit"]
        assert (limit["offset"], limit["why"]) == (DIVERGED_AT, "lineage"), limit
        assert names(limit["copy"], cleaned.root, old), limit

        (row,) = cleaned.reports[(old, round_)]["results"]
        fence = row["fence"]
        assert (fence["offset"], fence["why"]) == (DIVERGED_AT, "lineage"), fence
        assert names(fence["set_by"], cleaned.root, new) or names(fence["set_by"], cleaned.root, third), fence
        for copy in fence["copies"]:
            assert (copy["log_end"], copy["lineage_parts_at"], copy["fence"]) == (82, 40, 40), copy
        limit = row["clean_limit"]
        assert (limit["offset"], limit["why"]) == (DIVERGED_AT, "lineage"), limit
        assert names(limit["copy"], cleaned.root, new) or names(limit["copy"], cleaned.root, third), limit
        assert row["first_uncleanable_offset"] <= DIVERGED_AT, row


def test_the_fenced_clean_keeps_the_tombstones_and_the_old_leaders_40_to_62(
        failover: Failover, cleaned: Cleaned) -> None:
    old = dump(partition(cleaned.root, failover.old_leader))
    new = dump(partition(cleaned.root, failover.new_leader))
    # both were cleaned below 35 (their first segment): the values of 0..14 that 20..34 supersede went
    assert {offset for offset, _, _ in old} & set(range(15)) == set()
    assert {offset for offset, _, _ in new} & set(range(15)) == set()
    # the old leader keeps every key it had below 40, and its own 40..62 as they were
    assert {key for offset, key, _ in old if offset < DIVERGED_AT} == {key for key, _ in COMMON}
    assert [record for record in old if record[0] >= DIVERGED_AT] == [
        (DIVERGED_AT + i, k, v) for i, (k, v) in enumerate(LOST)]
    # the tombstones at 43 and 44 lie above the fence: they stay past their delete horizon
    assert [(offset, key) for offset, key, value in new if value is None] == [(43, "k10"), (44, "k11")]


def test_restarted_cleaned_every_replica_serves_what_it_served_uncleaned(
        failover: Failover, uncleaned: Served, cleaned_served: Served) -> None:
    for node_id, records in cleaned_served.records.items():
        view = served_view(records)
        assert view == served_view(uncleaned.records[node_id]) == expected_view(), f"broker {node_id}"
        # each replica's own log served it
        assert [r.offset for r in records] == record_offsets(partition(cleaned_served.root, node_id)), node_id
    old = served_view(cleaned_served.records[failover.old_leader])
    assert not set(DELETED) & set(old)  # the deleted keys stay deleted on the old leader
    assert {key for key, _ in COMMON} - set(DELETED) <= set(old)  # it lost no key it had below 40
    # the third copy was not cleaned: a consumer in its rack read its records, not the leader's
    third = [r.offset for r in cleaned_served.records[failover.third]]
    assert third != [r.offset for r in cleaned_served.records[failover.old_leader]]


def test_inspect_replicas_agrees_after_the_cleaned_restart(cleaned_served: Served) -> None:
    dirs = [cleaned_served.log_dir(node_id) for node_id in (1, 2, 3)]
    done = kcompact("inspect", "replicas", *dirs, "--topic", TOPIC, "--partition", "0")
    assert done.returncode == 0, done.stdout + done.stderr


def test_restarted_uncleaned_with_the_old_leader_first_the_others_truncate_to_its_history(
        failover: Failover, uncleaned_old_leader_first: Served) -> None:
    """Elected uncleanly in its turn, the old leader's history wins: the new leader's lineage parts from it at 40,
    so the new leader (and the third replica) truncate their 40..81, tombstones included, and fetch its 40..62.
    That is why the new leader's copy, too, is cleaned only below 40."""
    for node_id, records in uncleaned_old_leader_first.records.items():
        assert served_view(records) == expected_view(LOST), f"broker {node_id}"
        assert [(r.key, r.value) for r in records if r.offset >= DIVERGED_AT] == LOST, f"broker {node_id}"


def test_restarted_cleaned_with_the_old_leader_first_every_replica_serves_what_it_served_uncleaned(
        failover: Failover, uncleaned_old_leader_first: Served, cleaned_old_leader_first: Served) -> None:
    for node_id, records in cleaned_old_leader_first.records.items():
        assert served_view(records) == served_view(uncleaned_old_leader_first.records[node_id]), f"broker {node_id}"
        assert [r.offset for r in records] == record_offsets(partition(cleaned_old_leader_first.root, node_id))
    # the new leader keeps the keys it had below 40 that only its own (truncated) 40..81 rewrote or deleted
    new = served_view(cleaned_old_leader_first.records[failover.new_leader])
    assert {f"k{i}" for i in range(10, 20)} <= set(new)
