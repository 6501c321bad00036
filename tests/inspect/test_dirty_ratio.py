"""``inspect dirty-ratio`` end to end: partitions written to disk, one per blocking rule, the broker's
own log dirs, the cleaner's pick order across log dirs, and the JSON row's field names."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from kcompact.inspect.dirty_ratio import DirtyRatioRow, dirty_ratio_report
from kcompact.segment.checkpoint import write_offset_checkpoint
from tests.builders import BASE_TS, PartitionBuilder
from tests.config.test_effective import snapshot_without_its_tail
from tests.conftest import PROJECT_FIXTURES, copy_tree_writable, real_fixture
from tests.encoders import encode_producer_snapshot

NOW = BASE_TS + 10_000_000
DAY = 86_400_000
REAL_LOG_DIRS = (
    "kraft37-cleaned-logdir",
    "kraft37-consumer-offsets",
    "confluent512-lz4-logdir",
    "bitnami2024-rolled-logdir",
)

ROW_FIELDS = [
    "topic", "partition", "partition_dir", "cleanup_policy", "cleanup_policy_last_known_at",
    "log_start_offset", "log_end_offset",
    "high_watermark", "high_watermark_source", "high_watermark_note", "last_stable_offset", "first_dirty_offset",
    "first_uncleanable_offset", "clean_bytes", "dirty_bytes", "dirty_ratio",
    "min_cleanable_dirty_ratio", "eligible", "must_clean", "max_compaction_delay_ms", "blocking_rule",
    "blocking_detail", "cleaner_rank", "corrupt_batches", "cleaner_fails", "warnings", "error",
    "space_peak_bytes", "space_gives_back_bytes", "free_bytes",
]


def segmented(topic: str = "orders", partition: int = 0, *, closed: int = 3) -> PartitionBuilder:
    """``closed`` segments of ten records (two 5-record batches, keys k0..k4) and a 1-record active one."""
    b = PartitionBuilder(topic, partition)
    for _ in range(closed):
        for _ in range(2):
            b.batch([(f"k{i}".encode(), b"v" * 30) for i in range(5)])
        b.roll()
    return b.batch([(b"k0", b"active")])


def report(*paths: Path, **config: str) -> list[DirtyRatioRow]:
    """The rows of ``paths`` with ``cleanup.policy=compact`` unless ``config`` says otherwise (these
    partitions have no metadata log to say so)."""
    return dirty_ratio_report(paths, cli_overrides={"cleanup.policy": "compact", **config}, now_ms=NOW)


def only(*paths: Path, **config: str) -> DirtyRatioRow:
    (row,) = report(*paths, **config)
    return row


def test_row_json_field_names_are_fixed(tmp_path: Path) -> None:
    row = only(segmented().write(tmp_path / "logdir"))
    assert list(row.as_dict()) == ROW_FIELDS


def test_row_as_dict_is_dataclasses_asdict(tmp_path: Path) -> None:
    """``--json`` prints ``as_dict``: the same values as ``dataclasses.asdict``, its list a copy."""
    row = only(segmented().write(tmp_path / "logdir"))
    assert row.warnings
    as_dict = row.as_dict()
    assert json.dumps(as_dict) == json.dumps(dataclasses.asdict(row))
    as_dict["warnings"].append("changed")
    assert "changed" not in row.warnings


def test_fully_dirty_partition_numbers(tmp_path: Path) -> None:
    part = segmented().write(tmp_path / "logdir")
    row = only(part)
    segment_size = (part / "00000000000000000000.log").stat().st_size
    assert (row.topic, row.partition, row.partition_dir) == ("orders", 0, str(part))
    assert (row.log_start_offset, row.log_end_offset, row.high_watermark) == (0, 31, 31)
    assert row.high_watermark_source == "replication-offset-checkpoint"
    assert (row.last_stable_offset, row.first_dirty_offset, row.first_uncleanable_offset) == (31, 0, 30)
    assert (row.clean_bytes, row.dirty_bytes, row.dirty_ratio) == (0, 3 * segment_size, 1.0)
    assert (row.eligible, row.must_clean, row.cleaner_rank) == (True, False, 1)
    assert row.blocking_rule == "active-segment"
    assert row.cleanup_policy == "compact" and row.error is None
    assert any("no KRaft metadata log" in w for w in row.warnings)


def test_each_log_is_read_once_per_report(tmp_path: Path, log_opens: Counter[str]) -> None:
    """The loaded state, the dirty section's CRCs and the two places Kafka's cleaner throws on all read a
    segment; a report over 10 000 small partitions stays fast when each .log is opened and read once."""
    part = segmented().write(tmp_path / "logdir")
    (part / f"{30:020d}.snapshot").write_bytes(encode_producer_snapshot([]))  # the log end is read for it
    row = only(part)
    assert (row.eligible, row.first_dirty_offset, row.first_uncleanable_offset, row.error) == (True, 0, 30, None)
    assert log_opens == {f"{base:020d}.log": 1 for base in (0, 10, 20, 30)}


# -- one hand-built partition per blocking rule --


def test_rule_active_segment(tmp_path: Path) -> None:
    part = PartitionBuilder().batch([(b"a", b"1"), (b"a", b"2")]).write(tmp_path / "logdir")
    row = only(part)
    assert (row.blocking_rule, row.eligible, row.dirty_bytes) == ("active-segment", False, 0)
    assert row.first_uncleanable_offset == 0 and row.cleaner_rank is None
    assert row.blocking_detail is not None
    assert row.blocking_detail.startswith("the active segment (base offset 0, ")


def test_rule_high_watermark(tmp_path: Path) -> None:
    part = segmented().write(tmp_path / "logdir", high_watermark=12)
    row = only(part)
    assert row.blocking_rule == "high-watermark"
    assert (row.high_watermark, row.last_stable_offset, row.first_uncleanable_offset) == (12, 12, 10)
    assert row.eligible and row.dirty_ratio == 1.0  # the first segment is still cleanable
    assert "the high watermark 12 (from replication-offset-checkpoint)" in (row.blocking_detail or "")


def test_missing_high_watermark_is_the_log_end_with_a_warning(tmp_path: Path) -> None:
    row = only(segmented().write(tmp_path / "logdir", high_watermark=None))
    assert row.high_watermark == 31
    assert row.high_watermark_source == "log-end (no replication-offset-checkpoint entry)"
    assert any("no high watermark" in w for w in row.warnings)


def test_rule_open_transaction(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1")] * 5).roll()
    b.batch([(b"b", b"1")]).batch([(b"t", b"open")], producer_id=9, transactional=True).roll()
    b.batch([(b"c", b"1")])
    row = only(b.write(tmp_path / "logdir"))
    assert row.blocking_rule == "open-transaction"
    assert (row.last_stable_offset, row.first_uncleanable_offset) == (6, 5)
    assert "an open transaction of producer id 9 (epoch 0) beginning at offset 6" in (
        row.blocking_detail or ""
    )


def test_rule_min_compaction_lag(tmp_path: Path) -> None:
    row = only(segmented().write(tmp_path / "logdir"), **{"min.compaction.lag.ms": str(DAY)})
    assert (row.blocking_rule, row.first_uncleanable_offset, row.eligible) == (
        "min-compaction-lag", 0, False,
    )
    assert "within min.compaction.lag.ms 1d" in (row.blocking_detail or "")


def test_rule_below_dirty_ratio(tmp_path: Path) -> None:
    part = segmented(closed=4).write(tmp_path / "logdir", cleaner_checkpoint=30)
    row = only(part)
    assert row.blocking_rule == "below-dirty-ratio"
    assert (row.first_dirty_offset, row.dirty_ratio, row.eligible) == (30, 0.25, False)
    assert row.cleaner_rank is None
    assert "is not above min.cleanable.dirty.ratio 0.5" in (row.blocking_detail or "")


def test_max_compaction_lag_makes_a_low_ratio_partition_eligible(tmp_path: Path) -> None:
    part = segmented(closed=4).write(tmp_path / "logdir", cleaner_checkpoint=30)
    row = only(part, **{"max.compaction.lag.ms": "1000"})
    assert (row.must_clean, row.eligible, row.cleaner_rank) == (True, True, 1)
    first_batch_ts = BASE_TS + 30 + 4  # the dirty segment's first batch: five records from offset 30
    assert row.max_compaction_delay_ms == NOW - 1000 - first_batch_ts


@pytest.mark.parametrize(("checkpoint", "where"), [(1000, "past the log end offset 31"),
                                                   (3, "below the log start offset 10")])
def test_rule_checkpoint_reset(tmp_path: Path, checkpoint: int, where: str) -> None:
    part = segmented().write(tmp_path / "logdir", cleaner_checkpoint=checkpoint)
    if checkpoint < 10:
        write_offset_checkpoint(part.parent / "log-start-offset-checkpoint", {("orders", 0): 10})
    row = only(part)
    assert row.blocking_rule == "checkpoint-reset"
    assert row.first_dirty_offset == row.log_start_offset  # reset as Kafka does
    assert f"cleaner-offset-checkpoint holds {checkpoint}, {where}" in (row.blocking_detail or "")


def test_rule_cleanup_policy(tmp_path: Path) -> None:
    row = only(segmented().write(tmp_path / "logdir"), **{"cleanup.policy": "delete"})
    assert (row.blocking_rule, row.eligible, row.cleanup_policy) == ("cleanup-policy", False, "delete")
    assert not any("assuming 'compact'" in w for w in row.warnings)


# -- several partitions and log dirs --


def test_cleaner_rank_orders_partitions_across_log_dirs(tmp_path: Path) -> None:
    # four equal closed segments: a checkpoint at segment k leaves a ratio of (4 - k) / 4
    layout = {"a": {0: 1, 1: 3}, "b": {2: 0, 3: 2}}
    for log_dir, checkpoints in layout.items():
        for partition in checkpoints:
            segmented("orders", partition, closed=4).write(tmp_path / log_dir, high_watermark=None)
        write_offset_checkpoint(  # one file per log dir, a line per partition, as a broker writes
            tmp_path / log_dir / "cleaner-offset-checkpoint",
            {("orders", p): 10 * k for p, k in checkpoints.items()},
        )
    rows = report(tmp_path / "a", tmp_path / "b")
    ranked = [(r.partition, r.dirty_ratio, r.cleaner_rank) for r in rows]
    assert ranked == [(2, 1.0, 1), (0, 0.75, 2), (1, 0.25, None), (3, 0.5, None)]
    assert [r.blocking_rule for r in rows[2:]] == ["below-dirty-ratio"] * 2


def test_each_log_dir_uses_its_own_checkpoints(tmp_path: Path) -> None:
    segmented().write(tmp_path / "before", cleaner_checkpoint=10)
    segmented().write(tmp_path / "after", cleaner_checkpoint=20)
    rows = report(tmp_path / "before", tmp_path / "after")
    assert sorted((Path(r.partition_dir).parent.name, r.first_dirty_offset) for r in rows) == [
        ("after", 20), ("before", 10),
    ]


def test_unparsable_partition_gets_an_error_row_and_others_still_report(tmp_path: Path) -> None:
    segmented("good").write(tmp_path / "logdir")
    bad = segmented("bad").write(tmp_path / "logdir")
    log = bad / "00000000000000000010.log"
    data = bytearray(log.read_bytes())
    data[16] = 9  # the first batch's magic byte
    log.write_bytes(bytes(data))
    rows = {r.topic: r for r in report(tmp_path / "logdir")}
    assert rows["good"].error is None and rows["good"].cleaner_rank == 1
    assert rows["bad"].error is not None and "00000000000000000010.log" in rows["bad"].error
    assert rows["bad"].cleaner_rank is None


def test_a_path_that_is_no_log_dir_is_refused(tmp_path: Path) -> None:
    from kcompact.errors import KcompactError

    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(KcompactError, match="not a log dir or partition directory"):
        report(tmp_path / "file")


# -- the broker's own log dirs --


@pytest.mark.parametrize(("partition", "checkpoint"), [(31, 3), (44, 9)])
def test_broker_checkpoint_leaves_nothing_cleanable(partition: int, checkpoint: int) -> None:
    log_dir = real_fixture("kraft37-cleaned-logdir")
    row = only(log_dir / f"__consumer_offsets-{partition}")
    clean_size = (log_dir / f"__consumer_offsets-{partition}" / "00000000000000000000.log").stat()
    assert (row.first_dirty_offset, row.first_uncleanable_offset) == (checkpoint, checkpoint)
    assert (row.clean_bytes, row.dirty_bytes, row.dirty_ratio) == (clean_size.st_size, 0, 0.0)
    assert (row.blocking_rule, row.eligible, row.cleaner_rank) == ("active-segment", False, None)
    assert f"the active segment (base offset {checkpoint}," in (row.blocking_detail or "")


def test_broker_log_dirs_report_without_errors_and_nothing_eligible() -> None:
    """Each partition with the policy its broker would use: the compacted ones wait in their active
    segments; the others (Kafka's default delete, or a policy unknown without a metadata log) and
    KRaft's own logs are not compacted at all."""
    rows = dirty_ratio_report([real_fixture(name) for name in REAL_LOG_DIRS], cli_overrides={}, now_ms=NOW)
    assert len(rows) == 211
    assert all(r.error is None and not r.eligible and r.cleaner_rank is None for r in rows)
    assert {r.blocking_rule for r in rows if r.cleanup_policy == "compact"} == {"active-segment"}
    not_compacted = {f"{r.topic}-{r.partition}" for r in rows if r.cleanup_policy != "compact"}
    # Kafka's default delete where the metadata log shows the topic; unknown where it cannot be read
    assert {(r.cleanup_policy == "unknown", r.blocking_rule) for r in rows if r.cleanup_policy != "compact"} == {
        (False, "cleanup-policy"), (True, "cleanup-policy-unknown")}
    assert {"first-0", "sensor-data-0", "sensor-data-topic-0", "_schemas-0"} <= not_compacted
    assert not any(name.startswith("__consumer_offsets") for name in not_compacted)
    metadata = [r for r in rows if r.topic == "__cluster_metadata"]
    assert len(metadata) == 3 and {r.blocking_rule for r in metadata} == {"cleanup-policy"}


def test_a_policy_only_last_known_says_so(tmp_path: Path) -> None:
    log_dir = copy_tree_writable(PROJECT_FIXTURES / "sample-logdir", tmp_path / "logs")
    last = snapshot_without_its_tail(log_dir / "__cluster_metadata-0")

    (row,) = dirty_ratio_report([log_dir / "orders-0"], cli_overrides={}, now_ms=NOW)

    assert (row.cleanup_policy, row.cleanup_policy_last_known_at) == ("compact", last)
    assert row.as_dict()["cleanup_policy_last_known_at"] == last
    assert any(w.startswith(f"cleanup.policy=compact (topic override, last known at metadata offset {last}): ")
               for w in row.warnings)
