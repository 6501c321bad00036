"""What kcompact says a broker does on start with a segment's indexes, checked by Kafka 4.1 starting on the very
files judged (``LogLoader.loadSegmentFiles``, ``LogLoader.recoverLog``, ``LogSegment.sanityCheck``/``recover``).

One broker, one topic compacted and written in transactions, killed (``kill -9``) mid-produce: every partition's
active segment keeps its preallocated ``.index`` and ``.timeindex``, never trimmed (``__transaction_state-0`` and
``__cluster_metadata-0`` too). ``kcompact repair --dry-run`` and ``inspect dump --verify-index`` call them settled
by Kafka (exit 0) whatever their last entry, and a broker started on a copy loads every partition without a WARN
or ERROR about them. In the same copy three partitions of another topic lose index files: a closed segment both
its ``.index`` and ``.timeindex`` (recovered, both rebuilt), the active segment its ``.timeindex`` (recovered after
the crash: rebuilt), a closed segment below the recovery point its ``.timeindex`` (created empty, never rebuilt:
the one problem repair reports); and a closed segment below the recovery point gets a ``.txnindex`` the loader
refuses and a time index of garbage (recovered: both rebuilt). One broker start on the copy serves every case;
no record is lost.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kcompact.segment.checkpoint import read_offset_checkpoint
from kcompact.segment.fixed_index import ends_in_zero_slots
from kcompact.segment.time_index import TIME_INDEX_ENTRY_SIZE, decode_time_index
from kcompact.segment.txn_index import AbortedTxn, encode_txn_index
from tests.kafka.broker import KafkaCluster
from tests.kafka.conftest import Kafka
from tests.kafka.scenario import batches, copy_log_dir, kcompact

pytestmark = pytest.mark.broker

LEDGER = "ledger"  # compacted, written in transactions, the broker killed while it is written
PLAIN = "plain"  # three partitions, one per case of missing indexes
BROKER = {"log.cleaner.enable": "false", "log.flush.offset.checkpoint.interval.ms": "300"}
KILLED = ("__cluster_metadata-0", "__transaction_state-0", f"{LEDGER}-0")
ACKED_BEFORE_KILL = 45
SETTLED = "settled-by-kafka"


def transactions(count: int) -> list[dict[str, Any]]:
    """``count`` committed transactions of three records each, keys repeating (a compacted topic's)."""
    steps: list[dict[str, Any]] = []
    for t in range(count):
        sent = [{"key": f"k{(3 * t + j) % 11}", "value": f"value {3 * t + j} " * 12} for j in range(3)]
        steps += [{"begin": True}, {"send": sent}, {"commit": True}]
    return steps


def plain_steps() -> list[dict[str, Any]]:
    """Per partition of PLAIN 14 batches of two records: several 2 KiB segments each."""
    return [{"partition": p, "send": [{"key": f"p{p}-{i}", "value": f"{p}:{i} " * 40} for i in (2 * b, 2 * b + 1)]}
            for b in range(14) for p in range(3)]


def kill_mid_produce(kafka: Kafka, broker: KafkaCluster) -> list[int]:
    """Starts the transactional producer, kills the broker once some records are acknowledged, then the
    producer; the offsets acknowledged."""
    producer = kafka.clients.produce_in_background(broker.bootstrap, LEDGER, transactions(500),
                                                   {"transactional.id": "ledger-writer"})
    acked: list[int] = []
    assert producer.stdout is not None
    for line in producer.stdout:
        if '"offset"' in line:
            acked.append(json.loads(line)["offset"])
        if len(acked) >= ACKED_BEFORE_KILL:
            break
    broker.kill()
    producer.kill()
    producer.wait()
    assert len(acked) >= ACKED_BEFORE_KILL, "the producer ended before the broker was killed"
    return acked


def dry_run(path: Path) -> tuple[int, dict[str, Any]]:
    done = kcompact("repair", "--dry-run", "--json", path)
    assert done.returncode in (0, 2), done.stdout[-3000:] + done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, report


def verdicts(report: dict[str, Any], *names: str) -> set[tuple[str, str, str, bool]]:
    """``(file, kind, impact, whether repair acts)`` of the findings about the named files."""
    return {(Path(f["path"]).name, f["kind"], f["impact"], f["action"] is not None)
            for f in report["findings"] if Path(f["path"]).name in names}


def warnings_about(server_log: Path, names: tuple[str, ...]) -> list[str]:
    """The lines of a broker's log that warn about one of ``names`` or say it is corrupt."""
    return [line for line in server_log.read_text(errors="replace").splitlines()
            if any(name in line for name in names)
            and (" WARN " in line or " ERROR " in line or "Corrupt" in line or "Found invalid" in line)]


def time_index_entries(path: Path) -> list[tuple[int, int]]:
    return [(e.timestamp, e.offset) for e in decode_time_index(path.read_bytes(), int(path.stem))]


def test_kafka_settles_what_repair_calls_settled_and_loads_every_partition(kafka: Kafka, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    broker = kafka.single(log_dir, BROKER)
    kafka.clients.create_topic(broker.bootstrap, LEDGER, {"cleanup.policy": "compact",
                                                          "internal.segment.bytes": "4096"})
    kafka.clients.create_topic(broker.bootstrap, PLAIN, {"internal.segment.bytes": "2048"}, partitions=3)
    written = kafka.clients.produce(broker.bootstrap, PLAIN, plain_steps())
    acked = kill_mid_produce(kafka, broker)  # meanwhile the recovery points of PLAIN's rolled segments are saved

    for name in KILLED:  # the state judged: the active segment's indexes preallocated, never trimmed
        active = max((log_dir / name).glob("*.log"))
        assert ends_in_zero_slots(active.with_suffix(".timeindex"), TIME_INDEX_ENTRY_SIZE), name
    code, report = dry_run(log_dir)
    assert code == 0, [r for r in report["rows"] if r["status"] != "sound"]
    by_partition = {Path(p["partition_dir"]).name: p for p in report["partitions"]}
    for name in KILLED:
        found = {(f["kind"], f["impact"], f["action"]) for f in by_partition[name]["findings"]}
        assert ("index-preallocated", SETTLED, None) in found and all(i == SETTLED for _, i, _ in found), found
        done = kcompact("inspect", "dump", "--verify-index", log_dir / name)
        assert done.returncode == 0, done.stderr[-3000:]

    judged = copy_log_dir(log_dir, tmp_path / "judged")
    segments = {p: sorted((judged / f"{PLAIN}-{p}").glob("*.log")) for p in range(3)}
    points = read_offset_checkpoint(judged / "recovery-point-offset-checkpoint")
    for p in (0, 2):  # the broker will trust the first two segments: below the recovery point
        assert len(segments[p]) >= 3 and points.get((PLAIN, p), 0) >= int(segments[p][2].stem), (points, p)
    both, active, below = segments[0][0], segments[1][-1], segments[2][0]
    refused = segments[0][1]  # a .txnindex LogSegment.sanityCheck refuses, and a time index of garbage
    both.with_suffix(".index").unlink()
    both.with_suffix(".timeindex").unlink()
    active.with_suffix(".timeindex").unlink()
    below.with_suffix(".timeindex").unlink()
    refused.with_suffix(".txnindex").write_bytes(encode_txn_index([AbortedTxn(9, 0, 0, 0)]))  # below its base
    refused.with_suffix(".timeindex").write_bytes(b"\x5a" * 30)
    ends = {name: batches(judged / name)[-1]["last_offset"] + 1 for name in (f"{LEDGER}-0", f"{PLAIN}-0")}

    code, report = dry_run(judged / f"{PLAIN}-0")
    assert code == 0
    assert verdicts(report, both.with_suffix(".index").name, both.with_suffix(".timeindex").name) == {
        (both.with_suffix(".index").name, "index-missing", SETTLED, True),
        (both.with_suffix(".timeindex").name, "index-missing", SETTLED, True)}
    assert all("logs an ERROR saying so" in f["broker_effect"] for f in report["findings"]
               if Path(f["path"]).stem == both.stem)
    assert verdicts(report, refused.with_suffix(".timeindex").name, refused.with_suffix(".txnindex").name) == {
        (refused.with_suffix(".timeindex").name, "index-corrupt", SETTLED, True),
        (refused.with_suffix(".txnindex").name, "txn-index", SETTLED, True)}
    code, report = dry_run(judged / f"{PLAIN}-1")
    assert code == 0
    assert verdicts(report, active.with_suffix(".timeindex").name) == {
        (active.with_suffix(".timeindex").name, "index-missing", SETTLED, True)}
    code, report = dry_run(judged / f"{PLAIN}-2")
    assert code == 2
    assert verdicts(report, below.with_suffix(".timeindex").name) == {
        (below.with_suffix(".timeindex").name, "index-missing", "broker", True)}

    broker = kafka.on(judged, BROKER)
    server_log = broker.nodes[0].server_log
    ledger_end = kafka.clients.end_positions(broker.bootstrap, LEDGER, "read_uncommitted")[0]
    read = kafka.clients.consume(broker.bootstrap, PLAIN, "read_uncommitted", (0, 1, 2))
    broker.stop()

    assert ledger_end == ends[f"{LEDGER}-0"] and max(acked) < ledger_end  # loaded whole, nothing trimmed
    sent_to = [step["partition"] for step in plain_steps() for _ in step["send"]]
    for p in range(3):  # every record of the three partitions
        assert sorted(r.offset for r in read if r.partition == p) == sorted(
            o for o, to in zip(written, sent_to, strict=True) if to == p)
    assert warnings_about(server_log, KILLED) == []
    # the lines about PLAIN: the loader's own words for the missing .index below the recovery point, which
    # repair's finding quotes ("logs an ERROR saying so"), and for the .txnindex it refuses ("logging a WARN")
    missing, corrupt = warnings_about(server_log, tuple(f"{PLAIN}-{p}" for p in range(3)))
    assert " ERROR " in missing and "Could not find offset index file" in missing and str(both) in missing
    assert " WARN " in corrupt and "Found a corrupted index file" in corrupt and str(refused) in corrupt
    # rebuilt where repair said Kafka settles it: a time index ending at the segment's largest timestamp
    for segment in (both, active, refused):
        rows = [b for b in batches(segment.parent) if b["file"].endswith(segment.name)]
        assert time_index_entries(segment.with_suffix(".timeindex"))[-1][0] == max(b["max_timestamp"] for b in rows)
    assert both.with_suffix(".index").exists()
    # created empty and left so where repair calls it a problem: Kafka takes the .log's mtime for the segment
    assert below.with_suffix(".timeindex").stat().st_size == 0
