"""``spark export``: the Parquet rows against kcompact's format layer and kafka-python, and ``--latest``
against a small model of a read_committed consumer.

The log dir holds every v2 codec, headers, tombstones, keyless records, a committed and an aborted
transaction, a transaction still open at the log end, a legacy (v0/v1, gzip/snappy/lz4) partition
upgraded to v2, and a partition whose log start offset is above its first segment's base.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kafka.record.memory_records import MemoryRecords

from kcompact.cleaner.round.options import CleanOptions
from kcompact.errors import BatchCrcError, ConfigError, CorruptRecordError, KcompactError
from kcompact.inspect.export import EXPORT_COLUMNS, SegmentRef, split_segments
from kcompact.records.legacy import LegacyEntry, legacy_records
from kcompact.records.record import decode_records
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.partition import iter_partition_dirs, open_partition
from kcompact.spark.clean_job import spark_clean
from kcompact.spark.export import spark_export
from tests.spark.logdirs import (
    COMPACT,
    NOW,
    build_hanging_txn_partition,
    build_legacy_partition,
    build_log_dir,
    build_partition,
    flip_a_value_byte,
    undecodable_batch,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Row = dict[str, Any]
CONTROL_KEY = struct.Struct(">hh")  # version int16, type int16 (0 ABORT, 1 COMMIT)
LOG_START = {("users", 0): 5}


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_log_dir(tmp_path_factory.mktemp("export") / "logs", 5)
    build_partition(root, "pending", 0, open_txn=True)
    build_legacy_partition(root)
    write_offset_checkpoint(root / "log-start-offset-checkpoint", LOG_START)
    return root


def parquet_rows(directory: Path) -> list[Row]:
    import pyarrow.parquet as pq  # the spark extra: imported once a test runs, so a core install skips

    rows = pq.read_table(directory).to_pylist()
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def format_layer_rows(log_dir: Path) -> list[Row]:
    """Every stored record, read with kcompact's segment and records layers."""
    out: list[Row] = []
    for part_dir in iter_partition_dirs(log_dir):
        partition = open_partition(part_dir)
        for segment in partition.segments:
            with segment.open() as log:
                for batch in log.iter_batches():
                    records = legacy_records(batch) if isinstance(batch, LegacyEntry) else decode_records(batch)
                    out += [{"topic": partition.topic, "partition": partition.partition, "offset": r.offset,
                             "timestamp": r.timestamp, "key": r.key, "value": r.value,
                             "headers": [{"key": h.key.decode(), "value": h.value} for h in r.headers],
                             "is_tombstone": r.value is None, "is_control": batch.is_control,
                             "is_transactional": batch.is_transactional, "producer_id": batch.producer_id}
                            for r in records]
    return out


def kafka_python_rows(log_dir: Path) -> list[Row]:
    """The same, read by kafka-python's MemoryRecords (an independent implementation)."""
    out: list[Row] = []
    for part_dir in iter_partition_dirs(log_dir):
        topic, partition = part_dir.name.rsplit("-", 1)
        for log in sorted(part_dir.glob("*.log")):
            records = MemoryRecords(log.read_bytes())
            while (batch := records.next_batch()) is not None:
                v2 = batch.magic >= 2
                for r in batch:
                    out.append({
                        "topic": topic, "partition": int(partition), "offset": r.offset,
                        "timestamp": -1 if r.timestamp is None else r.timestamp, "key": r.key,
                        "value": r.value, "headers": [{"key": k, "value": v} for k, v in r.headers],
                        "is_tombstone": r.value is None, "is_control": v2 and batch.is_control_batch,
                        "is_transactional": v2 and batch.is_transactional,
                        "producer_id": batch.producer_id if v2 else -1,
                    })
    return out


def consumer_table(rows: list[Row]) -> dict[tuple[str, int, bytes], Row]:
    """A read_committed consumer from the log start, folding records into a table by key."""
    by_partition: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        by_partition.setdefault((row["topic"], row["partition"]), []).append(row)
    table: dict[tuple[str, int, bytes], Row] = {}
    for (topic, partition), records in by_partition.items():
        visible = _committed(records)
        start = LOG_START.get((topic, partition), 0)
        for row in sorted(visible, key=lambda r: r["offset"]):
            if row["key"] is not None and row["offset"] >= start:
                table[(topic, partition, row["key"])] = row
    return {key: row for key, row in table.items() if row["value"] is not None}


def _committed(records: list[Row]) -> list[Row]:
    """Data records outside transactions, or in transactions whose marker says COMMIT."""
    pending: dict[int, list[Row]] = {}
    visible: list[Row] = []
    for row in sorted(records, key=lambda r: r["offset"]):
        if row["is_control"]:
            _version, kind = CONTROL_KEY.unpack(row["key"])
            committed = pending.pop(row["producer_id"], [])
            visible += committed if kind == 1 else []
        elif row["is_transactional"]:
            pending.setdefault(row["producer_id"], []).append(row)
        else:
            visible.append(row)
    # whatever is still pending belongs to an open transaction, and a consumer reads nothing from its
    # first offset on (the last stable offset; these log dirs' high watermarks are their log ends)
    stable = min((rows[0]["offset"] for rows in pending.values()), default=None)
    return [row for row in visible if stable is None or row["offset"] < stable]


def test_export_holds_every_stored_record_as_the_format_layer_and_kafka_python_read_it(
    spark: SparkSession, log_dir: Path, tmp_path: Path
) -> None:
    summary = spark_export(spark, [log_dir], tmp_path / "all")

    exported = parquet_rows(tmp_path / "all")
    assert exported == format_layer_rows(log_dir)
    assert exported == kafka_python_rows(log_dir)
    assert summary.records == len(exported) and summary.partitions == 7 and not summary.latest
    assert list(exported[0]) == [name for name, _ in EXPORT_COLUMNS]
    kinds = {(r["is_control"], r["is_transactional"], r["is_tombstone"]) for r in exported}
    assert {(True, True, False), (False, True, False), (False, False, True)} <= kinds
    legacy = [r for r in exported if r["topic"] == "legacy"]
    assert [r["offset"] for r in legacy] == list(range(8))
    assert legacy[0]["timestamp"] == -1 and legacy[5]["key"] is None


def test_latest_is_what_a_read_committed_consumer_ends_up_with(
    spark: SparkSession, log_dir: Path, tmp_path: Path
) -> None:
    summary = spark_export(spark, [log_dir], tmp_path / "latest", latest=True, split_bytes=3000)

    latest = parquet_rows(tmp_path / "latest")
    assert summary.latest and summary.records == len(latest)
    model = consumer_table(format_layer_rows(log_dir))
    assert {(r["topic"], r["partition"], r["key"]): r for r in latest} == model
    assert len(latest) == len(model)
    pending = {r["key"]: r["value"] for r in latest if r["topic"] == "pending"}
    assert pending[b"k1"] != b"pending" and pending[b"tx"] == b"committed"  # open txn left out
    assert b"doomed" not in pending  # its tombstone is the latest value
    assert all(r["offset"] >= 5 for r in latest if (r["topic"], r["partition"]) == ("users", 0))
    assert {r["value"] for r in latest if r["topic"] == "legacy"} == {b"v2", b"v0-snappy", b"v1-lz4"}


def test_latest_view_is_the_same_after_a_clean(spark: SparkSession, log_dir: Path, tmp_path: Path) -> None:
    import shutil

    copy = Path(shutil.copytree(log_dir, tmp_path / "logs"))
    spark_export(spark, [copy], tmp_path / "before", latest=True)
    run = spark_clean(spark, [copy], cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW))
    spark_export(spark, [copy], tmp_path / "after", latest=True)

    assert "cleaned" in {r["status"] for r in run.as_dicts()}
    assert parquet_rows(tmp_path / "after") == parquet_rows(tmp_path / "before")


def test_a_corrupt_segment_fails_the_export_with_kcompacts_error(spark: SparkSession, tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logs", "orders", 0)
    segment = sorted(part.glob("*.log"))[1]
    segment.write_bytes(segment.read_bytes()[:-5])
    with pytest.raises(KcompactError, match=r"\.log at position \d+: .*remain"):
        spark_export(spark, [part], tmp_path / "out")


def test_an_existing_output_is_refused_before_any_work(spark: SparkSession, tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logs", "orders", 0)
    (tmp_path / "out").mkdir()
    with pytest.raises(KcompactError, match="expected a new path, found it exists"):
        spark_export(spark, [part], tmp_path / "out")


def test_data_source_read_directly_with_a_path_option(spark: SparkSession, log_dir: Path) -> None:
    from kcompact.spark.datasource import KcompactDataSource

    spark.dataSource.register(KcompactDataSource)
    frame = spark.read.format("kcompact").option("isolation", "read_committed").load(str(log_dir / "legacy-0"))
    assert [r.offset for r in frame.orderBy("offset").collect()] == list(range(8))


def test_splits_pack_small_segments_and_keep_big_ones_alone() -> None:
    refs = [SegmentRef("p", base, size) for base, size in ((0, 10), (1, 10), (2, 100), (3, 5), (4, 5))]
    assert [[r.base_offset for r in split] for split in split_segments(refs, 25)] == [[0, 1], [2], [3, 4]]


def test_unknown_isolation_is_a_config_error() -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")
    from kcompact.spark.datasource import _isolation

    with pytest.raises(ConfigError, match="expected one of read_uncommitted, read_committed, found 'dirty'"):
        _isolation({"isolation": "dirty"})


@pytest.mark.parametrize("latest", [False, True], ids=["every-record", "latest"])
def test_plain_kcompact_export_writes_the_same_schema_and_rows_as_spark_export(
    spark: SparkSession, log_dir: Path, tmp_path: Path, latest: bool
) -> None:
    import pyarrow.parquet as pq

    spark_summary = spark_export(spark, [log_dir], tmp_path / "spark", latest=latest, split_bytes=3000)
    done = subprocess.run([sys.executable, "-m", "kcompact", "export", str(log_dir), "--output",
                           str(tmp_path / "plain"), "--json", *(["--latest"] if latest else [])],
                          capture_output=True, text=True, timeout=120, check=False)

    assert done.returncode == 0, done.stderr
    assert pq.read_table(tmp_path / "plain").schema == pq.read_table(tmp_path / "spark").schema
    assert parquet_rows(tmp_path / "plain") == parquet_rows(tmp_path / "spark")
    summary = json.loads(done.stdout)
    assert {key: summary[key] for key in ("records", "partitions", "segments", "latest")} == {
        "records": spark_summary.records, "partitions": 7, "segments": spark_summary.segments, "latest": latest}
    assert summary["output"] == str(tmp_path / "plain") and spark_summary.records > 0


def test_a_corrupt_partition_is_left_out_whole_and_the_others_exported(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 3)
    sound = spark_export(spark, [log_dir / "users-0", log_dir / "orders-1"], tmp_path / "sound")
    segment, position = flip_a_value_byte(log_dir / "orders-0")

    summary = spark_export(spark, [log_dir], tmp_path / "out", split_bytes=3000)  # splits across partitions

    [failure] = summary.failures
    assert failure.partition_dir == str(log_dir / "orders-0") and isinstance(failure.error, BatchCrcError)
    assert (failure.error.path, failure.error.position) == (str(segment), position)
    assert (summary.records, summary.partitions, summary.segments) == (sound.records, 2, sound.segments)
    assert parquet_rows(tmp_path / "out") == parquet_rows(tmp_path / "sound")  # none of orders-0's rows


@pytest.mark.parametrize("latest", [False, True], ids=["every-record", "latest"])
def test_a_corrupt_partition_named_alone_is_the_error_and_nothing_is_written(
    spark: SparkSession, tmp_path: Path, latest: bool
) -> None:
    part = build_partition(tmp_path / "logs", "orders", 0)
    segment, position = flip_a_value_byte(part)
    with pytest.raises(BatchCrcError) as raised:
        spark_export(spark, [part], tmp_path / "out", latest=latest)
    assert (raised.value.path, raised.value.position) == (str(segment), position)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


@pytest.mark.parametrize("latest", [False, True], ids=["every-record", "latest"])
def test_data_that_does_not_parse_is_the_error_and_leaves_no_output_directory(
    spark: SparkSession, tmp_path: Path, latest: bool
) -> None:
    """A batch that passes its CRC but whose records do not parse, in a log dir: the error (its class,
    file and position, from the task's error row), and the directory Spark made for --output removed."""
    log_dir = build_log_dir(tmp_path / "logs", 3)
    segment, position = undecodable_batch(log_dir / "orders-0")
    with pytest.raises(CorruptRecordError, match=r"expected 5 records, found 4$") as raised:
        spark_export(spark, [log_dir], tmp_path / "out", latest=latest, split_bytes=3000)
    assert raised.value.path == str(segment) and (raised.value.position or 0) > position
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def test_error_rows_is_true_or_false() -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")
    from kcompact.spark.datasource import _error_rows

    assert (_error_rows({}), _error_rows({"error_rows": "TRUE"})) == (False, True)
    with pytest.raises(ConfigError, match="option 'error_rows'; expected true or false, found 'yes'"):
        _error_rows({"error_rows": "yes"})


@pytest.mark.parametrize("high_watermark, table, stop", [
    (20, {b"k0": 5, b"k1": 6, b"k2": 2, b"k3": 10, b"k4": 4}, (11, "open transaction", 13, 20)),
    (8, {b"k0": 0, b"k1": 1, b"k2": 2, b"k3": 3, b"k4": 4},
     (5, "transaction marker not below the high watermark", 11, 8)),
], ids=["open-transaction", "high-watermark-8"])
def test_latest_stops_where_a_read_committed_consumer_stops(
    spark: SparkSession, tmp_path: Path, high_watermark: int, table: dict[bytes, int],
    stop: tuple[int, str, int, int],
) -> None:
    log_dir = tmp_path / "logs"
    build_hanging_txn_partition(log_dir, high_watermark=high_watermark)
    build_partition(log_dir, "orders", 0)  # a partition whose view reaches its log end

    summary = spark_export(spark, [log_dir], tmp_path / "latest", latest=True, split_bytes=3000)

    rows = parquet_rows(tmp_path / "latest")
    assert {r["key"]: r["offset"] for r in rows if r["topic"] == "ledger"} == table
    stops = {s["topic"]: s for s in summary.as_dict()["stops"]}
    ledger = stops["ledger"]
    assert (ledger["stops_at"], ledger["reason"], ledger["producer_id"], ledger["high_watermark"]) == stop
    assert ledger["text"].startswith(f"ledger-0: the read_committed view stops at offset {stop[0]}: producer "
                                     f"{stop[2]}'s transaction from offset {stop[0]}")
    assert (stops["orders"]["reason"], stops["orders"]["stops_at"]) == ("log end",
                                                                        stops["orders"]["log_end_offset"])
