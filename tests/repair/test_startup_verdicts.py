"""What a starting broker does with a segment's indexes decides the verdict of ``repair`` and of ``inspect dump
--verify-index``, and the two agree (``LogLoader.loadSegmentFiles``, ``LogSegment.sanityCheck``,
``LogLoader.recoverLog``, ``LogSegment.recover``; tests/kafka/test_startup_verdicts.py has Kafka do it on the very
files). A segment the broker recovers as it starts gets indexes rebuilt from its log whatever they held: a
preallocated one is a note whatever its last entry, a missing one is settled by Kafka; a segment the broker
trusts keeps what it has: zero slots are read as entries, a missing ``.timeindex`` stays empty for good."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.records.batch import iter_batches
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.offset_index import OffsetIndexEntry, encode_offset_index
from kcompact.segment.partition import open_partition
from kcompact.segment.time_index import TimeIndexEntry, encode_time_index
from kcompact.segment.txn_index import AbortedTxn, encode_txn_index
from tests.conftest import copy_tree_writable, real_fixture
from tests.partition_builder import PartitionBuilder

SETTLED = "settled-by-kafka"
ZERO_SLOTS = 300  # a preallocated file is 10 MiB of them; any count ending the file is the same case


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def dry_run(path: Path) -> tuple[int, dict[str, Any]]:
    code, out, _err = run("repair", "--dry-run", "--json", path)
    return code, json.loads(out)


def verify_index(path: Path) -> tuple[int, list[dict[str, Any]]]:
    """``inspect dump --verify-index --json``: exit code, the problem items, then the warnings (on stderr)."""
    code, out, err = run("inspect", "dump", "--verify-index", "--json", path)
    problems = [i for i in map(json.loads, out.splitlines()) if i["type"] == "problem"]
    warned = [line.removeprefix("kcompact: warning: ").split(": ", 1) for line in err.splitlines()
              if line.startswith("kcompact: warning: ")]
    return code, problems + [{"type": "warning", "file": f, "message": m} for f, m in warned]


def index_findings(report: dict[str, Any]) -> set[tuple[str, str, str, bool]]:
    return {(Path(f["path"]).name, f["kind"], f["impact"], f["action"] is not None)
            for f in report["findings"] if f["kind"].startswith("index")}


def shut_down_cleanly(part: Path) -> None:
    (part.parent / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":1}')


def crash_active_indexes(part: Path, indexed: int) -> Path:
    """The active segment's indexes as a crashed broker leaves them: entries for its first ``indexed`` batches
    (a live broker indexes every index.interval.bytes, so the last batches often have none), then zero slots."""
    log = open_partition(part).segments[-1].log_path
    base = int(log.stem)
    rows = list(iter_batches(log.read_bytes()))[:indexed]
    offsets = [OffsetIndexEntry(b.last_offset, b.position) for b in rows]
    times = [TimeIndexEntry(max(b.max_timestamp for b in rows[: i + 1]), b.last_offset) for i, b in enumerate(rows)]
    log.with_suffix(".index").write_bytes(encode_offset_index(offsets, base) + bytes(8 * ZERO_SLOTS))
    log.with_suffix(".timeindex").write_bytes(encode_time_index(times, base) + bytes(12 * ZERO_SLOTS))
    return log


@pytest.fixture
def part(tmp_path: Path) -> Path:
    """Three closed segments and an active one of four batches; no recovery point, no clean shutdown marker."""
    b = PartitionBuilder("orders", 0)
    for s in range(3):
        for i in range(8):
            b.batch([(f"k{(s * 7 + i * 3 + j) % 40}".encode(), f"v{s}-{i}-{j}".encode() * 4) for j in range(4)])
        b.roll()
    for i in range(4):
        b.batch([(f"active{i}".encode(), b"1")])
    return b.write(tmp_path / "logdir")


@pytest.mark.parametrize("indexed", [0, 1, 4])
def test_a_crashed_brokers_active_indexes_are_settled_whatever_their_last_entry(part: Path, indexed: int) -> None:
    log = crash_active_indexes(part, indexed)
    code, report = dry_run(part)
    assert code == 0 and report["plan"] == []
    assert index_findings(report) == {(log.with_suffix(".index").name, "index-preallocated", SETTLED, False),
                                      (log.with_suffix(".timeindex").name, "index-preallocated", SETTLED, False)}
    code, noted = verify_index(part)
    assert code == 0 and {i["type"] for i in noted} == {"warning"}
    assert all("rebuilds this index from the log (LogSegment.recover)" in i["message"] for i in noted)
    assert verify_index(log.with_suffix(".timeindex"))[0] == 0  # one file alone: the same verdict

    shut_down_cleanly(part)  # now the broker reads every zero slot as an entry: both say so
    code, report = dry_run(part)
    assert code == 2 and {(k, i) for _n, k, i, _a in index_findings(report)} == {("index-corrupt", "broker")}
    code, found = verify_index(part)
    assert code == 2 and {Path(i["file"]).suffix for i in found if i["type"] == "problem"} == {".index", ".timeindex"}


def test_a_segment_without_index_and_timeindex_is_settled_even_after_a_clean_shutdown(part: Path) -> None:
    shut_down_cleanly(part)
    log = open_partition(part).segments[0].log_path
    log.with_suffix(".index").unlink()
    log.with_suffix(".timeindex").unlink()
    code, report = dry_run(part)
    assert code == 0  # LogSegment.sanityCheck: NoSuchFileException, the loader recovers the segment
    assert index_findings(report) == {(log.with_suffix(".index").name, "index-missing", SETTLED, True),
                                      (log.with_suffix(".timeindex").name, "index-missing", SETTLED, True)}
    assert all("NoSuchFileException" in f["broker_effect"] for f in report["findings"])
    code, found = verify_index(part)
    assert code == 0 and [(i["type"], i["message"]) for i in found] == [
        ("warning", "no .index: a broker recovers this segment at startup and rebuilds its indexes")]
    code, out, _err = run("repair", "--dry-run", part)
    assert code == 0 and out.startswith(f"{part}: 0 problems and 2 findings Kafka settles itself found;")
    assert "plan (dry run, nothing written; a broker settles each of these itself):" in out
    code, out, _err = run("repair", "--dry-run", part.parent)
    assert code == 0 and "│ orders-0  │ Kafka settles │" in out


@pytest.mark.parametrize(("state", "code", "impact"), [
    ("crashed", 0, SETTLED),  # no marker, no recovery point: recovered, the index rebuilt
    ("below the recovery point", 2, "broker"),  # created empty, never rebuilt
    ("clean shutdown", 2, "broker"),
])
def test_a_segment_without_its_timeindex_is_settled_only_where_the_broker_recovers_it(
    part: Path, state: str, code: int, impact: str
) -> None:
    segments = open_partition(part).segments
    log = segments[0].log_path
    log.with_suffix(".timeindex").unlink()
    if state == "clean shutdown":
        shut_down_cleanly(part)
    elif state != "crashed":
        write_offset_checkpoint(part.parent / "recovery-point-offset-checkpoint",
                                {("orders", 0): segments[-1].base_offset})
    found_code, report = dry_run(part)
    assert found_code == code
    assert index_findings(report) == {(log.with_suffix(".timeindex").name, "index-missing", impact, True)}
    if impact == "broker":
        assert "largest timestamp becomes the .log's mtime" in report["findings"][0]["broker_effect"]
    verified_code, found = verify_index(part)
    assert verified_code == code  # inspect dump --verify-index agrees
    assert [i["type"] for i in found] == ["problem" if code else "warning"]


def test_every_real_log_dir_kafka_loads_is_no_problem_for_a_dry_run(tmp_path: Path) -> None:
    for name in ("bitnami2024-rolled-logdir", "confluent512-lz4-logdir", "kraft37-cleaned-logdir",
                 "kraft37-consumer-offsets"):
        log_dir = copy_tree_writable(real_fixture(name), tmp_path / name)
        code, out, _err = run("repair", "--dry-run", "--json", log_dir)
        report = json.loads(out)
        assert code == 0 and report["ok"], [r for r in report["rows"] if r["status"] not in ("sound", "Kafka settles")]
        assert {r["status"] for r in report["rows"]} <= {"sound", "Kafka settles", "reported only"}


def test_a_txnindex_the_loader_refuses_sends_its_segment_to_recovery(part: Path) -> None:
    shut_down_cleanly(part)
    log = open_partition(part).segments[1].log_path
    log.with_suffix(".timeindex").write_bytes(b"junk")  # a broker that trusts it: damage
    code, report = dry_run(part)
    assert code == 2
    assert index_findings(report) == {(log.with_suffix(".timeindex").name, "index-corrupt", "broker", True)}
    # an entry ending below the segment's base: TransactionIndex.sanityCheck throws CorruptIndexException and
    # LogLoader.loadSegmentFiles recovers the segment, rebuilding all three indexes
    log.with_suffix(".txnindex").write_bytes(encode_txn_index([AbortedTxn(5, 0, 0, 0)]))
    code, report = dry_run(part)
    assert code == 0
    assert {(Path(f["path"]).suffix, f["impact"]) for f in report["findings"]} == {
        (".timeindex", SETTLED), (".txnindex", SETTLED)}
    assert all("TransactionIndex.sanityCheck" in f["broker_effect"] for f in report["findings"])
    code, found = verify_index(part)
    assert code == 0 and found and {i["type"] for i in found} == {"warning"}
