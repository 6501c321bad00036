"""A dead broker's leftovers: a partition this broker alone holds is cleaned up to its log end, not the stale
high-watermark checkpoint; a torn append is said as what it is, with the repair that cuts it.

The KRaft metadata log is built record by record (``tests.config.test_kraft_records``), naming the
partition's replicas and ISR; the partitions with ``PartitionBuilder``. Kafka's side (the leader's high
watermark is its log end on start; recovery truncates a torn tail) is proven by
``tests/kafka/test_dead_broker_e2e.py`` on a real broker's files.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.config.kraft.metadata_state import PartitionAssignment, load_metadata_state
from kcompact.log.rules.high_watermark import (
    SOURCE_KRAFT_METADATA,
    SOURCE_SOLE_REPLICA_FLAG,
    SoleReplica,
    sole_replica_from_metadata,
)
from kcompact.log.state.log_state import HW_FROM_SOLE_REPLICA
from kcompact.records.messages.reader import format_uuid
from tests.config.test_kraft_records import (
    encode_config,
    encode_partition,
    encode_partition_change,
    encode_topic,
    uuid_bytes,
)
from tests.config.test_metadata_state import write_log
from tests.partition_builder import BASE_TS, PartitionBuilder

NOW = BASE_TS + 10_000
TOPIC_ID = uuid_bytes(0x5EED)
STALE_HW = 12  # in the first segment [0, 11): the checkpoint caps cleaning at its base
LOG_END = 40


def log_dir_with(root: Path, metadata: list[list[bytes]] | None, *, torn: bytes = b"") -> Path:
    """A node-1 log dir: orders-0 in segments [0, 11), [11, 26), [26, 40) over 5 keys, its
    replication-offset-checkpoint stale at 12, and (unless None) a metadata log of these record groups."""
    log_dir = root / "logs"
    log_dir.mkdir(parents=True)
    (log_dir / "meta.properties").write_text("version=1\ncluster.id=c\nnode.id=1\n")
    if metadata is not None:
        write_log(log_dir / "__cluster_metadata-0", 0, metadata)
    b = PartitionBuilder("orders", 0)
    for i in range(LOG_END):
        b.batch([(f"k{i % 5}".encode(), f"v{i}".encode())])
        if i in (10, 25):
            b.roll()
    part = b.write(log_dir, high_watermark=STALE_HW)
    if torn:
        with (part / f"{26:020d}.log").open("ab") as active:
            active.write(torn)
    return log_dir


def assigned(replicas: tuple[int, ...], isr: tuple[int, ...]) -> list[list[bytes]]:
    return [[encode_topic("orders", TOPIC_ID), encode_config(2, "orders", "cleanup.policy", "compact")],
            [encode_partition(TOPIC_ID, 0, replicas, isr)]]


def clean(*args: str | Path) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    return runner.invoke(cli, ["clean", *map(str, args), "--now-ms", str(NOW)])


def only_row(result: Result) -> dict[str, object]:
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["results"]
    assert isinstance(row, dict)
    return row


def test_metadata_replay_follows_partition_changes(tmp_path: Path) -> None:
    metadata = [*assigned((1, 2), (1, 2)),
                [encode_partition_change(TOPIC_ID, 0, isr=(1,))],
                [encode_partition_change(TOPIC_ID, 0, replicas=(1,), leader=1)]]
    log_dir = log_dir_with(tmp_path, metadata)
    state = load_metadata_state(log_dir / "__cluster_metadata-0")
    assert state.assignments[(format_uuid(TOPIC_ID), 0)] == PartitionAssignment((1,), (1,), 1, 4)


def test_sole_replica_rule() -> None:
    alone, two = PartitionAssignment((1,), (1,), 1, 7), PartitionAssignment((1, 2), (1,), 1, 9)
    assert sole_replica_from_metadata(alone, 1, flag=False) == (SoleReplica(SOURCE_KRAFT_METADATA, 1, 7), None)
    assert sole_replica_from_metadata(alone, 2, flag=False) == (None, None)  # another node's partition
    fenced = PartitionAssignment((1,), (), -1, 3)  # its only replica, out of the ISR: the flag decides
    assert sole_replica_from_metadata(fenced, 1, flag=False) == (None, None)
    assert sole_replica_from_metadata(fenced, 1, flag=True) == (SoleReplica(SOURCE_SOLE_REPLICA_FLAG, 1), None)
    assert sole_replica_from_metadata(None, 1, flag=True) == (SoleReplica(SOURCE_SOLE_REPLICA_FLAG, 1), None)
    refused, note = sole_replica_from_metadata(two, 1, flag=True)
    assert refused is None and note is not None and "replicas [1, 2] (ISR [1])" in note


def test_kraft_sole_replica_is_cleaned_to_the_log_end(tmp_path: Path) -> None:
    log_dir = log_dir_with(tmp_path, assigned((1,), (1,)))
    row = only_row(clean(log_dir / "orders-0", "--dry-run", "--json"))
    assert (row["high_watermark"], row["end_offset"], row["first_uncleanable_offset"]) == (LOG_END, 26, 26)
    assert row["blocking_rule"] == "active-segment"
    assert row["high_watermark_note"] == (
        "high watermark taken as the log end 40: this broker (node 1) is the partition's only replica "
        "(KRaft metadata), and Kafka's leader sets it there on start (Partition.maybeIncrementLeaderHW); "
        "the replication-offset-checkpoint's 12 is stale")
    text = clean(log_dir, "--dry-run")
    assert text.exit_code == 0, text.output
    assert ("orders-0: high watermark taken as the log end 40: this broker (node 1) is the partition's only "
            "replica (KRaft metadata)") in " ".join(text.stdout.split())
    assert "would clean dirty section [0, 26)" in text.stdout


def test_other_replicas_keep_the_checkpoint_cap(tmp_path: Path) -> None:
    log_dir = log_dir_with(tmp_path, assigned((1, 2), (1, 2)))
    row = only_row(clean(log_dir / "orders-0", "--dry-run", "--json"))
    assert (row["high_watermark"], row["end_offset"], row["high_watermark_note"]) == (STALE_HW, 11, None)
    assert row["blocking_rule"] == "high-watermark"
    flagged = clean(log_dir / "orders-0", "--dry-run", "--json", "--sole-replica")
    report = json.loads(flagged.stdout)
    assert report["results"][0]["end_offset"] == 11  # the metadata log wins over the flag, and says so
    assert any("--sole-replica not applied: the KRaft metadata names replicas [1, 2]" in n for n in report["notes"])


def test_flag_stands_in_without_a_metadata_log(tmp_path: Path) -> None:
    log_dir = log_dir_with(tmp_path, None)
    part = log_dir / "orders-0"
    without = only_row(clean(part, "--dry-run", "--json", "--config", "cleanup.policy=compact"))
    assert (without["high_watermark"], without["end_offset"]) == (STALE_HW, 11)
    row = only_row(clean(part, "--dry-run", "--json", "--config", "cleanup.policy=compact", "--sole-replica"))
    assert (row["high_watermark"], row["end_offset"]) == (LOG_END, 26)
    assert "this broker (node 1) is the partition's only replica (--sole-replica)" in str(row["high_watermark_note"])


def test_torn_append_says_where_and_the_repair(tmp_path: Path) -> None:
    log_dir = log_dir_with(tmp_path, assigned((1,), (1,)), torn=b"\x00" * 8 + b"\x00\x00\x05\xbc" + b"\x01" * 28)
    active = log_dir / "orders-0" / f"{26:020d}.log"
    size = active.stat().st_size
    named = clean(log_dir / "orders-0", "--dry-run")
    assert named.exit_code == 2
    assert named.stderr.strip() == (
        f"kcompact: error: {active} at position {size - 40}: a torn append: the last 40 bytes of the partition's "
        f"last segment (positions {size - 40} to {size}) are an entry cut short (entry declares 1480 bytes but "
        f"only 40 remain; expected the whole entry inside the data); Kafka's recovery truncates the segment at "
        f"position {size - 40} on its next start (LogSegment.recover); cut it there first with `kcompact repair "
        f"{log_dir / 'orders-0'} --backup-dir <a directory on another volume>` (its backup copies the segment, "
        f"so on a full volume it must go elsewhere), then clean")
    report = json.loads(clean(log_dir, "--dry-run", "--json").stdout)
    (failure,) = report["failures"]
    assert failure["error"] == named.stderr.strip().removeprefix("kcompact: error: ")


# --- the read-only commands take the high watermark as clean does --------------------------------------------


def invoke(*args: str | Path, clock: bool = True) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    return runner.invoke(cli, [*map(str, args), *(("--now-ms", str(NOW)) if clock else ())])


KRAFT_NOTE = ("high watermark taken as the log end 40: this broker (node 1) is the partition's only replica "
              "(KRaft metadata), and Kafka's leader sets it there on start (Partition.maybeIncrementLeaderHW); "
              "the replication-offset-checkpoint's 12 is stale")


def test_dirty_ratio_agrees_with_clean_on_a_sole_replica(tmp_path: Path) -> None:
    log_dir = log_dir_with(tmp_path, assigned((1,), (1,)))
    cleaned = only_row(clean(log_dir / "orders-0", "--dry-run", "--json"))

    done = invoke("inspect", "dirty-ratio", log_dir, "--json")
    text = invoke("inspect", "dirty-ratio", log_dir)

    assert done.exit_code == 0, done.output
    (row,) = [r for r in json.loads(done.stdout) if r["topic"] == "orders"]  # not the metadata log's
    assert (row["high_watermark"], row["high_watermark_source"], row["first_uncleanable_offset"]) == (
        cleaned["high_watermark"], HW_FROM_SOLE_REPLICA, cleaned["first_uncleanable_offset"])
    assert (row["high_watermark"], row["first_uncleanable_offset"]) == (LOG_END, 26)
    assert row["high_watermark_note"] == cleaned["high_watermark_note"] == KRAFT_NOTE
    assert f"orders-0: {KRAFT_NOTE}" in " ".join(text.stdout.split())


def test_dirty_ratio_takes_the_flag_where_the_metadata_says_nothing(tmp_path: Path) -> None:
    log_dir = log_dir_with(tmp_path, None)
    args = ("inspect", "dirty-ratio", log_dir / "orders-0", "--json", "--config", "cleanup.policy=compact")

    (without,) = json.loads(invoke(*args).stdout)
    (flagged,) = json.loads(invoke(*args, "--sole-replica").stdout)
    cleaned = only_row(clean(log_dir / "orders-0", "--dry-run", "--json", "--config", "cleanup.policy=compact",
                             "--sole-replica"))

    assert (without["high_watermark"], without["first_uncleanable_offset"]) == (STALE_HW, 11)
    assert (flagged["high_watermark"], flagged["first_uncleanable_offset"]) == (LOG_END, 26)
    assert flagged["high_watermark_note"] == cleaned["high_watermark_note"]
    assert "(--sole-replica)" in str(flagged["high_watermark_note"])


def test_report_and_keys_agree_with_clean_on_a_sole_replica(tmp_path: Path) -> None:
    log_dir = log_dir_with(tmp_path, None)
    config = ("--config", "cleanup.policy=compact")
    cleaned = only_row(clean(log_dir / "orders-0", "--dry-run", "--json", *config, "--sole-replica"))

    report = invoke("report", log_dir, "--json", *config, "--sole-replica")
    stale = invoke("report", log_dir, "--json", *config)

    assert report.exit_code == 0, report.output
    (entry,) = json.loads(report.stdout)["partitions"]
    (before,) = json.loads(stale.stdout)["partitions"]
    assert entry["high_watermark_note"] == cleaned["high_watermark_note"] and before["high_watermark_note"] is None
    # the projection is the clean's dry run: with the log end as high watermark it cleans [0, 26), not [0, 11)
    assert entry["size_in_bytes_after"] < before["size_in_bytes_after"]


def exported_stop(log_dir: Path, out: Path, *flags: str) -> dict[str, object]:
    done = invoke("export", log_dir / "orders-0", "--latest", "--output", out, "--json", *flags, clock=False)
    assert done.exit_code == 0, done.output
    (stop,) = json.loads(done.stdout)["stops"]
    assert isinstance(stop, dict)
    return stop


def test_export_reads_a_sole_replica_to_its_log_end_as_clean_cleans_it(tmp_path: Path) -> None:
    kraft = log_dir_with(tmp_path / "kraft", assigned((1,), (1,)))
    bare = log_dir_with(tmp_path / "bare", None)

    by_metadata = exported_stop(kraft, tmp_path / "a")
    stale = exported_stop(bare, tmp_path / "b")
    flagged = exported_stop(bare, tmp_path / "c", "--sole-replica")
    text = invoke("export", kraft / "orders-0", "--latest", "--output", tmp_path / "d", clock=False)

    assert (by_metadata["stops_at"], by_metadata["high_watermark"], by_metadata["high_watermark_note"]) == (
        LOG_END, LOG_END, KRAFT_NOTE)
    assert (stale["stops_at"], stale["reason"], stale["high_watermark_note"]) == (STALE_HW, "high watermark", None)
    assert flagged["stops_at"] == LOG_END and "(--sole-replica)" in str(flagged["high_watermark_note"])
    assert f"orders-0: the read_committed view stops at offset 40: the log end; {KRAFT_NOTE}" in " ".join(
        text.stdout.split())
