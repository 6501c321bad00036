"""``clean --scratch-dir`` into another log dir of the same broker (JBOD: several ``log.dirs`` on different
volumes), through a real Kafka 4.1 broker with two log dirs.

Kafka's ``LogManager.loadLogs`` takes every directory at the top of a log dir for a partition
(``UnifiedLog.parseTopicPartitionName``): a directory named otherwise stops the broker's start, shown here. So
where the scratch dir is a log dir, kcompact keeps its scratch as files at its top (``disk.scratch``:
``kcompact-scratch.<partition>.*``), which the loader passes over: a broker started with the leftovers of a
clean killed mid-evacuation loads both log dirs and serves every record, and the next ``clean`` settles them.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.full_volume import fill, mounted_volumes
from tests.kafka.broker import KafkaCluster, KafkaError
from tests.kafka.clients import Record
from tests.kafka.conftest import Kafka
from tests.kafka.scenario import copy_log_dir, latest_by_key
from tests.kafka.test_compaction_promise import NO_CLEANER, TOPIC, TOPIC_CONFIGS, producers, read_all, steps
from tests.kafka.test_full_volume_e2e import du, kcompact

pytestmark = pytest.mark.broker
OTHER_TOPIC = "plain"  # a topic of its own, so that each log dir holds records to read
LOG_DIRS_TOOL = "org.apache.kafka.tools.LogDirsCommand"
ONE_GROUP = ("--config", "internal.segment.bytes=1048576")  # as test_scratch_dir_e2e: the cleaned group gives pages


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    yield from mounted_volumes(tmp_path / "volumes")


def two_log_dirs(first: Path, second: Path) -> dict[str, str]:
    return {**NO_CLEANER, "log.dirs": f"{first},{second}"}


def other_steps() -> list[dict[str, object]]:
    return [{"producer": "plain-none", "send": [
        {"key": f"k{i}", "value": f"v{i}", "headers": [], "timestamp": None} for i in range(20)]}]


def read_both(kafka: Kafka, broker: KafkaCluster) -> tuple[dict[str, list[Record]], list[Record]]:
    return (read_all(kafka.clients, broker.bootstrap),
            kafka.clients.consume(broker.bootstrap, OTHER_TOPIC, "read_uncommitted"))


def produce_two(kafka: Kafka, root: Path) -> tuple[dict[str, list[Record]], list[Record], Path, Path]:
    """A stopped broker with two log dirs (``root/logs-a``, the metadata log's, and ``root/logs-b``) and the test
    topics; what it served; the log dir of the compacted topic's partition, then the other."""
    first, second = root / "logs-a", root / "logs-b"
    broker = kafka.single(first, two_log_dirs(first, second))
    kafka.clients.create_topic(broker.bootstrap, TOPIC, TOPIC_CONFIGS)
    kafka.clients.create_topic(broker.bootstrap, OTHER_TOPIC)
    kafka.clients.produce(broker.bootstrap, TOPIC, steps(), producers=producers())
    kafka.clients.produce(broker.bootstrap, OTHER_TOPIC, other_steps(), producers=producers())
    original, other = read_both(kafka, broker)
    broker.stop()
    cleaned = first if (first / f"{TOPIC}-0").is_dir() else second
    return original, other, cleaned, second if cleaned == first else first


def log_dirs_described(kafka: Kafka, broker: KafkaCluster) -> dict[str, tuple[str | None, list[str]]]:
    """``kafka-log-dirs --describe``: per log dir the broker's error for it (None: online) and its partitions."""
    done = kafka.clients.tool(LOG_DIRS_TOOL, "--bootstrap-server", broker.bootstrap, "--describe")
    assert done.returncode == 0, done.stdout + done.stderr
    described = json.loads(done.stdout.strip().splitlines()[-1])
    (only,) = described["brokers"]
    return {d["logDir"]: (d["error"], sorted(p["partition"] for p in d["partitions"])) for d in only["logDirs"]}


def scratch_files(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir() if p.name.startswith("kcompact-scratch."))


@pytest.mark.parametrize("point", ["scratch-written", "scratch-swapped"])
def test_a_broker_loads_both_log_dirs_with_a_killed_cleans_scratch_in_one_and_the_next_clean_settles_it(
    kafka: Kafka, tmp_path: Path, small_volume: Callable[[int], Path], point: str,
) -> None:
    original, other, produced_cleaned, produced_scratch = produce_two(kafka, tmp_path / "produced")
    volume = small_volume(du(produced_cleaned) + 256 * 1024)
    cleaned = copy_log_dir(produced_cleaned, volume / produced_cleaned.name)  # full: the scratch is the other's
    scratch = copy_log_dir(produced_scratch, tmp_path / produced_scratch.name)
    filler = fill(volume)
    partition = cleaned / f"{TOPIC}-0"
    first = min(p.name for p in partition.glob("*.log"))

    crashed = kcompact("clean", partition, "--scratch-dir", scratch, *ONE_GROUP, KCOMPACT_CRASH_AT=point)

    assert crashed.returncode == 137, crashed.stderr
    stem = f"kcompact-scratch.{TOPIC}-0.{first.removesuffix('.log')}"
    assert {f"{stem}.scratch.json", f"{stem}.log.cleaned"} <= set(scratch_files(scratch))
    os.unlink(filler)  # the broker needs room to start (the operator's file, not Kafka's)
    dirs = [cleaned, scratch] if produced_cleaned.name == "logs-a" else [scratch, cleaned]  # the metadata log's first
    broker = kafka.on(dirs[0], two_log_dirs(*dirs))
    described = log_dirs_described(kafka, broker)
    served, served_other = read_both(kafka, broker)
    broker.stop()
    assert {d: error for d, (error, _partitions) in described.items()} == {str(cleaned): None, str(scratch): None}
    assert f"{TOPIC}-0" in described[str(cleaned)][1]
    assert served_other == other
    if point == "scratch-written":
        assert served == original  # the partition untouched: every record it served
    else:
        assert latest_by_key(served["read_committed"]) == latest_by_key(original["read_committed"])
    assert set(scratch_files(scratch)) >= {f"{stem}.scratch.json"}  # the broker left kcompact's files alone

    settled = kcompact("clean", cleaned, "--scratch-dir", scratch, "--json", *ONE_GROUP)

    assert settled.returncode == 0, settled.stdout + settled.stderr
    rows = {row["partition_dir"]: row for row in json.loads(settled.stdout)["results"]}
    expected = "the scratch clean had not changed its group" if point == "scratch-written" else \
        "the scratch clean had swapped it in"
    assert rows[str(partition)]["scratch_actions"][0] == f"{first}: {expected}; scratch files removed"
    assert scratch_files(scratch) == []
    broker = kafka.on(dirs[0], two_log_dirs(*dirs))
    served, served_other = read_both(kafka, broker)
    broker.stop()
    assert served_other == other
    assert latest_by_key(served["read_committed"]) == latest_by_key(original["read_committed"])
    assert len(served["read_committed"]) < len(original["read_committed"])  # cleaned


def test_a_directory_in_a_log_dir_not_named_topic_partition_stops_the_brokers_start(
    kafka: Kafka, tmp_path: Path,
) -> None:
    first, second = tmp_path / "logs-a", tmp_path / "logs-b"
    broker = kafka.single(first, two_log_dirs(first, second), start=False)
    (second / "scratch").mkdir()  # what --scratch-dir LOG_DIR/scratch would leave (kcompact refuses it)

    refused = kcompact("clean", first, "--scratch-dir", second / "scratch")

    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"give the log dir itself, --scratch-dir {second}:" in refused.stderr
    with pytest.raises(KafkaError, match="exited while starting"):
        broker.start()
    (node,) = broker.brokers
    assert "'scratch' is not in the form of topic-partition" in node.server_log.read_text(errors="replace")
    shutil.rmtree(second / "scratch")
    broker.start()  # without it the broker starts
    broker.stop()
