"""Test helpers: the package's partition builder, and reading a partition back as plain tuples."""

from __future__ import annotations

from pathlib import Path

from tests.partition_builder import BASE_TS, PartitionBuilder

__all__ = ["BASE_TS", "PartitionBuilder", "read_all_records"]


def read_all_records(part: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every (offset, key, value) of every data batch of a partition, in order (control batches excluded)."""
    from kcompact.records.batch_header import RecordBatch
    from kcompact.records.record import decode_records
    from kcompact.segment.partition import open_partition

    out: list[tuple[int, bytes | None, bytes | None]] = []
    for seg in open_partition(part).segments:
        with seg.open() as log:
            for batch in log.iter_batches():
                if batch.is_control:
                    continue
                assert isinstance(batch, RecordBatch), "a legacy entry: read it with legacy_records"
                out.extend((r.offset, r.key, r.value) for r in decode_records(batch))
    return out
