"""Byte ranges of source segments ("chunks"): how the passes are cut for worker processes, and how a worker
finds the first batch of its range.

A chunk owns the batches that *start* in ``[start, end)``, so any cut is valid and every batch belongs to
exactly one chunk. To begin its range a worker needs two things the batches before it determine:

* where the first batch of the range starts. Every entry of a ``.log`` (v2 batch or legacy entry) is
  framed the same way, so following the size fields from position 0 finds it without decoding a
  header (about 0.3 µs an entry)::

      base_offset   int64   the entry's first offset (legacy: its offset)
      size          int32   bytes after this field: position of the next entry = position + 12 + size

* the transaction state at that batch. It changes only at transactional data batches and COMMIT/ABORT
  markers (``transactions.py``); every other batch merely takes aborted transactions off the queue,
  which the first batch of the range does just the same, since nothing is queued inside a segment. So
  the walk unpacks the v2 header of each entry it passes (decoding only control batches, for their
  marker type) and replays those events (:func:`batches_from`); a segment without any (the plan counts
  them, ``SegmentPlan.txn_batches``) needs the sizes only.

Where the framing does not hold (a size out of range, an unknown magic), the size walk gives up and the
headers are read the slow way, which reports the damage exactly as a serial clean would.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.cleaner.round.plan import CleanPlan, SegmentPlan
from kcompact.log.rules.transactions import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    TXN_DATA,
    CleanedTransactionMetadata,
)
from kcompact.log.state.log_state import read_control
from kcompact.records.batch import ENTRY_PREFIX_STRUCT, RECORD_OVERHEAD_V0, iter_batches
from kcompact.records.batch_header import (
    CONTROL_FLAG_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V2,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_FLAG_MASK,
)
from kcompact.segment.log_file import LogFile
from kcompact.segment.txn_index import AbortedTxn

if TYPE_CHECKING:
    from kcompact.segment.log_file import AnyBatch

Chunk = tuple[int, int, int | None]
"""(index into ``plan.segments``, start position, end position or None for the file's end)."""


def chunks_of(
    plan: CleanPlan, segments: Sequence[SegmentPlan], parts: int, min_bytes: int
) -> list[Chunk]:
    """Cut ``segments`` into ranges of about ``total / parts`` bytes (at least ``min_bytes``).

    Args:
        plan: the round (chunks index its ``segments``).
        segments: the segments to cut, in order.
        parts: how many ranges the total should make, roughly.
        min_bytes: no range is cut smaller (a segment smaller than this stays whole).

    Returns:
        The chunks, in log order; each segment's chunks tile it from 0 to its end.
    """
    total = sum(s.size_in_bytes for s in segments)
    target = max(min_bytes, -(-total // max(1, parts)))
    index = {s.base_offset: i for i, s in enumerate(plan.segments)}
    chunks: list[Chunk] = []
    for seg in segments:
        count = max(1, -(-seg.size_in_bytes // target))
        cuts = [seg.size_in_bytes * k // count for k in range(count)]
        ends: list[int | None] = [*cuts[1:], None]
        chunks += [(index[seg.base_offset], start, end) for start, end in zip(cuts, ends, strict=True)]
    return chunks


_FORGET_STEP = 4 << 20  # bytes a framing walk passes between two LogFile.forget_before calls


def _walk(
    buffer: memoryview, start: int, events: list[tuple[int, int, int]] | None, path: Path,
    forget_before: Callable[[int], None] | None = None,
) -> tuple[int, list[tuple[int, int, int]]] | None:
    """Follow the framing to ``start``; with ``events``, collect the transaction events of the v2
    headers passed (control batches are decoded for their marker type). None: the framing breaks.
    ``forget_before`` (``LogFile.forget_before``) is called every :data:`_FORGET_STEP` bytes walked: the
    headers' page faults map the pages around them, which would otherwise hold the segment up to ``start``
    resident (a range near a large segment's end, on a thread or in a worker, held nearly all of it)."""
    position, size, released = 0, len(buffer), 0
    collected: list[tuple[int, int, int]] = []
    while position < start:
        if forget_before is not None and position - released >= _FORGET_STEP:
            forget_before(position)
            released = position
        if position + LOG_OVERHEAD > size:
            return None
        length = ENTRY_PREFIX_STRUCT.unpack_from(buffer, position)[1]
        if length < RECORD_OVERHEAD_V0 or position + LOG_OVERHEAD + length > size:
            return None
        if events is not None and buffer[position + MAGIC_OFFSET] == MAGIC_VALUE_V2:
            if length < MIN_BATCH_LENGTH:
                return None
            event = _event(buffer, position, path)
            if event is not None:
                collected.append(event)
        position += LOG_OVERHEAD + length
    return position, collected


def _event(buffer: memoryview, position: int, path: Path) -> tuple[int, int, int] | None:
    """The transaction event of the v2 batch at ``position`` (see ``transactions.py``), if any."""
    header = HEADER_STRUCT.unpack_from(buffer, position)
    base_offset, attributes, last_offset_delta, producer_id = (
        header[0], header[5], header[6], header[9])
    if attributes & CONTROL_FLAG_MASK:
        batch = next(iter_batches(buffer, position, position + LOG_OVERHEAD + header[1]))
        control_type = read_control(batch, path)[0]
        if control_type in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
            return base_offset + last_offset_delta, producer_id, control_type
        return None
    if attributes & TRANSACTIONAL_FLAG_MASK:
        return base_offset + last_offset_delta, producer_id, TXN_DATA
    return None


def batch_cuts(buffer: memoryview, cuts: Sequence[int],
               forget_before: Callable[[int], None] | None = None) -> list[int]:
    """The position of the first batch starting at or after each of ``cuts`` (ascending), by one walk of the
    framing from 0 (``at_batch`` of :func:`batches_from`). Where the framing breaks, the cuts past it are
    left out: the range that holds the break runs to the file's end, and its walk reports the damage
    exactly as a serial clean's.

    ``forget_before`` (``LogFile.forget_before``) is called with each cut found: the walk's page faults map
    the pages around every header it reads, so without it the whole segment stayed resident until the file
    closed (a peak RSS that grew with the segment size)."""
    found: list[int] = []
    position, size = 0, len(buffer)
    for cut in cuts:
        while position < cut:
            if position + LOG_OVERHEAD > size:
                return found
            length = ENTRY_PREFIX_STRUCT.unpack_from(buffer, position)[1]
            if length < RECORD_OVERHEAD_V0 or position + LOG_OVERHEAD + length > size:
                return found
            position += LOG_OVERHEAD + length
        if position >= size:
            return found
        if not found or found[-1] != position:
            found.append(position)
            if forget_before is not None:
                forget_before(position)
    return found


def batches_from(
    log: LogFile,
    seg: SegmentPlan,
    start: int,
    txn: CleanedTransactionMetadata[AbortedTxn],
    *,
    at_batch: bool = False,
) -> Iterator[AnyBatch]:
    """The batches of ``log`` from the first one starting at ``start`` or later, with ``txn`` advanced
    over those before it as reading them would (see the module docstring).

    Args:
        log: the open segment.
        seg: its plan (``txn_batches`` says whether headers before ``start`` matter).
        start: where the chunk starts.
        txn: the transaction state at the segment's start; left at the chunk's start.
        at_batch: ``start`` is a batch's own position (:func:`batch_cuts` found it): in a segment with no
            transaction events before it to replay, the walk there is skipped.
    """
    if start <= 0:
        return log.iter_batches()
    if at_batch and not seg.txn_batches:
        return log.iter_batches(start)
    found = _walk(log.buffer, start, [] if seg.txn_batches else None, log.path, log.forget_before)
    if found is not None:
        position, events = found
        log.forget_before(position)
        for last_offset, producer_id, kind in events:
            txn.apply_event(last_offset, producer_id, kind)
        return log.iter_batches(position)
    batches = log.iter_batches()  # the framing breaks before start: the full walk reports where
    for batch in batches:
        if batch.position >= start:
            return itertools.chain([batch], batches)
        if batch.is_control:
            txn.on_control_batch_read(batch, read_control(batch, log.path)[0])
        else:
            txn.on_batch_read(batch)
    return iter(())
