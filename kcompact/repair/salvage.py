"""Finding every intact batch of a damaged segment: Kafka's framing walk, plus resynchronisation.

Kafka's log recovery walks a segment batch by batch and stops at the first entry that fails its checks:
it truncates the ``.log`` there and deletes every later segment (``LogLoader.recoverLog``, ``LogSegment.recover``). One
flipped byte in the middle of a segment therefore loses everything after it. :func:`scan_segment` walks the same
way but, at a damaged entry, resynchronises instead of stopping: it looks for the next position where

* a plausible entry header parses (size ≥ 14, magic 0..2, the entry fits the buffer — found with one
  compiled pattern over the bytes, so long garbage or zero runs are skipped in C),
* its CRC validates (CRC-32C for v2, CRC-32 for v0/v1), and
* its offsets continue the sequence: the first offset is above the previous kept batch's last, the last
  offset is below the next segment's base and fits the segment's 32-bit relative offsets.

The position right after the damaged entry's own frame is tried first, then every byte after the damage.
The bytes in between form a :class:`DamagedRegion`; the caller moves them to a quarantine file.

A batch is kept only when Kafka's broker and cleaner can both use it: whole, CRC-valid, offsets in
sequence, and records that parse (a transaction marker's key and value too) — a CRC-valid batch whose
records do not parse is what makes the cleaner fail (``Cleaner.doClean`` throws), so it goes to quarantine as well.
Two header fields outside the CRC are restored when the evidence is conclusive, so that no intact
payload is lost to them:

* ``batch_length`` — the damaged region starts with a v2 header whose CRC matches the region's bytes
  exactly: the length field is what broke (``FIX_LENGTH``);
* ``base_offset`` — a CRC-valid v2 batch whose offsets do not fit between its neighbours, where the gap
  between the previous batch and the next one is exactly its ``last_offset_delta + 1`` offsets
  (``FIX_BASE_OFFSET``). A batch whose offsets overlap the next batch while the next one continues the
  sequence is the odd one out; an exact duplicate (same offsets) of the batch before it is the one
  dropped.

Works on a buffer (the segment's bytes or its memory map); positions are relative to it.
"""

from __future__ import annotations

import re
import struct
from dataclasses import replace
from typing import TYPE_CHECKING

from kcompact.errors import CorruptDataError, UnsupportedFormatError
from kcompact.records.batch import ENTRY_PREFIX_STRUCT, HEADER_SIZE_UP_TO_MAGIC, RECORD_OVERHEAD_V0
from kcompact.records.batch_header import (
    ATTRIBUTES_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V2,
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
)
from kcompact.records.crc import crc32c
from kcompact.repair.batches import (
    decode_copy,
    decode_entry,
    error_message,
    first_offset_of,
    records_problem,
)
from kcompact.segment.fixed_index import MAX_RELATIVE_OFFSET
from kcompact.segment.progress import ReadProgress
from kcompact.value import frozen

if TYPE_CHECKING:
    from kcompact.records.legacy import LegacyEntry
    from kcompact.records.varint import Buffer

    AnyBatch = RecordBatch | LegacyEntry

BASE_OFFSET_STRUCT = struct.Struct(">q")  # base_offset: the first 8 bytes of every entry
BATCH_LENGTH_STRUCT = struct.Struct(">i")  # batch_length, at byte 8 of every entry
BATCH_LENGTH_POSITION = BASE_OFFSET_STRUCT.size
CRC_STRUCT = struct.Struct(">I")  # v2 crc at byte 17
CRC_POSITION = MAGIC_OFFSET + 1

REGION_CORRUPT = "corrupt-batch"  # framing, header or CRC broken
REGION_OFFSET_ORDER = "offset-order"  # a whole batch whose offsets do not continue the sequence
REGION_RECORDS = "corrupt-records"  # a CRC-valid batch whose records do not parse
REGION_TORN_TAIL = "torn-tail"  # a partial entry at the end of the segment
REGION_ZERO_PADDING = "zero-padding"  # zero bytes after the last batch

FIX_LENGTH = "length-restored"
FIX_BASE_OFFSET = "base-offset-restored"

# A position q where an entry header could start: offset >= 0 (byte q < 0x80), size >= 14 and >= 0
# (bytes q+8..q+11 not 0x000000{00..0d}, byte q+8 < 0x80), magic 0..2 at q+16.
_CANDIDATE = re.compile(
    rb"(?=[\x00-\x7f].{7}(?![\x00]{3}[\x00-\x0d])[\x00-\x7f].{7}[\x00-\x02])", re.DOTALL
)
_NONZERO = re.compile(rb"[^\x00]")
SIZE_FIELD_LAST_BYTE = ENTRY_PREFIX_STRUCT.size - 1  # 11
SCAN_WINDOW = 1 << 16  # bytes searched per pattern call, so zero runs are skipped between calls
_OK, _FRAME, _HEADER, _CRC, _OFFSETS, _RECORDS = "ok", "frame", "header", "crc", "offsets", "records"


@frozen
class KeptBatch:
    """A batch that stays in the segment: where it was and what index building and reports need."""

    position: int  # in the scanned buffer
    size_in_bytes: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    magic: int
    producer_id: int
    is_transactional: bool
    is_control: bool
    control_type: int | None  # the first control record's type (COMMIT 1, ABORT 0, …)
    patched: bytes | None = None  # the batch with a restored header field (``fix``)
    fix: str | None = None
    fix_detail: str | None = None  # "expected X, found Y" for the restored field
    note: str | None = None  # e.g. records left unchecked for want of a codec library


@frozen
class DamagedRegion:
    """Bytes that are not part of any kept batch, and why the first entry there was refused."""

    position: int
    size_in_bytes: int
    kind: str  # one of the REGION_* constants
    reason: str
    offset: int | None  # the offset field at ``position``, when the entry framed
    cleaner_reads_it: bool  # Kafka's cleaner would copy it without an error (CRC not checked)


@frozen
class SegmentScan:
    """The outcome of :func:`scan_segment` for one segment."""

    size_in_bytes: int
    kept: tuple[KeptBatch, ...]
    damaged: tuple[DamagedRegion, ...]

    @property
    def log_changed(self) -> bool:
        """Whether the segment's ``.log`` must be rewritten (damage dropped or a field restored)."""
        return bool(self.damaged) or any(k.patched is not None for k in self.kept)


@frozen
class _Entry:
    """What examining one position found."""

    status: str  # _OK, or the first check that failed
    reason: str
    size_in_bytes: int | None  # the entry's frame size, when it fits the buffer
    batch: AnyBatch | None


def scan_segment(
    buf: Buffer, *, base_offset: int, first_offset: int, end_offset: int | None = None,
    progress: ReadProgress | None = None,
) -> SegmentScan:
    """Walk a segment's bytes, keeping every intact batch and isolating the damage between them.

    Args:
        buf: the segment's bytes.
        base_offset: the segment's base offset (its file name).
        first_offset: the lowest offset the first batch may start at (the segment's base, or the offset
            after the previous segment's last kept batch when that is higher).
        end_offset: the next segment's base offset (no batch may reach it); None for the last segment.
        progress: told the bytes walked (not finished here: a partition's segments share one).

    Returns:
        The kept batches and the damaged regions, in file order; together they cover the buffer.
    """
    return _Scanner(buf, base_offset, end_offset, progress).scan(first_offset)


class _Scanner:
    """One walk over one segment's bytes (see the module docstring)."""

    def __init__(self, buf: Buffer, base_offset: int, end_offset: int | None,
                 progress: ReadProgress | None = None) -> None:
        self.progress = progress
        self.view = memoryview(buf)
        self.end = len(self.view)
        self.base_offset = base_offset
        self.end_offset = end_offset
        self._seen: dict[tuple[int, int, int], int] = {}  # (base, last, crc) -> position kept

    def scan(self, first_offset: int) -> SegmentScan:
        kept: list[KeptBatch] = []
        damaged: list[DamagedRegion] = []
        lower, pos, walked = first_offset, 0, 0
        while pos < self.end:
            if self.progress is not None:
                self.progress.advance(pos - walked)
                walked = pos
            entry = self.examine(pos, lower)
            if entry.status == _OK:
                entry = self._check_next(pos, entry, lower)
            outcome = self._accept(pos, entry, lower)
            if isinstance(outcome, KeptBatch):
                kept.append(outcome)
                lower, pos = outcome.last_offset + 1, pos + _entry_size(entry)
                continue
            if outcome is not None:  # a whole, framed batch refused on its records or offsets
                damaged.append(outcome)
                pos += outcome.size_in_bytes
                continue
            resync = self._resync(pos, entry, lower)
            region_end = self.end if resync is None else resync
            fixed = self._restore_length(pos, region_end, lower)
            if fixed is not None:
                kept.append(fixed)
                lower, pos = fixed.last_offset + 1, region_end
                continue
            damaged.append(self._region(pos, region_end, entry, at_tail=resync is None))
            pos = region_end
        if self.progress is not None:
            self.progress.advance(self.end - walked)
        return SegmentScan(self.end, tuple(kept), tuple(damaged))

    # --- examining one position -----------------------------------------------------------------

    def examine(self, pos: int, lower: int) -> _Entry:
        """Frame, header, CRC and offset checks of the entry at ``pos`` (records not decoded)."""
        view, remaining = self.view, self.end - pos
        if remaining < HEADER_SIZE_UP_TO_MAGIC:
            return _Entry(_FRAME, f"partial entry header; expected at least "
                          f"{HEADER_SIZE_UP_TO_MAGIC} bytes, found {remaining}", None, None)
        _offset, size = ENTRY_PREFIX_STRUCT.unpack_from(view, pos)
        magic = view[pos + MAGIC_OFFSET]
        if size < RECORD_OVERHEAD_V0:
            return _Entry(_FRAME, f"size field below the minimum entry size; expected >= "
                          f"{RECORD_OVERHEAD_V0}, found {size}", None, None)
        if magic > MAGIC_VALUE_V2:
            return _Entry(_FRAME, f"invalid magic byte; expected 0, 1 or 2, found "
                          f"{magic - 256 if magic > 127 else magic}", None, None)
        if size + LOG_OVERHEAD > remaining:
            return _Entry(_FRAME, f"entry declares {size + LOG_OVERHEAD} bytes; expected at most "
                          f"the {remaining} left in the segment", None, None)
        try:
            batch = decode_entry(view, pos, magic)
        except (CorruptDataError, UnsupportedFormatError) as err:
            return _Entry(_HEADER, error_message(err), size + LOG_OVERHEAD, None)
        if not batch.crc_valid():
            return _Entry(_CRC, f"fails its CRC; expected {batch.compute_crc():#010x}, found "
                          f"{batch.crc:#010x}", size + LOG_OVERHEAD, batch)
        problem = self._offset_problem(batch, lower)
        if problem is not None:
            return _Entry(_OFFSETS, problem, size + LOG_OVERHEAD, batch)
        return _Entry(_OK, "", size + LOG_OVERHEAD, batch)

    def _offset_problem(self, batch: AnyBatch, lower: int) -> str | None:
        first, last = first_offset_of(batch), batch.last_offset
        if first is None:
            return None  # a legacy wrapper that does not decompress: the records check refuses it
        if last < first:
            return f"impossible offsets; expected last offset >= {first}, found {last}"
        if first < lower:
            return f"offsets go backwards; expected a first offset >= {lower}, found {first}"
        if self.end_offset is not None and last >= self.end_offset:
            return (f"offsets reach the next segment; expected a last offset < {self.end_offset}, "
                    f"found {last}")
        if last - self.base_offset > MAX_RELATIVE_OFFSET:
            return (f"offset does not fit the segment's 32-bit relative offsets; expected <= "
                    f"{self.base_offset + MAX_RELATIVE_OFFSET}, found {last}")
        return None

    def _check_next(self, pos: int, entry: _Entry, lower: int) -> _Entry:
        """Demote a batch whose offsets overlap the next batch when the next one fits the sequence."""
        batch = entry.batch
        following = pos + _entry_size(entry)
        if batch is None or following >= self.end:
            return entry
        nxt = self.examine(following, lower)
        if nxt.status != _OK or nxt.batch is None:
            return entry
        next_first = first_offset_of(nxt.batch)
        if next_first is None or next_first > batch.last_offset:
            return entry
        if (next_first, nxt.batch.last_offset) == (first_offset_of(batch), batch.last_offset):
            return entry  # the next batch repeats this one: it is the one that goes
        return _Entry(_OFFSETS, f"offsets {first_offset_of(batch)}..{batch.last_offset} overlap the "
                      f"next batch (position {following}, first offset {next_first}), which "
                      f"follows the batches before; expected a last offset < {next_first}",
                      entry.size_in_bytes, batch)

    # --- keeping, restoring, resynchronising ------------------------------------------------------

    def _accept(self, pos: int, entry: _Entry, lower: int) -> KeptBatch | DamagedRegion | None:
        """A kept batch, a whole-batch region (records or offsets), or None: resynchronise."""
        batch = entry.batch
        if entry.status == _OFFSETS and batch is not None:
            restored = self._restore_base_offset(pos, entry, lower)
            if restored is not None:
                return restored
            return DamagedRegion(pos, _entry_size(entry), REGION_OFFSET_ORDER,
                                 entry.reason + self._duplicate_note(batch), first_offset_of(batch),
                                 False)
        if entry.status != _OK or batch is None:
            return None
        problem, control_type, note = records_problem(batch)
        if problem is not None:
            return DamagedRegion(pos, _entry_size(entry), REGION_RECORDS,
                                 f"CRC-valid, but its records do not parse: {problem}",
                                 first_offset_of(batch), False)
        self._seen.setdefault((first_offset_of(batch) or 0, batch.last_offset, batch.crc), pos)
        return _kept(pos, batch, control_type, note)

    def _duplicate_note(self, batch: AnyBatch) -> str:
        earlier = self._seen.get((first_offset_of(batch) or 0, batch.last_offset, batch.crc))
        if earlier is None:
            return ""
        return f" (a copy of the batch kept at position {earlier}: no record is lost)"

    def _restore_base_offset(self, pos: int, entry: _Entry, lower: int) -> KeptBatch | None:
        batch = entry.batch
        if not isinstance(batch, RecordBatch):
            return None
        return self._restored(bytearray(batch.buffer), pos, lower, [])

    def _restore_length(self, pos: int, region_end: int, lower: int) -> KeptBatch | None:
        size = region_end - pos
        view = self.view
        if size < RECORD_BATCH_OVERHEAD or view[pos + MAGIC_OFFSET] != MAGIC_VALUE_V2:
            return None
        (stored,) = CRC_STRUCT.unpack_from(view, pos + CRC_POSITION)
        if crc32c(view[pos + ATTRIBUTES_OFFSET : region_end]) != stored:
            return None
        patched = bytearray(view[pos:region_end])
        (found,) = BATCH_LENGTH_STRUCT.unpack_from(patched, BATCH_LENGTH_POSITION)
        BATCH_LENGTH_STRUCT.pack_into(patched, BATCH_LENGTH_POSITION, size - LOG_OVERHEAD)
        detail = f"batch length; expected {size - LOG_OVERHEAD}, found {found}"
        return self._restored(patched, pos, lower, [(FIX_LENGTH, detail)])

    def _restored(
        self, data: bytearray, pos: int, lower: int, fixes: list[tuple[str, str]]
    ) -> KeptBatch | None:
        """Keep a CRC-valid v2 batch with restored fields, restoring its base offset if provable.

        The base offset is restored when the batch does not fit between ``lower`` and the first offset
        of the batch after it (or the next segment), and that gap holds exactly its offsets.
        """
        batch = decode_copy(data)
        if batch is None or not batch.crc_valid() or batch.last_offset_delta < 0:
            return None
        limit = self._limit(pos + len(data), lower)
        if self._offset_problem(batch, lower) is not None or (
                limit is not None and batch.last_offset >= limit):
            if limit is None or limit - lower != batch.last_offset_delta + 1:
                return None
            fixes.append((FIX_BASE_OFFSET,
                          f"base offset; expected {lower}, found {batch.base_offset}"))
            BASE_OFFSET_STRUCT.pack_into(data, 0, lower)
            batch = decode_copy(data)
            if batch is None or self._offset_problem(batch, lower) is not None:
                return None
        problem, control_type, note = records_problem(batch)
        if problem is not None:
            return None
        return replace(_kept(pos, batch, control_type, note), patched=bytes(data),
                       fix="+".join(f for f, _d in fixes), fix_detail="; ".join(d for _f, d in fixes))

    def _limit(self, following: int, lower: int) -> int | None:
        """First offset of the intact batch at ``following`` (the next segment's base at the end)."""
        if following >= self.end:
            return self.end_offset
        nxt = self.examine(following, lower)
        return first_offset_of(nxt.batch) if nxt.status == _OK and nxt.batch is not None else None

    def _resync(self, pos: int, entry: _Entry, lower: int) -> int | None:
        """The next position holding a whole, CRC-valid batch that continues the sequence."""
        if entry.size_in_bytes is not None and pos + entry.size_in_bytes < self.end:
            following = pos + entry.size_in_bytes
            if self.examine(following, lower).status in (_OK, _OFFSETS):
                return following  # the damaged entry's own frame was sound
        search_from = pos + 1
        while search_from <= self.end - HEADER_SIZE_UP_TO_MAGIC:
            nonzero = _NONZERO.search(self.view, search_from, self.end)
            if nonzero is None:
                return None
            # A size field >= 14 has a non-zero byte among bytes 8..11 of its entry.
            search_from = max(search_from, nonzero.start() - SIZE_FIELD_LAST_BYTE)
            window_end = min(self.end, search_from + SCAN_WINDOW + HEADER_SIZE_UP_TO_MAGIC)
            match = _CANDIDATE.search(self.view, search_from, window_end)
            if match is None:  # every start up to window_end - 17 was tried
                search_from = window_end - HEADER_SIZE_UP_TO_MAGIC + 1
                continue
            candidate = match.start()
            if self.examine(candidate, lower).status == _OK:
                return candidate
            search_from = candidate + 1
        return None

    def _region(self, pos: int, end: int, entry: _Entry, *, at_tail: bool) -> DamagedRegion:
        data = self.view[pos:end]
        offset = BASE_OFFSET_STRUCT.unpack_from(data)[0] if len(data) >= 8 else None
        if at_tail and data == bytes(len(data)):
            return DamagedRegion(pos, end - pos, REGION_ZERO_PADDING,
                                 f"{end - pos} zero bytes after the last batch", None, False)
        kind = REGION_TORN_TAIL if at_tail and entry.status == _FRAME else REGION_CORRUPT
        reason = entry.reason
        if entry.size_in_bytes is not None and entry.size_in_bytes < end - pos:
            reason += f"; {end - pos - entry.size_in_bytes} more damaged bytes follow its frame"
        readable = (entry.status == _CRC and entry.size_in_bytes == end - pos
                    and entry.batch is not None and records_problem(entry.batch)[0] is None)
        return DamagedRegion(pos, end - pos, kind, reason, offset, readable)


def _entry_size(entry: _Entry) -> int:
    """The frame size of an examined entry that framed."""
    if entry.size_in_bytes is None:
        raise ValueError("entry has no frame size")
    return entry.size_in_bytes


def _kept(pos: int, batch: AnyBatch, control_type: int | None, note: str | None) -> KeptBatch:
    return KeptBatch(
        position=pos,
        size_in_bytes=batch.size_in_bytes,
        base_offset=first_offset_of(batch) or 0,
        last_offset=batch.last_offset,
        max_timestamp=batch.max_timestamp,
        magic=batch.magic,
        producer_id=batch.producer_id,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        control_type=control_type,
        note=note,
    )
