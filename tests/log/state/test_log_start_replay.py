"""Producer state starts at the log start, as a broker's loader rebuilds it.

``UnifiedLog.rebuildProducerState`` replays from the newest producer snapshot or, without one, from the log
start offset (``ProducerStateManager.loadFromSnapshot``); snapshots at or below the log start are dropped
(``truncateAndReload``). So a producer heard of only below the log start is unknown to the broker: its
transaction does not pin the last stable offset, and its last batch is not kept for its sequence. (Kafka's
own cleaner, run as the referee in ``tests/kafka/test_referee.py``, disagreed with a replay of the whole log.)
"""

from __future__ import annotations

from pathlib import Path

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import TopicConfig
from kcompact.records.batch import iter_batches
from kcompact.segment.checkpoint import write_offset_checkpoint
from tests.partition_builder import BASE_TS, PartitionBuilder

COMPACT = TopicConfig.defaults().with_overrides({"cleanup.policy": "compact"})
NOW = CleanOptions(now_ms=BASE_TS + 60_000)


def _write(b: PartitionBuilder, log_dir: Path, log_start: int) -> Path:
    part = b.write(log_dir)
    write_offset_checkpoint(log_dir / "log-start-offset-checkpoint", {("orders", 0): log_start})
    return part


def test_an_open_transaction_below_the_log_start_does_not_hold_the_clean_back(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"t", b"never ended")], producer_id=10, transactional=True)  # offset 0, below the log start
    b.batch([(b"a", b"1")]).batch([(b"a", b"2")]).roll().batch([(b"z", b"z")])
    part = _write(b, tmp_path, log_start=1)

    result = clean_partition(part, COMPACT, NOW)

    assert result.range is not None and result.range.first_uncleanable_offset == 3  # the active segment
    assert result.end_offset == 3
    assert result.stats.superseded_removed == 1  # a=1 went


def test_a_producer_heard_of_only_below_the_log_start_keeps_no_empty_batch(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1")], producer_id=7)  # offset 0, below the log start: the broker never replays it
    b.batch([(b"a", b"2")]).roll().batch([(b"z", b"z")])
    part = _write(b, tmp_path, log_start=1)

    clean_partition(part, COMPACT, NOW)

    left = list(iter_batches((part / "00000000000000000000.log").read_bytes()))
    assert [(batch.base_offset, batch.producer_id) for batch in left] == [(1, -1)]
