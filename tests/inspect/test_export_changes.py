"""``kcompact export`` of a segment that changes while it is exported: its check and its rows must be of the same
file. Cut at a batch boundary between the check and the export, a segment still parses, only shorter: without
the size and identity taken at the listing (``kcompact.segment.stamp``), 110 of its 143 rows were exported, exit 0.

Local files and objects behind ``s3://`` (moto's S3 server on 127.0.0.1) are changed between the passes through
the export's own seams (``list_segments``, then ``check_segments``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.inspect import export
from kcompact.segment.log_file import LogFile
from tests.builders import PartitionBuilder
from tests.counting_s3 import upload_log_dir

pq = pytest.importorskip("pyarrow.parquet", reason="kcompact export needs pyarrow (pip install '.[export]')")

BATCHES, PER_BATCH, KEPT = 13, 11, 10  # 143 rows; a cut after the 10th batch leaves 110
SEGMENT = "00000000000000000000.log"


def build_batched(log_dir: Path, topic: str = "orders") -> Path:
    """A partition whose first segment holds :data:`BATCHES` batches of :data:`PER_BATCH` records, then an
    empty active segment; returns that first segment."""
    b = PartitionBuilder(topic, 0)
    for i in range(BATCHES):
        b.batch([(f"k{i}-{j}".encode(), f"{topic}-v{i}-{j}".encode()) for j in range(PER_BATCH)])
    b.roll()
    return b.write(log_dir) / SEGMENT


def cut_bytes(data: bytes) -> bytes:
    """``data`` (a segment's bytes) cut at the batch boundary after :data:`KEPT` batches."""
    with LogFile(_spooled(data)) as log:
        end = [batch.position + batch.size_in_bytes for batch in log.iter_batches()][KEPT - 1]
    return data[:end]


def _spooled(data: bytes) -> Any:
    class Source:
        path = Path("/cut")
        size_in_bytes = len(data)

        def read(self, start: int, end: int) -> bytes:
            return data[start:end]

    return Source()


def cut(segment: Path) -> None:
    segment.write_bytes(cut_bytes(segment.read_bytes()))


def after(monkeypatch: pytest.MonkeyPatch, seam: str, change: Callable[[], None]) -> None:
    """``change`` runs right after the export's ``seam`` (``list_segments`` or ``check_segments``) returns."""
    real = getattr(export, seam)

    def changing(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        change()
        return found

    monkeypatch.setattr(export, seam, changing)


def run_export(*args: str) -> Result:
    return CliRunner(env={"COLUMNS": "80"}).invoke(cli, ["export", *args], prog_name="kcompact",
                                                   catch_exceptions=False)


def test_the_cut_leaves_a_segment_that_parses_short(tmp_path: Path) -> None:
    """What makes the cut silent without the check: the shorter file is a sound segment."""
    segment = build_batched(tmp_path / "logs")
    cut(segment)

    result = run_export(str(segment.parent), "--output", str(tmp_path / "out"), "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["records"] == KEPT * PER_BATCH


def test_a_local_segment_cut_between_the_check_and_the_export_is_an_error_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment = build_batched(tmp_path / "logs")
    after(monkeypatch, "check_segments", lambda: cut(segment))

    result = run_export(str(segment.parent), "--output", str(tmp_path / "out"))

    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"kcompact: error: {segment}: changed while it was read (a file being "
                                    "written or replaced); expected it as listed, ")
    assert f"found {segment.stat().st_size} bytes" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


@pytest.mark.parametrize("change", ["cut", "replaced by a copy"])
def test_a_segment_changed_before_the_check_leaves_its_partition_out_and_exports_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    segment = build_batched(tmp_path / "logs", "orders")
    build_batched(tmp_path / "logs", "users")

    def replaced() -> None:  # the same bytes, another file: renamed over it, as a copy that finished would be
        shutil.copy2(segment, segment.with_suffix(".tmp"))
        os.replace(segment.with_suffix(".tmp"), segment)

    after(monkeypatch, "list_segments", lambda: cut(segment) if change == "cut" else replaced())

    result = run_export(str(tmp_path / "logs"), "--output", str(tmp_path / "out"), "--json")

    assert result.exit_code == 2, result.output
    summary = json.loads(result.stdout)
    assert [f["partition_dir"] for f in summary["failures"]] == [str(segment.parent)]
    assert summary["failures"][0]["error"].startswith(f"{segment}: changed while it was read")
    assert (summary["partitions"], summary["records"]) == (1, BATCHES * PER_BATCH)
    assert set(pq.read_table(tmp_path / "out").column("topic").to_pylist()) == {"users"}


@pytest.fixture
def uploaded(s3_endpoint: str, tmp_path: Path) -> tuple[str, dict[str, Any], list[str]]:
    """A log dir of one batched partition in a new bucket: its URL, storage options and CLI flags."""
    build_batched(tmp_path / "src")
    url, options = upload_log_dir(s3_endpoint, tmp_path / "src")
    flags = [arg for key, value in options.items() for arg in ("--storage-option", f"{key}={value}")]
    return url, options, flags


def cut_object(url: str, options: dict[str, Any]) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    fs.pipe_file(url, cut_bytes(fs.cat_file(url)))


@pytest.mark.parametrize("seam, latest", [
    ("check_segments", False),  # each pass reads the object by range
    ("list_segments", False),
    ("list_segments", True),  # --latest copies the partition once, after the listing, and reads the copy
], ids=lambda v: v if isinstance(v, str) else ("latest" if v else "all"))
def test_an_object_cut_between_the_passes_is_an_error_naming_it_and_nothing_is_written(
    uploaded: tuple[str, dict[str, Any], list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    seam: str, latest: bool
) -> None:
    url, options, flags = uploaded
    obj = f"{url}/orders-0/{SEGMENT}"
    after(monkeypatch, seam, lambda: cut_object(obj, options))
    extra: Sequence[str] = ["--latest"] if latest else []

    result = run_export(url, "--output", str(tmp_path / "out"), *extra, *flags)

    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"kcompact: error: {obj}: changed while it was read")
    assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_an_object_left_alone_exports_every_row(uploaded: tuple[str, dict[str, Any], list[str]],
                                                tmp_path: Path) -> None:
    """The identity the listing takes is the one the reads find again (an ETag, not S3's listed time)."""
    url, _, flags = uploaded

    result = run_export(url, "--output", str(tmp_path / "out"), "--json", *flags)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["records"] == BATCHES * PER_BATCH
