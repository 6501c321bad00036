"""``--assume-compact`` stands in for an unknown ``cleanup.policy``, never for an explicit one without
``compact``, even one only last known from an incomplete metadata history.

ksqlDB creates its command topic with ``cleanup.policy=delete`` (and ``retention.ms=-1``) and requires it:
compaction would drop every command but the last of each key. With the metadata log after a snapshot gone,
that override is only last known (a later record may have changed it), yet it is explicit: only
``--config cleanup.policy=compact`` given with the partition named alone compacts it, in ``clean``,
``repair --clean`` and ``spark clean``'s plan alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cli.main import cli
from kcompact.config.effective import ASSUME_COMPACT_NOT_APPLIED_EXPLICIT, partition_config
from kcompact.config.source_files import SERVER_PROPERTIES_ENV
from kcompact.config.sources import ConfigSources
from kcompact.errors import RefusedError
from kcompact.repair.repair import RepairOptions, repair_partition
from kcompact.spark.plan import plan_spark_clean
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.cleaner.round.test_clean_failures import log_dir_digest
from tests.config.test_effective import snapshot_without_its_tail
from tests.config.test_kraft_records import encode_config, encode_topic, uuid_bytes
from tests.config.test_metadata_state import write_log

NOW = BASE_TS + 10_000_000
TOPIC, BROKER = 2, 4
COMMANDS = "_confluent-ksql-default__command_topic"


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SERVER_PROPERTIES_ENV, raising=False)


def ksql_log_dir(tmp_path: Path, *configs: tuple[int, str, str, str]) -> Path:
    """A log dir holding ksqlDB's command topic (one key rewritten: a clean would drop 5 commands) and
    ``orders`` (no override), its metadata log a snapshot whose log after it is gone."""
    log_dir = tmp_path / "logs"
    for topic in (COMMANDS, "orders"):
        builder = PartitionBuilder(topic, 0)
        for i in range(5):
            builder.batch([(b"stream/KSQL_PROCESSING_LOG/create", b"command %d" % i)]).roll()
        builder.batch([(b"stream/KSQL_PROCESSING_LOG/create", b"latest")]).write(log_dir)
    write_log(log_dir / "__cluster_metadata-0", 0, [[
        encode_topic(COMMANDS, uuid_bytes(1)), encode_topic("orders", uuid_bytes(2)),
        *(encode_config(kind, name, key, value) for kind, name, key, value in configs)]])
    snapshot_without_its_tail(log_dir / "__cluster_metadata-0")
    return log_dir


COMMAND_TOPIC_DELETE = (
    (TOPIC, COMMANDS, "cleanup.policy", "delete"), (TOPIC, COMMANDS, "retention.ms", "-1"))
LAST_KNOWN_DELETE = (
    "cleanup.policy is not known: delete (topic override, last known at metadata offset 3) is where what was "
    "read of the metadata log ends, and a later record, missing from disk (or unread), may have changed it; "
    "kcompact compacts only a partition known to be compacted, and never on an assumption where the last "
    "known policy is explicit and has no compact (--assume-compact does not apply); all 6 records sampled "
    "carry a key; ")


def test_assume_compact_skips_a_command_topic_whose_last_known_policy_is_delete(tmp_path: Path) -> None:
    log_dir = ksql_log_dir(tmp_path, *COMMAND_TOPIC_DELETE)
    before = log_dir_digest(log_dir / f"{COMMANDS}-0")

    run = clean_path(log_dir, cli_overrides={}, assume_compact=True, options=CleanOptions(now_ms=NOW, roll=True))

    assert [r.topic for r in run.results] == ["orders"] and run.results[0].stats.superseded_removed == 5
    assert [(Path(skip.partition_dir).name, skip.reason) for skip in run.skipped] == [(f"{COMMANDS}-0", (
        LAST_KNOWN_DELETE + "clean this partition alone with --config cleanup.policy=compact if it really "
        "is compacted"))]
    # a --config for the whole log dir does not compact it either
    run = clean_path(log_dir, cli_overrides={"cleanup.policy": "compact"}, options=CleanOptions(now_ms=NOW))
    assert [Path(skip.partition_dir).name for skip in run.skipped] == [f"{COMMANDS}-0"]
    assert run.skipped[0].reason == (
        "cleanup.policy=delete (topic override, last known at metadata offset 3); the broker's cleaner never "
        "compacts it; a --config for a whole log dir does not change an explicit policy: clean this partition "
        "alone with --config cleanup.policy=compact if it really is compacted")
    assert log_dir_digest(log_dir / f"{COMMANDS}-0") == before


def test_assume_compact_refuses_the_command_topic_named_alone(tmp_path: Path) -> None:
    log_dir = ksql_log_dir(tmp_path, *COMMAND_TOPIC_DELETE)
    part = log_dir / f"{COMMANDS}-0"
    before = log_dir_digest(part)

    with pytest.raises(RefusedError) as err:
        clean_path(part, cli_overrides={}, assume_compact=True, options=CleanOptions(now_ms=NOW))
    shown = CliRunner(env={"COLUMNS": "80"}).invoke(cli, ["clean", str(part), "--assume-compact"],
                                                    catch_exceptions=False)

    assert str(err.value) == (f"{part}: {LAST_KNOWN_DELETE}give --config cleanup.policy=compact if it "
                              "really is compacted")
    assert shown.exit_code == 2 and shown.output.count("\n") == 1 and "Traceback" not in shown.output
    assert "--assume-compact does not apply" in shown.output
    assert log_dir_digest(part) == before
    given = clean_path(part, cli_overrides={"cleanup.policy": "compact"}, options=CleanOptions(now_ms=NOW, roll=True))
    assert given.results[0].stats.superseded_removed == 5  # what the user asked for, named alone


@pytest.mark.parametrize("configs", [
    pytest.param(((BROKER, "1", "log.cleanup.policy", "delete"),), id="this-brokers-dynamic-config"),
    pytest.param(((BROKER, "", "log.cleanup.policy", "delete"),), id="dynamic-cluster-default"),
    pytest.param(((TOPIC, COMMANDS, "cleanup.policy", ""),), id="empty-policy"),
])
def test_assume_compact_never_replaces_a_last_known_explicit_policy_without_compact(
    tmp_path: Path, configs: tuple[tuple[int, str, str, str], ...],
) -> None:
    log_dir = ksql_log_dir(tmp_path, *configs)
    (log_dir / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=c\n")
    effective = partition_config(log_dir / f"{COMMANDS}-0", cli_overrides={}, assume_compact=True)
    assert not effective.config.is_compacted and effective.notes[-1] == ASSUME_COMPACT_NOT_APPLIED_EXPLICIT
    before = log_dir_digest(log_dir / f"{COMMANDS}-0")
    run = clean_path(log_dir, cli_overrides={}, assume_compact=True, options=CleanOptions(now_ms=NOW))
    assert f"{COMMANDS}-0" in [Path(skip.partition_dir).name for skip in run.skipped] and not run.failures
    assert COMMANDS not in [r.topic for r in run.results]
    assert log_dir_digest(log_dir / f"{COMMANDS}-0") == before


def test_a_delete_policy_from_server_properties_is_not_assumed_away(tmp_path: Path) -> None:
    log_dir = ksql_log_dir(tmp_path)
    props = tmp_path / "server.properties"
    props.write_text("log.cleanup.policy=delete\n")
    run = clean_path(log_dir / f"{COMMANDS}-0", cli_overrides={}, server_properties=props, assume_compact=True,
                     options=CleanOptions(now_ms=NOW, dry_run=True))
    assert run.results[0].range is None
    assert run.results[0].skipped_reason == "cleanup.policy=delete has no 'compact': retention only"


def test_repair_clean_and_spark_plan_take_the_same_rule(tmp_path: Path) -> None:
    log_dir = ksql_log_dir(tmp_path, *COMMAND_TOPIC_DELETE)
    part = log_dir / f"{COMMANDS}-0"
    before = log_dir_digest(part)

    repaired = repair_partition(part, RepairOptions(clean=True, assume_compact=True, now_ms=NOW,
                                                    backup_dir=tmp_path / "backup"))
    planned = plan_spark_clean([part], ConfigSources({}, assume_compact=True), options=CleanOptions(now_ms=NOW))
    walked = plan_spark_clean([log_dir], ConfigSources({}, assume_compact=True), options=CleanOptions(now_ms=NOW))

    assert repaired.clean is None and repaired.clean_error == (
        f"{part}: {LAST_KNOWN_DELETE}give --config cleanup.policy=compact if it really is compacted (nothing "
        "was changed; no backup kept)")
    assert planned.tasks == [] and "--assume-compact does not apply" in planned.failures[0].error
    assert [task.topic for task in walked.tasks] == ["orders"] and len(walked.skipped) == 1
    assert log_dir_digest(part) == before


def test_an_unknown_policy_value_is_not_compact(tmp_path: Path) -> None:
    """Kafka's ValidList.in(compact, delete) refuses ``Compact``: no policy kcompact can act on, and no
    assumption stands in for it (the partition fails with the value named, left as it was)."""
    log_dir = ksql_log_dir(tmp_path, (TOPIC, COMMANDS, "cleanup.policy", "delete,Compact"))
    before = log_dir_digest(log_dir / f"{COMMANDS}-0")
    run = clean_path(log_dir, cli_overrides={}, assume_compact=True, options=CleanOptions(now_ms=NOW))
    assert [r.topic for r in run.results] == ["orders"]
    assert [f.error for f in run.failures] == [f"{log_dir / COMMANDS}-0: topic override: cleanup.policy="
                                               "delete,Compact: 'Compact' is not one of compact, delete"]
    assert log_dir_digest(log_dir / f"{COMMANDS}-0") == before


def test_repair_of_a_log_dir_takes_its_config_as_a_log_dirs_clean_does(tmp_path: Path) -> None:
    """``repair LOG_DIR --clean --config cleanup.policy=compact`` cleans each partition on its own, but the
    --config was given for the whole log dir: it compacts orders (no override: unknown), never the command
    topic (an explicit delete, only last known)."""
    log_dir = ksql_log_dir(tmp_path, *COMMAND_TOPIC_DELETE)
    before = log_dir_digest(log_dir / f"{COMMANDS}-0")

    done = CliRunner().invoke(cli, ["repair", str(log_dir), "--clean", "--config", "cleanup.policy=compact",
                                    "--now-ms", str(NOW), "--backup-dir", str(tmp_path / "backups"), "--json"],
                              catch_exceptions=False)

    assert done.exit_code == 2  # the command topic's clean refused: said in its row
    rows = {row["partition"]: row for row in json.loads(done.stdout)["rows"]}
    assert rows[f"{COMMANDS}-0"]["status"] == "clean failed" and rows[f"{COMMANDS}-0"]["error"] == (
        f"{log_dir / COMMANDS}-0: cleanup.policy=delete (topic override, last known at metadata offset 3); the "
        "broker's cleaner never compacts it; a --config for a whole log dir does not change an explicit policy: "
        "clean this partition alone with --config cleanup.policy=compact if it really is compacted (nothing was "
        "changed; no backup kept)")
    assert log_dir_digest(log_dir / f"{COMMANDS}-0") == before
    assert [key for _, key, _ in read_all_records(log_dir / "orders-0")] == [b"stream/KSQL_PROCESSING_LOG/create"] * 2


def test_an_internal_topics_last_known_delete_is_not_replaced_by_the_policy_it_is_created_with(
    tmp_path: Path,
) -> None:
    """Where __consumer_offsets' overrides are unknown, kcompact assumes the compact the broker creates it
    with; a last known explicit delete override is no unknown, and that assumption does not replace it."""
    log_dir = tmp_path / "logs"
    PartitionBuilder("__consumer_offsets", 3).batch([(b"g", b"1")]).roll().batch([(b"g", b"2")]).write(log_dir)
    write_log(log_dir / "__cluster_metadata-0", 0, [[
        encode_topic("__consumer_offsets", uuid_bytes(3)),
        encode_config(TOPIC, "__consumer_offsets", "cleanup.policy", "delete")]])
    snapshot_without_its_tail(log_dir / "__cluster_metadata-0")
    effective = partition_config(log_dir / "__consumer_offsets-3", cli_overrides={}, assume_compact=True)
    assert not effective.config.is_compacted and effective.value("cleanup.policy").source == "topic"
    assert effective.notes[-1] == ASSUME_COMPACT_NOT_APPLIED_EXPLICIT
