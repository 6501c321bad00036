"""partition_config: every source of a partition's configuration found offline, in Kafka's order.

The hand-built clusters write a real ``__cluster_metadata-0`` log (record values from the encoders in
test_kraft_records), a ``meta.properties`` and a ``server.properties``, so each precedence level is
exercised through the same files a broker leaves.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from kcompact.config.config_keys import CONFIG_KEYS, ConfigScalar, ParsedValue, format_value
from kcompact.config.effective import (
    ASSUME_COMPACT_NOT_APPLIED,
    ASSUMED_COMPACT,
    describe_source,
    partition_config,
)
from kcompact.config.kraft import metadata_state
from kcompact.config.source_files import SERVER_PROPERTIES_ENV
from kcompact.config.topic_config import ConfigValue
from kcompact.errors import ConfigError, CorruptDataError
from kcompact.records.control import ControlRecordType
from kcompact.records.messages.reader import format_uuid
from tests.config.test_kraft_records import (
    encode_config,
    encode_partition,
    encode_topic,
    uuid_bytes,
)
from tests.config.test_metadata_state import control, write_log
from tests.conftest import real_fixture

TOPIC, BROKER = 2, 4
ORDERS_ID = uuid_bytes(11)


def describe_sources(values: Iterable[ConfigValue]) -> list[str]:
    """``key=value (source)`` for each value some source set, e.g. ``segment.bytes=1024 (topic override)``."""
    return [f"{v.key}={format_value(v.value)} ({describe_source(v)})"
            for v in values if v.value is not None and v.source != "default"]


@pytest.fixture(autouse=True)
def _no_server_properties_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(SERVER_PROPERTIES_ENV, raising=False)
    yield


def make_log_dir(root: Path, *, node: int | None = 1, cluster_id: str = "cluster-a",
                 metadata: list[list[bytes]] | None = None, metadata_base: int = 0,
                 partitions: tuple[str, ...] = ("orders-0",)) -> Path:
    """A log dir with meta.properties, an optional metadata log and empty partition dirs."""
    log_dir = root / "logs"
    log_dir.mkdir(parents=True)
    meta = f"version=1\ncluster.id={cluster_id}\n" + (f"node.id={node}\n" if node is not None else "")
    (log_dir / "meta.properties").write_text(meta)
    if metadata is not None:
        write_log(log_dir / "__cluster_metadata-0", metadata_base, metadata)
    for name in partitions:
        (log_dir / name).mkdir()
    return log_dir


def snapshot_without_its_tail(metadata_dir: Path) -> int:
    """Turn a metadata partition whose one ``.log`` starts at 0 into a KRaft snapshot of that log, with
    the segment after it gone but for its index files (a copy that lost the log after the newest
    snapshot). Returns the offset of the last record the snapshot holds."""
    log = metadata_dir / f"{0:020d}.log"
    end = metadata_state.load_metadata_state(metadata_dir).end_offset
    (metadata_dir / f"{end:020d}-{1:010d}.checkpoint").write_bytes(
        control(0, ControlRecordType.SNAPSHOT_HEADER) + log.read_bytes()
        + control(end, ControlRecordType.SNAPSHOT_FOOTER))
    for old in metadata_dir.glob(f"{0:020d}.*"):
        old.unlink()
    for kind in ("index", "timeindex"):  # the segment the broker wrote after the snapshot: its .log is gone
        (metadata_dir / f"{end:020d}.{kind}").write_bytes(b"")
    return end - 1


def set_topic_id(partition_dir: Path, topic_id: bytes) -> None:
    (partition_dir / "partition.metadata").write_text(f"version: 0\ntopic_id: {format_uuid(topic_id)}")


def every_level_metadata() -> list[list[bytes]]:
    """Topic overrides, this broker's (1), another broker's (2) and the cluster-default configs."""
    return [
        [encode_topic("orders", ORDERS_ID), encode_partition(ORDERS_ID, 0)],
        [encode_config(TOPIC, "orders", "min.compaction.lag.ms", "20"),
         encode_config(TOPIC, "orders", "delete.retention.ms", "21")],
        [encode_config(BROKER, "1", "log.cleaner.min.compaction.lag.ms", "30"),
         encode_config(BROKER, "1", "log.cleaner.delete.retention.ms", "31"),
         encode_config(BROKER, "1", "log.roll.ms", "32"),
         encode_config(BROKER, "2", "log.cleaner.max.compaction.lag.ms", "99")],
        [encode_config(BROKER, "", "log.cleaner.min.compaction.lag.ms", "40"),
         encode_config(BROKER, "", "log.cleaner.delete.retention.ms", "41"),
         encode_config(BROKER, "", "log.roll.ms", "42"),
         encode_config(BROKER, "", "log.cleaner.max.compaction.lag.ms", "43")],
    ]  # fmt: skip


SERVER_PROPERTIES = (
    "log.cleaner.min.compaction.lag.ms=50\n"
    "log.cleaner.delete.retention.ms=51\n"
    "log.roll.ms=52\n"
    "log.cleaner.max.compaction.lag.ms=53\n"
    "log.retention.hours=2\n"
    "log.cleanup.policy=compact,delete\n"
)


def test_every_level_in_kafkas_order(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, metadata=every_level_metadata())
    set_topic_id(log_dir / "orders-0", ORDERS_ID)
    props = tmp_path / "server.properties"
    props.write_text(SERVER_PROPERTIES)
    effective = partition_config(log_dir / "orders-0", cli_overrides={"min.compaction.lag.ms": "10"},
                                 server_properties=props)
    assert describe_sources(effective.values) == [
        "cleanup.policy=compact,delete (server.properties: log.cleanup.policy)",
        "segment.ms=32 (dynamic config of broker 1: log.roll.ms)",
        "min.compaction.lag.ms=10 (--config)",
        "max.compaction.lag.ms=43 (dynamic cluster default: log.cleaner.max.compaction.lag.ms)",
        "delete.retention.ms=21 (topic override)",
        "retention.ms=7200000 (server.properties: log.retention.hours)",
    ]
    config = effective.config
    assert (config.min_compaction_lag_ms, config.delete_retention_ms, config.segment_ms) == (10, 21, 32)
    assert (config.max_compaction_lag_ms, config.retention_ms) == (43, 7200000)
    assert config.is_compacted and config.has_delete
    assert config.segment_jitter_ms == 0 and effective.value("segment.jitter.ms").source == "default"
    assert effective.value("segment.ms").source == "broker:1"
    assert effective.notes == []  # every source was read, nothing assumed
    assert (effective.node_id, effective.topic_id) == (1, format_uuid(ORDERS_ID))
    assert effective.metadata_dir == log_dir / "__cluster_metadata-0" and effective.metadata_complete


def test_each_level_falls_to_the_next_when_the_one_above_is_absent(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, metadata=every_level_metadata()[:1] + every_level_metadata()[3:],
                           node=2)  # fmt: skip
    props = tmp_path / "server.properties"
    props.write_text(SERVER_PROPERTIES)
    effective = partition_config(log_dir / "orders-0", cli_overrides={}, server_properties=props)
    sources = {v.key: (v.value, v.source) for v in effective.values}
    assert sources["min.compaction.lag.ms"] == (40, "cluster-default")
    assert sources["delete.retention.ms"] == (41, "cluster-default")
    (log_dir / "__cluster_metadata-0" / f"{0:020d}.log").unlink()
    effective = partition_config(log_dir / "orders-0", cli_overrides={}, server_properties=props)
    sources = {v.key: (v.value, v.source) for v in effective.values}
    assert sources["min.compaction.lag.ms"] == (50, "server.properties")
    assert effective.notes[0] == ("the metadata log's history is incomplete: no snapshot and no "
                                  "log segment; nothing to replay")
    props.write_text("")
    effective = partition_config(log_dir / "orders-0", cli_overrides={}, server_properties=props)
    assert effective.value("min.compaction.lag.ms").source == "default"


def test_server_properties_from_env_and_argument_wins(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    log_dir = make_log_dir(tmp_path, metadata=[[encode_topic("orders", ORDERS_ID)]])
    (tmp_path / "env.properties").write_text("log.cleaner.delete.retention.ms=7\n")
    (tmp_path / "arg.properties").write_text("log.cleaner.delete.retention.ms=8\n")
    monkeypatch.setenv(SERVER_PROPERTIES_ENV, str(tmp_path / "env.properties"))
    from_env = partition_config(log_dir / "orders-0", cli_overrides={})
    assert from_env.config.delete_retention_ms == 7
    assert from_env.server_properties == tmp_path / "env.properties"
    from_arg = partition_config(log_dir / "orders-0", cli_overrides={},
                                server_properties=tmp_path / "arg.properties")
    assert from_arg.config.delete_retention_ms == 8
    monkeypatch.setenv(SERVER_PROPERTIES_ENV, str(tmp_path / "missing.properties"))
    with pytest.raises(ConfigError, match="missing.properties: cannot read properties file"):
        partition_config(log_dir / "orders-0", cli_overrides={})


KNOWN_DEFAULT = ("cleanup.policy: no topic override, dynamic config or --config sets it, so a broker uses "
                 "Kafka's default 'delete'")
NO_SERVER_PROPERTIES = ("; server.properties was not given (--server-properties), and a log.cleanup.policy "
                        "there would change this")


def test_cleanup_policy_is_kafkas_default_without_a_source_and_compact_only_when_assumed(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, metadata=[[encode_topic("orders", ORDERS_ID)]])
    effective = partition_config(log_dir / "orders-0", cli_overrides={})
    assert effective.config.cleanup_policy == ("delete",) and not effective.config.is_compacted
    assert effective.value("cleanup.policy").source == "default" and effective.topic_config_unknown is None
    assert effective.notes == [KNOWN_DEFAULT + NO_SERVER_PROPERTIES]
    assert effective.known_policy == effective.value("cleanup.policy")
    # a known default is no unknown policy: --assume-compact leaves it delete, and says so
    declined = partition_config(log_dir / "orders-0", cli_overrides={}, assume_compact=True)
    assert declined.config.cleanup_policy == ("delete",) and not declined.config.is_compacted
    assert declined.notes == [KNOWN_DEFAULT + NO_SERVER_PROPERTIES, ASSUME_COMPACT_NOT_APPLIED]
    (log_dir / "ghost-0").mkdir()  # a topic the (complete) metadata log does not know: unknown
    assumed = partition_config(log_dir / "ghost-0", cli_overrides={}, assume_compact=True)
    assert assumed.config.cleanup_policy == ("compact",) and assumed.known_policy is None
    assert assumed.value("cleanup.policy").source == "assume-compact" and assumed.notes[-1] == ASSUMED_COMPACT
    assert describe_sources(assumed.values) == ["cleanup.policy=compact (--assume-compact)"]
    props = tmp_path / "server.properties"
    props.write_text("log.cleanup.policy=delete\n")
    explicit = partition_config(log_dir / "orders-0", cli_overrides={}, server_properties=props,
                                assume_compact=True)  # an explicit source always wins
    assert explicit.config.cleanup_policy == ("delete",) and not explicit.config.is_compacted
    assert explicit.value("cleanup.policy").source == "server.properties" and explicit.notes == []
    cli = partition_config(log_dir / "orders-0", cli_overrides={"cleanup.policy": "delete"})
    assert cli.config.cleanup_policy == ("delete",) and cli.notes == []
    props.write_text("log.retention.hours=1\n")
    known = partition_config(log_dir / "orders-0", cli_overrides={}, server_properties=props)
    assert known.notes == [KNOWN_DEFAULT]  # server.properties was read and has no log.cleanup.policy


def test_a_policy_an_incomplete_history_gives_is_only_last_known(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, metadata=[
        [encode_topic("orders", ORDERS_ID), encode_partition(ORDERS_ID, 0)],
        [encode_config(TOPIC, "orders", "cleanup.policy", "compact,delete"),
         encode_config(TOPIC, "orders", "segment.ms", "5")],
        [encode_config(BROKER, "1", "log.cleaner.delete.retention.ms", "6")]])
    set_topic_id(log_dir / "orders-0", ORDERS_ID)
    last = snapshot_without_its_tail(log_dir / "__cluster_metadata-0")

    effective = partition_config(log_dir / "orders-0", cli_overrides={})

    assert last == 4 and effective.metadata_complete is False
    assert describe_sources(effective.values) == [
        "cleanup.policy=compact,delete (topic override, last known at metadata offset 4)",
        "segment.ms=5 (topic override, last known at metadata offset 4)",
        ("delete.retention.ms=6 (dynamic config of broker 1: log.cleaner.delete.retention.ms, last known at "
         "metadata offset 4)"),
    ]
    assert effective.known_policy is None  # unknown for what clean may do
    assert effective.notes[-1] == (
        "cleanup.policy=compact,delete (topic override, last known at metadata offset 4): records of the "
        "metadata log are missing from disk (or unread) after what was read, and one may have changed it; "
        "kcompact treats the policy as unknown (clean compacts it only with --assume-compact or --config "
        "cleanup.policy=..., and runs no retention on it)")
    values = {v["key"]: v for v in effective.as_dict()["values"]}
    assert values["cleanup.policy"]["last_known_at_metadata_offset"] == 4
    assert values["segment.jitter.ms"]["last_known_at_metadata_offset"] is None  # Kafka's default: current
    assumed = partition_config(log_dir / "orders-0", cli_overrides={}, assume_compact=True)
    assert assumed.config.cleanup_policy == ("compact",) and assumed.value("cleanup.policy").source == "assume-compact"
    given = partition_config(log_dir / "orders-0", cli_overrides={"cleanup.policy": "compact"})
    assert given.value("cleanup.policy").last_known_offset is None and given.known_policy is None


def test_an_internal_topics_last_known_policy_is_the_one_the_broker_creates_it_with(tmp_path: Path) -> None:
    offsets_id = uuid_bytes(12)
    log_dir = make_log_dir(tmp_path, partitions=("__consumer_offsets-3",), metadata=[
        [encode_topic("__consumer_offsets", offsets_id)],
        [encode_config(TOPIC, "__consumer_offsets", "cleanup.policy", "compact")]])
    snapshot_without_its_tail(log_dir / "__cluster_metadata-0")

    effective = partition_config(log_dir / "__consumer_offsets-3", cli_overrides={})

    assert effective.config.is_compacted and effective.value("cleanup.policy").source == "assumed"
    assert effective.notes[-1].endswith(
        "; __consumer_offsets is an internal topic the broker creates with cleanup.policy=compact, so "
        "kcompact assumes that")


def test_metadata_log_dir_from_server_properties(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, metadata=[[encode_topic("orders", ORDERS_ID),
                                                encode_config(TOPIC, "orders", "segment.ms", "5")]])
    elsewhere = tmp_path / "meta"
    elsewhere.mkdir()
    write_log(elsewhere / "__cluster_metadata-0", 0, [[
        encode_topic("orders", ORDERS_ID), encode_config(TOPIC, "orders", "segment.ms", "6")]])
    props = tmp_path / "server.properties"
    props.write_text(f"metadata.log.dir={elsewhere}\nlog.dirs={log_dir}\n")
    effective = partition_config(log_dir / "orders-0", cli_overrides={}, server_properties=props)
    assert effective.config.segment_ms == 6
    assert effective.metadata_dir == elsewhere / "__cluster_metadata-0"
    assert any("the one beside the partition" in note for note in effective.notes)
    props.write_text(f"metadata.log.dir={tmp_path / 'gone'}\n")
    fallback = partition_config(log_dir / "orders-0", cli_overrides={}, server_properties=props)
    assert fallback.config.segment_ms == 5
    assert any("which does not exist here; looking beside the partition" in n for n in fallback.notes)


@pytest.mark.parametrize("given", ["meta", "meta/__cluster_metadata-0"])
def test_metadata_dir_argument(tmp_path: Path, given: str) -> None:
    log_dir = make_log_dir(tmp_path)
    (tmp_path / "meta").mkdir()
    write_log(tmp_path / "meta" / "__cluster_metadata-0", 0, [[
        encode_topic("orders", ORDERS_ID), encode_config(TOPIC, "orders", "segment.ms", "9")]])
    effective = partition_config(log_dir / "orders-0", cli_overrides={},
                                 metadata_dir=tmp_path / given)
    assert effective.config.segment_ms == 9 and effective.value("segment.ms").source == "topic"


def test_missing_metadata_dir_argument_and_other_cluster_are_errors(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, metadata=[[encode_topic("orders", ORDERS_ID)]])
    with pytest.raises(ConfigError, match="no metadata log; expected metadata.log.dir"):
        partition_config(log_dir / "orders-0", cli_overrides={}, metadata_dir=tmp_path)
    other = make_log_dir(tmp_path / "b", cluster_id="cluster-b",
                         metadata=[[encode_topic("orders", ORDERS_ID)]])
    with pytest.raises(ConfigError, match="metadata log of another cluster; expected cluster.id "
                                          "cluster-a"):
        partition_config(log_dir / "orders-0", cli_overrides={}, metadata_dir=other)


def test_no_metadata_log_is_noted_and_internal_topics_assume_compact(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, partitions=("orders-0", "__transaction_state-3"))
    plain = partition_config(log_dir / "orders-0", cli_overrides={})
    assert plain.metadata_dir is None and plain.metadata_complete is None
    assert "no KRaft metadata log" in plain.notes[0] and plain.config.cleanup_policy == ("delete",)
    assert plain.notes[1] == ("cleanup.policy: Kafka's default 'delete' unless the topic overrides it, and "
                              "its overrides are unknown (no KRaft metadata log was found)")
    assert plain.topic_config_unknown == "no KRaft metadata log was found"
    internal = partition_config(log_dir / "__transaction_state-3", cli_overrides={})
    assert internal.config.is_compacted and internal.value("cleanup.policy").source == "assumed"
    assert len(internal.notes) == 2 and internal.topic_config_unknown is None
    assert "__transaction_state is an internal topic the broker creates" in internal.notes[1]
    props = tmp_path / "server.properties"
    props.write_text("log.cleanup.policy=delete\n")  # the topic's own override beats it
    internal = partition_config(log_dir / "__transaction_state-3", cli_overrides={},
                                server_properties=props)
    assert internal.config.cleanup_policy == ("compact",)
    forced = partition_config(log_dir / "__transaction_state-3", server_properties=props,
                              cli_overrides={"cleanup.policy": "delete"})
    assert forced.config.cleanup_policy == ("delete",)


def test_unknown_or_stale_topic_id_falls_back(tmp_path: Path) -> None:
    new_id = uuid_bytes(12)
    log_dir = make_log_dir(tmp_path, metadata=[[
        encode_topic("orders", new_id), encode_config(TOPIC, "orders", "segment.ms", "5")]])
    set_topic_id(log_dir / "orders-0", ORDERS_ID)  # an older incarnation of "orders"
    effective = partition_config(log_dir / "orders-0", cli_overrides={})
    assert effective.value("segment.ms").source == "default"
    assert effective.topic_id == format_uuid(ORDERS_ID)
    assert effective.notes[0] == (
        f"partition.metadata names topic id {format_uuid(ORDERS_ID)} but the live topic orders has "
        f"id {format_uuid(new_id)} (a deleted incarnation, or another cluster's files): its topic "
        "overrides are unknown and the broker-level sources decide; give the topic's configs with "
        "--config")
    (log_dir / "gone-0").mkdir()
    set_topic_id(log_dir / "gone-0", uuid_bytes(13))
    gone = partition_config(log_dir / "gone-0", cli_overrides={})
    assert "is not a live topic in the metadata log:" in gone.notes[0]
    (log_dir / "orders-0" / "partition.metadata").write_text("version: 0\ntopic_id: nope\n")
    with pytest.raises(CorruptDataError, match="partition.metadata: invalid topic id; expected 22 characters"):
        partition_config(log_dir / "orders-0", cli_overrides={})


def test_incomplete_history_uses_what_it_saw_and_says_so(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, metadata_base=500, metadata=[[
        encode_topic("orders", ORDERS_ID), encode_config(TOPIC, "orders", "segment.ms", "5"),
        encode_config(BROKER, "1", "log.cleaner.delete.retention.ms", "6")]])
    effective = partition_config(log_dir / "orders-0", cli_overrides={})
    assert (effective.config.segment_ms, effective.config.delete_retention_ms) == (5, 6)
    assert effective.metadata_complete is False
    # only the beginning is missing: what was read is the latest word on it, not merely last known
    assert effective.value("segment.ms").last_known_offset is None
    assert effective.notes[0].startswith("the metadata log's history is incomplete: no snapshot "
                                         "and the metadata log starts at offset 500, not 0")
    (log_dir / "__consumer_offsets-4").mkdir()
    offsets = partition_config(log_dir / "__consumer_offsets-4", cli_overrides={})
    assert "topic __consumer_offsets is not in the metadata log (its history is incomplete)" in (
        offsets.notes[1])
    assert offsets.value("cleanup.policy").source == "assumed"


def test_node_id_sources(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, node=None, metadata=[[
        encode_config(BROKER, "3", "log.cleaner.delete.retention.ms", "6")]])
    unknown = partition_config(log_dir / "orders-0", cli_overrides={})
    assert unknown.node_id is None and unknown.config.delete_retention_ms == 86400000
    assert "dynamic configs exist for broker 3 but this log dir's node id is unknown" in (
        unknown.notes[0])
    props = tmp_path / "server.properties"
    props.write_text("node.id=3\n")
    from_props = partition_config(log_dir / "orders-0", cli_overrides={}, server_properties=props)
    assert from_props.node_id == 3 and from_props.config.delete_retention_ms == 6
    (log_dir / "meta.properties").write_text("version=1\ncluster.id=cluster-a\nnode.id=4\n")
    mismatch = partition_config(log_dir / "orders-0", cli_overrides={}, server_properties=props)
    assert mismatch.node_id == 4 and "kcompact uses the log dir's node 4" in mismatch.notes[0]
    (log_dir / "meta.properties").write_text("node.id=four\n")
    with pytest.raises(ConfigError, match=r"meta.properties: node.id=four: not a valid int"):
        partition_config(log_dir / "orders-0", cli_overrides={})


def test_bad_values_and_names_are_config_errors(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    log_dir = make_log_dir(tmp_path, metadata=[[
        encode_topic("orders", ORDERS_ID),
        encode_config(TOPIC, "orders", "min.cleanable.dirty.ratio", "1.5")]])
    with pytest.raises(ConfigError, match="topic override: min.cleanable.dirty.ratio=1.5: must be "
                                          "between 0.0 and 1.0"):
        partition_config(log_dir / "orders-0", cli_overrides={})
    monkeypatch.chdir(log_dir / "orders-0")
    with pytest.raises(ConfigError, match=f"{log_dir / 'orders-0'}: topic override"):
        partition_config(".", cli_overrides={})  # found by its absolute name
    (log_dir / "not-a-partition").mkdir()
    with pytest.raises(ConfigError, match="not a partition directory"):
        partition_config(log_dir / "not-a-partition", cli_overrides={})


def test_internal_segment_bytes_is_the_segment_size_and_noted(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, metadata=[[
        encode_topic("orders", ORDERS_ID), encode_config(TOPIC, "orders", "segment.bytes", "1048576"),
        encode_config(TOPIC, "orders", "internal.segment.bytes", "1024")]])
    effective = partition_config(log_dir / "orders-0", cli_overrides={"cleanup.policy": "compact"})
    assert effective.config.segment_bytes == 1024
    assert effective.notes == [("internal.segment.bytes=1024 (topic override) sets the segment size; "
                               "segment.bytes is not used (Kafka's LogConfig.segmentSize)")]


def test_metadata_partition_itself_is_not_assumed_compact(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, metadata=[[encode_topic("orders", ORDERS_ID)]])
    effective = partition_config(log_dir / "__cluster_metadata-0", cli_overrides={})
    assert effective.config.cleanup_policy == ("delete",)
    assert effective.notes == [("__cluster_metadata is KRaft's own log (metadata.log.* broker "
                               "configs govern it); no cleaner touches it")]


def test_metadata_log_is_replayed_once_per_log_dir(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    names = tuple(f"orders-{i}" for i in range(300))
    log_dir = make_log_dir(tmp_path, metadata=every_level_metadata(), partitions=names)
    calls: list[Path] = []
    real_load = metadata_state.load_metadata_state

    def counting(directory: str | os.PathLike[str]) -> metadata_state.MetadataState:
        calls.append(Path(directory))
        return real_load(directory)

    monkeypatch.setattr(metadata_state, "load_metadata_state", counting)
    configs = [partition_config(log_dir / n, cli_overrides={}) for n in names]
    assert len(calls) == 1  # one replay serves all 300 partitions
    assert {c.config.delete_retention_ms for c in configs} == {21}
    write_log(log_dir / "__cluster_metadata-0", 9, [[
        encode_config(TOPIC, "orders", "delete.retention.ms", "22")]])  # a new segment: re-read
    assert partition_config(log_dir / "orders-0", cli_overrides={}).config.delete_retention_ms == 22
    assert len(calls) == 2


def test_as_dict_is_json(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, metadata=every_level_metadata())
    effective = partition_config(log_dir / "orders-0", cli_overrides={})
    data = json.loads(json.dumps(effective.as_dict()))
    by_key = {v["key"]: v for v in data["values"]}
    assert by_key["segment.ms"] == {"key": "segment.ms", "value": "32", "source": "broker:1",
                                    "synonym": "log.roll.ms", "last_known_at_metadata_offset": None}
    assert by_key["internal.segment.bytes"]["value"] is None
    assert data["node_id"] == 1 and data["metadata_complete"] is True
    assert data["notes"] == [KNOWN_DEFAULT + NO_SERVER_PROPERTIES] and data["topic_config_unknown"] is None


# --- broker-written log dirs ---------------------------------------------------------------------

OFFSETS_SOURCES = [
    "cleanup.policy=compact (topic override)",
    "segment.bytes=104857600 (topic override)",
    "compression.type=producer (topic override)",
]


def test_real_consumer_offsets_resolves_its_topic_override() -> None:
    partition = real_fixture("kraft37-consumer-offsets", "__consumer_offsets-6")
    effective = partition_config(partition, cli_overrides={})
    assert effective.config.cleanup_policy == ("compact",)
    assert effective.value("cleanup.policy").source == "topic"
    assert effective.config.segment_bytes == 104857600
    assert describe_sources(effective.values) == OFFSETS_SOURCES
    assert effective.topic_id == "gSnfpEbtQfSDpxM2lhEn9A" and effective.metadata_complete
    assert effective.node_id is None and effective.notes == []  # no meta.properties, no dynamic


def test_real_complete_log_dir_every_partition() -> None:
    log_dir = real_fixture("bitnami2024-rolled-logdir")
    partitions = sorted(p for p in log_dir.iterdir() if p.is_dir())
    configs = {p.name: partition_config(p, cli_overrides={}) for p in partitions}
    assert len(configs) == 55 and configs["__consumer_offsets-0"].node_id == 1
    for name, effective in configs.items():
        if name.startswith("__consumer_offsets-"):
            assert describe_sources(effective.values) == OFFSETS_SOURCES and not effective.notes
    for name in ("test-0", "first-0", "sensor-data-0", "sensor-data-topic-0"):
        assert configs[name].config.cleanup_policy == ("delete",)  # what the broker uses
        assert configs[name].value("cleanup.policy").source == "default"
        assert configs[name].notes == [KNOWN_DEFAULT + NO_SERVER_PROPERTIES]
        assert configs[name].topic_id is not None and configs[name].topic_config_unknown is None


def test_real_incomplete_history_is_reported_and_falls_back() -> None:
    partition = real_fixture("kraft37-cleaned-logdir", "__consumer_offsets-31")
    effective = partition_config(partition, cli_overrides={"delete.retention.ms": "1000"})
    assert effective.metadata_complete is False and effective.node_id == 1
    assert effective.notes == [
        ("the metadata log's history is incomplete: no snapshot and the metadata log starts at "
        "offset 1725413, not 0; topics and configs set before it are unknown"),
        ("topic id dqK7-AskTSux4so_l6jJXg (partition.metadata) is not a live topic in the metadata "
        "log (its history is incomplete): its topic overrides are unknown and the broker-level "
        "sources decide; give the topic's configs with --config"),
        ("__consumer_offsets is an internal topic the broker creates with the topic configs "
        "cleanup.policy=compact, compression.type=producer and segment.bytes=<offsets.topic.segment.bytes>; "
        "its topic configuration is unknown here, so kcompact assumes them, with segment.bytes=104857600 "
        "(offsets.topic.segment.bytes, Kafka's default)"),
    ]
    assert describe_sources(effective.values) == [
        "cleanup.policy=compact (assumed by kcompact)",
        "segment.bytes=104857600 (assumed by kcompact: offsets.topic.segment.bytes, Kafka's default)",
        "delete.retention.ms=1000 (--config)", "compression.type=producer (assumed by kcompact)"]
    user_topic = partition_config(partition.parent / "topic_transactions-0", cli_overrides={})
    assert user_topic.config.cleanup_policy == ("delete",) and user_topic.topic_config_unknown is not None
    assert user_topic.notes[-1].startswith("cleanup.policy: Kafka's default 'delete' unless the topic "
                                           "overrides it, and its overrides are unknown (topic id ")


def test_real_zookeeper_log_dir_has_no_metadata_log() -> None:
    partition = real_fixture("confluent512-lz4-logdir", "__consumer_offsets-0")
    effective = partition_config(partition, cli_overrides={})
    assert effective.node_id == 1001 and effective.metadata_dir is None  # broker.id, v0
    assert effective.notes[0].startswith("no KRaft metadata log (")
    assert effective.config.is_compacted and effective.value("cleanup.policy").source == "assumed"


def test_partitions_sharing_their_sources_resolve_them_once(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from kcompact.config import topic_config

    names = tuple(f"orders-{i}" for i in range(200)) + ("payments-0",)
    log_dir = make_log_dir(tmp_path, metadata=[
        *every_level_metadata(), [encode_topic("payments", uuid_bytes(12)), encode_partition(uuid_bytes(12), 0),
                                  encode_config(TOPIC, "payments", "delete.retention.ms", "77")]],
        partitions=names)
    parsed: list[str] = []
    from kcompact.config.config_keys import parse_value as real_parse


    def counting(name: str, raw: ConfigScalar, **kwargs: int | None) -> ParsedValue:
        parsed.append(name)
        return real_parse(name, raw, **kwargs)

    monkeypatch.setattr(topic_config, "parse_value", counting)
    cli = {"segment.ms": "123457"}  # sources no other test resolved: nothing remembered yet
    configs = [partition_config(log_dir / n, cli_overrides=cli) for n in names]
    assert len(parsed) < 6 * len(CONFIG_KEYS)  # two topics, each once with and once without the cli's
    assert {c.config.delete_retention_ms for c in configs[:-1]} == {21}
    assert configs[-1].config.delete_retention_ms == 77
    assert [v.source for v in configs[0].values] == [v.source for v in configs[1].values]
    configs[0].values.clear()  # each caller owns its list
    again = partition_config(log_dir / "orders-0", cli_overrides=cli)
    assert again.value("delete.retention.ms").source == "topic" and again.config == configs[1].config
