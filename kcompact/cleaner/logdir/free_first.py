"""A log dir's space before its cleans: first free what costs no write and loses nothing Kafka keeps, then
clean the partitions in an order that fits the volume.

Only where the volume's free space is short of the most the cleans could write (``logdir.run``; else each
round settles its own leftovers after rehearsing its clean, so that a partition whose clean fails stays exactly
as it was), what goes first, for every partition of the run (the partition filters honoured, each under its
partition lock inside the log dir's):

1. an interrupted clean's or roll's leftovers, settled exactly as a broker's loader settles them on start
   (``disk.swap.recover_interrupted_swaps``: ``LogLoader.load``): ``.deleted`` and ``.cleaned`` files go,
   a ``.swap`` is completed or rolled back, orphaned indexes go;
2. the segments wholly below the log start offset (``UnifiedLog.deleteLogStartOffsetBreachedSegments``,
   which a broker runs long before its cleaner; the round plans them away the same way, ``disk.retention``
   with ``log_start_only``).

Neither writes a byte: they only rename and delete. Then the order: each partition's clean measured
(``disk.space.SpaceNeed``, a dry run its round then reuses while it fits), and among those that fit the free
space, the one needing least (most given back on a tie) goes first, so each clean makes room for the next
(:func:`fit_order`); those that never fit come last, and each is refused by its round with its numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from pathlib import Path

from kcompact.cleaner.disk.retention import apply_retention, plan_retention
from kcompact.cleaner.disk.space import SpaceNeed, held_bytes, segment_paths
from kcompact.cleaner.disk.swap import recover_interrupted_swaps, unsettled_files
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import KcompactError
from kcompact.log.state.known_state import KnownState, state_for_round
from kcompact.segment.lock import log_dir_write_guard, partition_lock
from kcompact.segment.partition import open_partition
from kcompact.text import plural
from kcompact.value import mutable


@mutable
class FreedFirst:
    """What was freed (a dry run: would be) before any clean."""

    actions: list[str] = field(default_factory=list)  # "<partition>: <what>", in the order done
    freed_bytes: int = 0  # what the deleted files held on disk
    by_partition: dict[str, int] = field(default_factory=dict)  # partition dir name -> bytes freed
    below_log_start: dict[str, int] = field(default_factory=dict)  # of which segments below the log start

    def add(self, part_dir: Path, actions: Sequence[str], freed_bytes: int) -> None:
        self.actions.extend(f"{part_dir.name}: {action}" for action in actions)
        self.freed_bytes += freed_bytes
        self.by_partition[part_dir.name] = self.by_partition.get(part_dir.name, 0) + freed_bytes


def settle_leftovers(part_dirs: Sequence[Path], freed: FreedFirst, *, dry_run: bool) -> None:
    """Settle every partition's interrupted clean as a broker's loader would (step 1 of the module docstring).

    A partition whose leftovers cannot be settled (a ``.swap`` that does not parse, a file that cannot be
    deleted) is left as it is: its round meets them again and fails with the reason.

    Args:
        part_dirs: the run's partitions.
        freed: receives what was done.
        dry_run: only count what would be done.
    """
    for part_dir in part_dirs:
        try:
            if not unsettled_files(part_dir):
                continue
            if dry_run:
                report = recover_interrupted_swaps(part_dir, dry_run=True)
            else:
                with log_dir_write_guard(part_dir.parent), partition_lock(part_dir.parent, part_dir.name):
                    report = recover_interrupted_swaps(part_dir)
        except (KcompactError, OSError):
            continue
        freed.add(part_dir, report.actions, report.freed_bytes)


def delete_below_log_start(
    part_dir: Path, config: TopicConfig, known: KnownState | None, now_ms: int, freed: FreedFirst, *,
    dry_run: bool,
) -> None:
    """Delete the segments wholly below the partition's log start offset (step 2 of the module docstring).

    Args:
        part_dir: the partition directory.
        config: its configuration.
        known: its state as the log dir's ranking loaded it (``state.known_state``), if any.
        now_ms: the run's clock.
        freed: receives what was done.
        dry_run: only count what would be done.

    Raises:
        KcompactError: the partition does not load, or a segment cannot be deleted.
    """
    # with the high watermark the ranking loaded it with (a sole replica's is its log end: ``rules.high_watermark``)
    state = state_for_round(known, open_partition(part_dir), config, None if known is None else known.sole_replica)
    plan = plan_retention(state, config, now_ms, log_start_only=True)
    if not plan.deleted_segments:
        return
    held = held_bytes(segment_paths(part_dir, plan.deleted_segments))
    if not dry_run:
        with log_dir_write_guard(part_dir.parent), partition_lock(part_dir.parent, part_dir.name):
            apply_retention(state, config, plan)
    count = plural(len(plan.deleted_segments), "segment")
    freed.add(part_dir, [f"delete {count} wholly below the log start offset {state.log_start_offset}"], held)
    freed.below_log_start[part_dir.name] = held


def fit_order(needs: Sequence[SpaceNeed | None], free_bytes: int) -> list[int]:
    """The order of the cleans that fits the volume, as indices into ``needs`` (given in the broker's order).

    Among the cleans that fit the free space, the one needing least goes first (on a tie, the one giving
    back most, then the broker's order); each adds what it gives back. Those that never fit follow in the
    broker's order. A clean whose need is unknown (None: nothing to clean, or its measure failed) counts as
    needing nothing.

    Args:
        needs: each partition's clean, in the broker's order.
        free_bytes: the volume's free space now.

    Returns:
        The indices, every one once.
    """
    remaining = list(range(len(needs)))
    order: list[int] = []
    free = free_bytes
    while remaining:
        fitting = [i for i in remaining if _need(needs[i]).fits(free)]
        if not fitting:
            break
        pick = min(fitting, key=lambda i: (_need(needs[i]).peak_bytes, -_need(needs[i]).gives_back_bytes, i))
        order.append(pick)
        remaining.remove(pick)
        free += _need(needs[pick]).gives_back_bytes
    return order + remaining


def run_need(needs: Sequence[SpaceNeed | None], freed_first: int) -> SpaceNeed:
    """A run's total: the free space it needs now (before freeing anything) for every clean, in this
    order, to fit, and what the whole run gives back, the space freed first included."""
    peak, given = 0, freed_first
    for need in needs:
        peak = max(peak, _need(need).peak_bytes - given)
        given += _need(need).gives_back_bytes
    return SpaceNeed(peak, given)


def _need(need: SpaceNeed | None) -> SpaceNeed:
    return need if need is not None else SpaceNeed(0, 0)
