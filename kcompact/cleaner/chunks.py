"""Byte ranges of source segments ("chunks"): how the passes are cut for worker processes, and how a worker
finds the first batch of its range.

A chunk owns the batches that *start* in ``[start, end)``, so any cut is valid and every batch belongs to
exactly one chunk. To begin its range a worker needs two things the batches before it determine:

* where the first batch of the range starts. Every entry of a ``.log`` (v2 batch or legacy entry) is
  framed the same way, so following the size fields from position 0 finds it without decoding a
  header (:func:`first_entry_at`; about 0.3 µs an entry)::

      base_offset   int64   the entry's first offset (legacy: its offset)
      size          int32   bytes after this field: position of the next entry = position + 12 + size

* the transaction state at that batch. A segment without transactional headers (the plan counts them,
  ``SegmentPlan.txn_batches``) leaves nothing to replay; otherwise the worker reads the headers before
  its range through the same bookkeeping the serial walk uses (:func:`batches_from`).

Where the framing does not hold (a size out of range), the size walk gives up and the headers are read
the slow way, which reports the damage exactly as a serial clean would.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Sequence
from typing import Any

from kcompact.cleaner.log_state import read_control
from kcompact.cleaner.plan import CleanPlan, SegmentPlan
from kcompact.cleaner.transactions import CleanedTransactionMetadata
from kcompact.segment.log_file import LogFile
from kcompact.segment.txn_index import AbortedTxn

FRAME_SIZE_FIELD = struct.Struct(">i")  # the int32 size at offset 8 of every entry (after base_offset)
LOG_OVERHEAD = 12  # base_offset (8) + size (4): bytes before what ``size`` counts
MIN_ENTRY_SIZE = 14  # the smallest legal ``size`` (a legacy v0 message with no key and no value)

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
        chunks += [(index[seg.base_offset], start, end) for start, end in zip(cuts, ends)]
    return chunks


def first_entry_at(buffer: memoryview, start: int) -> int | None:
    """Position of the first entry starting at or after ``start``, following the size fields from 0.

    Args:
        buffer: the whole ``.log`` file.
        start: any byte position.

    Returns:
        The position (the file size when no entry starts at or after ``start``), or None when a size
        field is out of range before it.
    """
    position, size = 0, len(buffer)
    unpack = FRAME_SIZE_FIELD.unpack_from
    while position < start:
        if position + LOG_OVERHEAD > size:
            return None
        (length,) = unpack(buffer, position + 8)
        if length < MIN_ENTRY_SIZE or position + LOG_OVERHEAD + length > size:
            return None
        position += LOG_OVERHEAD + length
    return position


def batches_from(
    log: LogFile,
    seg: SegmentPlan,
    start: int,
    txn: CleanedTransactionMetadata[AbortedTxn],
) -> Iterator[Any]:
    """The batches of ``log`` from the first one starting at ``start`` or later, with ``txn`` advanced
    over those before it as reading them would (see the module docstring).

    Args:
        log: the open segment.
        seg: its plan (``txn_batches`` says whether headers before ``start`` matter).
        start: where the chunk starts.
        txn: the transaction state at the segment's start; left at the chunk's start.
    """
    if start <= 0:
        return log.iter_batches()
    if not seg.txn_batches:
        position = first_entry_at(log.buffer, start)
        if position is not None:
            return log.iter_batches(position)
    batches = log.iter_batches()
    for batch in batches:
        if batch.position >= start:
            return itertools.chain([batch], batches)
        if batch.is_control:
            txn.on_control_batch_read(batch, read_control(batch, log.path)[0])
        else:
            txn.on_batch_read(batch)
    return iter(())
