"""``kcompact export``: Parquet written in-process, with progress, and nothing left at --output on failure."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.inspect.export import export_parquet
from tests.spark.logdirs import build_log_dir, build_partition

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
    assert {(t, p) for t, p in zip(table.column("topic").to_pylist(), table.column("partition").to_pylist())} \
        == {(topic, int(partition))}


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
