"""A segment's three indexes against what its (repaired) log needs, and what a starting broker does with them.

The offset and time indexes are checked with Kafka's own sanity rules and with what its reads need of
them (``check_offset_lookups``, ``check_time_lookups``): an index that fails is damage and is rebuilt as
Kafka 4.1 builds it (``segment.index_builder``, which is also what log recovery rebuilds). One that passes
but differs from that rebuild — written by another broker version, after a restart, or with another
``index.interval.bytes`` — is reported as informational and left alone.

Whose problem a finding is follows Kafka 4.1's loader. ``LogLoader.loadSegmentFiles`` calls
``LogSegment.sanityCheck``, which checks only that the ``.index`` exists (else ``NoSuchFileException``: the loader
recovers the segment) and the ``.txnindex`` (``TransactionIndex.sanityCheck``; a ``CorruptIndexException``: the
loader recovers the segment), and creates a missing ``.timeindex`` empty (``timeIndex().resize(0)``). Then
``LogLoader.recoverLog`` recovers, after an unclean shutdown, every segment from the recovery point on
(``segment.startup_recovery``). ``LogSegment.recover`` resets all three indexes and rebuilds them from the log
(``AbstractIndex.reset``, ``trimToValidSize``), never reading what they held. So in a segment the broker
recovers as it starts, whatever its offset and time indexes hold — missing, preallocated and never trimmed,
garbage — Kafka settles it itself: a preallocated index (what a crashed broker leaves) is reported and left to
Kafka; a missing or damaged one is rebuilt by repair too ("repair does the same now"), for kcompact's own clean,
which reads the time index of a segment that does not look crashed. In any other segment Kafka trusts the
files as they are — a wrong entry is only noticed by the fetches it breaks, zero slots are read as entries, and
a missing ``.timeindex`` stays empty for good (the segment's largest timestamp is then the ``.log``'s mtime,
``LogSegment.largestTimestamp``) — and those are problems repair fixes.

The ``.txnindex`` is compared with the aborted transactions the data shows: an entry the data needs but
the file lacks makes the cleaner keep aborted data as committed (``TransactionIndex``); a file that fails Kafka's
sanity check makes the broker recover the segment, which re-derives the entries from the data — what a
rewritten index then holds, and what recovery at start writes too. A sane file keeps its entries (the cleaner's
and recovery's may differ legitimately, ``LogSegment.recover``) plus the ones it lacks.

The zero slots of a preallocated index are counted from the end of the file (``split_offset_index``), never
walked one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.errors import CorruptIndexError
from kcompact.log.rules.aborted import merge_aborted
from kcompact.records.control import ControlRecordType
from kcompact.repair.findings import (
    IMPACT_BOTH,
    IMPACT_BROKER,
    IMPACT_NONE,
    IMPACT_SETTLED,
    KIND_INDEX_CORRUPT,
    KIND_INDEX_DIFFERS,
    KIND_INDEX_MISSING,
    KIND_INDEX_PREALLOCATED,
    KIND_TXN_INDEX,
    Finding,
)
from kcompact.repair.salvage import SegmentScan
from kcompact.segment.files import read_file
from kcompact.segment.index_builder import build_indexes
from kcompact.segment.names import segment_file_name
from kcompact.segment.offset_index import (
    OFFSET_INDEX_ENTRY_SIZE,
    OffsetIndexEntry,
    check_offset_index,
    check_offset_lookups,
    split_offset_index,
)
from kcompact.segment.startup_recovery import txn_index_fails_sanity_check
from kcompact.segment.time_index import (
    TIME_INDEX_ENTRY_SIZE,
    TimeIndexEntry,
    check_time_index,
    check_time_lookups,
    split_time_index,
)
from kcompact.segment.txn_index import AbortedTxn, check_txn_index, decode_txn_index
from kcompact.text import plural
from kcompact.value import frozen

if TYPE_CHECKING:
    from kcompact.repair.segment_check import SegmentCheck
    from kcompact.segment.partition import SegmentFiles

REBUILD = "rebuild it as Kafka 4.1 builds it from the log"
_OFFSET_EFFECT = "none: the cleaner reads the log, not the offset index"
_TIME_EFFECT = ("the cleaner takes the segment's largest timestamp from the time index's last entry "
                "(min.compaction.lag.ms, retention), not from the log")
# The loader sanity-checks neither index of a segment it does not recover (``LogSegment.sanityCheck``).
_TRUSTED = ("Kafka's loader trusts an index it does not rebuild: a fetch that meets a wrong "
            "entry reads the wrong batch or fails")
# LogManager.loadLogs / LogLoader.recoverLog / LogSegment.recover (segment.startup_recovery)
_RECOVERED = ("the broker recovers this segment when it starts (no .kafka_cleanshutdown in the log dir, and "
              "the segment is at or past the partition's recovery point; KRaft's metadata log always): "
              "LogSegment.recover rebuilds the index from the log and trims it, never reading what it held")
# LogLoader.loadSegmentFiles: LogSegment.sanityCheck throws NoSuchFileException, the loader recovers the segment
_NO_OFFSET_INDEX = ("Kafka's loader recovers the whole segment when it starts (LogSegment.sanityCheck: "
                    "NoSuchFileException), rebuilding its .index, .timeindex and .txnindex from the log; after a "
                    "clean shutdown or below the recovery point it logs an ERROR saying so")
# LogLoader.loadSegmentFiles: TransactionIndex.sanityCheck throws CorruptIndexException, the loader recovers it
_TXN_REFUSED = ("Kafka's loader recovers the whole segment when it starts, logging a WARN (its .txnindex fails "
                "TransactionIndex.sanityCheck: CorruptIndexException), rebuilding its .index, .timeindex and "
                ".txnindex from the log")
_NOT_RECOVERED = ("the broker does not recover this segment when it starts ({why}), so it reads every zero "
                  "slot as an entry (offset {base} at position 0; in a time index timestamp 0, which becomes "
                  "the segment's largest timestamp)")
_EMPTY_TIME_INDEX = ("the broker does not recover this segment when it starts ({why}): LogSegment.sanityCheck "
                     "creates the .timeindex empty and nothing rebuilds it, so the segment's largest timestamp "
                     "becomes the .log's mtime (LogSegment.largestTimestamp: time retention, the cleaner's "
                     "min.compaction.lag.ms) and lookups by time scan the log")


def expected_indexes(
    scan: SegmentScan, base_offset: int, index_interval_bytes: int
) -> tuple[list[OffsetIndexEntry], list[TimeIndexEntry]]:
    """The offset and time index entries Kafka 4.1 builds for the kept batches, laid end to end."""
    rows, position = [], 0
    for kept in scan.kept:
        rows.append((position, kept.size_in_bytes, kept.last_offset, kept.max_timestamp))
        position += kept.size_in_bytes
    return build_indexes(rows, base_offset=base_offset, index_interval_bytes=index_interval_bytes)


def check_segment_indexes(
    seg: SegmentCheck, derived: list[AbortedTxn], index_interval_bytes: int, *,
    recovered_at_start: bool = False, not_recovered_why: str = "",
) -> list[Finding]:
    """Findings for one segment's indexes; sets ``seg.rebuild_indexes`` and ``seg.txn_entries``.

    Args:
        seg: the segment and its scan.
        derived: the aborted transactions whose markers its kept batches hold.
        index_interval_bytes: the topic's ``index.interval.bytes``.
        recovered_at_start: whether a broker starting on the log dir recovers this segment
            (``segment.startup_recovery``: also one without ``.index``), rebuilding its three indexes.
        not_recovered_why: otherwise, why not (for the findings of indexes the broker then trusts).

    Returns:
        One finding per index file that is missing, fails a check, or differs from the rebuilt one
        (none for the offset and time indexes of a segment whose log is rewritten anyway).
    """
    files, base = seg.files, seg.files.base_offset
    offsets, times = expected_indexes(seg.scan, base, index_interval_bytes)
    txn_refused = files.txn_index_path is not None and txn_index_fails_sanity_check(files.txn_index_path, base)
    recovery = _Recovery(recovered_at_start, files.index_path is None, txn_refused, not_recovered_why)
    findings: list[Finding] = []
    if not seg.scan.log_changed:
        log_pairs = [(k.position, k.last_offset) for k in seg.scan.kept]
        findings += _offset_index(files.index_path, files.log_path, base, offsets, log_pairs, recovery)
        time_pairs = [(k.last_offset, k.max_timestamp) for k in seg.scan.kept]
        findings += _time_index(files.time_index_path, files.log_path, base, times, time_pairs, recovery)
    markers = {k.last_offset: (k.producer_id, k.control_type) for k in seg.scan.kept if k.is_control}
    txn_findings, seg.txn_entries = _txn_index(files, derived, markers, recovery)
    findings += txn_findings
    seg.rebuild_indexes = any(f.action for f in findings)
    return findings


@frozen
class _Recovery:
    """Whether the broker recovers the segment as it starts, rebuilding its indexes (``segment.startup_recovery``),
    whether because ``LogSegment.sanityCheck`` throws (no ``.index``; a ``.txnindex`` it refuses:
    ``LogLoader.loadSegmentFiles``), and if not why."""

    at_start: bool
    no_offset_index: bool
    txn_refused: bool
    why_not: str

    def effect(self) -> str:
        """What the broker's recovery at start does with the segment's indexes."""
        return _NO_OFFSET_INDEX if self.no_offset_index else _TXN_REFUSED if self.txn_refused else _RECOVERED

    def why(self) -> str:
        """Why the broker does not recover the segment as it starts."""
        return self.why_not or "it is below the partition's recovery point"


def _missing(
    log_path: Path, base: int, kind: str, effect: str, cleaner: str, impact: str
) -> Finding:
    path = log_path.with_name(segment_file_name(base, kind))
    return Finding(kind=KIND_INDEX_MISSING, path=str(path), position=None,
                   message=f"missing; expected the {kind} of segment {log_path.name}",
                   cleaner_effect=cleaner, broker_effect=effect, action=REBUILD, impact=impact)


def _offset_index(
    path: Path | None, log_path: Path, base: int, expected: list[OffsetIndexEntry],
    log_pairs: list[tuple[int, int]], recovery: _Recovery,
) -> list[Finding]:
    if path is None:
        return [_missing(log_path, base, "index", _NO_OFFSET_INDEX, _OFFSET_EFFECT, IMPACT_SETTLED)]
    try:
        entries, zeros = split_offset_index(read_file(path), base)
    except CorruptIndexError as err:
        return [_bad(path, err, _OFFSET_EFFECT, recovery)]
    if zeros and recovery.at_start:  # whatever its entries: recovery resets the index before it reads a slot
        return [_preallocated(path, zeros, len(entries), _OFFSET_EFFECT)]
    problems = check_offset_index(entries, base, zero_slots=zeros) or check_offset_lookups(entries, log_pairs)
    return _compare(path, problems, entries, expected, _OFFSET_EFFECT, recovery, zeros, base)


def _time_index(
    path: Path | None, log_path: Path, base: int, expected: list[TimeIndexEntry],
    log_pairs: list[tuple[int, int]], recovery: _Recovery,
) -> list[Finding]:
    if path is None:
        if recovery.at_start:
            return [_missing(log_path, base, "timeindex", recovery.effect(), _TIME_EFFECT, IMPACT_SETTLED)]
        return [_missing(log_path, base, "timeindex", _EMPTY_TIME_INDEX.format(why=recovery.why()),
                         _TIME_EFFECT, IMPACT_BROKER)]
    try:
        entries, zeros = split_time_index(read_file(path), base)
    except CorruptIndexError as err:
        return [_bad(path, err, _TIME_EFFECT, recovery)]
    if zeros and recovery.at_start:
        return [_preallocated(path, zeros, len(entries), _TIME_EFFECT)]
    problems = check_time_index(entries, base, zero_slots=zeros) or check_time_lookups(entries, log_pairs)
    return _compare(path, problems, entries, expected, _TIME_EFFECT, recovery, zeros, base)


def _preallocated(path: Path, zeros: int, real: int, cleaner: str) -> Finding:
    """A never-trimmed preallocated index of a segment the broker recovers as it starts: it resets the index
    before reading a slot, so neither the zero slots nor the entries before them matter."""
    return Finding(kind=KIND_INDEX_PREALLOCATED, path=str(path), position=real * _slot_size(path),
                   message=(f"{plural(zeros, 'zero-filled slot')} " + (
                       f"after its {plural(real, 'entry', 'entries')}" if real else
                       "and no entry") + " (preallocated by a broker that did not shut down cleanly, "
                       "never trimmed)"),
                   cleaner_effect=f"{cleaner}; the broker rebuilds the index before its cleaner runs",
                   broker_effect=_RECOVERED, action=None, impact=IMPACT_SETTLED)


def _slot_size(path: Path) -> int:
    return OFFSET_INDEX_ENTRY_SIZE if path.name.endswith(".index") else TIME_INDEX_ENTRY_SIZE


def _bad(path: Path, err: CorruptIndexError, cleaner: str, recovery: _Recovery) -> Finding:
    broker, impact = (recovery.effect(), IMPACT_SETTLED) if recovery.at_start else (_TRUSTED, IMPACT_BROKER)
    return Finding(kind=KIND_INDEX_CORRUPT, path=str(path), position=err.position,
                   message=err.message, cleaner_effect=cleaner, broker_effect=broker,
                   action=REBUILD, impact=impact)


def _compare(
    path: Path, problems: list[str], entries: Sequence[object], expected: Sequence[object],
    cleaner: str, recovery: _Recovery, zeros: int, base: int,
) -> list[Finding]:
    if problems:
        if recovery.at_start:
            broker, impact = recovery.effect(), IMPACT_SETTLED
        else:
            broker = _NOT_RECOVERED.format(why=recovery.why(), base=base) if zeros else _TRUSTED
            impact = IMPACT_BROKER
        return [Finding(kind=KIND_INDEX_CORRUPT, path=str(path), position=None,
                        message="; ".join(problems), cleaner_effect=cleaner,
                        broker_effect=broker, action=REBUILD, impact=impact)]
    if entries != expected:  # another broker version's, or another index.interval.bytes: left alone
        return [Finding(kind=KIND_INDEX_DIFFERS, path=str(path), position=None,
                        message=f"valid: Kafka's loader and reads accept every entry (it differs "
                                f"from what Kafka 4.1 would build from this log: {len(expected)} "
                                f"entries expected, {len(entries)} found); not rebuilt",
                        cleaner_effect="none",
                        broker_effect="none: any subset of correct entries is a valid index; log "
                                      "recovery after an unclean shutdown rebuilds it anyway",
                        action=None, impact=IMPACT_NONE)]
    return []


def _txn_index(
    files: SegmentFiles, derived: list[AbortedTxn], markers: dict[int, tuple[int, int | None]],
    recovery: _Recovery,
) -> tuple[list[Finding], tuple[AbortedTxn, ...]]:
    """Findings for the ``.txnindex`` and the entries it holds after the repair."""
    path, base = files.txn_index_path, files.base_offset
    if path is None:
        entries: list[AbortedTxn] | None = []
        problems: list[str] = []
        position = None
    else:
        try:
            entries, problems, position = decode_txn_index(read_file(path)), [], None
        except CorruptIndexError as err:
            entries, problems, position = None, [err.message], err.position
    if entries is not None:
        problems += check_txn_index(entries, base)
    if entries is None or problems:  # Kafka recovers the segment: the entries come from the data
        result = tuple(derived)
    else:
        inside = [e for e in entries if e.first_offset <= e.last_offset
                  and markers.get(e.last_offset) == (e.producer_id, ControlRecordType.ABORT)]
        if len(inside) < len(entries):
            wrong = len(entries) - len(inside)
            does = "does" if wrong == 1 else "do"
            problems.append(f"{plural(wrong, 'entry', 'entries')} {does} not end at an ABORT marker of "
                            f"the producer in this segment; expected one at each last offset")
        merged, lacking = merge_aborted(inside, derived)
        if lacking:
            problems.append(f"lacks {plural(len(lacking), 'aborted transaction')} the data shows; first: "
                            f"producer {lacking[0].producer_id} aborted at offset "
                            f"{lacking[0].last_offset}")
        result = tuple(merged)
    if not problems:
        return [], result
    name = path or files.log_path.with_name(segment_file_name(base, "txnindex"))
    action = f"write it with {len(result)} entries" if result else "remove it"
    cleaner = ("the cleaner learns which transactional data was aborted from this index: a missing entry makes "
               "it keep aborted data as committed")
    if recovery.at_start:  # LogSegment.recover: txnIndex.reset, then an entry per ABORT marker it replays
        broker, impact = (f"{recovery.effect()}; recovery writes an entry for each aborted transaction "
                          "the data shows", IMPACT_SETTLED)
        cleaner = f"none once the broker has recovered the segment (kcompact clean reads this file): {cleaner}"
    else:  # TransactionIndex.sanityCheck in LogSegment.sanityCheck; TransactionIndex.collectAbortedTxns
        broker, impact = ("a failed sanity check makes Kafka recover the segment at load; READ_COMMITTED "
                          "consumers see aborted data for a missing entry", IMPACT_BOTH)
    return [Finding(
        kind=KIND_TXN_INDEX, path=str(name), position=position, message="; ".join(problems),
        cleaner_effect=cleaner, broker_effect=broker, action=action, impact=impact)], result
