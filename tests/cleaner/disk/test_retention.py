"""Segment retention (cleanup.policy with delete), as Kafka's deleteOldSegments, end to end through clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import defaults_with_overrides
from kcompact.errors import RefusedError
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.partition import open_partition
from tests.builders import BASE_TS, PartitionBuilder, read_all_records

NOW = BASE_TS + 10_000_000


def four_segments(tmp_path: Path, *, high_watermark: int | None | str = "log-end") -> Path:
    b = PartitionBuilder("events", 0)
    for seg in range(4):
        b.batch([(f"k{seg}-{i}".encode(), b"v" * 50) for i in range(10)])
        if seg < 3:
            b.roll()
    return b.write(tmp_path / "logdir", high_watermark=high_watermark)


def delete_config(**extra: str):  # type: ignore[no-untyped-def]
    config = defaults_with_overrides({"cleanup.policy": "delete", **extra})
    return config


def bases(part: Path) -> list[int]:
    return [s.base_offset for s in open_partition(part).segments]


def test_retention_ms_deletes_old_closed_segments_and_moves_the_log_start(tmp_path: Path) -> None:
    part = four_segments(tmp_path)
    result = clean_partition(part, delete_config(**{"retention.ms": "1000"}),
                             CleanOptions(now_ms=NOW, apply_retention=True))
    assert result.retention is not None and result.retention.deleted_segments == [0, 10, 20, 30]
    assert result.retention.rolled  # every segment qualified: a new active segment first, as the broker
    assert bases(part) == [40]
    assert open_partition(part).log_start_offset() == 40
    assert not [p for p in part.iterdir() if p.name.endswith(".deleted")]
    assert read_all_records(part) == []


def test_retention_bytes_deletes_just_enough_oldest_segments(tmp_path: Path) -> None:
    part = four_segments(tmp_path)
    sizes = [s.size_in_bytes for s in open_partition(part).segments]
    keep = sizes[2] + sizes[3]
    result = clean_partition(part, delete_config(**{"retention.bytes": str(keep)}),
                             CleanOptions(now_ms=NOW, apply_retention=True))
    assert result.retention is not None and result.retention.deleted_segments == [0, 10]
    assert {reason for reason in result.retention.reasons.values()} == {"retention.bytes"}
    assert bases(part) == [20, 30]
    assert [o for o, _k, _v in read_all_records(part)] == list(range(20, 40))


def test_retention_never_deletes_at_or_above_the_high_watermark(tmp_path: Path) -> None:
    part = four_segments(tmp_path, high_watermark=15)
    result = clean_partition(part, delete_config(**{"retention.ms": "1000"}),
                             CleanOptions(now_ms=NOW, apply_retention=True))
    assert result.retention is not None and result.retention.deleted_segments == [0]
    assert bases(part) == [10, 20, 30]


def test_without_an_explicit_delete_policy_nothing_is_deleted(tmp_path: Path) -> None:
    part = four_segments(tmp_path)
    before = read_all_records(part)
    with pytest.raises(RefusedError, match="cleanup.policy is not known"):  # neither compacted nor retained
        clean_path(part, cli_overrides={"retention.ms": "1000"}, options=CleanOptions(now_ms=NOW))
    assert read_all_records(part) == before
    run = clean_path(part, cli_overrides={"retention.ms": "1000"}, options=CleanOptions(now_ms=NOW),
                     assume_compact=True)
    [result] = run.results
    assert result.retention is not None and result.retention.deleted_segments == []
    assert read_all_records(part) == before  # compacted (assumed), but nothing retained away


def test_an_explicit_delete_policy_on_the_command_line_runs_retention(tmp_path: Path) -> None:
    part = four_segments(tmp_path)
    run = clean_path(part, cli_overrides={"cleanup.policy": "delete", "retention.bytes": "0"},
                     options=CleanOptions(now_ms=NOW))
    [result] = run.results
    # retention.bytes=0 takes every segment, the non-empty active one too, after a roll (as Kafka)
    assert result.retention is not None and result.retention.deleted_segments == [0, 10, 20, 30]
    assert result.retention.rolled and bases(part) == [40]


def test_segments_below_the_log_start_offset_go_even_when_compacted(tmp_path: Path) -> None:
    part = four_segments(tmp_path)
    write_offset_checkpoint(part.parent / "log-start-offset-checkpoint", {("events", 0): 25})
    config = defaults_with_overrides({"cleanup.policy": "compact"})
    result = clean_partition(part, config, CleanOptions(now_ms=NOW))
    assert result.retention is not None and result.retention.deleted_segments == [0, 10]
    assert bases(part)[0] == 20


def test_a_high_watermark_below_the_log_start_is_raised_to_it(tmp_path: Path) -> None:
    # UnifiedLog.updateHighWatermark bounds the high watermark below by the log start: the segments
    # wholly below the log start go although the checkpointed high watermark has not reached them
    part = four_segments(tmp_path, high_watermark=5)
    write_offset_checkpoint(part.parent / "log-start-offset-checkpoint", {("events", 0): 20})
    config = defaults_with_overrides({"cleanup.policy": "compact"})
    result = clean_partition(part, config, CleanOptions(now_ms=NOW))
    assert result.retention is not None and result.retention.deleted_segments == [0, 10]
    assert bases(part) == [20, 30]


def test_dry_run_plans_retention_and_deletes_nothing(tmp_path: Path) -> None:
    part = four_segments(tmp_path)
    before = sorted(p.name for p in part.iterdir())
    result = clean_partition(part, delete_config(**{"retention.bytes": "0"}),
                             CleanOptions(now_ms=NOW, apply_retention=True, dry_run=True))
    assert result.retention is not None and result.retention.deleted_segments == [0, 10, 20, 30]
    assert sorted(p.name for p in part.iterdir()) == before


def test_compact_delete_compacts_then_applies_retention(tmp_path: Path) -> None:
    b = PartitionBuilder("both", 0)
    b.batch([(b"a", b"1"), (b"a", b"2")]).roll()
    b.batch([(b"b", b"1")]).roll()
    b.batch([(b"c", b"1")])
    part = b.write(tmp_path / "logdir")
    config = delete_config(**{"cleanup.policy": "compact,delete", "retention.ms": "1000"})
    result = clean_partition(part, config, CleanOptions(now_ms=NOW, apply_retention=True))
    assert result.end_offset == 3  # the compaction round ran first (segments 0 and 2 merged into 0)
    assert result.retention is not None and result.retention.deleted_segments == [0, 3]
    assert result.retention.rolled and bases(part) == [4] and read_all_records(part) == []
