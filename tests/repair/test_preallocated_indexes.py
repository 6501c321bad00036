"""A crashed broker's preallocated indexes: settled by Kafka when the broker recovers the segment as it starts,
a real problem when it does not (``LogManager.loadLogs``, ``LogLoader.recoverLog``, ``KafkaMetadataLog.apply``),
and checked without walking the zero slots one by one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.repair.repair import RepairOptions, repair_partition
from kcompact.segment import offset_index, time_index
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.names import segment_file_name
from kcompact.segment.partition import open_partition
from tests.repair.support import build_partition, real_partition

# A broker's default segment.index.bytes, rounded down to whole slots as AbstractIndex preallocates it.
OFFSET_INDEX_BYTES = 10 * 1024 * 1024
TIME_INDEX_BYTES = OFFSET_INDEX_BYTES // 12 * 12


def preallocate(part: Path, base_offset: int | None = None) -> None:
    """Extend a segment's indexes with zeros as a broker that crashed leaves them (the active one's by default)."""
    segments = open_partition(part).segments
    segment = segments[-1] if base_offset is None else next(s for s in segments if s.base_offset == base_offset)
    for kind, size in (("index", OFFSET_INDEX_BYTES), ("timeindex", TIME_INDEX_BYTES)):
        path = part / segment_file_name(segment.base_offset, kind)
        with open(path, "ab") as handle:
            handle.truncate(size)


def dry_run(path: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, ["repair", "--dry-run", "--json", str(path)],
                                                     catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def crashed(tmp_path: Path) -> Path:
    """A broker-written partition whose active segment kept its preallocated indexes (no clean shutdown)."""
    part = real_partition(tmp_path, "bitnami2024-rolled-logdir", "sensor-data-0")
    preallocate(part)
    return part


def test_preallocated_active_indexes_after_a_crash_are_settled_by_kafka_exit_0(crashed: Path) -> None:
    code, report = dry_run(crashed)
    assert code == 0 and report["plan"] == []
    assert [(f["kind"], Path(f["path"]).suffix, f["impact"], f["action"]) for f in report["findings"]] == [
        ("index-preallocated", ".index", "settled-by-kafka", None),
        ("index-preallocated", ".timeindex", "settled-by-kafka", None)]
    assert all("LogSegment.recover rebuilds the index" in f["broker_effect"] for f in report["findings"])


def test_the_text_report_says_kafka_settles_it_not_that_it_breaks_the_broker(crashed: Path) -> None:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, ["repair", "--dry-run", str(crashed)],
                                                     catch_exceptions=False)
    assert result.exit_code == 0
    assert "0 problems and 2 findings Kafka settles itself found" in result.stdout
    assert "breaks the broker" not in result.stdout
    assert result.stdout.count("impact: Kafka settles it itself when the broker starts; not repaired") == 2
    assert result.stdout.rstrip().endswith("nothing to repair")


def test_a_real_repair_leaves_them_to_kafka_and_keeps_no_backup(crashed: Path, tmp_path: Path) -> None:
    before = {p.name: p.read_bytes() for p in crashed.iterdir()}
    result = repair_partition(crashed, RepairOptions(backup_dir=tmp_path / "backup"))
    assert result.ok and result.backup_dir is None and result.actions == []
    assert {p.name: p.read_bytes() for p in crashed.iterdir()} == before


def test_with_a_clean_shutdown_marker_the_broker_reads_the_zero_slots_so_repair_rebuilds_them(
    crashed: Path, tmp_path: Path
) -> None:
    (crashed.parent / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":1}')
    code, report = dry_run(crashed)
    assert code == 2
    assert [(f["kind"], f["impact"]) for f in report["findings"]] == [
        ("index-corrupt", "broker"), ("index-corrupt", "broker")]
    assert all("holds .kafka_cleanshutdown" in f["broker_effect"] for f in report["findings"])
    repaired = repair_partition(crashed, RepairOptions(backup_dir=tmp_path / "backup"))
    assert repaired.ok and repaired.remaining == []
    segment = open_partition(crashed).segments[-1]
    assert segment.index_path is not None and segment.index_path.stat().st_size < 1024


def test_kraft_metadata_log_is_always_recovered_even_after_a_clean_shutdown(tmp_path: Path) -> None:
    part = real_partition(tmp_path, "kraft37-consumer-offsets", "__cluster_metadata-0")
    preallocate(part)
    (part.parent / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":1}')
    code, report = dry_run(part)
    assert code == 0
    assert {f["kind"] for f in report["findings"]} == {"index-preallocated"}


def test_a_segment_below_the_recovery_point_is_not_recovered(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    segments = open_partition(part).segments
    first, active = segments[0].base_offset, segments[-1].base_offset
    preallocate(part, first)
    assert dry_run(part)[0] == 0  # no recovery-point entry: the broker recovers every segment
    write_offset_checkpoint(part.parent / "recovery-point-offset-checkpoint", {("orders", 0): active})
    code, report = dry_run(part)
    assert code == 2
    assert {(f["kind"], Path(f["path"]).name) for f in report["findings"]} == {
        ("index-corrupt", segment_file_name(first, "index")),
        ("index-corrupt", segment_file_name(first, "timeindex"))}
    assert all("below the partition's recovery point" in f["broker_effect"] for f in report["findings"])


def test_zero_slots_are_not_decoded_one_by_one(crashed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    decoded = {"slots": 0}
    for module in (offset_index, time_index):
        real = module.iter_slots

        def counting(data, entry, name, real=real):  # type: ignore[no-untyped-def]
            decoded["slots"] += len(data) // entry.size
            return real(data, entry, name)

        monkeypatch.setattr(module, "iter_slots", counting)
    repair_partition(crashed, RepairOptions(dry_run=True))
    (crashed.parent / ".kafka_cleanshutdown").write_text("")  # the path that reports them, too
    repair_partition(crashed, RepairOptions(dry_run=True))
    assert decoded["slots"] < 1000  # of 1310720 + 873813 slots per run


@pytest.mark.parametrize(("retention_ms", "deleted"), [(10 * 365 * 86_400_000, []), (3_600_000, [0])])
def test_retention_judges_a_preallocated_segment_by_its_data_not_by_the_zero_slot(
    crashed: Path, retention_ms: int, deleted: list[int]
) -> None:
    # the time index's last slot (timestamp 0) is no timestamp of the data: the broker rebuilds the index
    # as it starts, so only data older than retention.ms goes
    result = CliRunner(env={"COLUMNS": "80"}).invoke(
        cli, ["clean", str(crashed), "--dry-run", "--json", "--config", "cleanup.policy=delete",
              "--config", f"retention.ms={retention_ms}"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["results"]
    assert row["retention_deleted_segments"] == deleted
