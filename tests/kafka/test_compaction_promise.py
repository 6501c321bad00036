"""Compaction, the whole promise, through a real broker: one log, produced by Kafka's Java producer in every codec
(plain, idempotent and transactional producers, committed and aborted transactions, updates and tombstones),
cleaned twice from the same copy — once by ``kcompact clean``, once by a broker's own cleaner. A broker started on
kcompact's output serves, read_committed and read_uncommitted, exactly what the broker's own clean serves, and the
segments of both cleans are byte-identical."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
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


def steps(generation: int = 0) -> list[dict[str, Any]]:
    """Three rounds over the codecs: keyed updates, tombstones, headers, explicit and producer-set timestamps;
    per codec and round one committed and one aborted transaction (``generation``: keys of their own)."""
    now = int(time.time() * 1000) - 60_000
    counter = iter(range(10_000))

    def records(kind: str, codec: str, rnd: int, start: int) -> list[dict[str, Any]]:
        # two keys of its own (kept: the batch is rebuilt around them, not dropped) and three shared ones
        # (updated by later batches; one of them deleted by a tombstone from the second round on)
        out: list[dict[str, Any]] = []
        for j in range(5):
            n = next(counter)
            key = f"{kind}-{codec}-{generation}.{rnd}-{j}" if j < 2 else f"key-{(start + j) % 7}"
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


def broker_clean_time(partition_dir: Path, delete_retention_ms: int) -> int | None:
    """When the broker's cleaner ran its (last) round: a batch it stamped with a delete horizon carries
    ``currentTime + delete.retention.ms`` (``MemoryRecords.filterTo``)."""
    horizons = {b["delete_horizon_ms"] for b in batches(partition_dir) if b["delete_horizon_ms"] is not None}
    return max(horizons) - delete_retention_ms if horizons else None


@dataclass
class TwoCleans:
    """One log cleaned by a broker's own cleaner (B) and by ``kcompact clean`` (A), and what each serves."""

    copy_a: Path
    copy_b: Path
    from_a: dict[str, list[Record]]
    from_b: dict[str, list[Record]]
    recompressed: list[str]  # batches whose compressed bytes differ (see recompressed_differences)


def clean_both(kafka: Kafka, source: Path, root: Path, delete_retention_ms: int,
               settled: Callable[[Path], bool] | None = None) -> TwoCleans:
    """Copies a stopped broker's log dir twice; B: a broker's own cleaner, one round up to the active segment,
    then stopped; A: ``kcompact clean`` of the same round (the broker's clock, its dedupe buffer; no roll: the
    broker does not roll). Same checkpoint, same segment files but for the known codec difference."""
    partition = f"{TOPIC}-0"
    upper = active_base_offset(source / partition)
    copy_a = copy_log_dir(source, root / "copy-a")
    copy_b = copy_log_dir(source, root / "copy-b")

    broker_b = kafka.on(copy_b, EAGER_CLEANER)
    checkpoint_b = wait_cleaner_checkpoint(copy_b, TOPIC, upper)
    deadline = time.monotonic() + 60
    while settled is not None and not settled(copy_b / partition):  # what the cleaner thread does next
        assert time.monotonic() < deadline, "the broker's cleaner thread did not settle"
        time.sleep(0.3)
    from_b = read_all(kafka.clients, broker_b.bootstrap)
    broker_b.stop()

    clean_time = broker_clean_time(copy_b / partition, delete_retention_ms) or int(time.time() * 1000)
    report = kcompact_json("clean", copy_a / partition, "--now-ms", str(clean_time),
                           "--dedupe-buffer-size", str(DEDUPE_BUFFER_BYTES))
    assert report, "kcompact clean printed no report"
    assert cleaner_checkpoint(copy_a, TOPIC) == checkpoint_b
    # Where both cleaned the same range the bytes are the same, but for one known difference (checked to be
    # only that: same headers, same records) that the test reports at its end.
    recompressed = recompressed_differences(segment_files(copy_a / partition), segment_files(copy_b / partition))

    broker_a = kafka.on(copy_a)
    from_a = read_all(kafka.clients, broker_a.bootstrap)
    broker_a.stop()
    for isolation in READS:
        assert from_a[isolation] == from_b[isolation], isolation
    return TwoCleans(copy_a, copy_b, from_a, from_b, recompressed)


def report_recompressed(recompressed: list[str]) -> None:
    if recompressed:
        codecs = Counter(line.split()[1].rstrip(":") for line in recompressed)
        pytest.xfail(f"{len(recompressed)} batches rebuilt in snappy ({dict(codecs)}) compressed by another "
                     "library than Kafka's (cramjam's snappy; Kafka: snappy-java), same headers and records; e.g. "
                     + "; ".join(recompressed[:2]))


def produce_log(kafka: Kafka, log_dir: Path, configs: dict[str, str]) -> dict[str, list[Record]]:
    """A stopped broker's log dir with the test topic and every step of :func:`steps`; what it served."""
    produced = kafka.single(log_dir, NO_CLEANER)
    kafka.clients.create_topic(produced.bootstrap, TOPIC, configs)
    kafka.clients.produce(produced.bootstrap, TOPIC, steps(), producers=producers())
    original = read_all(kafka.clients, produced.bootstrap)
    produced.stop()
    assert len(list((log_dir / f"{TOPIC}-0").glob("*.log"))) >= 5
    return original


def test_kcompact_clean_serves_what_the_brokers_own_cleaner_serves(kafka: Kafka, tmp_path: Path) -> None:
    original = produce_log(kafka, tmp_path / "produced", TOPIC_CONFIGS)
    cleans = clean_both(kafka, tmp_path / "produced", tmp_path, DELETE_RETENTION_MS)
    for isolation in READS:
        assert len(cleans.from_a[isolation]) < len(original[isolation])  # something was cleaned
    # and what compaction promises: every key's latest committed value (or its tombstone) survives
    assert latest_by_key(cleans.from_a["read_committed"]) == latest_by_key(original["read_committed"])
    report_recompressed(cleans.recompressed)


def add_dirty_segments(kafka: Kafka, log_dir: Path, generation: int) -> dict[str, list[Record]]:
    """New records (so that a broker's cleaner runs again) on a stopped log dir; what it served after them."""
    broker = kafka.on(log_dir, NO_CLEANER)
    kafka.clients.produce(broker.bootstrap, TOPIC, steps(generation), producers=producers())
    served = read_all(kafka.clients, broker.bootstrap)
    broker.stop()
    return served


def control_records(partition_dir: Path) -> tuple[int, int]:
    """How many transaction markers the log holds, and how many of them carry a delete horizon."""
    markers = [b for b in batches(partition_dir) if b["is_control"]]
    return sum(b["count"] for b in markers), sum(b["count"] for b in markers if b["delete_horizon_ms"])


def test_later_rounds_past_the_delete_horizon_remove_tombstones_and_markers_as_the_broker_does(
        kafka: Kafka, tmp_path: Path) -> None:
    short = 200  # delete.retention.ms: each round comes well after the horizon the one before stamped
    log_dir = tmp_path / "produced"
    produce_log(kafka, log_dir, {**TOPIC_CONFIGS, "delete.retention.ms": str(short)})
    first = kafka.on(log_dir, EAGER_CLEANER)  # round 1, by the broker: stamps the tombstones
    wait_cleaner_checkpoint(log_dir, TOPIC, active_base_offset(log_dir / f"{TOPIC}-0"))
    first.stop()
    recompressed = []
    for generation in (1, 2):  # rounds 2 and 3, each by a broker and by kcompact on copies of the same log
        before = add_dirty_segments(kafka, log_dir, generation)["read_uncommitted"]
        markers_before = control_records(log_dir / f"{TOPIC}-0")
        time.sleep(short / 1000)
        cleans = clean_both(kafka, log_dir, tmp_path / f"round-{generation + 1}", short)
        recompressed += cleans.recompressed
        after = cleans.from_a["read_uncommitted"]
        assert sum(r.value is None for r in after) < sum(r.value is None for r in before)  # tombstones go
        markers_after = control_records(cleans.copy_b / f"{TOPIC}-0")
        if generation == 1:
            # Kafka stamps the marker of a transaction with no records left one round after those records
            # went (round 1 removes the aborted records, round 2 stamps their markers): kcompact alike
            assert markers_before[1] == 0 < markers_after[1]
        else:
            assert markers_after[0] < markers_before[0]  # round 3: stamped markers past their horizon go
        log_dir = cleans.copy_b  # the next round starts from the broker's own result
    report_recompressed(recompressed)


def test_compact_delete_retention_after_the_round_as_the_brokers_cleaner_thread_does(
        kafka: Kafka, tmp_path: Path) -> None:
    """cleanup.policy=compact,delete: the broker's cleaner thread cleans, then deletes the segments past
    retention.ms (``LogCleaner.CleanerThread`` with ``LogCleanerManager.deletableLogs``); kcompact clean the same."""
    day = 86_400_000
    now = int(time.time() * 1000)
    log_dir = tmp_path / "produced"
    produced = kafka.single(log_dir, NO_CLEANER)
    kafka.clients.create_topic(produced.bootstrap, TOPIC, {**TOPIC_CONFIGS, "cleanup.policy": "compact,delete",
                                                           "retention.ms": str(day)})
    sends = []
    for i in range(40):  # the first half two days old (past retention.ms), keys of their own: their segments
        old = i < 20     # stay full when cleaned, so whole groups of them pass retention.ms; the rest recent
        stamp = now - 2 * day + i if old else now - 60_000 + i
        sends.append({"send": [{"key": f"old-{i}-{j}" if old else f"k{(i * 5 + j) % 23}",
                                "value": None if j == 4 and i % 3 == 0 else f"value {i}.{j} " * (3 + j),
                                "timestamp": stamp} for j in range(5)]})
    kafka.clients.produce(produced.bootstrap, TOPIC, sends, {"compression.type": "gzip"})
    produced.stop()
    first_segment = min(p.stem for p in (log_dir / f"{TOPIC}-0").glob("*.log"))

    def retention_ran(partition_dir: Path) -> bool:
        return min(p.stem for p in partition_dir.glob("*.log")) != first_segment

    cleans = clean_both(kafka, log_dir, tmp_path, DELETE_RETENTION_MS, settled=retention_ran)
    assert retention_ran(cleans.copy_a / f"{TOPIC}-0")
    assert all(r.timestamp >= now - day for r in cleans.from_a["read_uncommitted"])
    report_recompressed(cleans.recompressed)
