"""``clean`` and ``inspect dirty-ratio`` take each partition's own configuration (partition_config):
topic overrides from the metadata log, server.properties, and the skip/refusal of partitions not known
to be compacted (Kafka's default policy is delete; ``--assume-compact``; keyless evidence)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cleaner.logdir.run import PartitionSkip, clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cli.main import cli
from kcompact.config.effective import ASSUMED_COMPACT
from kcompact.config.source_files import SERVER_PROPERTIES_ENV
from kcompact.config.sources import ConfigSources
from kcompact.errors import RefusedError
from kcompact.inspect.dirty_ratio import dirty_ratio_report
from kcompact.spark.plan import plan_spark_clean
from tests.builders import BASE_TS, PartitionBuilder
from tests.cleaner.round.test_clean_failures import log_dir_digest
from tests.config.test_effective import snapshot_without_its_tail
from tests.config.test_kraft_records import encode_config, encode_topic, uuid_bytes
from tests.config.test_metadata_state import snapshot_only, write_log
from tests.conftest import copy_tree_writable, real_fixture

NOW = BASE_TS + 10_000_000
TOPIC = 2


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SERVER_PROPERTIES_ENV, raising=False)


def log_dir_with_overrides(tmp_path: Path) -> Path:
    """orders (compact, ratio 0.9), events (delete) and plain (no override) in one KRaft log dir."""
    log_dir = tmp_path / "logs"
    for topic in ("orders", "events", "plain"):
        builder = PartitionBuilder(topic, 0)
        for _ in range(2):
            builder.batch([(f"k{i}".encode(), b"v" * 30) for i in range(5)]).roll()
        builder.batch([(b"k0", b"active")]).write(log_dir)
    write_log(log_dir / "__cluster_metadata-0", 0, [[
        encode_topic("orders", uuid_bytes(1)), encode_topic("events", uuid_bytes(2)),
        encode_topic("plain", uuid_bytes(3)),
        encode_config(TOPIC, "orders", "cleanup.policy", "compact"),
        encode_config(TOPIC, "orders", "min.cleanable.dirty.ratio", "0.9"),
        encode_config(TOPIC, "events", "cleanup.policy", "delete")]])  # fmt: skip
    return log_dir


def test_dirty_ratio_uses_each_topics_config(tmp_path: Path) -> None:
    log_dir = log_dir_with_overrides(tmp_path)
    rows = {r.topic: r for r in dirty_ratio_report([log_dir], cli_overrides={}, now_ms=NOW)}
    assert (rows["orders"].cleanup_policy, rows["orders"].min_cleanable_dirty_ratio) == ("compact", 0.9)
    assert ASSUMED_COMPACT not in rows["orders"].warnings and rows["orders"].eligible
    assert (rows["events"].cleanup_policy, rows["events"].blocking_rule) == ("delete", "cleanup-policy")
    assert (rows["plain"].cleanup_policy, rows["plain"].blocking_rule) == ("delete", "cleanup-policy")
    assert any("so a broker uses Kafka's default 'delete'" in w for w in rows["plain"].warnings)


def test_clean_log_dir_applies_retention_only_to_an_explicit_delete_topic(tmp_path: Path) -> None:
    log_dir = log_dir_with_overrides(tmp_path)
    run = clean_path(log_dir, cli_overrides={}, options=CleanOptions(now_ms=NOW, dry_run=True))
    by_topic = {r.topic: r for r in run.results}
    assert sorted(by_topic) == ["events", "orders"] and not run.failures
    events = by_topic["events"]
    assert events.range is None and events.end_offset is None  # never compacted
    assert events.skipped_reason == "cleanup.policy=delete has no 'compact': retention only"
    assert events.retention is not None
    assert [skip.partition_dir for skip in run.skipped] == [str(log_dir / "plain-0")]
    # nothing about configuration (each builder's write keeps only its own high-watermark entry: counted)
    assert [n for n in run.notes if not n.startswith("no replication-offset-checkpoint entry for ")] == []


def test_a_policy_only_last_known_runs_neither_compaction_nor_retention(tmp_path: Path) -> None:
    """The same log dir, its metadata log now a snapshot whose log after it is gone: orders' compact and
    events' delete are as of that snapshot, and a later record may have changed either."""
    log_dir = log_dir_with_overrides(tmp_path)
    snapshot_without_its_tail(log_dir / "__cluster_metadata-0")
    before = log_dir_digest(log_dir)

    run = clean_path(log_dir, cli_overrides={"retention.ms": "1"}, options=CleanOptions(now_ms=NOW, roll=True))

    assert run.results == [] and not run.failures
    reasons = {Path(skip.partition_dir).name: skip.reason for skip in run.skipped}
    assert sorted(reasons) == ["events-0", "orders-0", "plain-0"]
    assert reasons["events-0"].startswith("cleanup.policy is not known: delete (topic override, last known at "
                                          "metadata offset 5) is where what was read of the metadata log ends")
    assert reasons["orders-0"].startswith("cleanup.policy is not known: compact (topic override, last known")
    assert log_dir_digest(log_dir) == before
    assumed = clean_path(log_dir, cli_overrides={}, assume_compact=True, options=CleanOptions(now_ms=NOW))
    assert sorted(r.topic for r in assumed.results if r.end_offset is not None) == ["orders", "plain"]
    assert [Path(skip.partition_dir).name for skip in assumed.skipped] == ["events-0"]  # an explicit delete


def test_spark_clean_plans_a_policy_only_last_known_as_an_unknown_one(tmp_path: Path) -> None:
    log_dir = log_dir_with_overrides(tmp_path)
    snapshot_without_its_tail(log_dir / "__cluster_metadata-0")
    options = CleanOptions(now_ms=NOW)

    alone = plan_spark_clean([log_dir / "orders-0"], ConfigSources({}), options=options)
    walked = plan_spark_clean([log_dir], ConfigSources({}), options=options)
    assumed = plan_spark_clean([log_dir / "orders-0"], ConfigSources({}, assume_compact=True), options=options)

    assert alone.tasks == [] and "cleanup.policy is not known: compact (topic override, last known" in (
        alone.failures[0].error)
    assert walked.tasks == [] and len(walked.skipped) == 3
    assert [task.topic for task in assumed.tasks] == ["orders"]


def test_clean_partition_with_a_delete_policy_from_server_properties_runs_retention_only(
    tmp_path: Path,
) -> None:
    log_dir = log_dir_with_overrides(tmp_path)
    props = tmp_path / "server.properties"
    props.write_text("log.cleanup.policy=delete\n")
    run = clean_path(log_dir / "plain-0", cli_overrides={}, server_properties=props,
                     options=CleanOptions(now_ms=NOW, dry_run=True))
    [result] = run.results
    assert result.range is None and result.stats.records_read == 0
    assert result.skipped_reason == "cleanup.policy=delete has no 'compact': retention only"
    run = clean_path(log_dir / "orders-0", cli_overrides={}, server_properties=props,
                     options=CleanOptions(now_ms=NOW, dry_run=True))
    assert run.notes == [] and len(run.results) == 1


# -- a partition whose policy no source sets is not compacted (Kafka's default is delete) --

DEFAULT_DELETE = (
    "cleanup.policy=delete (Kafka's default: no topic override in the metadata log, no dynamic config, "
    "no --config, server.properties not given); a broker never compacts this topic"
)


def keyless_partition(log_dir: Path, topic: str = "clicks") -> Path:
    """A topic written without keys, as most delete topics are (a clean would delete every record)."""
    builder = PartitionBuilder(topic, 0)
    for _ in range(2):
        builder.batch([(None, b"event-%d" % i) for i in range(4)]).roll()
    return builder.batch([(None, b"last")]).write(log_dir)


def test_log_dir_skips_a_partition_with_kafkas_default_policy_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    log_dir = log_dir_with_overrides(tmp_path)
    before = log_dir_digest(log_dir / "plain-0")
    run = clean_path(log_dir, cli_overrides={}, options=CleanOptions(now_ms=NOW, roll=True))
    assert not run.failures and sorted(r.topic for r in run.results) == ["events", "orders"]
    assert run.skipped == [PartitionSkip(str(log_dir / "plain-0"), (
        f"{DEFAULT_DELETE}; all 11 records sampled carry a key; clean this partition alone with --config "
        "cleanup.policy=compact if it really is compacted"))]
    assert log_dir_digest(log_dir / "plain-0") == before  # not even rolled


def test_partition_named_alone_with_kafkas_default_policy_is_refused(tmp_path: Path) -> None:
    log_dir = log_dir_with_overrides(tmp_path)
    before = log_dir_digest(log_dir)
    with pytest.raises(RefusedError) as err:
        clean_path(log_dir / "plain-0", cli_overrides={}, options=CleanOptions(now_ms=NOW, roll=True))
    assert str(err.value) == (f"{log_dir / 'plain-0'}: {DEFAULT_DELETE}; all 11 records sampled carry a key; "
                              "give --config cleanup.policy=compact if it really is compacted")
    assert log_dir_digest(log_dir) == before


def test_policy_unknown_without_a_metadata_log_is_skipped_with_the_reason(tmp_path: Path) -> None:
    part = PartitionBuilder("orders", 0).batch([(b"k", b"v1")]).roll().batch([(b"k", b"v2")]).write(tmp_path)
    with pytest.raises(RefusedError) as err:
        clean_path(part, cli_overrides={}, options=CleanOptions(now_ms=NOW))
    assert str(err.value) == (
        f"{part}: cleanup.policy is not known (no KRaft metadata log was found); Kafka's default is 'delete', "
        "and kcompact compacts only a partition known to be compacted; all 2 records sampled carry a key; "
        "if the topic is compacted, give --config cleanup.policy=compact or --assume-compact to compact it")


def test_assume_compact_compacts_a_keyed_partition_whose_policy_is_unknown(tmp_path: Path) -> None:
    log_dir = log_dir_with_overrides(tmp_path)
    (log_dir / "__cluster_metadata-0" / f"{0:020d}.log").unlink()
    (log_dir / "__cluster_metadata-0").rmdir()  # a ZooKeeper-era log dir: no topic's policy is known
    run = clean_path(log_dir / "plain-0", cli_overrides={}, assume_compact=True,
                     options=CleanOptions(now_ms=NOW))
    [result] = run.results
    assert result.end_offset == 10 and result.stats.superseded_removed == 5
    assert run.notes[-1] == ASSUMED_COMPACT


def test_assume_compact_leaves_a_topic_known_to_be_delete_alone(tmp_path: Path) -> None:
    """A complete metadata log shows plain with no override: its policy is known (Kafka's default
    delete), so --assume-compact, which stands in for an unknown policy, does not apply; no message
    about it suggests --assume-compact."""
    log_dir = log_dir_with_overrides(tmp_path)
    before = log_dir_digest(log_dir / "plain-0")
    run = clean_path(log_dir, cli_overrides={}, assume_compact=True, options=CleanOptions(now_ms=NOW, roll=True))
    assert sorted(r.topic for r in run.results) == ["events", "orders"] and not run.failures
    assert run.skipped == [PartitionSkip(str(log_dir / "plain-0"), (
        f"{DEFAULT_DELETE}; all 11 records sampled carry a key; clean this partition alone with --config "
        "cleanup.policy=compact if it really is compacted"))]
    assert log_dir_digest(log_dir / "plain-0") == before  # not compacted, not even rolled
    with pytest.raises(RefusedError) as err:
        clean_path(log_dir / "plain-0", cli_overrides={}, assume_compact=True, options=CleanOptions(now_ms=NOW))
    assert "--assume-compact" not in str(err.value)
    assert str(err.value).endswith("give --config cleanup.policy=compact if it really is compacted")
    # a --config for the whole log dir does not change a known policy either: only on the partition alone
    run = clean_path(log_dir, cli_overrides={"cleanup.policy": "compact"}, options=CleanOptions(now_ms=NOW))
    assert sorted(r.topic for r in run.results) == ["orders"]
    assert {Path(k.partition_dir).name: k.reason for k in run.skipped} == {
        "events-0": ("cleanup.policy=delete (topic override); the broker's cleaner never compacts it; a "
                     "--config for a whole log dir does not change a known policy: clean this partition alone "
                     "with --config cleanup.policy=compact if it really is compacted"),
        "plain-0": (f"{DEFAULT_DELETE}; a --config for a whole log dir does not change a known policy: clean "
                    "this partition alone with --config cleanup.policy=compact if it really is compacted")}
    assert log_dir_digest(log_dir / "plain-0") == before
    alone = clean_path(log_dir / "plain-0", cli_overrides={"cleanup.policy": "compact"},
                       options=CleanOptions(now_ms=NOW))
    assert alone.results[0].stats.superseded_removed == 5


def test_assume_compact_never_overrides_an_explicit_policy(tmp_path: Path) -> None:
    log_dir = log_dir_with_overrides(tmp_path)
    run = clean_path(log_dir, cli_overrides={}, assume_compact=True, options=CleanOptions(now_ms=NOW, dry_run=True))
    events = next(r for r in run.results if r.topic == "events")
    assert events.range is None and events.skipped_reason == "cleanup.policy=delete has no 'compact': retention only"


def test_keyless_data_is_named_as_evidence_and_refused_even_with_assume_compact(tmp_path: Path) -> None:
    part = keyless_partition(tmp_path)
    before = log_dir_digest(tmp_path)
    with pytest.raises(RefusedError) as err:
        clean_path(part, cli_overrides={}, options=CleanOptions(now_ms=NOW))
    assert "9 of 9 records sampled have no key, as in a topic that is not compacted" in str(err.value)
    run = clean_path(tmp_path, cli_overrides={}, assume_compact=True, options=CleanOptions(now_ms=NOW, roll=True))
    assert run.results == [] and run.skipped == [PartitionSkip(str(part), (
        "cleanup.policy=compact is only assumed (--assume-compact), but 9 of the 9 records of the partition "
        "have no key, and a clean deletes every keyless record it reaches: a compacted topic's records carry "
        "keys, and compaction would delete these; clean this partition alone with --config "
        "cleanup.policy=compact and --allow-keyless-loss to compact it anyway"))]
    assert log_dir_digest(tmp_path) == before
    run = clean_path(tmp_path, cli_overrides={}, assume_compact=True, allow_keyless_loss=True,
                     options=CleanOptions(now_ms=NOW, roll=True))  # an assumption is not enough
    assert run.results == [] and len(run.skipped) == 1 and log_dir_digest(tmp_path) == before
    forced = clean_path(part, cli_overrides={"cleanup.policy": "compact"}, allow_keyless_loss=True,
                        options=CleanOptions(now_ms=NOW))
    assert forced.results[0].stats.invalid_records == 8  # what was acknowledged: keyless records go


def test_broker_log_dir_keeps_its_delete_topics_whole(tmp_path: Path) -> None:
    """The bitnami log dir: a complete KRaft metadata log, no override on its user topics. A broker
    never compacts them; ``clean --roll`` on the log dir cleans __consumer_offsets and leaves them."""
    log_dir = copy_tree_writable(real_fixture("bitnami2024-rolled-logdir"), tmp_path / "logs")
    user_topics = ["first-0", "sensor-data-0", "sensor-data-topic-0"]
    before = {name: log_dir_digest(log_dir / name) for name in user_topics}
    run = clean_path(log_dir, cli_overrides={}, options=CleanOptions(now_ms=NOW, roll=True))
    assert not run.failures
    skipped = {Path(skip.partition_dir).name: skip.reason for skip in run.skipped}
    assert sorted(skipped) == sorted(user_topics + ["test-0"])
    assert all(reason.startswith(DEFAULT_DELETE) for reason in skipped.values())
    assert "11 of 11 records sampled have no key" in skipped["first-0"]
    assert {name: log_dir_digest(log_dir / name) for name in user_topics} == before
    cleaned = [r for r in run.results if r.end_offset is not None]
    assert cleaned and all(r.topic == "__consumer_offsets" for r in cleaned)


def test_a_metadata_log_missing_its_tail_leaves_the_policy_unknown(tmp_path: Path) -> None:
    """The newest snapshot ends at 60500 and the .log segment after it is gone, but a producer snapshot at
    66046 shows the log went further: a record there may have made plain compacted. Its policy is unknown,
    not "a broker never compacts this topic", and --assume-compact (for unknown policies) applies."""
    log_dir = tmp_path / "logs"
    builder = PartitionBuilder("plain", 0)
    builder.batch([(f"k{i}".encode(), b"v") for i in range(5)]).roll()
    builder.batch([(f"k{i}".encode(), b"w") for i in range(5)]).roll().batch([(b"k0", b"x")]).write(log_dir)
    metadata = snapshot_only(tmp_path)  # the same log dir: plain is in the snapshot, with no override
    (metadata / f"{66046:020d}.snapshot").write_bytes(b"")
    (metadata / f"{60500:020d}.index").write_bytes(b"")
    run = clean_path(log_dir, cli_overrides={}, options=CleanOptions(now_ms=NOW))
    [skip] = run.skipped
    assert skip.reason == (
        "cleanup.policy is not known (the metadata log's history is incomplete); Kafka's default is 'delete', "
        "and kcompact compacts only a partition known to be compacted; all 11 records sampled carry a key; "
        "if the topic is compacted, clean it alone with --config cleanup.policy=compact, or give "
        "--assume-compact, to compact it")
    shown = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["config", "show", str(log_dir / "plain-0")],
                                                     catch_exceptions=False)
    assert shown.exit_code == 0 and "(incomplete history)" in shown.stdout and "(complete)" not in shown.stdout
    assert ("00000000000000060500.index is here but its segment 00000000000000060500.log is not"
            in " ".join(shown.stdout.split()))
    assumed = clean_path(log_dir, cli_overrides={}, assume_compact=True, options=CleanOptions(now_ms=NOW))
    assert [r.stats.superseded_removed for r in assumed.results] == [5]
