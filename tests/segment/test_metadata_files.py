"""partition.metadata."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from kcompact.errors import CorruptDataError
from kcompact.segment.metadata_files import (
    read_partition_metadata,
    read_partition_topic_id,
)
from kcompact.segment.names import parse_partition_dir_name
from tests.conftest import real_fixture


def test_every_real_partition_metadata_decodes_and_is_shared_by_a_topics_partitions() -> None:
    files = sorted(real_fixture().glob("*/*/partition.metadata"))
    assert len(files) == 109
    ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in files:
        name = parse_partition_dir_name(path.parent.name)
        assert name is not None
        ids[(path.parent.parent.name, name.topic)].add(read_partition_metadata(path))
    assert all(len(topic_ids) == 1 for topic_ids in ids.values())
    assert ids[("bitnami2024-rolled-logdir", "__cluster_metadata")] == {"AAAAAAAAAAAAAAAAAAAAAQ"}
    cleaned = real_fixture("kraft37-cleaned-logdir", "__consumer_offsets-31", "partition.metadata")
    assert read_partition_metadata(cleaned) == "dqK7-AskTSux4so_l6jJXg"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            b"version: 1\ntopic_id: dqK7-AskTSux4so_l6jJXg",
            "unknown partition metadata version; expected 0, found '1'",
        ),
        (
            b"version:0\ntopic_id: dqK7-AskTSux4so_l6jJXg",
            "line 1: malformed; expected \"<key>: <value>\", found 'version:0'",
        ),
        (b"version: 0\n", "line 2: malformed"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "invalid topic id"),  # the zero id
        (b"version: 0\ntopic_id: dqK7-AskTSux4so_l6jJ", "invalid topic id"),  # 15 bytes
        (b"version: 0\ntopic_id: dqK7+AskTSux4so/l6jJXg", "invalid topic id"),  # not URL-safe
        (b"version: 0\ntopic_id: \xff", "not UTF-8 text"),
    ],
)
def test_bad_partition_metadata(tmp_path: Path, text: bytes, fragment: str) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(text)
    with pytest.raises(CorruptDataError, match=fragment) as info:
        read_partition_metadata(path)
    assert str(info.value).startswith(str(path))


def test_partition_metadata_as_kafka_writes_it_with_a_padded_or_crlf_variant(
    tmp_path: Path,
) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(b"version: 0\r\ntopic_id: dqK7-AskTSux4so_l6jJXg==\r\n")
    assert read_partition_metadata(path) == "dqK7-AskTSux4so_l6jJXg=="


def test_partition_topic_id_is_kafkas_printed_form_and_none_without_the_file(tmp_path: Path) -> None:
    assert read_partition_topic_id(tmp_path) is None
    (tmp_path / "partition.metadata").write_bytes(b"version: 0\r\ntopic_id: dqK7-AskTSux4so_l6jJXg==\r\n")
    assert read_partition_topic_id(tmp_path) == "dqK7-AskTSux4so_l6jJXg"
    (tmp_path / "partition.metadata").write_bytes(b"version: 7\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA")
    with pytest.raises(CorruptDataError, match="unknown partition metadata version; expected 0"):
        read_partition_topic_id(tmp_path)
