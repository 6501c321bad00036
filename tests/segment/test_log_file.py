"""LogFile: small files read into memory, large ones mapped, both walked the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Record
from kcompact.segment.log_file import READ_BELOW, LogFile


def _segment(path: Path, value_size: int, batches: int) -> bytes:
    data = b"".join(
        encode_batch([Record(i * 3 + j, 1_000 + i, b"k%d" % j, b"v" * value_size) for j in range(3)],
                     base_offset=i * 3)
        for i in range(batches))
    path.write_bytes(data)
    return data


def _mapped(path: Path) -> bool:
    return str(path) in Path("/proc/self/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux's /proc/self/maps")
def test_small_files_are_read_and_large_ones_mapped(tmp_path: Path) -> None:
    small, large = tmp_path / "00000000000000000000.log", tmp_path / "00000000000000000030.log"
    small_bytes = _segment(small, 10, 10)
    large_bytes = _segment(large, 4096, READ_BELOW // (3 * 4096) + 2)
    assert len(small_bytes) < READ_BELOW <= len(large_bytes)
    for path, data in ((small, small_bytes), (large, large_bytes)):
        with LogFile(path) as log:
            assert _mapped(path) == (path == large)  # mapping a small file costs more than reading it
            assert log.size_in_bytes == len(data)
            assert b"".join(bytes(b.buffer) for b in log.iter_batches()) == data
            last = [b.last_offset for b in log.iter_batches()]
            assert last == [i * 3 + 2 for i in range(len(last))] and len(last) >= 7
        assert not _mapped(path)

