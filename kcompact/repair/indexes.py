"""A segment's three indexes against what its (repaired) log needs.

The offset and time indexes are checked with Kafka's own sanity rules and with what its reads need of
them (``check_offset_lookups``, ``check_time_lookups``): an index that fails is damage and is rebuilt as
Kafka 4.1 builds it (``segment.index_builder``, which is also what log recovery rebuilds). One that passes
but differs from that rebuild — written by another broker version, after a restart, or with another
``index.interval.bytes`` — is reported as informational and left alone. Kafka trusts both files at load
(``LogSegment.sanityCheck``), so a wrong entry is only noticed by the fetches it breaks; a missing ``.index`` makes the broker recover the segment, a
missing ``.timeindex`` is created empty and the segment's largest timestamp falls back to the log's mtime.

The ``.txnindex`` is compared with the aborted transactions the data shows: an entry the data needs but
the file lacks makes the cleaner keep aborted data as committed (``TransactionIndex``); a file that fails Kafka's
sanity check makes the broker recover the segment, which re-derives the entries from the data — what a
rewritten index then holds. A sane file keeps its entries (the cleaner's and recovery's may differ
legitimately, ``LogSegment.recover``) plus the ones it lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.errors import CorruptIndexError
from kcompact.records.control import ControlRecordType
from kcompact.repair.findings import (
    IMPACT_BOTH,
    IMPACT_BROKER,
    IMPACT_NONE,
    IMPACT_SETTLED,
    KIND_INDEX_CORRUPT,
    KIND_INDEX_DIFFERS,
    KIND_INDEX_MISSING,
    KIND_TXN_INDEX,
    Finding,
)
from kcompact.repair.salvage import SegmentScan
from kcompact.segment.files import read_file
from kcompact.segment.index_builder import build_indexes
from kcompact.segment.names import segment_file_name
from kcompact.segment.offset_index import (
    OffsetIndexEntry,
    check_offset_index,
    check_offset_lookups,
    decode_offset_index,
)
from kcompact.segment.time_index import (
    TimeIndexEntry,
    check_time_index,
    check_time_lookups,
    decode_time_index,
)
from kcompact.segment.txn_index import AbortedTxn, check_txn_index, decode_txn_index
from kcompact.text import plural

if TYPE_CHECKING:
    from kcompact.repair.verify import SegmentCheck
    from kcompact.segment.partition import SegmentFiles

REBUILD = "rebuild it as Kafka 4.1 builds it from the log"
_OFFSET_EFFECT = "none: the cleaner reads the log, not the offset index"
_TIME_EFFECT = ("the cleaner takes the segment's largest timestamp from the time index's last entry "
                "(min.compaction.lag.ms, retention), not from the log")
# The loader only sanity-checks an index it did not recover (``LogSegment.sanityCheck``).
_TRUSTED = ("Kafka's loader trusts an index that passes its sanity checks: a fetch that meets a wrong "
            "entry reads the wrong batch or fails")


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
    seg: SegmentCheck, derived: list[AbortedTxn], index_interval_bytes: int
) -> list[Finding]:
    """Findings for one segment's indexes; sets ``seg.rebuild_indexes`` and ``seg.txn_entries``.

    Args:
        seg: the segment and its scan.
        derived: the aborted transactions whose markers its kept batches hold.
        index_interval_bytes: the topic's ``index.interval.bytes``.

    Returns:
        One finding per index file that is missing, fails a check, or differs from the rebuilt one
        (none for the offset and time indexes of a segment whose log is rewritten anyway).
    """
    files, base = seg.files, seg.files.base_offset
    offsets, times = expected_indexes(seg.scan, base, index_interval_bytes)
    findings: list[Finding] = []
    if not seg.scan.log_changed:
        log_pairs = [(k.position, k.last_offset) for k in seg.scan.kept]
        findings += _offset_index(files.index_path, files.log_path, base, offsets, log_pairs)
        time_pairs = [(k.last_offset, k.max_timestamp) for k in seg.scan.kept]
        findings += _time_index(files.time_index_path, files.log_path, base, times, time_pairs)
    markers = {k.last_offset: (k.producer_id, k.control_type) for k in seg.scan.kept if k.is_control}
    txn_findings, seg.txn_entries = _txn_index(files, derived, markers)
    findings += txn_findings
    seg.rebuild_indexes = any(f.action for f in findings)
    return findings


def _missing(
    log_path: Path, base: int, kind: str, effect: str, cleaner: str, impact: str
) -> Finding:
    path = log_path.with_name(segment_file_name(base, kind))
    return Finding(kind=KIND_INDEX_MISSING, path=str(path), position=None,
                   message=f"missing; expected the {kind} of segment {log_path.name}",
                   cleaner_effect=cleaner, broker_effect=effect, action=REBUILD, impact=impact)


def _offset_index(
    path: Path | None, log_path: Path, base: int, expected: list[OffsetIndexEntry],
    log_pairs: list[tuple[int, int]],
) -> list[Finding]:
    if path is None:
        return [_missing(log_path, base, "index", "Kafka's loader recovers the whole segment "
                         "(NoSuchFileException)", _OFFSET_EFFECT, IMPACT_SETTLED)]
    try:
        entries = decode_offset_index(read_file(path), base)
    except CorruptIndexError as err:
        return [_bad(path, err, _OFFSET_EFFECT)]
    problems = check_offset_index(entries, base) or check_offset_lookups(entries, log_pairs)
    return _compare(path, problems, entries, expected, _OFFSET_EFFECT)


def _time_index(
    path: Path | None, log_path: Path, base: int, expected: list[TimeIndexEntry],
    log_pairs: list[tuple[int, int]],
) -> list[Finding]:
    if path is None:
        return [_missing(log_path, base, "timeindex", "Kafka's loader creates it empty and does not "
                         "rebuild it: the segment's largest timestamp becomes the .log mtime",
                         _TIME_EFFECT, IMPACT_BROKER)]
    try:
        entries = decode_time_index(read_file(path), base)
    except CorruptIndexError as err:
        return [_bad(path, err, _TIME_EFFECT)]
    problems = check_time_index(entries, base) or check_time_lookups(entries, log_pairs)
    return _compare(path, problems, entries, expected, _TIME_EFFECT)


def _bad(path: Path, err: CorruptIndexError, cleaner: str) -> Finding:
    return Finding(kind=KIND_INDEX_CORRUPT, path=str(path), position=err.position,
                   message=err.message, cleaner_effect=cleaner, broker_effect=_TRUSTED,
                   action=REBUILD, impact=IMPACT_BROKER)


def _compare(
    path: Path, problems: list[str], entries: Sequence[object], expected: Sequence[object],
    cleaner: str,
) -> list[Finding]:
    if problems:
        return [Finding(kind=KIND_INDEX_CORRUPT, path=str(path), position=None,
                        message="; ".join(problems), cleaner_effect=cleaner,
                        broker_effect=_TRUSTED, action=REBUILD, impact=IMPACT_BROKER)]
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
    files: SegmentFiles, derived: list[AbortedTxn], markers: dict[int, tuple[int, int | None]]
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
        known = {(e.producer_id, e.last_offset) for e in entries}
        inside = [e for e in entries if e.first_offset <= e.last_offset
                  and markers.get(e.last_offset) == (e.producer_id, ControlRecordType.ABORT)]
        if len(inside) < len(entries):
            wrong = len(entries) - len(inside)
            does = "does" if wrong == 1 else "do"
            problems.append(f"{plural(wrong, 'entry', 'entries')} {does} not end at an ABORT marker of "
                            f"the producer in this segment; expected one at each last offset")
        lacking = [d for d in derived if (d.producer_id, d.last_offset) not in known]
        if lacking:
            problems.append(f"lacks {plural(len(lacking), 'aborted transaction')} the data shows; first: "
                            f"producer {lacking[0].producer_id} aborted at offset "
                            f"{lacking[0].last_offset}")
        result = tuple(sorted(inside + lacking, key=lambda e: e.last_offset))
    if not problems:
        return [], result
    name = path or files.log_path.with_name(segment_file_name(base, "txnindex"))
    action = f"write it with {len(result)} entries" if result else "remove it"
    return [Finding(
        kind=KIND_TXN_INDEX, path=str(name), position=position, message="; ".join(problems),
        cleaner_effect="the cleaner learns which transactional data was aborted from this index: a "
                       "missing entry makes it keep aborted data as committed",
        broker_effect="a failed sanity check makes Kafka recover the segment at load; READ_COMMITTED "
                      "consumers see aborted data for a missing entry",  # TransactionIndex, LogLoader.load
        action=action, impact=IMPACT_BOTH)], result
