"""``kcompact export``: Parquet written in-process, with progress, and nothing left at --output on failure;
corrupt data never exported: a partition whose batch fails its CRC is left out whole and named (exit 2)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.inspect.export import export_parquet
from tests.spark.logdirs import (
    build_hanging_txn_partition,
    build_legacy_partition,
    build_log_dir,
    build_partition,
    flip_a_value_byte,
    undecodable_batch,
)

pq = pytest.importorskip("pyarrow.parquet", reason="kcompact export needs pyarrow (pip install '.[export]')")


def test_export_reports_progress_up_to_every_segment_byte(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    seen: list[tuple[str, int, int]] = []

    summary = export_parquet([log_dir], tmp_path / "out", progress=lambda *args: seen.append(args))

    total = sum(p.stat().st_size for p in log_dir.rglob("*.log"))
    assert seen[-1] == ("records", total, total)
    assert pq.read_table(tmp_path / "out").num_rows == summary.records > 0
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["part-00000.parquet"]


def test_a_corrupt_segment_exits_2_with_one_line_and_leaves_no_output(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logs", "orders", 0)
    segment = sorted(part.glob("*.log"))[1]
    segment.write_bytes(segment.read_bytes()[:-5])

    result = CliRunner().invoke(cli, ["export", str(part), "--output", str(tmp_path / "out")],
                                prog_name="kcompact")

    assert result.exit_code == 2
    assert result.stderr.startswith(f"kcompact: error: {segment} at position ")
    assert len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def test_export_writes_only_the_partitions_the_topic_filter_matches(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    names = sorted(p.name for p in log_dir.iterdir() if p.is_dir() and not p.name.startswith("__"))
    wanted = names[0]
    topic, partition = wanted.rsplit("-", 1)

    result = CliRunner().invoke(cli, ["export", str(log_dir), "--output", str(tmp_path / "out"), "--topic",
                                      topic, "--partition", partition, "--json"], prog_name="kcompact")

    assert result.exit_code == 0, result.output
    table = pq.read_table(tmp_path / "out")
    assert table.num_rows > 0
    topics, partitions = table.column("topic").to_pylist(), table.column("partition").to_pylist()
    assert set(zip(topics, partitions, strict=True)) == {(topic, int(partition))}


def test_an_output_inside_a_log_dir_is_refused(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    part = next(p for p in sorted(log_dir.iterdir()) if p.is_dir())
    for output in (log_dir / "out", part / "out", log_dir / "a" / "b"):
        result = CliRunner().invoke(cli, ["export", str(log_dir), "--output", str(output)], prog_name="kcompact")
        assert result.exit_code == 2, result.output
        assert "which the export reads: a broker refuses" in result.stderr
        assert not output.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def test_the_summary_counts_one_of_each_in_the_singular(tmp_path: Path) -> None:
    from tests.partition_builder import PartitionBuilder

    builder = PartitionBuilder("orders", 0)
    builder.batch([(b"k", b"v")])
    log_dir = builder.write(tmp_path / "logs").parent
    out = tmp_path / "out"

    result = CliRunner().invoke(cli, ["export", str(log_dir), "--output", str(out), "--topic", "orders"],
                                prog_name="kcompact")

    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == "kcompact: --topic 'orders' matched 1 of 1 partition"
    assert result.stdout.startswith(f"1 record of 1 partition (1 segment) written to {out} in ")


def crc_line(segment: Path, position: int) -> re.Pattern[str]:
    return re.compile(rf"{re.escape(str(segment))} at position {position}: batch \(last offset \d+\) fails its "
                      r"CRC; expected 0x[0-9a-f]{8}, found 0x[0-9a-f]{8}; the data is corrupt")


@pytest.mark.parametrize("latest", [False, True], ids=["every-record", "latest"])
def test_a_flipped_value_byte_is_never_exported_as_data(tmp_path: Path, latest: bool) -> None:
    part = build_partition(tmp_path / "logs", "orders", 0)
    segment, position = flip_a_value_byte(part)

    result = CliRunner().invoke(cli, ["export", str(part), "--output", str(tmp_path / "out"), "--json",
                                      *(["--latest"] if latest else [])], prog_name="kcompact")

    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert crc_line(segment, position).match(error["message"])
    assert (error["kind"], error["path"], error["position"]) == ("BatchCrcError", str(segment), position)
    assert result.stderr == f"kcompact: error: {error['message']}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]  # no output, no temporary


def test_a_log_dir_exports_its_sound_partitions_and_names_the_corrupt_one(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 3)
    sound = export_parquet([log_dir / "users-0", log_dir / "orders-1"], tmp_path / "sound")
    segment, position = flip_a_value_byte(log_dir / "orders-0")

    result = CliRunner().invoke(cli, ["export", str(log_dir), "--output", str(tmp_path / "out"), "--json"],
                                prog_name="kcompact")

    assert result.exit_code == 2, result.output
    summary = json.loads(result.stdout)
    [failure] = summary["failures"]
    assert failure["partition_dir"] == str(log_dir / "orders-0")
    assert crc_line(segment, position).match(failure["error"])
    assert (summary["records"], summary["partitions"], summary["segments"]) == (
        sound.records, 2, sound.segments)
    key = ("topic", "partition", "offset")
    assert pq.read_table(tmp_path / "out").sort_by([(k, "ascending") for k in key]) == \
        pq.read_table(tmp_path / "sound").sort_by([(k, "ascending") for k in key])  # none of orders-0's rows
    text = CliRunner().invoke(cli, ["export", str(log_dir), "--output", str(tmp_path / "text")],
                              prog_name="kcompact")
    assert text.exit_code == 2
    assert text.stdout.startswith(f"{sound.records} records of 2 partitions ({sound.segments} segments) "
                                  f"written to {tmp_path / 'text'} in ")
    assert text.stdout.rstrip().endswith("; 1 partition left out, their data failing its checks")
    assert text.stderr == f"kcompact: error: {failure['error']}\n"


def test_a_batch_that_passes_its_crc_but_does_not_parse_leaves_nothing(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    segment, position = undecodable_batch(log_dir / "orders-0")

    result = CliRunner().invoke(cli, ["export", str(log_dir), "--output", str(tmp_path / "out")],
                                prog_name="kcompact")

    assert result.exit_code == 2
    found = re.match(rf"kcompact: error: {re.escape(str(segment))} at position (\d+): .*expected 5 records, "
                     "found 4$", result.stderr)
    assert found and int(found[1]) > position  # where in the batch its records stop parsing
    assert len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def test_a_legacy_message_that_fails_its_crc_is_not_exported(tmp_path: Path) -> None:
    part = build_legacy_partition(tmp_path / "logs")
    segment = part / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    at = data.find(b"v0-plain")  # the magic 0 message's value, stored as it is
    data[at] ^= 0x01
    segment.write_bytes(bytes(data))

    result = CliRunner().invoke(cli, ["export", str(part), "--output", str(tmp_path / "out")], prog_name="kcompact")

    assert result.exit_code == 2
    assert re.fullmatch(rf"kcompact: error: {re.escape(str(segment))} at position 0: "
                        r"batch \(last offset 0\) fails its CRC; expected 0x[0-9a-f]{8}, found 0x[0-9a-f]{8}; "
                        r"the data is corrupt .*\n", result.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def latest_table(out: Path) -> dict[bytes, tuple[int, bytes | None]]:
    return {row["key"]: (row["offset"], row["value"]) for row in pq.read_table(out).to_pylist()}


def test_latest_stops_at_the_last_stable_offset_and_names_the_open_transaction(tmp_path: Path) -> None:
    part = build_hanging_txn_partition(tmp_path / "logs")
    out = tmp_path / "out"

    result = CliRunner().invoke(cli, ["export", str(part), "--latest", "--output", str(out), "--json"],
                                prog_name="kcompact")

    assert result.exit_code == 0, result.output
    # what a read_committed consumer's table holds: nothing from offset 11 (producer 13's open
    # transaction) on, so neither k1@13, k2@14, the tombstone of k0 at 16 nor k5@19
    assert latest_table(out) == {b"k0": (5, b"committed-5"), b"k1": (6, b"committed-6"), b"k2": (2, b"v2"),
                                 b"k3": (10, b"plain-10"), b"k4": (4, b"v4")}
    stop = json.loads(result.stdout)["stops"]
    assert [{k: s[k] for k in ("stops_at", "reason", "producer_id", "first_offset", "high_watermark",
                                "log_end_offset")} for s in stop] == [
        {"stops_at": 11, "reason": "open transaction", "producer_id": 13, "first_offset": 11,
         "high_watermark": 20, "log_end_offset": 20}]

    text = CliRunner().invoke(cli, ["export", str(part), "--latest", "--output", str(tmp_path / "text")],
                              prog_name="kcompact")
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines()[1] == (
        "ledger-0: the read_committed view stops at offset 11: producer 13's transaction from offset 11 "
        "has no COMMIT or ABORT marker (a consumer reads nothing at or after it until it ends)")


def test_latest_stops_at_a_transaction_whose_marker_is_not_below_the_high_watermark(tmp_path: Path) -> None:
    # high watermark 8: the COMMIT of offsets 5-6 (at offset 8) is not replicated, so that transaction
    # is still unstable (ProducerStateManager.firstUnstableOffset): a consumer sees offsets 0-4 only
    part = build_hanging_txn_partition(tmp_path / "logs", high_watermark=8)

    summary = export_parquet([part], tmp_path / "out", latest=True)

    assert latest_table(tmp_path / "out") == {f"k{i}".encode(): (i, f"v{i}".encode()) for i in range(5)}
    assert [(s.stops_at, s.reason, s.producer_id, s.first_offset, s.high_watermark) for s in summary.stops] == [
        (5, "transaction marker not below the high watermark", 11, 5, 8)]
    assert summary.stops[0].describe() == (
        "ledger-0: the read_committed view stops at offset 5: producer 11's transaction from offset 5 has its "
        "marker at or above the high watermark 8 (not yet replicated)")


def test_latest_stops_at_the_high_watermark(tmp_path: Path) -> None:
    part = build_hanging_txn_partition(tmp_path / "logs", high_watermark=3)

    summary = export_parquet([part], tmp_path / "out", latest=True)

    assert latest_table(tmp_path / "out") == {f"k{i}".encode(): (i, f"v{i}".encode()) for i in range(3)}
    assert summary.stops[0].describe() == (
        "ledger-0: the read_committed view stops at offset 3: the high watermark "
        "(replication-offset-checkpoint; the log ends at 20)")


def test_latest_without_a_high_watermark_is_bounded_by_the_open_transaction_and_says_so(tmp_path: Path) -> None:
    part = build_hanging_txn_partition(tmp_path / "logs", high_watermark=None)

    summary = export_parquet([part], tmp_path / "out", latest=True)

    assert latest_table(tmp_path / "out")[b"k1"] == (6, b"committed-6")
    assert summary.as_dict()["stops"][0]["high_watermark"] is None
    assert summary.stops[0].describe().endswith(
        "until it ends); no high watermark in replication-offset-checkpoint: bounded by the last stable "
        "offset and the log end only")


def test_the_plain_export_still_holds_every_stored_record(tmp_path: Path) -> None:
    part = build_hanging_txn_partition(tmp_path / "logs", high_watermark=8)

    summary = export_parquet([part], tmp_path / "out")

    assert [row["offset"] for row in pq.read_table(tmp_path / "out").to_pylist()] == list(range(20))
    assert summary.stops == () and summary.as_dict()["stops"] == []
