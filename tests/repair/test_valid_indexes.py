"""``repair`` flags only index problems that break a broker's reads, and says per finding what it breaks.

An index that Kafka's loader and lookups accept — written by another broker version, after a restart, or with
another ``index.interval.bytes`` — differs from what Kafka 4.1 would rebuild, but is not damage: it is
reported as informational, ``--dry-run`` exits 0 and ``repair`` leaves it alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.records.batch import iter_batches
from kcompact.segment.names import segment_file_name
from kcompact.segment.offset_index import OffsetIndexEntry, decode_offset_index, encode_offset_index
from kcompact.segment.partition import open_partition
from kcompact.segment.time_index import TimeIndexEntry, decode_time_index, encode_time_index
from tests.partition_builder import PartitionBuilder
from tests.repair.support import partition_digest, real_partition

Batches = list[tuple[int, int, int, int]]  # (position, base_offset, last_offset, max_timestamp)


def run(*args: str) -> tuple[int, Any, str]:
    """Exit code, the --json document, stderr."""
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout), result.stderr


def partition(tmp_path: Path, *, index_interval_bytes: int = 4096) -> Path:
    """Two segments of 4-record batches (~150 bytes each), the first closed."""
    b = PartitionBuilder()
    for s in range(2):
        for i in range(40):
            b.batch([(f"k{i % 9}".encode(), f"v{s}-{i}-{j}".encode() * 3) for j in range(4)])
        b.roll()
    b.batch([(b"active", b"1")])
    return b.write(tmp_path / "logdir", index_interval_bytes=index_interval_bytes)


def first_segment(part: Path) -> tuple[Path, Path, Batches]:
    log = open_partition(part).segments[0].log_path
    rows = [(b.position, b.base_offset, b.last_offset, b.max_timestamp)
            for b in iter_batches(log.read_bytes())]
    return log.with_suffix(".index"), log.with_suffix(".timeindex"), rows


def write_index(path: Path, entries: list[OffsetIndexEntry]) -> None:
    path.write_bytes(encode_offset_index(entries, 0))


def kafka_010_entries(rows: Batches) -> list[OffsetIndexEntry]:
    """Kafka 0.10 indexed the first offset of each append at its position."""
    return [OffsetIndexEntry(base, position) for position, base, _last, _ts in rows[3::5]]


def multi_batch_append_entries(rows: Batches) -> list[OffsetIndexEntry]:
    """Brokers before Kafka 4.1 indexed a two-batch append at its first batch with its largest offset."""
    return [OffsetIndexEntry(rows[i + 1][2], rows[i][0]) for i in range(3, len(rows) - 1, 6)]


def read_past_a_batch(rows: Batches) -> list[OffsetIndexEntry]:
    """An entry that sends a read of its offset past the batch holding it (damage)."""
    return [OffsetIndexEntry(rows[9][2], rows[10][0])]


def assert_informational_and_left_alone(part: Path, kinds: set[str]) -> None:
    code, report, err = run("repair", "--dry-run", "--json", str(part))
    findings = report["findings"]
    assert isinstance(findings, list)
    assert code == 0, (err, findings)
    assert {f["kind"] for f in findings} == kinds
    assert all(f["impact"] == "informational" and f["action"] is None for f in findings)
    assert report["plan"] == []
    before = partition_digest(part)
    code, report, err = run("repair", "--json", str(part))
    assert code == 0, err
    assert report["backup_dir"] is None and report["actions"] == []
    assert partition_digest(part) == before


def test_indexes_written_with_another_index_interval_are_valid(tmp_path: Path) -> None:
    part = partition(tmp_path, index_interval_bytes=600)
    index, _timeindex, _rows = first_segment(part)
    assert len(decode_offset_index(index.read_bytes(), 0)) > 2  # denser than the default's

    assert_informational_and_left_alone(part, {"index-differs"})


@pytest.mark.parametrize("entries", [kafka_010_entries, multi_batch_append_entries])
def test_offset_indexes_older_brokers_wrote_are_valid(
    tmp_path: Path, entries: Callable[[Batches], list[OffsetIndexEntry]]
) -> None:
    part = partition(tmp_path)
    index, _timeindex, rows = first_segment(part)
    write_index(index, entries(rows))

    assert_informational_and_left_alone(part, {"index-differs"})


def test_time_index_with_record_offsets_is_valid(tmp_path: Path) -> None:
    part = partition(tmp_path)
    _index, timeindex, rows = first_segment(part)
    kafka = decode_time_index(timeindex.read_bytes(), 0)
    # some brokers stored the offset of the record holding the maximum, not its batch's last offset
    base_of = {last: base for _p, base, last, _ts in rows}
    timeindex.write_bytes(encode_time_index(
        [TimeIndexEntry(e.timestamp, base_of[e.offset]) for e in kafka], 0))

    assert_informational_and_left_alone(part, {"index-differs"})


def shut_down_cleanly(part: Path) -> None:
    """The marker a broker leaves at a clean shutdown: the next one recovers no segment and trusts every index
    (``LogLoader.recoverLog``)."""
    (part.parent / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":1}')


def test_an_entry_that_misdirects_reads_is_settled_by_a_broker_that_recovers_the_segment(tmp_path: Path) -> None:
    part = partition(tmp_path)
    index, _timeindex, rows = first_segment(part)
    write_index(index, read_past_a_batch(rows))

    code, report, _err = run("repair", "--dry-run", "--json", str(part))

    assert code == 0  # no marker, no recovery point: LogSegment.recover rebuilds the index, never reading it
    assert [(f["kind"], f["impact"]) for f in report["findings"]] == [("index-corrupt", "settled-by-kafka")]
    assert "LogSegment.recover rebuilds the index" in report["findings"][0]["broker_effect"]
    assert report["plan"]  # kcompact's own clean reads it: repair rebuilds it all the same


def test_an_entry_that_misdirects_reads_is_damage_that_breaks_the_broker(tmp_path: Path) -> None:
    part = partition(tmp_path)
    index, _timeindex, rows = first_segment(part)
    write_index(index, read_past_a_batch(rows))
    shut_down_cleanly(part)

    code, report, _err = run("repair", "--dry-run", "--json", str(part))

    assert code == 2
    (finding,) = report["findings"]
    assert finding["kind"] == "index-corrupt" and finding["impact"] == "broker"
    assert "not above the last offset of the batch before its position" in finding["message"]
    code, _report, err = run("repair", "--json", str(part))
    assert code == 0, err
    assert decode_offset_index(index.read_bytes(), 0) != read_past_a_batch(rows)


def test_a_time_index_ending_below_the_segments_largest_timestamp_breaks_the_broker(
    tmp_path: Path,
) -> None:
    part = partition(tmp_path)
    _index, timeindex, _rows = first_segment(part)
    kafka = decode_time_index(timeindex.read_bytes(), 0)
    timeindex.write_bytes(encode_time_index(kafka[:-1], 0))  # the final entry lost
    shut_down_cleanly(part)

    code, report, _err = run("repair", "--dry-run", "--json", str(part))

    assert code == 2
    (finding,) = report["findings"]
    assert finding["kind"] == "index-corrupt" and finding["impact"] == "broker"
    assert "the segment's largest" in finding["message"]


def test_broker_written_indexes_of_a_cleanly_shut_down_broker_are_not_damage(tmp_path: Path) -> None:
    part = real_partition(tmp_path, "bitnami2024-rolled-logdir", "__cluster_metadata-0")
    assert (part / segment_file_name(0, "index")).exists()

    code, report, err = run("repair", "--dry-run", "--json", str(part))

    assert code == 0, err
    assert {(f["kind"], f["impact"]) for f in report["findings"]} == {
        ("index-differs", "informational")}
