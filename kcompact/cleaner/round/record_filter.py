"""Pass 2's one decision of what survives, and the shape of what it writes (Kafka's ``RecordFilter``, which
``Cleaner.cleanInto`` hands to ``MemoryRecords.filterTo``).

Two questions, as Kafka's filter asks them: per batch, :func:`decide_batch` (``checkBatchRetention``:
``rules.policy.check_batch_retention`` over the transaction state, the live producers and the round's upper
bound); per record, :func:`keep_records` (``Cleaner.shouldRetainRecord``) over many records at once. Every
walk of pass 2 asks them here, whatever reads its bytes: the per-batch walk (``filtering``), the C windows
of data batches (``filter_windows``) and the C runs of legacy entries (``legacy_runs``).

What the walks produce is one thing too: :class:`OutputRun`, consecutive output batches back to back with
each one's size, last offset and max timestamp, which the group's writer appends in one call
(``disk.swap.CleanedSegmentWriter.append_run``; a worker's collector the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from kcompact.cleaner.round.plan import CleanPlan, SegmentPlan
from kcompact.cleaner.round.stats import CleanStats
from kcompact.errors import CleanerStateError
from kcompact.log.offset_map.oracle import RetentionOracle
from kcompact.log.rules.policy import BatchDecision, check_batch_retention
from kcompact.log.rules.producer_state import LastRecord
from kcompact.log.rules.transactions import CleanedTransactionMetadata
from kcompact.log.state.log_state import read_control
from kcompact.records.filter import BatchRetention
from kcompact.segment.txn_index import AbortedTxn
from kcompact.value import mutable

if TYPE_CHECKING:
    from kcompact.segment.log_file import AnyBatch

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
KeysAt = Callable[[npt.NDArray[np.intp]], Sequence[bytes]]

RUN_RECORDS = 1 << 14  # records decided together (one oracle call, one set of masks)
RUN_BATCHES = 128
RUN_BYTES = 4 << 20  # a window's batches: its output (copies too) is one buffer of at most about this


class OutputRun(NamedTuple):
    """Consecutive output batches: their bytes back to back, then per batch its size, last offset and max
    timestamp (what the indexes need): the arguments of ``CleanedSegmentWriter.append_run``."""

    data: bytes | memoryview
    sizes: Sequence[int]
    last_offsets: Sequence[int]
    max_timestamps: Sequence[int]


@mutable
class FilterContext:
    """What filtering needs in one process: the round's clock and bounds, the oracle, the transaction
    state (carried from segment to segment), the live producers and the counters."""

    oracle: RetentionOracle
    txn: CleanedTransactionMetadata[AbortedTxn]
    last_records: dict[int, LastRecord]
    upper_bound: int
    now_ms: int
    delete_retention_ms: int
    stats: CleanStats
    fence: int | None = None  # the replica fence (``rules.fence``); None: Kafka's rules alone
    window_bytes: int | None = None  # the C windows' bytes read and decompressed; None: RUN_BYTES

    @classmethod
    def at(
        cls, plan: CleanPlan, seg: SegmentPlan, oracle: RetentionOracle, stats: CleanStats
    ) -> FilterContext:
        """A context positioned at the start of ``seg`` (its transaction state from the plan's seed).

        Raises:
            CleanerStateError: the oracle covers a different range than the plan.
        """
        if oracle.map_latest_offset != plan.map_latest_offset:
            raise CleanerStateError(
                f"{plan.partition_dir}: the retention oracle's map_latest_offset; expected "
                f"{plan.map_latest_offset} (the plan's), found {oracle.map_latest_offset}"
            )
        return cls(
            oracle=oracle,
            txn=CleanedTransactionMetadata.from_seed(seg.clean_seed),
            last_records=dict(plan.last_records),
            upper_bound=plan.first_uncleanable_offset,
            now_ms=plan.now_ms,
            delete_retention_ms=plan.config.delete_retention_ms,
            stats=stats,
            fence=plan.fence_offset,
        )


Decided = tuple[BatchDecision, int | None]
"""A batch kept at batch level: Kafka's batch decision and its control type (None: a data batch)."""


def decide_batch(batch: AnyBatch, ctx: FilterContext, path: Path) -> Decided | None:
    """Kafka's ``checkBatchRetention`` for one batch (advancing the transaction state); None for a batch
    deleted whole."""
    control_type = None
    if batch.is_control:
        control_type, _ts = read_control(batch, path)
    decision = check_batch_retention(
        batch,
        control_type=control_type,
        txn=ctx.txn,
        last_records_of_active_producers=ctx.last_records,
        upper_bound_offset=ctx.upper_bound,
        now_ms=ctx.now_ms,
        fence=ctx.fence,
    )
    ctx.stats.batches_read += 1
    if decision.retention is BatchRetention.DELETE:
        ctx.stats.note_batch_deleted(batch, decision, control_type)
        return None
    return decision, control_type


def keep_records(
    offsets: I64, keyed: Mask, tombstone: Mask, keeps_tombstones: Mask, keys_at: KeysAt,
    oracle: RetentionOracle, fence: int | None, stats: CleanStats,
) -> Mask:
    """Kafka's ``Cleaner.shouldRetainRecord`` over the records of several batches at once::

        keep = beyond the map | (is latest & (has a value | tombstone still before its horizon))

    Args:
        offsets, keyed, tombstone: per record.
        keeps_tombstones: per record, its batch has no delete horizon or it is still ahead.
        keys_at: the keys of the records at given positions (asked for clean-section records only).
        oracle: the retention oracle.
        fence: the replica fence (``rules.fence``): at or above it no tombstone goes for its age.
        stats: keyless, superseded and tombstone removals are counted here.

    Returns:
        The kept mask.
    """
    covered = offsets <= oracle.map_latest_offset
    asked = np.flatnonzero(covered & keyed)
    is_latest = np.zeros(len(offsets), dtype=bool)
    if len(asked):
        is_latest[asked] = oracle.is_latest(offsets[asked], lambda at: keys_at(asked[at]))
    if fence is not None:
        keeps_tombstones = keeps_tombstones | (offsets >= fence)
    kept: Mask = ~covered | (is_latest & (~tombstone | keeps_tombstones))
    stats.invalid_records += int(np.count_nonzero(covered & ~keyed))
    stats.tombstones_removed += int(np.count_nonzero(covered & keyed & tombstone & ~kept))
    stats.superseded_removed += int(np.count_nonzero(covered & keyed & ~tombstone & ~kept))
    return kept


def protected_offsets(last_records: Mapping[int, LastRecord]) -> I64:
    """The last offsets a C window must not take: each live producer's last data batch (its batch
    decision is ``RETAIN_EMPTY``), ascending."""
    return np.array(sorted(r.last_data_offset for r in last_records.values()
                           if r.last_data_offset is not None), dtype=np.int64)
