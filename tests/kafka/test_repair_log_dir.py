"""Repair of a stopped broker's damaged log dir, through a real broker: a flipped byte mid-segment, a torn
tail, a deleted and a corrupt index. ``kcompact repair LOG_DIR``; the broker starts on the result and a consumer
reads every offset the repair kept, none it gave up. ``repair --undo`` puts the damage back byte for byte, and a
broker on it behaves as it did on the damage before the repair."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.kafka.clients import ClientError
from tests.kafka.conftest import Kafka
from tests.kafka.scenario import (
    active_base_offset,
    batches,
    copy_log_dir,
    digests,
    kcompact,
    segment_files,
    wait_cleaner_checkpoint,
)
from tests.kafka.test_compaction_promise import EAGER_CLEANER, READS, TOPIC_CONFIGS, produce_log
from tests.kafka.test_compaction_promise import TOPIC as PROMISE

pytestmark = pytest.mark.broker

TOPIC = "damaged"
CODECS = ("none", "gzip", "zstd", "lz4", "snappy")


def produce(kafka: Kafka, bootstrap: str) -> dict[int, list[int]]:
    """Per partition 30 batches of 4 records, the codecs in turn; the offsets written."""
    written: dict[int, list[int]] = {}
    for partition in range(3):
        steps = [{"partition": partition, "send": [
            {"key": f"p{partition}-k{i * 4 + j}", "value": os.urandom(24).hex()} for j in range(4)]}
            for i in range(30)]
        offsets = []
        for codec in CODECS:
            offsets += kafka.clients.produce(bootstrap, TOPIC, steps[: 6], {"compression.type": codec})
            steps = steps[6:]
        written[partition] = offsets
    return written


def flip_byte_mid_segment(partition_dir: Path) -> None:
    """One byte of a batch in the middle of the second segment (its records: the CRC fails)."""
    segment = sorted(partition_dir.glob("*.log"))[1]
    rows = [b for b in batches(partition_dir) if b["file"].endswith(segment.name)]
    victim = rows[len(rows) // 2]
    with open(segment, "r+b") as f:
        f.seek(victim["position"] + 61 + 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes((byte[0] ^ 0x5A,)))


def tear_tail(partition_dir: Path) -> None:
    """The active segment ends half-way through its last batch (a crash mid-append)."""
    segment = max(partition_dir.glob("*.log"))
    last = [b for b in batches(partition_dir) if b["file"].endswith(segment.name)][-1]
    os.truncate(segment, last["position"] + last["size_in_bytes"] // 2)


def break_indexes(partition_dir: Path) -> None:
    """The first segment's offset index deleted, the second's time index overwritten with garbage."""
    indexes = sorted(partition_dir.glob("*.index"))
    indexes[0].unlink()
    timeindex = sorted(partition_dir.glob("*.timeindex"))[1]
    timeindex.write_bytes(os.urandom(max(timeindex.stat().st_size, 48)))


def repair_report(log_dir: Path, backup: Path) -> dict[str, Any]:
    done = kcompact("repair", log_dir, "--backup-dir", backup, "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def given_up(report: dict[str, Any], partition: int) -> list[tuple[int, int | None]]:
    """The offset ranges the repair gave up in a partition (an open end: everything from there on)."""
    (row,) = [p for p in report["partitions"] if p["partition_dir"].endswith(f"/{TOPIC}-{partition}")]
    return [(region["first_offset"], region["last_offset"]) for region in row["given_up"]]


def served(kafka: Kafka, log_dir: Path) -> dict[int, tuple[str, list[int]]]:
    """Starts a broker on ``log_dir``; per partition the offsets a consumer reads, or that it failed."""
    broker = kafka.on(log_dir)
    outcome: dict[int, tuple[str, list[int]]] = {}
    for partition in range(3):
        try:
            read = kafka.clients.consume(broker.bootstrap, TOPIC, "read_uncommitted", (partition,), 30_000)
            outcome[partition] = ("read", [r.offset for r in read])
        except ClientError as err:  # which exceptions, not their text
            outcome[partition] = ("failed: " + " ".join(sorted(set(re.findall(r"\w+Exception", str(err))))), [])
    broker.stop()
    return outcome


def test_repair_of_a_damaged_log_dir_serves_what_it_kept_and_undo_restores_the_damage(
        kafka: Kafka, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    broker = kafka.single(log_dir, {"log.cleaner.enable": "false"})
    kafka.clients.create_topic(broker.bootstrap, TOPIC, {"internal.segment.bytes": "2048"}, partitions=3)
    written = produce(kafka, broker.bootstrap)
    broker.stop()

    flip_byte_mid_segment(log_dir / f"{TOPIC}-0")
    tear_tail(log_dir / f"{TOPIC}-1")
    break_indexes(log_dir / f"{TOPIC}-2")
    damaged = digests(log_dir)
    on_damage = served(kafka, copy_log_dir(log_dir, tmp_path / "damaged-copy"))

    # Kafka itself (the clean shutdown marker spares the segments its recovery): the flipped byte stops the
    # consumer, the torn tail and the broken indexes do not
    assert on_damage[0][0].startswith("failed: ")  # "Received exception when fetching the next record"
    assert on_damage[1][0] == on_damage[2][0] == "read"
    report = repair_report(log_dir, tmp_path / "backup")
    assert [row["status"] for row in report["rows"] if row["partition"].startswith(TOPIC)] == ["repaired"] * 3
    repaired = digests(log_dir)
    on_repair = served(kafka, copy_log_dir(log_dir, tmp_path / "repaired-copy"))
    for partition in range(3):
        lost = given_up(report, partition)
        kept = [offset for offset in written[partition]
                if not any(first <= offset and (last is None or offset <= last) for first, last in lost)]
        assert on_repair[partition] == ("read", kept), partition  # every offset kept, none given up
    assert given_up(report, 0) and given_up(report, 1) and not given_up(report, 2)

    assert digests(log_dir) == repaired  # the broker ran on a copy: the repair's own output, for its undo
    for partition in range(3):
        done = kcompact("repair", "--undo", tmp_path / "backup" / f"{TOPIC}-{partition}")
        assert done.returncode == 0, done.stdout + done.stderr
    # byte for byte; but the empty .lock a broker deletes on shutdown stays: kcompact's log-dir guard (a shared
    # lock on it, so that no broker starts meanwhile) creates it, and a lock file is not removed after use
    assert {name: d for name, d in digests(log_dir).items() if name != ".lock"} == damaged
    assert served(kafka, log_dir) == on_damage


def test_repair_settles_an_interrupted_swap_as_kafkas_own_loader_does(kafka: Kafka, tmp_path: Path) -> None:
    """A clean killed mid-swap (``LocalLog.replaceSegments``): the first group's cleaned segment renamed to
    ``.swap`` (log and indexes), the segments it replaces still in place, the checkpoint not yet advanced.
    A broker started on it finishes the swap in its loader; ``kcompact repair`` finishes it the same way."""
    source = tmp_path / "produced"
    produce_log(kafka, source, TOPIC_CONFIGS)
    cleaned = copy_log_dir(source, tmp_path / "cleaned")
    broker = kafka.on(cleaned, EAGER_CLEANER)
    wait_cleaner_checkpoint(cleaned, PROMISE, active_base_offset(source / f"{PROMISE}-0"))
    broker.stop()

    interrupted = copy_log_dir(source, tmp_path / "interrupted")
    partition = f"{PROMISE}-0"
    group_base = min(p.stem for p in (cleaned / partition).glob("*.log"))
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        made = cleaned / partition / f"{group_base}{suffix}"
        if made.exists():
            shutil.copy2(made, interrupted / partition / f"{group_base}{suffix}.swap")
    assert (interrupted / partition / f"{group_base}.log").exists()  # the old segment is still there

    by_kafka = copy_log_dir(interrupted, tmp_path / "by-kafka")
    broker = kafka.on(by_kafka)
    kafka_reads = {isolation: kafka.clients.consume(broker.bootstrap, PROMISE, isolation) for isolation in READS}
    broker.stop()

    done = kcompact("repair", interrupted, "--backup-dir", tmp_path / "backup", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not list((interrupted / partition).glob("*.swap"))
    assert segment_files(interrupted / partition) == segment_files(by_kafka / partition)
    swapped_in = (cleaned / partition / f"{group_base}.log").read_bytes()
    assert (interrupted / partition / f"{group_base}.log").read_bytes() == swapped_in  # finished, not undone
    broker = kafka.on(interrupted)
    assert {isolation: kafka.clients.consume(broker.bootstrap, PROMISE, isolation)
            for isolation in READS} == kafka_reads
    broker.stop()
