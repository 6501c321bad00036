"""File and directory names of a log dir: formatting, parsing, every name in the real fixtures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.segment.names import (
    SEGMENT_KINDS,
    TEMP_SUFFIXES,
    PartitionDirName,
    SegmentFileName,
    format_offset,
    parse_partition_dir_name,
    parse_segment_file_name,
    segment_file_name,
)
from tests.conftest import real_fixture

UUID_HEX = "8a1f0c7e2b3d4e5f60718293a4b5c6d7"


@pytest.mark.parametrize(
    ("offset", "text"),
    [
        (0, "00000000000000000000"),
        (368769, "00000000000000368769"),
        (2**63 - 1, "09223372036854775807"),
    ],
)
def test_format_offset_pads_to_20_digits(offset: int, text: str) -> None:
    assert format_offset(offset) == text


@pytest.mark.parametrize("offset", [-1, 2**63])
def test_format_offset_rejects_offsets_outside_int64(offset: int) -> None:
    with pytest.raises(ValueError, match="offset must be"):
        format_offset(offset)


def test_temp_suffix_goes_after_the_extension() -> None:
    assert segment_file_name(42, "log", "cleaned") == "00000000000000000042.log.cleaned"
    assert segment_file_name(7, "timeindex", "swap") == "00000000000000000007.timeindex.swap"
    assert segment_file_name(3, "snapshot", "deleted") == "00000000000000000003.snapshot.deleted"


@pytest.mark.parametrize(("kind", "suffix"), [("checkpoint", None), ("log", "tmp"), ("LOG", None)])
def test_segment_file_name_rejects_unknown_kind_or_suffix(kind: str, suffix: str | None) -> None:
    with pytest.raises(ValueError, match="must be one of"):
        segment_file_name(0, kind, suffix)


@given(
    offset=st.integers(0, 2**63 - 1),
    kind=st.sampled_from(SEGMENT_KINDS),
    suffix=st.sampled_from((None, *TEMP_SUFFIXES)),
)
def test_segment_file_name_round_trips(offset: int, kind: str, suffix: str | None) -> None:
    name = segment_file_name(offset, kind, suffix)
    assert parse_segment_file_name(name) == SegmentFileName(offset, kind, suffix, name)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("00000000000000839130-0000000001.checkpoint", (839130, "checkpoint", None)),
        ("00000000000000839130-0000000001.checkpoint.deleted", (839130, "checkpoint", "deleted")),
        ("123.log", (123, "log", None)),  # Kafka reads whatever digits precede the first '.'
    ],
)
def test_parse_special_segment_names(name: str, expected: tuple[int, str, str | None]) -> None:
    parsed = parse_segment_file_name(name)
    assert parsed is not None
    assert (parsed.base_offset, parsed.kind, parsed.temp_suffix) == expected


@pytest.mark.parametrize(
    "name",
    [
        "leader-epoch-checkpoint",
        "partition.metadata",
        "quorum-state",
        "cleaner-offset-checkpoint.tmp",
        "00000000000000839130-0000000001.checkpoint.part",
        "00000000000000000000.log.tmp",
        "00000000000000000000.cleaned",
        "abc.log",
        ".log",
        "99999999999999999999.log",  # beyond int64
    ],
)
def test_other_files_do_not_parse(name: str) -> None:
    assert parse_segment_file_name(name) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orders-3", PartitionDirName("orders", 3, "live", None)),
        ("__consumer_offsets-31", PartitionDirName("__consumer_offsets", 31, "live", None)),
        ("my.topic-with-dashes-12", PartitionDirName("my.topic-with-dashes", 12, "live", None)),
        (f"orders-3.{UUID_HEX}-delete", PartitionDirName("orders", 3, "delete", UUID_HEX)),
        (f"a.b-c-0.{UUID_HEX}-future", PartitionDirName("a.b-c", 0, "future", UUID_HEX)),
        (
            f"orders-2147483647.{UUID_HEX}-stray",
            PartitionDirName("orders", 2**31 - 1, "stray", UUID_HEX),
        ),
    ],
)
def test_parse_partition_dir_name(name: str, expected: PartitionDirName) -> None:
    assert parse_partition_dir_name(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "remote-log-index-cache",
        "orders",
        "orders-",
        "-3",
        "orders-3-delete",
        "orders-x",
        "orders-2147483648",
        f"orders-3.{UUID_HEX}-deleted",
        f"orders-x.{UUID_HEX}-delete",
        "orders-٣",  # a non-ASCII digit
    ],
)
def test_non_partition_dirs_do_not_parse(name: str) -> None:
    assert parse_partition_dir_name(name) is None


def test_every_real_fixture_name_is_understood() -> None:
    root = real_fixture()
    known_files = {"leader-epoch-checkpoint", "partition.metadata", "quorum-state"}
    segments = 0
    for log_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for partition_dir in sorted(p for p in log_dir.iterdir() if p.is_dir()):
            parsed_dir = parse_partition_dir_name(partition_dir.name)
            assert parsed_dir is not None, partition_dir
            assert f"{parsed_dir.topic}-{parsed_dir.partition}" == partition_dir.name
            assert parsed_dir.kind == "live"
            for file in partition_dir.iterdir():
                parsed = parse_segment_file_name(file.name)
                if parsed is None:
                    assert file.name in known_files, file
                    continue
                segments += 1
                canonical = segment_file_name(parsed.base_offset, parsed.kind, parsed.temp_suffix)
                assert canonical == file.name
    assert segments == 135  # .log, .index, .timeindex and .snapshot files listed in PROVENANCE
