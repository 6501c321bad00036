"""One cleaning round as a plain, picklable value: what every stage of a clean needs to know.

:class:`CleanPlan` is built once, by the process that holds the partition's locks, from the loaded facts
(``log_state.py``) and the cleanable range (``ranges.py``). After that every stage — pass 1 over one
dirty segment, pass 2 over one group or a byte range of one segment — can run in another process from the
plan alone and the partition directory, and produce exactly what the serial walk would have produced.

Round state that carries across segments is the transaction bookkeeping
(:class:`~kcompact.log.rules.transactions.CleanedTransactionMetadata`). It depends only on batch headers,
which ``load_log_state`` already walked and recorded (``SegmentState.txn_events``), so the plan replays
those events once, here, and keeps for every segment the state at its start (:class:`SegmentPlan`):

* ``clean_seed``: pass 2's state before the segment's own aborted transactions are fed (one metadata for
  the whole round, fed per segment, as ``Cleaner.cleanSegments`` does), with its queued entries;
* ``map_seed``: pass 1's state (one metadata fed every aborted transaction of ``[first_dirty,
  first_uncleanable)`` up front, as ``Cleaner.buildOffsetMap`` does), without its queue, which the worker re-feeds.

The map's upper offset is known before the map is built when the map is unbounded (the round's last
offset, ``first_uncleanable - 1``); a bounded map (``--dedupe-buffer-size``) may stop earlier, and
:meth:`CleanPlan.bounded` then gives the plan of the shorter round (new end offset, regrouped segments).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from kcompact.config.topic_config import TopicConfig
from kcompact.errors import CleanerStateError
from kcompact.log.rules.grouping import group_segments_by_size
from kcompact.log.rules.producer_state import LastRecord
from kcompact.log.rules.ranges import CleanableRange
from kcompact.log.rules.transactions import CleanedTransactionMetadata, TxnSeed
from kcompact.log.state.log_state import LogState, SegmentState
from kcompact.segment.txn_index import AbortedTxn
from kcompact.value import frozen

Seed = TxnSeed[AbortedTxn]


@frozen
class SegmentPlan:
    """One source segment of the round, and the transaction state at its start."""

    base_offset: int
    upper_offset: int  # the next segment's base offset (its own next offset for the last one)
    next_offset: int  # past its last batch; its base when empty
    size_in_bytes: int
    offset_index_bytes: int  # what grouping adds up (Cleaner.groupSegmentsBySize)
    time_index_bytes: int
    mtime_ns: int
    log_path: str
    txn_batches: int  # its transactional data batches and COMMIT/ABORT markers (0: no state to replay)
    clean_seed: Seed  # pass 2, before this segment's feed
    map_seed: Seed | None  # pass 1 (dirty segments only), queue left out

    @property
    def mtime_ms(self) -> int:
        """The ``.log`` mtime in milliseconds (the legacy delete horizon's clock)."""
        return self.mtime_ns // 1_000_000


@frozen
class CleanPlan:
    """Everything a stage of one cleaning round needs (see the module docstring).

    ``segments`` holds every segment below the first uncleanable offset, in order; ``groups`` the base
    offsets of the segments merged into each output segment (only those below ``end_offset``);
    ``dirty_segments`` the bases pass 1 reads.
    """

    partition_dir: str
    topic: str
    partition: int
    config: TopicConfig
    now_ms: int
    range: CleanableRange
    first_dirty_offset: int
    first_uncleanable_offset: int
    map_latest_offset: int
    end_offset: int  # the new cleaner checkpoint
    groups: tuple[tuple[int, ...], ...]
    segments: tuple[SegmentPlan, ...]
    dirty_segments: tuple[int, ...]
    aborted: tuple[AbortedTxn, ...]  # every txn-index entry of the partition, segment by segment
    last_records: tuple[tuple[int, LastRecord], ...]  # live producers' last entries (Cleaner.cleanInto)
    legacy_delete_horizon_ms: int
    checkpoint_before: int | None
    warnings: tuple[str, ...] = ()
    fence_offset: int | None = None  # the replica fence (``rules.fence``); None: Kafka's rules alone

    def segment(self, base_offset: int) -> SegmentPlan:
        """The planned segment based at ``base_offset``.

        Raises:
            CleanerStateError: the round has no such segment.
        """
        for seg in self.segments:
            if seg.base_offset == base_offset:
                return seg
        raise CleanerStateError(
            f"{self.partition_dir}: segment of this cleaning round; expected one of "
            f"{[s.base_offset for s in self.segments]}, found base offset {base_offset}"
        )

    def aborted_in(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start, end)``, as the cleaner asks its txn indexes."""
        return _overlapping(self.aborted, start, end)

    def map_feed(self) -> list[AbortedTxn]:
        """What pass 1's transaction metadata is fed up front."""
        return self.aborted_in(self.first_dirty_offset, self.first_uncleanable_offset)

    def bounded(self, map_latest_offset: int) -> CleanPlan:
        """The plan of a round whose map stopped at ``map_latest_offset`` (a bounded map filled up).

        Args:
            map_latest_offset: the built map's ``latest_offset``.

        Returns:
            This plan with the new map offset, end offset and groups.
        """
        end = map_latest_offset + 1
        return replace(self, map_latest_offset=map_latest_offset, end_offset=end,
                       groups=_groups(self.segments, end, self.config, self.first_uncleanable_offset))


def build_plan(
    state: LogState,
    rng: CleanableRange,
    config: TopicConfig,
    now_ms: int,
    fence_offset: int | None = None,
) -> CleanPlan:
    """The plan of the round ``rng`` describes, for an unbounded map.

    Args:
        state: the partition's loaded facts.
        rng: a cleanable range with something to clean.
        config: the topic's configuration.
        now_ms: the round's clock.
        fence_offset: the replica fence (``rules.fence``), or None.

    Returns:
        The plan; call :meth:`CleanPlan.bounded` once a bounded map has stopped.
    """
    start, end = rng.first_dirty_offset, rng.first_uncleanable_offset
    chosen = [(i, s) for i, s in enumerate(state.segments) if s.base_offset < end]
    uppers = [_upper(state.segments, i) for i, _s in chosen]
    aborted = tuple(t for _base, entries in state.aborted_by_segment for t in entries)
    dirty = [k for k, (_i, s) in enumerate(chosen) if s.base_offset < end and uppers[k] > start]
    segs = [s for _i, s in chosen]
    clean_seeds = _clean_seeds(segs, uppers, aborted)
    map_seeds = _map_seeds([segs[k] for k in dirty], _overlapping(aborted, start, end))
    plans = tuple(
        _segment_plan(s, uppers[k], clean_seeds[k], map_seeds.get(s.base_offset))
        for k, s in enumerate(segs)
    )
    live = state.producers.last_records_of_active_producers(now_ms, config.producer_id_expiration_ms)
    clean = [s for s in state.segments if s.base_offset < start]
    return CleanPlan(
        partition_dir=str(state.partition.path), topic=state.partition.topic,
        partition=state.partition.partition, config=config, now_ms=now_ms, range=rng,
        first_dirty_offset=start, first_uncleanable_offset=end, map_latest_offset=end - 1,
        end_offset=end, groups=_groups(plans, end, config, end), segments=plans,
        dirty_segments=tuple(segs[k].base_offset for k in dirty), aborted=aborted,
        last_records=tuple(sorted(live.items())),
        legacy_delete_horizon_ms=clean[-1].files.mtime_ms - config.delete_retention_ms if clean else 0,
        checkpoint_before=state.checkpoint_offset, warnings=tuple(state.warnings),
        fence_offset=fence_offset,
    )


def _upper(segments: tuple[SegmentState, ...], i: int) -> int:
    return segments[i + 1].base_offset if i + 1 < len(segments) else segments[i].next_offset


def _overlapping(aborted: Iterable[AbortedTxn], start: int, end: int) -> list[AbortedTxn]:
    return [t for t in aborted if t.overlaps(start, end)]


def _groups(
    segments: tuple[SegmentPlan, ...], end_offset: int, config: TopicConfig, first_uncleanable: int
) -> tuple[tuple[int, ...], ...]:
    groups = group_segments_by_size(
        [s for s in segments if s.base_offset < end_offset],
        max_size=config.segment_bytes,
        max_index_size=config.segment_index_bytes,
        first_uncleanable_offset=first_uncleanable,
    )
    return tuple(tuple(s.base_offset for s in group) for group in groups)


def _segment_plan(seg: SegmentState, upper: int, clean_seed: Seed, map_seed: Seed | None) -> SegmentPlan:
    return SegmentPlan(
        base_offset=seg.base_offset, upper_offset=upper, next_offset=seg.next_offset,
        size_in_bytes=seg.size_in_bytes, offset_index_bytes=seg.offset_index_bytes,
        time_index_bytes=seg.time_index_bytes, mtime_ns=seg.files.mtime_ns,
        log_path=str(seg.files.log_path), txn_batches=len(seg.txn_events), clean_seed=clean_seed,
        map_seed=map_seed,
    )


def _replay(txn: CleanedTransactionMetadata[AbortedTxn], seg: SegmentState) -> None:
    """Advance ``txn`` over one segment as reading its batches would (see ``transactions.py``)."""
    for last_offset, producer_id, kind in seg.txn_events:
        txn.apply_event(last_offset, producer_id, kind)
    if seg.batch_count:
        txn.advance_to(seg.next_offset - 1)


def _clean_seeds(
    segments: list[SegmentState], uppers: list[int], aborted: tuple[AbortedTxn, ...]
) -> list[Seed]:
    txn: CleanedTransactionMetadata[AbortedTxn] = CleanedTransactionMetadata(
        collect_index_entries=False
    )
    seeds = []
    for seg, upper in zip(segments, uppers, strict=True):
        seeds.append(txn.seed())
        txn.add_aborted(_overlapping(aborted, seg.base_offset, upper))
        _replay(txn, seg)
    return seeds


def _map_seeds(dirty: list[SegmentState], feed: list[AbortedTxn]) -> dict[int, Seed]:
    txn: CleanedTransactionMetadata[AbortedTxn] = CleanedTransactionMetadata(
        collect_index_entries=False
    )
    txn.add_aborted(feed)
    seeds = {}
    for seg in dirty:
        seeds[seg.base_offset] = txn.seed(with_pending=False)
        _replay(txn, seg)
    return seeds
