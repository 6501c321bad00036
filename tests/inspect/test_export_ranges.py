"""Exports of a log dir behind a URL read only what they need, by byte range: each Spark task of ``spark
export`` its split's segment bytes (the functions its tasks run, here in-process), ``kcompact export`` each
segment once per pass (the check, the export), and the segments are listed with one listing per log dir.
Counted by an S3-protocol server on 127.0.0.1 (moto's) that records the bytes it serves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.inspect.export import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    CommittedView,
    SegmentRef,
    iter_split_columns,
    list_segments,
    split_report,
    split_segments,
)
from kcompact.segment.names import segment_file_name
from tests.counting_s3 import CountingS3, upload_log_dir
from tests.spark.logdirs import build_log_dir, build_partition

SPLIT_BYTES = 600  # a split of one or two of these small segments


@pytest.fixture(scope="module")
def copies(counting_s3: CountingS3, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    """A log dir of partitions of four segments (transactions committed, aborted and open among them), on
    local disk and uploaded to a new bucket: its path, its URL and the storage options that read it."""
    local = build_log_dir(tmp_path_factory.mktemp("ranges") / "logs", 3)
    build_partition(local, "pending", 0, open_txn=True)
    url, options = upload_log_dir(counting_s3.endpoint, local)
    return local, url, options


def key(ref: SegmentRef) -> str:
    return f"{ref.partition_dir.split('://', 1)[1]}/{segment_file_name(ref.base_offset, 'log')}"


def local_refs(split: tuple[SegmentRef, ...], url: str, local: Path) -> tuple[SegmentRef, ...]:
    return tuple(SegmentRef(ref.partition_dir.replace(url, str(local)), ref.base_offset, ref.size_in_bytes)
                 for ref in split)


def rows(chunks: Any) -> list[tuple[Any, ...]]:
    return [row for columns in chunks for row in zip(*columns.values(), strict=True)]


def test_the_segments_of_a_log_dir_are_listed_with_one_request(
        counting_s3: CountingS3, copies: tuple[Path, str, dict[str, Any]]) -> None:
    local, url, options = copies
    counting_s3.clear()

    refs = list_segments([url], options)

    assert len(counting_s3.listings()) == 1
    assert counting_s3.reads() == []
    assert [(r.partition_dir.replace(url, str(local)), r.base_offset, r.size_in_bytes) for r in refs] == [
        (r.partition_dir, r.base_offset, r.size_in_bytes) for r in list_segments([local])]


def test_each_split_reads_its_own_segment_bytes_and_nothing_else(
        counting_s3: CountingS3, copies: tuple[Path, str, dict[str, Any]]) -> None:
    local, url, options = copies
    splits = split_segments(list_segments([url], options), SPLIT_BYTES)
    assert len(splits) > len({ref.partition_dir for ref in list_segments([url], options)})  # partitions cut

    for split in splits:
        own = {key(ref): ref.size_in_bytes for ref in split}
        counting_s3.clear()
        assert split_report(split, options) == ([], [])
        assert counting_s3.bytes_by_key() == own  # the checking task
        counting_s3.clear()
        read = rows(iter_split_columns(split, READ_UNCOMMITTED, storage_options=options))
        assert counting_s3.bytes_by_key() == own  # the reading task
        assert read == rows(iter_split_columns(local_refs(split, url, local), READ_UNCOMMITTED)) != []


def test_a_read_committed_split_given_its_views_reads_its_own_bytes(
        counting_s3: CountingS3, copies: tuple[Path, str, dict[str, Any]]) -> None:
    local, url, options = copies
    refs = list_segments([url], options)
    views = {ref.partition_dir: CommittedView.of(ref.partition_dir, options) for ref in refs}

    for split in split_segments(refs, SPLIT_BYTES):
        counting_s3.clear()
        read = rows(iter_split_columns(split, READ_COMMITTED, storage_options=options, views=views))
        assert counting_s3.bytes_by_key() == {key(ref): ref.size_in_bytes for ref in split}
        assert read == rows(iter_split_columns(local_refs(split, url, local), READ_COMMITTED))


def test_a_view_travels_as_json_and_reads_the_same_rows(copies: tuple[Path, str, dict[str, Any]]) -> None:
    local, _url, _options = copies
    refs = list_segments([local])
    for part in dict.fromkeys(ref.partition_dir for ref in refs):
        view = CommittedView.of(part)
        assert CommittedView.from_dict(json.loads(json.dumps(view.as_dict()))) == view
        assert any(view.spans.values()) and view.stop.partition_dir == part  # the aborted transaction


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), prog_name="kcompact", catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_kcompact_export_of_a_url_reads_each_segment_once_per_pass_and_writes_the_local_rows(
        counting_s3: CountingS3, copies: tuple[Path, str, dict[str, Any]], tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    local, url, options = copies
    flags = [arg for k, v in options.items() for arg in ("--storage-option", f"{k}={v}")]
    refs = list_segments([url], options)
    counting_s3.clear()

    remote = run("export", url, "--output", str(tmp_path / "remote"), "--json", *flags)

    assert counting_s3.bytes_by_key() == {key(ref): 2 * ref.size_in_bytes for ref in refs}  # check, export
    on_disk = run("export", str(local), "--output", str(tmp_path / "local"), "--json")
    assert remote[0] == on_disk[0] == 0, remote[2]
    table = pq.read_table(tmp_path / "remote" / "part-00000.parquet").to_pylist()
    assert table == pq.read_table(tmp_path / "local" / "part-00000.parquet").to_pylist() != []
    drop = ("elapsed_s", "output")
    assert ({k: v for k, v in json.loads(remote[1]).items() if k not in drop}
            == {k: v for k, v in json.loads(on_disk[1]).items() if k not in drop})


def test_inspect_dirty_ratio_of_a_url_reads_no_file_twice_and_says_what_it_says_on_disk(
        counting_s3: CountingS3, copies: tuple[Path, str, dict[str, Any]]) -> None:
    local, url, options = copies
    flags = [arg for k, v in options.items() for arg in ("--storage-option", f"{k}={v}")]
    sizes = {f"{url.split('://', 1)[1]}/{p.relative_to(local)}": p.stat().st_size
             for p in local.rglob("*") if p.is_file()}
    counting_s3.clear()

    remote = run("inspect", "dirty-ratio", url, "--now-ms", "1800000000000", "--json", *flags)

    read = counting_s3.bytes_by_key()
    assert {k: n for k, n in read.items() if n != sizes[k]} == {}  # every file read once, whole, at most
    on_disk = run("inspect", "dirty-ratio", str(local), "--now-ms", "1800000000000", "--json")
    assert remote == (0, on_disk[1].replace(str(local), url), on_disk[2].replace(str(local), url))


def test_a_segment_shorter_than_listed_is_one_line_naming_its_url(
        counting_s3: CountingS3, copies: tuple[Path, str, dict[str, Any]], tmp_path: Path) -> None:
    import s3fs

    local, url, options = copies
    ref = list_segments([url], options)[1]
    s3fs.S3FileSystem(**options).pipe_file(key(ref), b"\x00" * 20)  # not even a batch header: a cut copy
    try:
        code, out, err = run("export", f"{ref.partition_dir}", "--output", str(tmp_path / "out"),
                             *[a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")])
    finally:
        s3fs.S3FileSystem(**options).put_file(
            str(local / ref.partition_dir.rsplit("/", 1)[1] / segment_file_name(ref.base_offset, "log")), key(ref))
    assert (code, out) == (2, "")
    assert err.startswith(f"kcompact: error: {ref.partition_dir}/{segment_file_name(ref.base_offset, 'log')}"), err
    assert len(err.splitlines()) == 1 and "/logs/" not in err.replace(url, "")


@pytest.mark.parametrize("latest", [False, True], ids=["every-record", "latest"])
def test_a_corrupt_partition_behind_a_url_is_named_by_its_url_as_on_disk(
        counting_s3: CountingS3, tmp_path: Path, latest: bool) -> None:

    local = build_log_dir(tmp_path / "logs", 2)
    segment = sorted((local / "orders-0").glob("*.log"))[1]
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0xFF  # a value byte of its last batch: the CRC fails
    segment.write_bytes(bytes(data))
    url, options = upload_log_dir(counting_s3.endpoint, local)
    flags = [arg for k, v in options.items() for arg in ("--storage-option", f"{k}={v}")]
    more = ["--latest"] if latest else []

    on_disk = run("export", str(local), "--output", str(tmp_path / "a"), *more)
    remote = run("export", url, "--output", str(tmp_path / "b"), *more, *flags)

    assert on_disk[0] == remote[0] == 2
    # the same line, naming the URL; the repair it advises runs on a local copy (repair refuses URLs)
    expected = on_disk[2].replace(f"`kcompact repair {local}/orders-0`",
                                  f"`kcompact repair` on a local copy of {local}/orders-0")
    assert "`kcompact repair` on a local copy of s3://" in remote[2]
    assert remote[2] == expected.replace(str(local), url) != ""
    assert f"{url}/orders-0/{segment.name} at position" in remote[2] and "kcompact-mirror" not in remote[2]
