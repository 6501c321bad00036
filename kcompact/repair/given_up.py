"""What a repair gives up: per damaged region, the bytes, the offsets and the records it takes out of the log.

A repair keeps every batch that passes its CRC and moves the bytes between them to the quarantine. An
operator then needs to know exactly what the log lost: which byte range of which segment, which offsets,
and how many records. :func:`given_up_of` says it per region (``repair`` prints it in text and JSON, for a
dry run what it would give up):

* **bytes**: ``[position, position + size_in_bytes)`` of the segment's ``.log``, always exact;
* **offsets and records from the headers**, when the region is whole v2 batches that pass their CRC
  (records that do not parse, offsets out of order): their offsets and their ``records_count``;
* **zero bytes** (preallocation padding after the last batch) hold no offset and no record;
* otherwise the bytes do not decode, and the record count is **unknown**; the offsets are those the kept
  batches around the region leave out (none when they are contiguous; open-ended after the last kept
  batch of the last segment, where nothing tells how far the lost data reached).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from kcompact.errors import CorruptDataError, UnsupportedFormatError
from kcompact.records.batch import ENTRY_PREFIX_STRUCT, decode_batch
from kcompact.records.batch_header import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V2,
    RECORD_BATCH_OVERHEAD,
)
from kcompact.repair.salvage import REGION_ZERO_PADDING, DamagedRegion
from kcompact.repair.segment_check import SegmentCheck
from kcompact.value import frozen

FROM_HEADERS = "from the batch headers (the batches pass their CRC)"
FROM_GAP = "the offsets the kept batches around it leave out"
UNDECODED = "unknown: the bytes do not decode"
ZERO_BYTES = "none: zero bytes"


@frozen
class GivenUp:
    """One quarantined region and what it takes out of the log (see the module docstring)."""

    segment: str  # the .log
    position: int
    size_in_bytes: int
    kind: str  # the region's kind (salvage.REGION_*)
    first_offset: int | None  # None: no offset is lost
    last_offset: int | None  # None with a first_offset: open-ended (unknown how far)
    offsets_source: str  # FROM_HEADERS, FROM_GAP or ZERO_BYTES
    records: int | None  # None: unknown (the bytes do not decode)
    records_source: str

    def offsets_text(self) -> str:
        """``offsets 5..9``, ``offsets from 12 (how far is unknown)`` or ``no offsets``."""
        if self.first_offset is None:
            return "no offsets"
        if self.last_offset is None:
            return f"offsets from {self.first_offset} (how far is unknown)"
        return f"offsets {self.first_offset}..{self.last_offset}"

    def records_text(self) -> str:
        """``3 records`` or ``records unknown (the bytes do not decode)``."""
        if self.records is None:
            return "records unknown (the bytes do not decode)"
        return f"{self.records} record{'' if self.records == 1 else 's'}"

    def text(self) -> str:
        """One line: the segment, bytes, offsets and records."""
        end = self.position + self.size_in_bytes
        return (f"{self.segment} bytes {self.position}..{end} ({self.size_in_bytes} bytes, {self.kind}): "
                f"{self.offsets_text()}, {self.records_text()}")

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``repair --json``: ``given_up``)."""
        return {**asdict(self), "end_position": self.position + self.size_in_bytes}


def given_up_of(segments: Iterable[SegmentCheck]) -> list[GivenUp]:
    """What the damaged regions of ``segments`` (a partition's, in offset order) take out of the log.

    Args:
        segments: the verified segments (``PartitionCheck.segments``).

    Returns:
        One :class:`GivenUp` per damaged region, in offset and file order.
    """
    segments = list(segments)
    out: list[GivenUp] = []
    lower = segments[0].files.base_offset if segments else 0
    for i, seg in enumerate(segments):
        upper = segments[i + 1].files.base_offset if i + 1 < len(segments) else None
        if seg.scan.damaged:
            with seg.files.open() as log:
                out += _segment_given_up(seg, bytes(log.buffer), max(lower, seg.files.base_offset), upper)
        if seg.next_offset is not None:
            lower = seg.next_offset
    return out


def _segment_given_up(seg: SegmentCheck, data: bytes, lower: int, upper: int | None) -> list[GivenUp]:
    kept = sorted(seg.scan.kept, key=lambda k: k.position)
    out = []
    for region in seg.scan.damaged:
        before = [k for k in kept if k.position < region.position]
        after = [k for k in kept if k.position > region.position]
        first = before[-1].last_offset + 1 if before else lower
        last = after[0].base_offset - 1 if after else None if upper is None else upper - 1
        out.append(_region(str(seg.files.log_path), region,
                           data[region.position:region.position + region.size_in_bytes], first, last))
    return out


def _region(segment: str, region: DamagedRegion, data: bytes, first: int, last: int | None) -> GivenUp:
    """The region's offsets and records: from its headers, its zero bytes, or the gap it sits in."""
    def made(first_offset: int | None, last_offset: int | None, offsets: str, records: int | None,
             records_source: str) -> GivenUp:
        return GivenUp(segment, region.position, region.size_in_bytes, region.kind, first_offset,
                       last_offset, offsets, records, records_source)

    decoded = _whole_batches(data)
    if decoded is not None:
        return made(decoded[0], decoded[1], FROM_HEADERS, decoded[2], FROM_HEADERS)
    if region.kind == REGION_ZERO_PADDING or not data.strip(b"\x00"):
        return made(None, None, ZERO_BYTES, 0, ZERO_BYTES)
    if last is not None and last < first:
        return made(None, None, FROM_GAP + " (none: they are contiguous)", None, UNDECODED)
    return made(first, last, FROM_GAP, None, UNDECODED)


def _whole_batches(data: bytes) -> tuple[int, int, int] | None:
    """``(first offset, last offset, records)`` when ``data`` is whole v2 batches that pass their CRC."""
    view, pos, records = memoryview(data), 0, 0
    first: int | None = None
    last = 0
    while pos < len(data):
        if len(data) - pos < RECORD_BATCH_OVERHEAD or data[pos + MAGIC_OFFSET] != MAGIC_VALUE_V2:
            return None
        _offset, size = ENTRY_PREFIX_STRUCT.unpack_from(data, pos)
        if size + LOG_OVERHEAD > len(data) - pos:
            return None
        try:
            batch = decode_batch(view, pos)
        except (CorruptDataError, UnsupportedFormatError):
            return None
        if not batch.crc_valid():
            return None
        first = batch.base_offset if first is None else first
        last, records = batch.last_offset, records + batch.records_count
        pos += size + LOG_OVERHEAD
    return None if first is None else (first, last, records)
