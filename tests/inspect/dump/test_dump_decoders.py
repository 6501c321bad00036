"""inspect dump decodes __cluster_metadata and __consumer_offsets records; inspect keys names the
consumer groups of an offsets partition.

Expectations are read from the broker-written kraft37-consumer-offsets fixture (a KRaft 3.7 broker
that created __consumer_offsets and committed offsets of one group) or built here byte by byte with
``struct`` from Kafka's message layouts, independently of kcompact.config's decoders.
"""

from __future__ import annotations

import base64
import json
import shutil
import struct
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.inspect.dump import dump_path
from kcompact.inspect.keys import keys_report
from tests.builders import BASE_TS, PartitionBuilder
from tests.conftest import real_fixture

Item = dict[str, Any]
FIXTURE = "kraft37-consumer-offsets"
LOG = "00000000000000000000.log"
GROUP = "DEVSmileCDR"
RECORD_KEYS = ["type", "offset", "timestamp", "key", "value", "headers", "control",
               "coordinator_epoch"]


def records(path: Path) -> list[Item]:
    return [i for i in dump_path(path, records=True) if i["type"] == "record"]


def kafka_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def commit_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey v1: int16 version, group, topic, int32 partition."""
    return struct.pack(">h", 1) + kafka_string(group) + kafka_string(topic) + struct.pack(
        ">i", partition)


def commit_value(offset: int) -> bytes:
    """OffsetCommitValue v3: offset, leader epoch, metadata "", commit timestamp."""
    return struct.pack(">hqi", 3, offset, 7) + kafka_string("") + struct.pack(">q", BASE_TS)


def metadata_key(group: str) -> bytes:
    """GroupMetadataKey v2: int16 version, group."""
    return struct.pack(">h", 2) + kafka_string(group)


def parse_commit_key(raw: bytes) -> tuple[int, str, str, int]:
    """The version, group, topic and partition of an OffsetCommitKey, read by hand."""
    version, glen = struct.unpack_from(">hh", raw, 0)
    group = raw[4 : 4 + glen].decode()
    (tlen,) = struct.unpack_from(">h", raw, 4 + glen)
    topic = raw[6 + glen : 6 + glen + tlen].decode()
    (partition,) = struct.unpack_from(">i", raw, 6 + glen + tlen)
    return version, group, topic, partition


# -- __cluster_metadata --


def test_metadata_records_decode_topic_and_config() -> None:
    part = real_fixture(FIXTURE, "__cluster_metadata-0")
    found = records(part)
    decoded = [r["decoded"] for r in found if r["control"] is None]
    assert decoded and all(d is not None for d in decoded)
    topics = [d for d in decoded if d["type"] == "TOPIC_RECORD"]
    offsets_topic = [t for t in topics if t["data"]["name"] == "__consumer_offsets"]
    assert len(offsets_topic) == 1 and offsets_topic[0]["version"] == 0
    topic_id = offsets_topic[0]["data"]["topicId"]
    assert len(base64.urlsafe_b64decode(topic_id + "==")) == 16  # Kafka's printed Uuid form
    configs = {(d["data"]["resourceName"], d["data"]["name"]): d["data"]["value"]
               for d in decoded if d["type"] == "CONFIG_RECORD"}
    assert configs[("__consumer_offsets", "cleanup.policy")] == "compact"
    assert configs[("__consumer_offsets", "segment.bytes")] == "104857600"


def test_control_records_of_the_metadata_log_have_no_decoded_field() -> None:
    found = records(real_fixture(FIXTURE, "__cluster_metadata-0"))
    control = [r for r in found if r["control"] is not None]
    assert control  # KRaft writes LEADER_CHANGE markers
    assert all(list(r) == RECORD_KEYS for r in control)


def test_a_kraft_snapshot_file_is_dumped_and_decoded(tmp_path: Path) -> None:
    # A .checkpoint holds batches framed exactly like a segment's: the metadata segment stands in
    src = real_fixture(FIXTURE, "__cluster_metadata-0", LOG)
    snapshot = tmp_path / "__cluster_metadata-0" / "00000000000000000420-0000000001.checkpoint"
    snapshot.parent.mkdir()
    shutil.copy(src, snapshot)
    items = list(dump_path(snapshot, records=True))
    assert items[0]["type"] == "file" and items[0]["kind"] == "checkpoint"
    assert not [i for i in items if i["type"] == "problem"]
    names = {r["decoded"]["data"].get("name") for r in items
             if r["type"] == "record" and r["control"] is None
             and r["decoded"]["type"] == "TOPIC_RECORD"}
    assert "__consumer_offsets" in names


# -- __consumer_offsets --


def test_offset_commits_decode_group_topic_and_partition() -> None:
    found = records(real_fixture(FIXTURE, "__consumer_offsets-6"))
    commits = [r for r in found if r["decoded"]["key"]["version"] in (0, 1)]
    assert commits
    for r in commits:
        version, group, topic, partition = parse_commit_key(base64.b64decode(r["key"]))
        assert r["decoded"]["key"] == {"version": version, "data": {
            "group": group, "topic": topic, "partition": partition}}
        value = base64.b64decode(r["value"])
        (value_version, offset) = struct.unpack_from(">hq", value, 0)
        assert r["decoded"]["value"]["version"] == value_version
        assert r["decoded"]["value"]["data"]["offset"] == offset
    assert {r["decoded"]["key"]["data"]["group"] for r in commits} == {GROUP}
    metadata = [r["decoded"] for r in found if r["decoded"]["key"]["version"] == 2]
    assert metadata and all(m["value"]["data"]["protocolType"] == "consumer" for m in metadata)


def test_tombstones_and_undecodable_keys(tmp_path: Path) -> None:
    part = (PartitionBuilder("__consumer_offsets", 0)
            .batch([(commit_key("g", "t", 3), commit_value(42)), (commit_key("g", "t", 3), None),
                    (b"\x00", b"x")])
            .write(tmp_path))
    items = list(dump_path(part, records=True))
    recs = [i for i in items if i["type"] == "record"]
    assert recs[0]["decoded"]["value"] == {"version": 3, "data": {
        "offset": 42, "leaderEpoch": 7, "metadata": "", "commitTimestamp": BASE_TS,
        "expireTimestamp": None}}
    assert recs[1]["decoded"]["value"] is None
    assert recs[2]["decoded"] is None
    problems = [i for i in items if i["type"] == "problem"]
    assert len(problems) == 1
    assert "record at offset 2 does not decode: offsets key too short" in problems[0]["message"]


def test_other_topics_keep_their_record_fields(tmp_path: Path) -> None:
    part = PartitionBuilder("__consumer_offsets_copy", 0).batch(
        [(metadata_key("g"), b"v")]).write(tmp_path)
    assert [list(r) for r in records(part)] == [RECORD_KEYS]


# -- CLI --


def run(*args: str | Path) -> Any:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80"})
    return runner.invoke(cli, [*map(str, args)])


def test_cli_json_records_carry_the_decoded_object() -> None:
    part = real_fixture(FIXTURE, "__consumer_offsets-6")
    result = run("inspect", "dump", "--json", "--records", part)
    assert result.exit_code == 0
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    recs = [line for line in lines if line["type"] == "record"]
    assert len(recs) == 13
    assert all(list(r) == [*RECORD_KEYS, "decoded"] for r in recs)
    assert recs[1]["decoded"]["key"] == {"version": 1, "data": {
        "group": GROUP, "topic": "batch2.work.notification.SHR_PROD.persistence", "partition": 0}}


def test_cli_text_shows_decoded_key_and_payload(tmp_path: Path) -> None:
    part = (PartitionBuilder("__consumer_offsets", 0)
            .batch([(commit_key("g", "t", 3), commit_value(42)), (commit_key("g", "t", 3), None)])
            .write(tmp_path))
    result = run("inspect", "dump", "--records", part / LOG)
    assert result.exit_code == 0
    lines = [line for line in result.stdout.splitlines() if line.startswith("| offset")]
    key = '{"version":1,"data":{"group":"g","topic":"t","partition":3}}'
    assert lines[0].endswith(
        f'key: {key} payload: {{"version":3,"data":{{"offset":42,"leaderEpoch":7,'
        f'"metadata":"","commitTimestamp":{BASE_TS},"expireTimestamp":null}}}}')
    assert lines[1].endswith(f"key: {key} payload: <DELETE>")


def test_cli_undecodable_record_exits_2_and_shows_raw_bytes(tmp_path: Path) -> None:
    part = PartitionBuilder("__consumer_offsets", 0).batch([(b"\x00", b"x")]).write(tmp_path)
    result = run("inspect", "dump", "--records", part)
    assert result.exit_code == 2
    assert "record at offset 0 does not decode" in result.stderr
    assert "payload: x" in result.stdout


# -- inspect keys: consumer groups --


def test_keys_consumer_groups_of_the_real_offsets_partition() -> None:
    part = real_fixture(FIXTURE, "__consumer_offsets-6")
    got = keys_report(part, cli_overrides={}, top=5)
    recs = records(part)
    latest: dict[str, Item] = {}
    for r in recs:
        latest[r["key"]] = r
    commits = [r for r in latest.values()
               if r["decoded"]["key"]["version"] == 1 and r["value"] is not None]
    assert got.consumer_groups is not None
    assert got.consumer_groups.groups == 1 and got.consumer_groups.other_records == 0
    (group,) = got.consumer_groups.top
    assert group.group == GROUP
    assert group.offset_commit_keys == len(commits)
    assert group.records == len(recs) == got.keys.keyed_records
    assert group.duplicate_records == len(recs) - len(latest) == got.keys.duplicate_records
    assert group.duplicate_bytes == got.keys.duplicate_bytes
    assert group.duplicate_bytes < group.size_in_bytes < got.size_in_bytes
    assert list(got.as_dict()["consumer_groups"]["top"][0]) == [
        "group", "offset_commit_keys", "records", "size_in_bytes", "duplicate_records",
        "duplicate_bytes"]


def test_keys_consumer_groups_sorted_by_bytes_cut_at_top(tmp_path: Path) -> None:
    b = PartitionBuilder("__consumer_offsets", 0)
    b.batch([(commit_key("big", "t", p), commit_value(o)) for o in range(3) for p in range(4)])
    b.batch([(commit_key("big", "t", 0), None), (metadata_key("big"), b"\x00\x09")])
    b.batch([(commit_key("small", "t", 0), commit_value(1)), (b"\x00\x63", b"newer")])
    b.batch([(commit_key("mid", "topic-with-a-long-name", p), commit_value(1)) for p in range(2)])
    part = b.write(tmp_path)
    got = keys_report(part, cli_overrides={"cleanup.policy": "compact"}, top=2)
    assert got.consumer_groups is not None
    assert (got.consumer_groups.groups, got.consumer_groups.other_records) == (3, 1)
    assert [g.group for g in got.consumer_groups.top] == ["big", "mid"]
    big = got.consumer_groups.top[0]
    # 12 commits + a tombstone + a metadata record; 9 commits superseded, plus the tombstoned one
    assert (big.records, big.duplicate_records, big.offset_commit_keys) == (14, 9, 3)
    mid = got.consumer_groups.top[1]
    assert (mid.records, mid.duplicate_records, mid.offset_commit_keys) == (2, 0, 2)
    assert keys_report(part, cli_overrides={"cleanup.policy": "compact"},
                       top=0).consumer_groups.top == []  # type: ignore[union-attr]


def test_keys_other_topics_have_no_consumer_groups_section(tmp_path: Path) -> None:
    part = PartitionBuilder("orders", 0).batch([(b"k", b"v")]).write(tmp_path)
    got = keys_report(part, cli_overrides={"cleanup.policy": "compact"})
    assert got.consumer_groups is None and "consumer_groups" not in got.as_dict()


def test_keys_cli_prints_the_groups(tmp_path: Path) -> None:
    part = (PartitionBuilder("__consumer_offsets", 0)
            .batch([(commit_key("g1", "t", 0), commit_value(1))] * 2).write(tmp_path))
    got = keys_report(part, cli_overrides={"cleanup.policy": "compact"})
    assert got.consumer_groups is not None
    group = got.consumer_groups.top[0]
    result = run("inspect", "keys", part, "--config", "cleanup.policy=compact")
    assert result.exit_code == 0
    table = result.stdout[result.stdout.index("consumer groups by bytes (1 in all)"):]
    row = next(line for line in table.splitlines() if "g1" in line)
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    assert cells == [str(group.size_in_bytes), "2", str(group.duplicate_bytes), "1", "1", "g1"]
