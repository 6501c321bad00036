"""Checking one index file against its segment's ``.log``: what ``inspect dump --verify-index`` reports.

Kafka's own checks (spec §5) plus agreement with the log: every offset-index entry must point at a batch start
whose last offset is the entry's offset, the time index must follow the running maximum timestamp, and txn-index
entries must not lie below the segment's base. Also flags a file that differs from what Kafka 4.1 would build
from the log (a sparser or denser index is valid for a broker, so this is a note, not a failure).
"""

from __future__ import annotations

from pathlib import Path

from kcompact.errors import CorruptDataError
from kcompact.segment.log_file import LogFile
from kcompact.segment.names import parse_segment_file_name
from kcompact.segment.offset_index import check_offset_index, decode_offset_index
from kcompact.segment.time_index import check_time_index, decode_time_index
from kcompact.segment.txn_index import check_txn_index, decode_txn_index


def verify_index_file(index_path: Path, base_offset: int, log_path: Path) -> list[str]:
    """Problems of one ``.index``/``.timeindex``/``.txnindex`` file, in words (empty: none found).

    Args:
        index_path: the index file.
        base_offset: its segment's base offset.
        log_path: the segment's ``.log`` (may be missing: then only the file's own rules are checked).

    Returns:
        One sentence per problem.
    """
    parsed = parse_segment_file_name(index_path.name)
    kind = parsed.kind if parsed is not None else ""
    data = index_path.read_bytes()
    try:
        batches = _log_batches(log_path) if log_path.exists() else None
    except CorruptDataError as err:
        return [f"cannot compare with {log_path.name}: {err}"]
    try:
        if kind == "index":
            entries = decode_offset_index(data, base_offset)
            pairs = None if batches is None else [(p, last) for p, last, _ts in batches]
            return check_offset_index(entries, base_offset, log_batches=pairs)
        if kind == "timeindex":
            tentries = decode_time_index(data, base_offset)
            tpairs = None if batches is None else [(last, ts) for _p, last, ts in batches]
            return check_time_index(tentries, base_offset, log_batches=tpairs)
        if kind == "txnindex":
            return check_txn_index(decode_txn_index(data), base_offset)
    except CorruptDataError as err:
        return [err.message]
    return [f"not an index file: {index_path.name}"]


def _log_batches(log_path: Path) -> list[tuple[int, int, int]]:
    with LogFile(log_path) as log:
        return [(s.position, s.last_offset, s.max_timestamp) for s in log.summaries()]
