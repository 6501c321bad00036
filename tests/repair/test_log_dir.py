"""``kcompact repair LOG_DIR``: every partition verified, those that need it repaired with one backup each,
one summary table (text and JSON), exactly what was given up, log-dir causes said once, exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.records.batch import iter_batches
from kcompact.records.batch_encoding import encode_records_batch
from kcompact.records.batch_header import RecordBatch
from kcompact.segment.names import segment_file_name
from tests.builders import PartitionBuilder, read_all_records
from tests.cli.test_dump_cli import broker_running
from tests.conftest import copy_tree_writable, real_fixture
from tests.repair.support import batch_positions, flip_byte, partition_digest, tree_digest
from tests.unprivileged import run_kcompact_batch

LOG0 = "00000000000000000000.log"
RECORDS_PER_BATCH = 4
BATCHES = 10


def run(*args: str | Path) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "200", "KCOMPACT_SERVER_PROPERTIES": None})
    return runner.invoke(cli, ["repair", *map(str, args)])


def partition(log_dir: Path, topic: str, number: int) -> Path:
    """A closed segment of 10 batches of 4 records (batch i holds offsets 4i..4i+3), then an active one."""
    b = PartitionBuilder(topic, number)
    for i in range(BATCHES):
        b.batch([(f"k{j}".encode(), f"{topic}-{i}-{j}".encode() * 3) for j in range(RECORDS_PER_BATCH)])
    b.roll().batch([(b"active", b"1")])
    return b.write(log_dir)


def damaged_log_dir(tmp_path: Path) -> tuple[Path, dict[str, dict[str, Any]]]:
    """Four partitions: a CRC failure, a CRC-valid batch whose records do not parse, zero padding after
    the closed segment's last batch, and a sound one. Returns what each gives up, worked out here."""
    log_dir = tmp_path / "logs"
    crc, records, zeros, _sound = (partition(log_dir, "orders", 0), partition(log_dir, "orders", 1),
                                   partition(log_dir, "payments", 0), partition(log_dir, "payments", 1))
    expected: dict[str, dict[str, Any]] = {}

    position, size = batch_positions(crc / LOG0)[3]
    flip_byte(crc / LOG0, position + size - 5)  # in the records: the CRC fails
    expected["orders-0"] = {"segment": str(crc / LOG0), "position": position, "size_in_bytes": size,
                            "kind": "corrupt-batch", "first_offset": 12, "last_offset": 15, "records": None}

    log = records / LOG0
    victim = list(iter_batches(log.read_bytes()))[5]
    assert isinstance(victim, RecordBatch)
    bad = encode_records_batch(bytes(victim.payload), count=victim.records_count + 2,
                               base_offset=victim.base_offset, last_offset_delta=victim.last_offset_delta,
                               base_timestamp=victim.base_timestamp, max_timestamp=victim.max_timestamp)
    data = log.read_bytes()
    log.write_bytes(data[:victim.position] + bad + data[victim.position + len(bad):])
    expected["orders-1"] = {"segment": str(log), "position": victim.position, "size_in_bytes": len(bad),
                            "kind": "corrupt-records", "first_offset": 20, "last_offset": 23,
                            "records": RECORDS_PER_BATCH + 2}

    log = zeros / LOG0
    size = log.stat().st_size
    log.write_bytes(log.read_bytes() + bytes(300))
    expected["payments-0"] = {"segment": str(log), "position": size, "size_in_bytes": 300,
                              "kind": "zero-padding", "first_offset": None, "last_offset": None, "records": 0}
    return log_dir, expected


def given_up_fields(entry: dict[str, object]) -> dict[str, object]:
    return {key: entry[key] for key in ("segment", "position", "size_in_bytes", "kind", "first_offset",
                                        "last_offset", "records")}


def test_dry_run_reports_every_partitions_findings_and_what_it_would_give_up(tmp_path: Path) -> None:
    log_dir, expected = damaged_log_dir(tmp_path)
    (log_dir / "lost+found").mkdir()  # every partition's check finds it: said once, for the log dir
    before = tree_digest(log_dir)
    result = run(log_dir, "--dry-run", "--json")
    assert result.exit_code == 2, result.output
    report = json.loads(result.stdout)
    assert [(f["kind"], f["path"]) for f in report["log_dir_findings"]] == [("stray", str(log_dir / "lost+found"))]
    assert [(r["partition"], r["status"]) for r in report["rows"]] == [
        ("orders-0", "would repair"), ("orders-1", "would repair"), ("payments-0", "would repair"),
        ("payments-1", "sound")]
    by_name = {Path(p["partition_dir"]).name: p for p in report["partitions"]}
    for name, want in expected.items():
        (entry,) = by_name[name]["given_up"]
        assert given_up_fields(entry) == want
        assert [f["kind"] for f in by_name[name]["findings"]] == [want["kind"]]  # no stray among them
    assert by_name["payments-1"]["findings"] == [] and by_name["payments-1"]["given_up"] == []
    assert tree_digest(log_dir) == before


def test_repair_gives_up_exactly_the_reported_offsets_with_one_backup_each(tmp_path: Path) -> None:
    log_dir, expected = damaged_log_dir(tmp_path)
    written = list(range(BATCHES * RECORDS_PER_BATCH + 1))  # the closed segment's, then the active one's
    sound_before = partition_digest(log_dir / "payments-1")
    backups = tmp_path / "backups"
    result = run(log_dir, "--jobs", "2", "--backup-dir", backups)
    assert result.exit_code == 0, result.output
    text = result.stdout
    crc = expected["orders-0"]
    assert (f"  - {crc['segment']} bytes {crc['position']}..{crc['position'] + crc['size_in_bytes']} "
            f"({crc['size_in_bytes']} bytes, corrupt-batch): offsets 12..15, records unknown (the bytes "
            "do not decode)") in text
    assert "(6 records" not in text and ", 6 records" in text  # the header's count of orders-1's batch
    assert "no offsets, 0 records" in text  # the zero padding
    lines = [line.split("│") for line in text.splitlines() if line.startswith("│")]
    assert [(cells[1].strip(), cells[2].strip()) for cells in lines] == [
        ("orders-0", "repaired"), ("orders-1", "repaired"), ("payments-0", "repaired"), ("payments-1", "sound")]
    assert text.splitlines()[-1] == "4 partitions: 3 repaired, 1 sound"
    assert sorted(p.name for p in backups.iterdir()) == ["orders-0", "orders-1", "payments-0"]
    for name in ("orders-0", "orders-1"):
        lost = set(range(expected[name]["first_offset"], expected[name]["last_offset"] + 1))
        assert [r[0] for r in read_all_records(log_dir / name)] == [
            o for o in written if o not in lost]
    assert [r[0] for r in read_all_records(log_dir / "payments-0")] == written
    assert partition_digest(log_dir / "payments-1") == sound_before
    again = run(log_dir, "--dry-run", "--json")
    assert again.exit_code == 0, again.output
    assert {r["status"] for r in json.loads(again.stdout)["rows"]} == {"sound"}


def test_each_partitions_backup_undoes_it_alone(tmp_path: Path) -> None:
    log_dir, _expected = damaged_log_dir(tmp_path)
    before = partition_digest(log_dir / "orders-1")
    result = run(log_dir, "--json", "--backup-dir", tmp_path / "backups")
    assert result.exit_code == 0, result.output
    rows = {r["partition"]: r for r in json.loads(result.stdout)["rows"]}
    undo = run("--undo", rows["orders-1"]["backup_dir"])
    assert undo.exit_code == 0, undo.output
    assert partition_digest(log_dir / "orders-1") == before


def test_one_undo_puts_back_every_partition_a_log_dir_repair_changed(tmp_path: Path) -> None:
    """Without --backup-dir the run's backups share one root next to the log dir; the repair names it, and one
    `repair --undo` of it (or of <log dir>.kcompact-backup, the directory an operator finds) undoes the run."""
    log_dir, _expected = damaged_log_dir(tmp_path)
    before = tree_digest(log_dir)
    result = run(log_dir)
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("backups: ")]
    root = Path(line.removeprefix("backups: ").split(" (")[0])
    assert root.parent == tmp_path / "logs.kcompact-backup" and root.name.startswith("repair.")
    assert sorted(p.name for p in root.iterdir()) == ["orders-0", "orders-1", "payments-0"]
    assert f"(undo the whole run: kcompact repair --undo {root};" in line
    rehearsal = run("--undo", tmp_path / "logs.kcompact-backup", "--dry-run")
    assert rehearsal.exit_code == 0, rehearsal.output
    assert rehearsal.stdout.splitlines()[-1] == f"would undo 3 backups under {tmp_path / 'logs.kcompact-backup'}"
    repaired = tree_digest(log_dir)
    after_repair_lock = repaired.pop(".lock")
    assert repaired != before
    undo = run("--undo", tmp_path / "logs.kcompact-backup", "--json")
    assert undo.exit_code == 0, undo.output
    assert sorted(Path(b["partition_dir"]).name for b in json.loads(undo.stdout)["backups"]) == [
        "orders-0", "orders-1", "payments-0"]
    after = tree_digest(log_dir)
    assert after.pop(".lock") == after_repair_lock and after == before  # the empty .lock a writer creates stays
    again = run("--undo", root)
    assert again.exit_code == 2
    assert again.stderr == f"kcompact: error: {root}: every backup under it (3) is already undone; nothing changed\n"


def test_a_partition_filter_limits_the_repair(tmp_path: Path) -> None:
    log_dir, _expected = damaged_log_dir(tmp_path)
    before = {name: partition_digest(log_dir / name) for name in ("orders-0", "orders-1", "payments-0")}
    result = run(log_dir, "--json", "--topic", "orders", "--partition", "1", "--backup-dir", tmp_path / "b")
    assert result.exit_code == 0, result.output
    assert [(r["partition"], r["status"]) for r in json.loads(result.stdout)["rows"]] == [
        ("orders-1", "repaired")]
    assert result.stderr.splitlines() == ["kcompact: --topic 'orders' --partition 1 matched 1 of 4 partitions"]
    assert partition_digest(log_dir / "orders-0") == before["orders-0"]
    assert partition_digest(log_dir / "payments-0") == before["payments-0"]
    assert partition_digest(log_dir / "orders-1") != before["orders-1"]


def test_a_log_dir_level_cause_is_said_once(tmp_path: Path) -> None:
    log_dir, _expected = damaged_log_dir(tmp_path)
    checkpoint = log_dir / "replication-offset-checkpoint"
    checkpoint.write_text("0\n2\norders 0 5\n")  # two entries announced, one there
    before = tree_digest(log_dir)
    result = run(log_dir, "--dry-run")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"kcompact: error: {checkpoint}")
    assert tree_digest(log_dir) == before


def test_a_broker_holding_the_log_dir_is_refused_once(tmp_path: Path) -> None:
    log_dir, _expected = damaged_log_dir(tmp_path)
    with broker_running(log_dir):
        before = tree_digest(log_dir)  # with the broker's .lock
        for args in (["--dry-run"], ["--backup-dir", str(tmp_path / "b")]):
            result = run(log_dir, *args)
            assert result.exit_code == 2
            (line,) = result.stderr.splitlines()
            assert "held by a running Kafka broker" in line, line
        assert tree_digest(log_dir) == before


def test_a_reported_only_metadata_log_decides_no_exit_code_and_the_others_are_repaired(tmp_path: Path) -> None:
    log_dir, _expected = damaged_log_dir(tmp_path)
    meta = PartitionBuilder("__cluster_metadata", 0).batch([(b"k", b"v")]).write(log_dir)
    (meta / segment_file_name(7, "index")).write_bytes(b"")  # an orphan: repair reports, never rewrites
    before = partition_digest(meta)
    result = run(log_dir, "--json", "--backup-dir", tmp_path / "b")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    statuses = {r["partition"]: r["status"] for r in report["rows"]}
    assert statuses == {"__cluster_metadata-0": "reported only", "orders-0": "repaired",
                        "orders-1": "repaired", "payments-0": "repaired", "payments-1": "sound"}
    assert report["ok"] and partition_digest(meta) == before


def test_repair_of_a_kraft_log_dir_exits_0_and_says_the_metadata_log_was_only_reported(tmp_path: Path) -> None:
    log_dir = copy_tree_writable(real_fixture("kraft37-cleaned-logdir"), tmp_path / "logs")
    meta_before = partition_digest(log_dir / "__cluster_metadata-0")
    result = run(log_dir, "--backup-dir", tmp_path / "b")
    assert result.exit_code == 0, result.output
    assert "plan (dry run, nothing written)" not in result.stdout
    assert ("reported only, nothing written (kcompact never rewrites KRaft's metadata log); not done:"
            in result.stdout)
    assert "repair does the same now" not in result.stdout.split("__consumer_offsets")[0]
    assert partition_digest(log_dir / "__cluster_metadata-0") == meta_before
    assert run(log_dir, "--dry-run").exit_code == 0  # the metadata log's orphans are its loader's to settle


def test_repair_of_a_broker_written_log_dir(tmp_path: Path) -> None:
    """A broker-written log dir (its .index/.timeindex files were left out of the repository): every
    missing index is rebuilt, one backup per partition, no .log byte changes, nothing is given up."""
    log_dir = copy_tree_writable(real_fixture("confluent512-lz4-logdir"), tmp_path / "logs")
    logs_before = {p.relative_to(log_dir): p.read_bytes() for p in log_dir.rglob("*.log")}
    needing = sorted({log.parent.name for log in log_dir.glob("*/*.log") if log.stat().st_size
                      and not all(log.with_suffix(ext).exists() for ext in (".index", ".timeindex"))})
    result = run(log_dir, "--json", "--backup-dir", tmp_path / "b")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    repaired = sorted(r["partition"] for r in report["rows"] if r["status"] == "repaired")
    assert repaired == needing and repaired
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == repaired
    assert all(r["given_up"] == [] for r in report["partitions"])
    assert {p.relative_to(log_dir): p.read_bytes() for p in log_dir.rglob("*.log")} == logs_before
    again = run(log_dir, "--dry-run", "--json")
    assert again.exit_code == 0, again.output


def test_single_partition_report_lists_what_was_given_up(tmp_path: Path) -> None:
    log_dir, expected = damaged_log_dir(tmp_path)
    result = run(log_dir / "orders-0", "--json", "--backup-dir", tmp_path / "b")
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["given_up"]
    assert given_up_fields(entry) == expected["orders-0"]
    assert entry["end_position"] == entry["position"] + entry["size_in_bytes"]


@pytest.mark.parametrize("jobs", ["0", "x"])
def test_bad_jobs_is_a_usage_error(tmp_path: Path, jobs: str) -> None:
    log_dir, _expected = damaged_log_dir(tmp_path)
    result = run(log_dir, "--jobs", jobs)
    assert result.exit_code == 2 and "a number of worker processes" in result.stderr


def test_a_read_only_log_dir_is_refused_once_and_an_unreadable_partition_fails_alone(tmp_path: Path) -> None:
    """File modes apply to the child (tests/unprivileged.py): a read-only log dir is one line for the run;
    an unreadable segment fails its partition only, and the others are repaired."""
    read_only, _expected = damaged_log_dir(tmp_path / "ro")
    unreadable, _expected = damaged_log_dir(tmp_path / "unreadable")
    segment = unreadable / "orders-0" / LOG0
    before_ro, before_orders = tree_digest(read_only), partition_digest(unreadable / "orders-0")
    read_only.chmod(0o555)
    segment.chmod(0o000)
    try:
        refused, partial = run_kcompact_batch([
            ["repair", str(read_only), "--backup-dir", str(tmp_path / "b1")],
            ["repair", str(unreadable), "--json", "--backup-dir", str(tmp_path / "b2")],
        ])
    finally:
        read_only.chmod(0o755)
        segment.chmod(0o644)
    assert refused.traceback is None and refused.exit_code == 2
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"kcompact: error: {read_only}") and "Permission denied" in line, line
    assert tree_digest(read_only) == before_ro
    assert partial.traceback is None and partial.exit_code == 2, partial.stderr
    report = json.loads(partial.stdout)
    assert [(r["partition"], r["status"]) for r in report["rows"]] == [
        ("orders-0", "failed"), ("orders-1", "repaired"), ("payments-0", "repaired"), ("payments-1", "sound")]
    (failure,) = report["failures"]
    assert str(segment) in failure["error"] and "Permission denied" in failure["error"]
    assert partition_digest(unreadable / "orders-0") == before_orders


def test_a_partition_whose_clean_is_refused_reads_clean_failed_not_problems_left(tmp_path: Path) -> None:
    # No metadata log and no --config: the policy is unknown, so each sound partition's clean is refused.
    log_dir = tmp_path / "logs"
    partition(log_dir, "orders", 0)

    result = run(log_dir, "--clean", "--json")

    assert result.exit_code == 2, result.output
    [row] = json.loads(result.stdout)["rows"]
    assert (row["status"], row["problems"]) == ("clean failed", 0)
    assert "cleanup.policy is not known" in row["error"]
