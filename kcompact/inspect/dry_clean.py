"""What ``kcompact clean`` would do with one partition, run dry: the one place the read-only commands reach
into the cleaner. ``inspect dirty-ratio`` measures a clean's space with it and ``inspect keys`` projects a clean
with it, so both report what a clean does, not an estimate of it; the rest of ``inspect`` reads the log through
Kafka's log model (``kcompact.log``) alone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kcompact.cleaner.logdir.compaction_gate import not_compacted
from kcompact.cleaner.logdir.keyless import sample_keyless
from kcompact.cleaner.round.options import CleanOptions, CleanResult
from kcompact.cleaner.round.steps import unsupported_reason
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import TopicConfig
from kcompact.log.rules.high_watermark import SoleReplica
from kcompact.segment.partition import Partition

__all__ = ["CleanResult", "dry_clean", "mostly_keyless", "not_compacted", "skipped_clean", "unsupported_reason"]


def dry_clean(path: str | Path, config: TopicConfig, now_ms: int, *, sole_replica: SoleReplica | None = None,
              roll: bool = False, progress: Callable[[int], None] | None = None) -> CleanResult:
    """``kcompact clean --dry-run`` of one partition: the round planned and run, nothing written.

    Args:
        path: the partition directory.
        config: its effective configuration.
        now_ms: the clock the time rules use.
        sole_replica: the partition is this broker's alone (its high watermark is its log end).
        roll: ``clean --roll --dry-run``: the active segment rolled first, so its data is cleaned too.
        progress: told the bytes the dry run reads.

    Returns:
        The clean's result (``dry_run`` set).

    Raises:
        KcompactError: as the clean would (a refused partition, a batch that does not parse, ...).
    """
    options = CleanOptions(now_ms=now_ms, dry_run=True, sole_replica=sole_replica, roll=roll)
    return clean_partition(path, config, options, progress)


def mostly_keyless(partition: Partition) -> bool:
    """Whether most of the records ``clean``'s keyless sample reads have no key (``keyless.sample_keyless``): the
    sign of a topic that is not compacted, whose records a clean would delete."""
    return sample_keyless(partition).mostly_keyless


def skipped_clean(path: str | Path, topic: str, partition: int, now_ms: int, reason: str | None) -> CleanResult:
    """The result of a dry run that does not run: ``skipped_reason`` says why no clean would."""
    result = CleanResult(str(path), topic, partition, now_ms, True)
    result.skipped_reason = reason
    return result
