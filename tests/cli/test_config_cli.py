"""``kcompact config show``: the table, the JSON, the notes and the exit codes, at COLUMNS=80."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.config.source_files import SERVER_PROPERTIES_ENV
from tests.config.test_effective import (
    SERVER_PROPERTIES,
    every_level_metadata,
    make_log_dir,
    set_topic_id,
    snapshot_without_its_tail,
)
from tests.config.test_kraft_records import uuid_bytes
from tests.conftest import PROJECT_FIXTURES, copy_tree_writable, real_fixture

ENV = {"COLUMNS": "80", SERVER_PROPERTIES_ENV: None}


def run(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(cli, ["config", *args], env={**ENV, **(env or {})},
                              catch_exceptions=False)  # fmt: skip


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def test_show_real_consumer_offsets_table() -> None:
    partition = real_fixture("kraft37-consumer-offsets", "__consumer_offsets-6")
    result = run("show", str(partition), "--config", "delete.retention.ms=5")
    assert result.exit_code == 0
    default = "Kafka's default"
    rows = [
        ("cleanup.policy", "compact", "topic override"),
        ("segment.bytes", "104857600", "topic override"),
        ("segment.ms", "604800000", default),
        ("segment.jitter.ms", "0", default),
        ("segment.index.bytes", "10485760", default),
        ("index.interval.bytes", "4096", default),
        ("min.cleanable.dirty.ratio", "0.5", default),
        ("min.compaction.lag.ms", "0", default),
        ("max.compaction.lag.ms", "9223372036854775807", default),
        ("delete.retention.ms", "5", "--config"),
        ("retention.ms", "604800000", default),
        ("retention.bytes", "-1", default),
        ("max.message.bytes", "1048588", default),
        ("message.timestamp.type", "CreateTime", default),
        ("file.delete.delay.ms", "60000", default),
        ("preallocate", "false", default),
        ("compression.type", "producer", "topic override"),
        ("remote.storage.enable", "false", default),
        ("log.cleaner.dedupe.buffer.size", "134217728", default),
        ("log.cleaner.threads", "1", default),
        ("log.cleaner.io.buffer.load.factor", "0.9", default),
        ("log.cleaner.io.buffer.size", "524288", default),
        ("message.max.bytes", "1048588", default),
        ("producer.id.expiration.ms", "86400000", default),
        ("transaction.max.timeout.ms", "900000", default),
    ]
    assert lines(result.output) == [
        "topic id: gSnfpEbtQfSDpxM2lhEn9A",
        "node id: -",
        "server.properties: -",
        f"metadata log: {partition.parent / '__cluster_metadata-0'} (complete)",
        "configuration of __consumer_offsets-6",
        " key                               ┃ value               ┃ source",
        "━" * 35 + "╇" + "━" * 21 + "╇" + "━" * 17,
        *(f" {key:<33} │ {value:<19} │ {source}" for key, value, source in rows),
    ]


def test_show_incomplete_history_prints_notes() -> None:
    partition = real_fixture("kraft37-cleaned-logdir", "__consumer_offsets-31")
    result = run("show", str(partition))
    out = lines(result.output)
    assert result.exit_code == 0
    assert out[1] == "node id: 1"
    assert out[3].endswith("__cluster_metadata-0 (incomplete history)")
    assert " cleanup.policy                    │ compact             │ assumed by kcompact" in out
    assert out[-3:] == [
        ("note: the metadata log's history is incomplete: no snapshot and the metadata log starts "
        "at offset 1725413, not 0; topics and configs set before it are unknown"),
        ("note: topic id dqK7-AskTSux4so_l6jJXg (partition.metadata) is not a live topic in the "
        "metadata log (its history is incomplete): its topic overrides are unknown and the "
        "broker-level sources decide; give the topic's configs with --config"),
        ("note: " + "__consumer_offsets is an internal topic the broker creates with the topic configs "
         "cleanup.policy=compact, compression.type=producer and segment.bytes=<offsets.topic.segment.bytes>; "
         "its topic configuration is unknown here, so kcompact assumes them, with segment.bytes=104857600 "
         "(offsets.topic.segment.bytes, Kafka's default)"),
    ]


def test_show_json_with_every_option(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "broker", metadata=every_level_metadata())
    set_topic_id(log_dir / "orders-0", uuid_bytes(11))
    props = tmp_path / "server.properties"
    props.write_text(SERVER_PROPERTIES)
    result = run("show", str(log_dir / "orders-0"), "--server-properties", str(props),
                 "--metadata-dir", str(log_dir), "--config", "min.compaction.lag.ms=10", "--json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    sources = {v["key"]: (v["value"], v["source"], v["synonym"]) for v in data["values"]}
    assert sources["min.compaction.lag.ms"] == ("10", "cli", None)
    assert sources["delete.retention.ms"] == ("21", "topic", None)
    assert sources["segment.ms"] == ("32", "broker:1", "log.roll.ms")
    assert sources["max.compaction.lag.ms"] == ("43", "cluster-default",
                                                "log.cleaner.max.compaction.lag.ms")
    assert sources["retention.ms"] == ("7200000", "server.properties", "log.retention.hours")
    assert sources["segment.jitter.ms"] == ("0", "default", None)
    assert data["server_properties"] == str(props) and data["node_id"] == 1
    assert data["metadata_dir"] == str(log_dir / "__cluster_metadata-0")
    assert data["notes"] == [] and data["topic"] == "orders"


def test_show_reads_server_properties_from_the_environment(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path)
    props = tmp_path / "server.properties"
    props.write_text("log.cleaner.delete.retention.ms=77\n")
    result = run("show", str(log_dir / "orders-0"), "--json",
                 env={SERVER_PROPERTIES_ENV: str(props)})
    data = json.loads(result.output)
    assert {"key": "delete.retention.ms", "value": "77", "source": "server.properties",
            "synonym": "log.cleaner.delete.retention.ms", "last_known_at_metadata_offset": None} in data["values"]
    assert {"key": "cleanup.policy", "value": "delete", "source": "default", "synonym": None,
            "last_known_at_metadata_offset": None} in data["values"]
    assert data["notes"][-1] == ("cleanup.policy: Kafka's default 'delete' unless the topic overrides it, "
                                 "and its overrides are unknown (no KRaft metadata log was found)")
    assert data["topic_config_unknown"] == "no KRaft metadata log was found"


def test_show_gives_the_policy_a_broker_would_use_not_an_assumption() -> None:
    """bitnami: a complete metadata log with no override on first-0, and no server.properties given."""
    result = run("show", str(real_fixture("bitnami2024-rolled-logdir", "first-0")))
    out = lines(result.output)
    assert result.exit_code == 0
    assert " cleanup.policy                    │ delete              │ Kafka's default" in out
    assert out[-1] == ("note: cleanup.policy: no topic override, dynamic config or --config sets it, so a "
                       "broker uses Kafka's default 'delete'; server.properties was not given "
                       "(--server-properties), and a log.cleanup.policy there would change this")


def test_show_zookeeper_internal_topics_use_the_segment_size_the_broker_created_them_with(tmp_path: Path) -> None:
    """No metadata log (a ZooKeeper log dir): __consumer_offsets and __transaction_state get the
    segment.bytes the broker passes at creation (offsets.topic.segment.bytes /
    transaction.state.log.segment.bytes, 100 MiB by default), not log.segment.bytes' 1 GiB."""
    log_dir = make_log_dir(tmp_path, partitions=("__consumer_offsets-7", "__transaction_state-2"))
    offsets = run("show", str(log_dir / "__consumer_offsets-7"))
    assert offsets.exit_code == 0
    assert (" segment.bytes                     │ 104857600           │ assumed by kcompact: "
            "offsets.topic.segment.bytes, Kafka's default") in lines(offsets.output)
    props = tmp_path / "server.properties"
    props.write_text("log.segment.bytes=536870912\noffsets.topic.segment.bytes=52428800\n"
                     "transaction.state.log.segment.bytes=20971520\n")
    for name, expected, key in (("__consumer_offsets-7", "52428800", "offsets.topic.segment.bytes"),
                                ("__transaction_state-2", "20971520", "transaction.state.log.segment.bytes")):
        data = json.loads(run("show", str(log_dir / name), "--json", "--server-properties", str(props)).output)
        assert {"key": "segment.bytes", "value": expected, "source": "assumed",
                "synonym": f"{key} in server.properties", "last_known_at_metadata_offset": None} in data["values"]
    txn = json.loads(run("show", str(log_dir / "__transaction_state-2"), "--json").output)
    assert {"key": "segment.bytes", "value": "104857600", "source": "assumed",
            "synonym": "transaction.state.log.segment.bytes, Kafka's default",
            "last_known_at_metadata_offset": None} in txn["values"]
    assert {"key": "compression.type", "value": "uncompressed", "source": "assumed",
            "synonym": None, "last_known_at_metadata_offset": None} in txn["values"]
    forced = json.loads(run("show", str(log_dir / "__transaction_state-2"), "--json",
                            "--config", "segment.bytes=2097152").output)
    assert {"key": "segment.bytes", "value": "2097152", "source": "cli", "synonym": None,
            "last_known_at_metadata_offset": None} in forced["values"]
    props.write_text("offsets.topic.segment.bytes=many\n")
    bad = run("show", str(log_dir / "__consumer_offsets-7"), "--server-properties", str(props))
    assert bad.exit_code == 2 and str(props) in bad.stderr and "many" in bad.stderr


@pytest.mark.parametrize(("text", "reason"), [
    ("version: 7\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n", "unknown partition metadata version; expected 0, found '7'"),
    ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n", ("invalid topic id; expected 22 characters of URL-safe "
                                                       "base64 for a non-zero id, found 'AAAAAAAAAAAAAAAAAAAAAA'")),
])
def test_a_partition_metadata_kafka_refuses_is_a_one_line_error_naming_it(tmp_path: Path, text: str,
                                                                           reason: str) -> None:
    """Kafka's PartitionMetadataFile.read refuses any version but 0 and the zero topic id."""
    log_dir = make_log_dir(tmp_path, metadata=every_level_metadata())
    path = log_dir / "orders-0" / "partition.metadata"
    path.write_text(text)
    result = run("show", str(log_dir / "orders-0"))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"kcompact: error: {path}: {reason}\n"
    data = json.loads(run("show", str(log_dir / "orders-0"), "--json").stdout)
    assert data["error"]["path"] == str(path) and data["error"]["exit_code"] == 2


def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path)
    bad_pair = run("show", str(log_dir / "orders-0"), "--config", "min.cleanable.dirty.ratio=2")
    assert bad_pair.exit_code == 2
    assert bad_pair.stderr == ("kcompact: error: min.cleanable.dirty.ratio=2: must be between 0.0 "
                               "and 1.0\n")
    no_metadata = run("show", str(log_dir / "orders-0"), "--metadata-dir", str(tmp_path))
    assert no_metadata.exit_code == 2 and no_metadata.stdout == ""
    assert no_metadata.stderr.startswith(f"kcompact: error: {tmp_path}: no metadata log; expected")
    not_partition = run("show", str(tmp_path))
    assert not_partition.exit_code == 2
    assert "not a partition directory; expected a name like <topic>-<partition>" in (
        not_partition.stderr)


def test_help() -> None:
    group = run("--help")
    assert group.exit_code == 0
    assert "show  A partition's effective configuration and each value's source." in group.output
    show = run("show", "--help")
    assert show.exit_code == 0
    for fragment in ("Usage: cli config show [OPTIONS] PARTITION_DIR", "--server-properties FILE",
                     "--metadata-dir DIR", "--config KEY=VALUE", "--json", "Exit codes: 0 success"):
        assert fragment in show.output


def test_show_says_a_policy_from_a_snapshot_without_the_log_after_it_is_only_last_known(tmp_path: Path) -> None:
    log_dir = copy_tree_writable(PROJECT_FIXTURES / "sample-logdir", tmp_path / "logs")
    last = snapshot_without_its_tail(log_dir / "__cluster_metadata-0")

    result = run("show", str(log_dir / "orders-0"))

    assert result.exit_code == 0, result.output
    out = lines(result.stdout)
    assert f"metadata log: {log_dir / '__cluster_metadata-0'} (incomplete history)" in out
    (policy,) = [line for line in out if line.startswith(" cleanup.policy")]
    assert [cell.strip() for cell in policy.split("│")] == [
        "cleanup.policy", "compact", f"topic override, last known at metadata offset {last}"]
    assert any(line.startswith(f"note: cleanup.policy=compact (topic override, last known at metadata offset "
                               f"{last}): records of the metadata log are missing from disk")
               for line in out)
    shown = json.loads(run("show", str(log_dir / "orders-0"), "--json").stdout)
    (value,) = [v for v in shown["values"] if v["key"] == "cleanup.policy"]
    assert value == {"key": "cleanup.policy", "value": "compact", "source": "topic", "synonym": None,
                     "last_known_at_metadata_offset": last}
