"""Pass 1 of a cleaning round: the offset map over the dirty range (Kafka's ``Cleaner.buildOffsetMap``).

Split in two so that the expensive half runs anywhere:

* :func:`iter_dirty_keys` reads one dirty segment, or the batches starting in a byte range of it, and
  returns its map entries as arrays — the 128-bit digests and offsets of every keyed record at or above
  the first dirty offset in a data batch that is not aborted, in put order — plus, per batch, how many
  entries it contributed and its last offset. The transaction state comes from the plan's seed, so any
  process that sees the partition directory can do this for any segment.
* :func:`insert_keys` puts those entries into the map, in segment order, in the process that owns the
  map. A bounded map (``--dedupe-buffer-size``) may refuse a put; the per-batch counts then tell where the
  serial walk would have stopped and which ``latest_offset`` it would have left: the last accepted
  put's offset when the batch got some in, else the last offset of the batch before it.

After a whole dirty segment the map's ``latest_offset`` jumps to the next dirty segment's base minus one
(the first uncleanable offset minus one after the last), as Kafka's does.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kcompact.cleaner.round import accel
from kcompact.cleaner.round.chunks import batches_from
from kcompact.cleaner.round.key_counts import SLICE_RECORDS, batch_keys
from kcompact.cleaner.round.options import Progress
from kcompact.cleaner.round.plan import CleanPlan, SegmentPlan
from kcompact.errors import CleanerStateError, CorruptDataError
from kcompact.log.offset_map import DIGEST_LAYOUT, OffsetMap, digest_bytes, thread_buffer
from kcompact.log.rules.transactions import CleanedTransactionMetadata
from kcompact.log.state.log_state import read_control
from kcompact.records.compression import decompress, zstd_one_call
from kcompact.records.legacy import LegacyEntry
from kcompact.records.record import records_bytes
from kcompact.records.scan import scan_key_digests
from kcompact.records.scan.legacy_rows import (
    KEY_START,
    LEGACY_DIGESTS,
    OFFSET,
    ROW_FIELDS,
    legacy_entries,
    wrapper_columns,
)
from kcompact.segment.log_file import LogFile, crc_error_or
from kcompact.segment.txn_index import AbortedTxn
from kcompact.value import frozen, mutable

if TYPE_CHECKING:
    from kcompact.segment.log_file import AnyBatch

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

RUN_BYTES = 8 << 20  # the most of a segment one C run reads (then its pages go): large records, few per slice
KEEP_INFLATED_DIRTY_BYTES = 4 << 20  # a round whose dirty segments hold at most this keeps pass 1's payloads


@frozen
class SegmentKeys:
    """The map entries of consecutive batches of one dirty segment, in put order.

    ``batch_put_ends[j]`` is how many of the entries come from batches ``0..j`` of those whose last
    offset reaches the first dirty offset (the batches that move ``latest_offset``);
    ``batch_scanned[j]`` the records batch ``j`` had scanned (``records_scanned``).
    """

    hi: U64
    lo: U64
    offsets: I64
    batch_put_ends: I64
    batch_last_offsets: I64
    batch_scanned: I64


def iter_dirty_keys(
    plan: CleanPlan,
    seg: SegmentPlan,
    start_position: int = 0,
    end_position: int | None = None,
    *,
    at_batch: bool = False,
) -> Iterator[SegmentKeys]:
    """The map entries of the batches of ``seg`` that start in ``[start_position, end_position)``.

    Args:
        plan: the round.
        seg: one of ``plan.dirty_segments``.
        start_position: where the range starts (any byte position: a batch belongs to the range it
            starts in; ``chunks.batches_from`` finds it).
        end_position: where it ends (None: the end of the file).
        at_batch: ``start_position`` is a batch's own (``chunks.batch_cuts``).

    Yields:
        Slices of about :data:`SLICE_RECORDS` entries, in order.

    Raises:
        CorruptDataError: a batch does not parse (names the file and position).
        CleanerStateError: ``seg`` is not a dirty segment of the plan.
    """
    if seg.map_seed is None:
        raise CleanerStateError(
            f"{seg.log_path}: a dirty segment of the round; expected one of {plan.dirty_segments}, "
            f"found base offset {seg.base_offset}"
        )
    txn: CleanedTransactionMetadata[AbortedTxn] = CleanedTransactionMetadata.from_seed(
        seg.map_seed, feed=plan.map_feed(), collect_index_entries=False
    )
    start = plan.first_dirty_offset
    acc = _Slice()
    with LogFile(seg.log_path) as log:
        limit = log.size_in_bytes if end_position is None else min(end_position, log.size_in_bytes)
        batches = batches_from(log, seg, start_position, txn, at_batch=at_batch)
        while (batch := next(batches, None)) is not None:
            if end_position is not None and batch.position >= end_position:
                break
            if batch.magic < 2:  # plain legacy entries from this one: a C run
                reached = acc.add_legacy_run(log, batch.position, limit, start, txn)
                if reached != batch.position:
                    if acc.puts >= SLICE_RECORDS:
                        yield acc.take()
                    batches = log.iter_batches(reached)
                    continue
            if batch.is_control:
                txn.on_control_batch_read(batch, read_control(batch, log.path)[0])
                aborted = True
            else:
                aborted = txn.on_batch_read(batch)
            if batch.last_offset >= start:
                if not aborted:
                    acc.add_batch(batch, start, log)
                acc.end_batch(batch.last_offset)
                if acc.puts >= SLICE_RECORDS:
                    yield acc.take()
            if batch.magic >= 2 and not seg.txn_batches:  # no transaction state: the C run
                after = batch.position + batch.size_in_bytes
                reached = acc.add_run(log, after, limit, start)
                if acc.puts >= SLICE_RECORDS:
                    yield acc.take()
                if reached != after:
                    batches = log.iter_batches(reached)
        del batches
    yield acc.take()


class _Slice:
    """Accumulates a slice's entries (offsets and digests as raw bytes, no Python object per key) and
    per-batch bookkeeping; numpy arrays once per slice."""

    def __init__(self) -> None:
        self.digests = bytearray()
        self.offsets = bytearray()  # native int64
        self.put_ends = array("q")  # per batch: array('q') grows by memcpy from the C runs
        self.last_offsets = array("q")
        self.scanned = array("q")
        self._batch_scanned = 0
        self.puts = 0

    def _reset(self) -> None:
        self.digests, self.offsets = bytearray(), bytearray()
        self.put_ends, self.last_offsets, self.scanned = array("q"), array("q"), array("q")
        self.puts = 0

    def add_batch(self, batch: AnyBatch, start: int, log: LogFile) -> None:
        offsets, digests, self._batch_scanned = batch_key_digests(batch, start, log)
        self.offsets += offsets
        self.digests += digests
        self.puts = len(self.offsets) // 8

    def add_run(self, log: LogFile, position: int, limit: int, start: int) -> int:
        """The v2 data batches from ``position`` on, compressed or not, in one C call
        (``scan_window_key_digests``, decompressing through ``records_bytes``' own ``decompress``),
        up to the slice's size and :data:`RUN_BYTES`; returns where it stopped (``position``: nothing taken)."""
        found = accel.scan_window_key_digests(
            log.buffer, position, min(limit, position + RUN_BYTES), start, SLICE_RECORDS - self.puts, self.puts,
            decompress, accel.zstd_codec(zstd_one_call()), accel.native_codecs())
        if found is None:
            return position
        log.forget_before(found[0])
        reached, offsets, digests, batches = found
        self.offsets += offsets
        self.digests += digests
        self.puts = len(self.offsets) // 8
        info = array("q", batches)
        self.put_ends += info[0::3]
        self.last_offsets += info[1::3]
        self.scanned += info[2::3]
        return reached

    def add_legacy_run(
        self, log: LogFile, position: int, limit: int, start: int,
        txn: CleanedTransactionMetadata[AbortedTxn],
    ) -> int:
        """The plain legacy entries from ``position`` on in one C call (``legacy_rows.legacy_entries``),
        up to the slice's size, as the per-entry walk puts them (a legacy entry is never transactional:
        the transaction state only takes aborted transactions off its queue); returns where it stopped
        (``position``: nothing taken)."""
        run = legacy_entries(log.buffer, position, limit, max(1, SLICE_RECORDS - self.puts),
                             LEGACY_DIGESTS)
        if run is None or run[0] == position:
            return position
        rows = np.frombuffer(run[1], dtype=np.int64).reshape(-1, ROW_FIELDS)
        offsets = rows[:, OFFSET]
        counted = offsets >= start  # the entries that move latest_offset (each its own last offset)
        wanted = counted & (rows[:, KEY_START] >= 0)
        self.offsets += offsets[wanted].tobytes()
        self.digests += np.frombuffer(run[2], dtype=np.uint8).reshape(-1, 16)[wanted].tobytes()
        self.put_ends.frombytes((self.puts + np.cumsum(wanted))[counted].tobytes())
        self.last_offsets.frombytes(offsets[counted].tobytes())
        self.scanned.frombytes(np.ones(int(np.count_nonzero(counted)), dtype=np.int64).tobytes())
        self.puts = len(self.offsets) // 8
        txn.advance_to(int(offsets[-1]))  # what each entry's on_batch_read does first
        return run[0]

    def end_batch(self, last_offset: int) -> None:
        self.put_ends.append(self.puts)
        self.last_offsets.append(last_offset)
        self.scanned.append(self._batch_scanned)
        self._batch_scanned = 0

    def take(self) -> SegmentKeys:
        packed = np.frombuffer(self.digests, dtype=DIGEST_LAYOUT)
        out = SegmentKeys(
            packed["hi"].astype(np.uint64), packed["lo"].astype(np.uint64),
            np.frombuffer(self.offsets, dtype=np.int64).copy(),
            np.frombuffer(self.put_ends, dtype=np.int64).copy(),
            np.frombuffer(self.last_offsets, dtype=np.int64).copy(),
            np.frombuffer(self.scanned, dtype=np.int64).copy(),
        )
        self._reset()
        return out


def batch_key_digests(batch: AnyBatch, start: int, log: LogFile) -> tuple[bytes, bytes, int]:
    """The map entries of one data batch or legacy entry of ``log``: as ``Cleaner.buildOffsetMapForSegment``
    puts them, the keyed records at offset ``start`` or later.

    Returns:
        Their offsets (native int64 bytes), their keys' digests (``DIGEST_LAYOUT``, 16 bytes each),
        and how many records the batch has.

    Raises:
        CorruptDataError: its records do not parse (located in ``log``).
    """
    if isinstance(batch, LegacyEntry):
        inner = wrapper_columns(batch)  # a compressed wrapper in one C walk, its keys hashed there
        if inner is not None:
            inner_offsets = np.frombuffer(inner.offsets, dtype=np.int64)
            put = (inner_offsets >= start) & (np.frombuffer(inner.key_starts, dtype=np.int64) >= 0)
            hashed = np.frombuffer(inner.digests, dtype=np.uint8).reshape(-1, 16)
            return inner_offsets[put].tobytes(), hashed[put].tobytes(), len(inner_offsets)
        offsets, keys = batch_keys(batch, log)
        wanted = [(offset, key) for offset, key in zip(offsets, keys, strict=True)
                  if key is not None and offset >= start]
        kept = array("q", [offset for offset, _key in wanted]).tobytes()
        return kept, digest_bytes([key for _offset, key in wanted]), len(offsets)
    try:
        found = scan_key_digests(records_bytes(batch), base_offset=batch.base_offset,
                                 count=batch.records_count, min_offset=start)
    except CorruptDataError as err:
        raise crc_error_or(err, log.path, batch) from err
    return found[0], found[1], batch.records_count


@mutable
class MapProgress:
    """Where pass 1 stands: ``latest`` is the map's latest offset so far, ``full`` once it stopped."""

    latest: int = -1
    full: bool = False
    records_scanned: int = 0


def insert_keys(offset_map: OffsetMap, keys: SegmentKeys, progress: MapProgress) -> None:
    """Put one slice's entries, in order, as the serial walk would (see the module docstring).

    Args:
        offset_map: the map being built.
        keys: the next slice of the dirty range.
        progress: updated in place; once ``full`` is set the remaining slices must be dropped.
    """
    n = len(keys.offsets)
    accepted = offset_map.put_batch(keys.hi, keys.lo, keys.offsets, owned=True) if n else 0
    if accepted == n:
        progress.records_scanned += int(keys.batch_scanned.sum())
        if len(keys.batch_last_offsets):
            progress.latest = int(keys.batch_last_offsets[-1])
        return
    j = int(np.searchsorted(keys.batch_put_ends, accepted, side="right"))  # batch of the refused put
    first_put = int(keys.batch_put_ends[j - 1]) if j else 0
    if accepted > first_put:
        progress.latest = int(keys.offsets[accepted - 1])
    elif j:
        progress.latest = int(keys.batch_last_offsets[j - 1])
    progress.records_scanned += int(keys.batch_scanned[: j + 1].sum())
    progress.full = True


def new_offset_map(plan: CleanPlan, dedupe_buffer_size: int | None) -> OffsetMap:
    """An empty map: bounded like one thread's of a broker with this ``log.cleaner.dedupe.buffer.size``
    (and the plan's ``log.cleaner.threads``) when ``dedupe_buffer_size`` is given, else unbounded."""
    if dedupe_buffer_size is None:
        return OffsetMap()
    share = thread_buffer(dedupe_buffer_size, plan.config.cleaner_threads)
    return OffsetMap.for_dedupe_buffer(share, plan.config.dedupe_load_factor)


def fill_offset_map(
    plan: CleanPlan,
    offset_map: OffsetMap,
    segment_slices: Iterable[tuple[SegmentPlan, Iterable[SegmentKeys]]],
    progress: Progress | None = None,
) -> int:
    """Insert the dirty segments' entries in order, stop where a bounded map fills, and freeze the map.

    Args:
        plan: the round.
        offset_map: from :func:`new_offset_map`.
        segment_slices: every dirty segment, in order, with its slices (:func:`iter_dirty_keys` here,
            or the same computed by worker processes).
        progress: called with each dirty segment's size once it is in.

    Returns:
        The records scanned (``CleanStats.records_scanned``); the map's ``latest_offset`` is set.
    """
    # what an earlier round's pass 2 left goes; a small round's pass 1 keeps what it decompresses for pass 2,
    # a larger one nothing (its peak memory stays what it was; its batches are decompressed twice)
    bases = set(plan.dirty_segments)
    dirty_bytes = sum(seg.size_in_bytes for seg in plan.segments if seg.base_offset in bases)
    accel.forget_inflated(accel.INFLATED_BUDGET if dirty_bytes <= KEEP_INFLATED_DIRTY_BYTES else 0)
    state = MapProgress()
    dirty = plan.dirty_segments
    for k, (seg, slices) in enumerate(segment_slices):
        for keys in slices:
            insert_keys(offset_map, keys, state)
            if state.full:
                break
        if state.full:
            break
        state.latest = (dirty[k + 1] if k + 1 < len(dirty) else plan.first_uncleanable_offset) - 1
        if progress is not None:
            progress(seg.size_in_bytes)
    offset_map.latest_offset = state.latest
    offset_map.freeze()
    return state.records_scanned
