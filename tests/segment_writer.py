"""Writing whole segments from encoded batches: kcompact's own writer for fixtures, benchmarks and tests.

It lays out a segment the way a broker leaves a *closed* segment: the ``.log`` as given, ``.index`` and
``.timeindex`` built per batch with Kafka 4.1's algorithm and trimmed, a ``.txnindex`` only when there are
aborted transactions. (The cleaner writes its output through ``cleaner/swap.py`` instead, which adds the
crash-safe protocol.)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from kcompact.records.batch import iter_batches
from kcompact.segment.index_builder import build_indexes
from kcompact.segment.names import segment_file_name
from kcompact.segment.offset_index import encode_offset_index
from kcompact.segment.time_index import encode_time_index
from kcompact.segment.txn_index import AbortedTxn, encode_txn_index


def write_segment(
    directory: str | os.PathLike[str],
    base_offset: int,
    batches: Iterable[bytes],
    *,
    index_interval_bytes: int = 4096,
    aborted: Sequence[AbortedTxn] = (),
    mtime_ms: int | None = None,
    with_indexes: bool = True,
) -> Path:
    """Write ``<base>.log`` (+ indexes) into ``directory`` and return the ``.log`` path.

    Args:
        directory: the partition directory (created if missing).
        base_offset: the segment's base offset (its file name).
        batches: encoded batches, in offset order.
        index_interval_bytes: ``index.interval.bytes`` for the indexes.
        aborted: entries for the ``.txnindex`` (written only when non-empty).
        mtime_ms: the mtime to give the files (default: now).
        with_indexes: False leaves the indexes out (as some copied log dirs do).
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    data = b"".join(batches)
    log_path = root / segment_file_name(base_offset, "log")
    log_path.write_bytes(data)
    written = [log_path]
    if with_indexes:
        summaries = [
            (b.position, b.size_in_bytes, b.last_offset, b.max_timestamp)
            for b in iter_batches(data)
        ]
        offsets, times = build_indexes(
            summaries, base_offset=base_offset, index_interval_bytes=index_interval_bytes
        )
        for kind, blob in (
            ("index", encode_offset_index(offsets, base_offset)),
            ("timeindex", encode_time_index(times, base_offset)),
        ):
            path = root / segment_file_name(base_offset, kind)
            path.write_bytes(blob)
            written.append(path)
    if aborted:
        path = root / segment_file_name(base_offset, "txnindex")
        path.write_bytes(encode_txn_index(aborted))
        written.append(path)
    if mtime_ms is not None:
        for path in written:
            os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    return log_path
