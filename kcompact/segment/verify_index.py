"""Checking one index file against its segment's ``.log``: what ``inspect dump --verify-index`` reports.

Kafka's own sanity rules (``AbstractIndex.sanityCheck``) plus agreement with the log, which Kafka trusts without
checking at load:

* ``.index`` — every entry names a batch start, and the entry's offset is that batch's *last* offset;
* ``.timeindex`` — every entry is the running maximum ``max_timestamp`` at a batch's last offset, at the
  batch that first reached it;
* ``.txnindex`` — no entry below the segment's base, ``last_offset`` strictly increasing, ``first_offset``
  not after ``last_offset``, and every ``last_offset`` is the offset of an ABORT marker of the entry's
  producer in this segment (a broker stores the entry with its marker, ``TransactionIndex.append``).

A sparser or denser index than Kafka 4.1 would build is still valid for a broker and is not reported. A
preallocated index (zero-filled slots after the entries) is a problem in a segment a broker trusts — Kafka reads
every slot as an entry — but normal in the active segment of a running broker and no matter in a segment a
starting broker recovers, rebuilding its indexes (``segment.startup_recovery``), which callers say with
``live_active`` and ``rebuilt_at_start``. Only batch headers are read from the ``.log``, plus the key and value
of each control record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kcompact.errors import KcompactError, TruncatedDataError
from kcompact.records.batch_header import RecordBatch
from kcompact.records.control import ControlRecordKey
from kcompact.segment.fixed_index import Finding
from kcompact.segment.log_file import LogFile
from kcompact.segment.names import parse_segment_file_name
from kcompact.segment.offset_index import check_offset_index, split_offset_index
from kcompact.segment.time_index import (
    TimeIndexEntry,
    check_time_index,
    split_time_index,
)
from kcompact.segment.txn_index import AbortedTxn, check_txn_index, decode_txn_index
from kcompact.value import mutable

if TYPE_CHECKING:
    from kcompact.records.legacy import LegacyEntry

I64 = npt.NDArray[np.int64]
_OFFSET_SLOT = np.dtype([("relative", ">i4"), ("position", ">i4")])  # OFFSET_INDEX_ENTRY
_TIME_SLOT = np.dtype([("timestamp", ">i8"), ("relative", ">i4")])  # TIME_INDEX_ENTRY

MARKER_NONE = "no records"  # a control batch emptied to a shell by the cleaner
MARKER_UNREADABLE = "unreadable"


@mutable
class LogFacts:
    """What the index checks need of a segment's ``.log``, from one walk of its batch headers.

    ``columns``: the same facts as three int64 arrays (positions, last offsets, max timestamps) of a
    log with no control batch, where a C walk gave them (:meth:`of_columns`); ``starts`` and ``times``
    are then filled only if an index needs the entry-by-entry check.
    """

    starts: list[tuple[int, int]] = field(default_factory=list)  # (position, last_offset)
    times: list[tuple[int, int]] = field(default_factory=list)  # (last_offset, max_timestamp)
    markers: dict[int, tuple[int, str]] = field(default_factory=dict)  # offset -> (producer, type)
    columns: tuple[I64, I64, I64] | None = None

    @classmethod
    def of_columns(cls, positions: I64, last_offsets: I64, max_timestamps: I64) -> LogFacts:
        """The facts of a log of data batches only, in file order."""
        return cls(columns=(positions, last_offsets, max_timestamps))

    def add(self, batch: RecordBatch | LegacyEntry) -> None:
        """Take the next batch of the walk, in file order."""
        last_offset = batch.last_offset
        self.starts.append((batch.position, last_offset))
        self.times.append((last_offset, batch.max_timestamp))
        if batch.is_control:
            self.markers[last_offset] = (batch.producer_id, _marker_type(batch))

    def listed(self) -> LogFacts:
        """These facts with ``starts`` and ``times`` filled (from ``columns`` when given)."""
        if self.columns is None or self.starts:
            return self
        positions, lasts, times = (column.tolist() for column in self.columns)
        return LogFacts(list(zip(positions, lasts, strict=True)), list(zip(lasts, times, strict=True)), self.markers,
                        self.columns)


def verify_index_file(
    index_path: Path, base_offset: int, log_path: Path, *, live_active: bool = False,
    rebuilt_at_start: bool = False,
) -> list[str]:
    """Problems of one ``.index``/``.timeindex``/``.txnindex`` file, in words (empty: none found).

    The index is read before the log: a broker appends a batch to the log before indexing it, so
    every entry read then names a batch the log walk will find, even while the segment grows.

    Args:
        index_path: the index file.
        base_offset: its segment's base offset.
        log_path: the segment's ``.log``; when it is missing only the file's own rules are checked.
        live_active: the active segment of a running broker: trailing zero-filled slots and a
            partial last batch are expected, not problems.
        rebuilt_at_start: a segment a broker starting on the log dir recovers: trailing zero-filled
            slots are no problem (its other findings are the caller's to weigh).

    Returns:
        One sentence per problem. A ``.log`` that cannot be walked adds one sentence saying the
        comparison was skipped; the index's own rules are still checked.
    """
    loaded = _read_index(index_path)
    if isinstance(loaded, str):
        return [loaded]
    walked: LogFacts | Exception | None = None
    if log_path.exists():
        try:
            walked = read_log_facts(log_path, partial_tail_ok=live_active)
        except (KcompactError, OSError) as err:
            walked = err
    return _verify(*loaded, base_offset, log_path, walked, live_active or rebuilt_at_start)


def verify_index_with_facts(
    index_path: Path, base_offset: int, log_path: Path, walked: LogFacts | Exception, kind: str | None = None
) -> list[str]:
    """:func:`verify_index_file` of a closed segment whose ``.log`` the caller has walked already.

    One walk then serves all of a segment's indexes (the cleaner's self-check walks its output once
    for its own rules and these). Only for files no one appends to: the log is read before the index.

    Args:
        index_path: the index file.
        base_offset: its segment's base offset.
        log_path: the segment's ``.log`` (named in the problem when it could not be walked).
        walked: the facts of the whole ``.log`` (:meth:`LogFacts.add` over every batch), or the
            error that stopped its walk.
        kind: ``index``, ``timeindex`` or ``txnindex``, for a file not named as Kafka names it (a scratch
            file in a log dir, ``cleaner.disk.scratch``); None: from its name.

    Returns:
        The problems :func:`verify_index_file` would report with ``live_active=False``.
    """
    loaded = _read_index(index_path, kind)
    if isinstance(loaded, str):
        return [loaded]
    if isinstance(walked, LogFacts) and walked.columns is not None:
        if _agrees(*loaded, base_offset, walked.columns):
            return []
        walked = walked.listed()
    return _verify(*loaded, base_offset, log_path, walked, False)


def _agrees(kind: str, data: bytes, base_offset: int, columns: tuple[I64, I64, I64]) -> bool:
    """Whether :func:`_check` of a closed segment's index finds nothing, decided over whole arrays
    (True only then; False sends the index to the entry-by-entry check, which says what is wrong).

    The rules are :func:`check_offset_index`'s and :func:`check_time_index`'s with ``log_batches``; a
    ``.txnindex`` is always checked entry by entry (a log of data batches has no ABORT marker).
    """
    positions, lasts, max_timestamps = columns
    if kind == "index":
        slots = _slots(data, _OFFSET_SLOT)
        return slots is not None and _offset_slots_agree(slots, base_offset, positions, lasts)
    if kind == "timeindex":
        slots = _slots(data, _TIME_SLOT)
        return slots is not None and _time_slots_agree(slots, base_offset, lasts, max_timestamps)
    return False


def _slots(data: bytes, slot: np.dtype[np.void]) -> npt.NDArray[np.void] | None:
    """The file's slots, or None where its length is not a whole number of them."""
    return None if len(data) % slot.itemsize else np.frombuffer(data, dtype=slot)


def _offset_slots_agree(slots: npt.NDArray[np.void], base_offset: int, positions: I64, lasts: I64) -> bool:
    relative, position = slots["relative"].astype(np.int64), slots["position"].astype(np.int64)
    if not len(slots):
        return True
    at = np.minimum(np.searchsorted(positions, position), max(len(positions) - 1, 0))
    return bool(
        len(positions) and relative[-1] >= 0 and (relative[-1] != 0 or position[-1] != 0)
        and (relative >= 0).all() and (position >= 0).all()
        and (np.diff(relative) > 0).all() and (np.diff(position) > 0).all()
        and (positions[at] == position).all() and (lasts[at] == base_offset + relative).all())


def _time_slots_agree(slots: npt.NDArray[np.void], base_offset: int, lasts: I64, max_timestamps: I64) -> bool:
    stamps, relative = slots["timestamp"].astype(np.int64), slots["relative"].astype(np.int64)
    if not len(slots):
        return True
    if not len(lasts) or not (np.diff(lasts) > 0).all():
        return False
    # Kafka's running maximum after each batch, and the last offset of the batch that set it
    running = np.maximum.accumulate(np.maximum(max_timestamps, -1))
    before = np.concatenate(([-1], running[:-1]))
    setter = np.maximum.accumulate(np.where(max_timestamps > before, np.arange(len(lasts)), -1))
    reached_at = np.where(setter >= 0, lasts[np.maximum(setter, 0)], -1)
    offsets = base_offset + relative
    at = np.minimum(np.searchsorted(lasts, offsets), len(lasts) - 1)
    return bool(
        relative[-1] >= 0 and stamps[-1] >= stamps[0]
        and (len(slots) == 1 or stamps[-1] != 0 or relative[-1] != 0)
        and (relative >= 0).all() and (np.diff(stamps) >= 0).all() and (np.diff(offsets) >= 0).all()
        and (lasts[at] == offsets).all() and (running[at] == stamps).all()
        and (reached_at[at] == offsets).all())


def _read_index(index_path: Path, kind: str | None = None) -> tuple[str, bytes] | str:
    """``(kind, bytes)`` of an index file (its kind by its name unless given), or the one problem that stops
    its check."""
    if kind is None:
        parsed = parse_segment_file_name(index_path.name)
        kind = parsed.kind if parsed is not None else ""
    if kind not in ("index", "timeindex", "txnindex"):
        return (
            "not an index file; expected a .index, .timeindex or .txnindex name, found "
            + index_path.name
        )
    try:
        return kind, index_path.read_bytes()
    except OSError as err:
        return f"cannot read the file: {err.strerror or err}"


def _verify(
    kind: str,
    data: bytes,
    base_offset: int,
    log_path: Path,
    walked: LogFacts | Exception | None,
    allow_preallocated: bool,
) -> list[str]:
    """The index's problems: a log that could not be walked first, then the index's own and the log's."""
    problems: list[str] = []
    facts = walked if isinstance(walked, LogFacts) else None
    if walked is not None and facts is None:
        problems.append(f"not compared with {log_path.name}, which cannot be walked: {walked}")
    try:
        problems += _check(kind, data, base_offset, facts, allow_preallocated)
    except KcompactError as err:
        problems.append(getattr(err, "message", str(err)))
    return problems


def _check(
    kind: str, data: bytes, base_offset: int, facts: LogFacts | None, allow_preallocated: bool
) -> list[str]:
    """Decode ``data`` as an index of ``kind`` and apply its rules (and the log's, given ``facts``).

    Trailing zero-filled slots are counted from the end of the file, not decoded one by one.
    """
    if kind == "index":
        entries, zeros = split_offset_index(data, base_offset)
        return check_offset_index(
            entries, base_offset, log_batches=None if facts is None else facts.starts,
            zero_slots=0 if allow_preallocated else zeros,
        )
    if kind == "timeindex":
        tentries, tzeros = split_time_index(data, base_offset)
        if allow_preallocated and tzeros and not tentries:  # a lone first slot may be real
            tentries, tzeros = [TimeIndexEntry(0, base_offset)], 0
        return check_time_index(
            tentries, base_offset, log_batches=None if facts is None else facts.times,
            zero_slots=0 if allow_preallocated else tzeros,
        )
    txns = decode_txn_index(data)
    problems = check_txn_index(txns, base_offset)
    _check_txns(txns, facts, problems)
    return problems


def _check_txns(txns: Sequence[AbortedTxn], facts: LogFacts | None, problems: list[str]) -> None:
    reversed_range = Finding("first offset after last offset")
    no_marker = Finding(
        "last offset is not an ABORT marker of the entry's producer in this segment"
    )
    for number, txn in enumerate(txns):
        if txn.first_offset > txn.last_offset:
            reversed_range.add(
                f"entry {number} has first offset {txn.first_offset} > last offset {txn.last_offset}"
            )
        if facts is None:
            continue
        found = facts.markers.get(txn.last_offset)
        if found is None:
            no_marker.add(f"entry {number}: no control batch at offset {txn.last_offset}")
        elif found != (txn.producer_id, "ABORT"):
            no_marker.add(
                f"entry {number} at offset {txn.last_offset}: expected an ABORT marker of producer "
                f"{txn.producer_id}, found {found[1]} of producer {found[0]}"
            )
    reversed_range.report(problems)
    no_marker.report(problems)


def read_log_facts(log_path: Path, *, partial_tail_ok: bool = False) -> LogFacts:
    """Walk a ``.log``'s batch headers (and its control records) for the index checks.

    Args:
        log_path: the segment's ``.log``.
        partial_tail_ok: stop quietly at an entry that runs past the end (a live active segment).

    Returns:
        Batch starts, running-maximum inputs and control markers.

    Raises:
        KcompactError: the log's framing breaks, or a batch header is refused.
        OSError: the file cannot be opened.
    """
    facts = LogFacts()
    with LogFile(log_path) as log:
        try:
            for batch in log.iter_batches():
                facts.add(batch)
        except TruncatedDataError:
            if not partial_tail_ok:
                raise
    return facts


def _marker_type(batch: RecordBatch | LegacyEntry) -> str:
    from kcompact.records.record import decode_records

    if not isinstance(batch, RecordBatch) or batch.records_count == 0:
        return MARKER_NONE
    try:
        first = decode_records(batch)[0]
        return ControlRecordKey.parse(first.key).type.name
    except (KcompactError, IndexError):
        return MARKER_UNREADABLE
