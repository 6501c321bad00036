"""Compaction, the whole promise, through a real broker: one log, produced by Kafka's Java producer in every codec
(plain, idempotent and transactional producers, committed and aborted transactions, updates and tombstones),
cleaned twice from the same copy — once by ``kcompact clean``, once by a broker's own cleaner. A broker started on
kcompact's output serves, read_committed and read_uncommitted, exactly what the broker's own clean serves, and the
segments of both cleans are byte-identical."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.kafka.clients import Clients, Record
from tests.kafka.conftest import Kafka
from tests.kafka.scenario import (
    active_base_offset,
    batches,
    cleaner_checkpoint,
    copy_log_dir,
    kcompact_json,
    latest_by_key,
    recompressed_differences,
    segment_files,
    wait_cleaner_checkpoint,
)

pytestmark = pytest.mark.broker

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TOPIC = "promise"
DELETE_RETENTION_MS = 86_400_000  # Kafka's default: the first round keeps tombstones and markers
DEDUPE_BUFFER_BYTES = 8 * 1024 * 1024
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "internal.segment.bytes": "2048",  # many small segments (segment.bytes may not go below 1 MiB)
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
}
# The producing broker's cleaner stays off: both cleans start from the same uncleaned log.
NO_CLEANER = {"log.cleaner.enable": "false"}
# A broker that cleans at once (its threads start a round every 100 ms while a log is dirty enough).
EAGER_CLEANER = {
    "log.cleaner.enable": "true",
    "log.cleaner.backoff.ms": "100",
    "log.cleaner.min.cleanable.ratio": "0.01",
    "log.cleaner.dedupe.buffer.size": str(DEDUPE_BUFFER_BYTES),
    "log.cleaner.threads": "1",
}
READS = ("read_committed", "read_uncommitted")


def producers() -> dict[str, dict[str, str]]:
    """Per codec a plain producer (no producer id), an idempotent one and a transactional one."""
    named: dict[str, dict[str, str]] = {}
    for codec in CODECS:
        named[f"plain-{codec}"] = {"compression.type": codec, "enable.idempotence": "false", "acks": "1"}
        named[f"idempotent-{codec}"] = {"compression.type": codec, "enable.idempotence": "true"}
        named[f"transactional-{codec}"] = {"compression.type": codec, "transactional.id": f"txn-{codec}"}
    return named


def steps() -> list[dict[str, Any]]:
    """Three rounds over the codecs: keyed updates, tombstones, headers, explicit and producer-set timestamps;
    per codec and round one committed and one aborted transaction."""
    now = int(time.time() * 1000) - 60_000
    counter = iter(range(10_000))

    def records(kind: str, codec: str, rnd: int, start: int) -> list[dict[str, Any]]:
        # two keys of its own (kept: the batch is rebuilt around them, not dropped) and three shared ones
        # (updated by later batches; one of them deleted by a tombstone from the second round on)
        out: list[dict[str, Any]] = []
        for j in range(5):
            n = next(counter)
            key = f"{kind}-{codec}-{rnd}-{j}" if j < 2 else f"key-{(start + j) % 7}"
            tombstone = rnd > 0 and j == 2
            out.append({
                "key": key,
                "value": None if tombstone else f"{kind}/{codec}/round {rnd}/{j} " * (1 + n % 4),
                "headers": [["codec", codec], ["n", str(n)]] + ([["empty", None]] if j == 1 else []),
                "timestamp": None if j == 4 else now + n,
            })
        return out

    out: list[dict[str, Any]] = []
    for rnd in range(3):
        for i, codec in enumerate(CODECS):
            start = rnd * 7 + i * 3
            out.append({"producer": f"plain-{codec}", "send": records("plain", codec, rnd, start)})
            out.append({"producer": f"idempotent-{codec}", "send": records("idempotent", codec, rnd, start + 1)})
            transactional = f"transactional-{codec}"
            for outcome in ("commit", "abort"):
                out += [{"producer": transactional, "begin": True},
                        {"producer": transactional, "send": records(outcome, codec, rnd, start + 2)},
                        {"producer": transactional, outcome: True}]
    return out


def read_all(clients: Clients, bootstrap: str) -> dict[str, list[Record]]:
    return {isolation: clients.consume(bootstrap, TOPIC, isolation) for isolation in READS}


def broker_clean_time(partition_dir: Path) -> int | None:
    """When the broker's cleaner ran its round: a batch it stamped with a delete horizon carries
    ``currentTime + delete.retention.ms`` (``MemoryRecords.filterTo``)."""
    horizons = {b["delete_horizon_ms"] for b in batches(partition_dir) if b["delete_horizon_ms"] is not None}
    assert len(horizons) <= 1, f"one round stamps one horizon, found {sorted(horizons)}"
    return horizons.pop() - DELETE_RETENTION_MS if horizons else None


def test_kcompact_clean_serves_what_the_brokers_own_cleaner_serves(kafka: Kafka, tmp_path: Path) -> None:
    clients = kafka.clients
    produced = kafka.single(tmp_path / "produced", NO_CLEANER)
    clients.create_topic(produced.bootstrap, TOPIC, TOPIC_CONFIGS)
    clients.produce(produced.bootstrap, TOPIC, steps(), producers=producers())
    original = read_all(clients, produced.bootstrap)
    produced.stop()

    partition = f"{TOPIC}-0"
    upper = active_base_offset(tmp_path / "produced" / partition)
    assert upper > 0 and len(list((tmp_path / "produced" / partition).glob("*.log"))) >= 5
    copy_a = copy_log_dir(tmp_path / "produced", tmp_path / "copy-a")
    copy_b = copy_log_dir(tmp_path / "produced", tmp_path / "copy-b")

    # B: the broker's own cleaner, one round up to the active segment, then stopped.
    broker_b = kafka.on(copy_b, EAGER_CLEANER)
    checkpoint_b = wait_cleaner_checkpoint(copy_b, TOPIC, upper)
    from_b = read_all(clients, broker_b.bootstrap)
    broker_b.stop()

    # A: kcompact clean, the same round (the broker's clock, its dedupe buffer), no roll: the broker does not roll.
    clean_time = broker_clean_time(copy_b / partition) or int(time.time() * 1000)
    report = kcompact_json("clean", copy_a / partition, "--now-ms", str(clean_time),
                           "--dedupe-buffer-size", str(DEDUPE_BUFFER_BYTES))
    assert report, "kcompact clean printed no report"
    assert cleaner_checkpoint(copy_a, TOPIC) == checkpoint_b

    # Where both cleaned the same range the bytes are the same, but for one known difference (checked to be
    # only that: same headers, same records) that the end of the test reports.
    recompressed = recompressed_differences(segment_files(copy_a / partition), segment_files(copy_b / partition))

    broker_a = kafka.on(copy_a)
    from_a = read_all(clients, broker_a.bootstrap)
    broker_a.stop()
    for isolation in READS:
        assert from_a[isolation] == from_b[isolation], isolation
        assert len(from_a[isolation]) < len(original[isolation])  # something was cleaned
    # and what compaction promises: every key's latest committed value (or its tombstone) survives
    assert latest_by_key(from_a["read_committed"]) == latest_by_key(original["read_committed"])
    if recompressed:
        pytest.xfail("batches rebuilt in snappy or lz4 are compressed by other libraries than Kafka's "
                     "(cramjam's snappy, python-lz4 vs snappy-java, lz4-java): " + "; ".join(recompressed))
