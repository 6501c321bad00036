"""LogFile: small files read into memory, large ones mapped, both walked the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Record
from kcompact.records.scan import accel
from kcompact.segment import log_file
from kcompact.segment.log_file import READ_BELOW, LogFile
from tests.builders import PartitionBuilder

needs_kernels = pytest.mark.skipif(accel.kernels is None or not accel.enabled, reason="the C kernels are not built")


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



def _resident_kib(path: Path) -> int:
    """The resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = fields[-1] == str(path)
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's /proc/self/smaps")
def test_forget_before_lets_read_pages_go_and_reads_the_same_bytes_again(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = _segment(path, 4096, 200)  # about 2.4 MiB: mapped
    with LogFile(path) as log:
        assert bytes(log.buffer) == data  # every page read: resident
        assert _resident_kib(path) >= len(data) // 1024 - 4
        half = len(data) // 2
        log.forget_before(half)
        assert _resident_kib(path) <= (len(data) - half) // 1024 + 8  # the first half is gone
        log.forget_before(len(data))
        assert _resident_kib(path) <= 8
        assert b"".join(bytes(b.buffer) for b in log.iter_batches()) == data  # read again: the file's bytes
        log.forget_before(0)  # behind what is gone already: nothing to do


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's /proc/self/smaps")
def test_forget_before_also_lets_go_of_pages_read_again_behind_it(tmp_path: Path) -> None:
    """A walk reads batches behind it again (pass 2 writes a window out after walking past it): the next call
    lets those pages go too, not only the ones since the last call."""
    path = tmp_path / "00000000000000000000.log"
    data = _segment(path, 4096, 400)  # about 4.8 MiB: the page read again is in another folio than the end's
    with LogFile(path) as log:
        assert bytes(log.buffer[: len(data) // 2]) == data[: len(data) // 2]
        log.forget_before(len(data) // 2)
        assert bytes(log.buffer[:4096]) == data[:4096]  # behind the first call: mapped again
        assert bytes(log.buffer[len(data) // 2:]) == data[len(data) // 2:]
        log.forget_before(len(data))
        assert _resident_kib(path) <= 8


def test_forget_before_is_a_no_op_for_a_file_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = _segment(path, 10, 5)
    with LogFile(path) as log:
        log.forget_before(len(data))
        assert bytes(log.buffer) == data


class _CountedSource:
    """A ByteSource over bytes in memory that records every range read from it."""

    def __init__(self, data: bytes, path: Path) -> None:
        self.data, self.path, self.size_in_bytes = data, path, len(data)
        self.ranges: list[tuple[int, int]] = []

    def read(self, start: int, end: int) -> bytes:
        self.ranges.append((start, end))
        return self.data[start:end]


@pytest.mark.parametrize("spooled", [False, True], ids=["in-memory", "spooled"])
def test_a_byte_source_reads_as_the_file_each_byte_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          spooled: bool) -> None:
    from kcompact.segment import source

    path = tmp_path / "00000000000000000000.log"
    data = _segment(path, 300, 20)
    if spooled:  # a big segment is read in chunks into a temporary file, not held in memory
        monkeypatch.setattr(source, "SPOOL_ABOVE", 1000)
        monkeypatch.setattr(source, "SPOOL_CHUNK", 4000)
    remote = _CountedSource(data, Path("/bucket/logs/orders-0/00000000000000000000.log"))

    with LogFile(remote) as log, LogFile(path) as local:
        assert log.path == remote.path and log.size_in_bytes == len(data)
        assert [bytes(b.buffer) for b in log.iter_batches()] == [bytes(b.buffer) for b in local.iter_batches()]
    chunk = 4000 if spooled else len(data)
    assert remote.ranges == [(start, min(len(data), start + chunk)) for start in range(0, len(data), chunk)]


def test_a_byte_source_cut_short_names_its_path_and_position(tmp_path: Path) -> None:
    from kcompact.errors import CorruptDataError

    data = _segment(tmp_path / "00000000000000000000.log", 10, 3)
    remote = _CountedSource(data[:-7], Path("/bucket/logs/orders-0/00000000000000000000.log"))
    remote.size_in_bytes = len(data)  # listed whole, read short: a copy cut while it was read

    with LogFile(remote) as log, pytest.raises(CorruptDataError) as raised:
        list(log.iter_batches())
    assert raised.value.path is not None and str(raised.value.path) == str(remote.path)
    assert log.size_in_bytes == len(data) - 7


def _mixed_segment(tmp_path: Path) -> Path:
    """~1.3 MiB of data batches of several sizes, a transaction and its marker past the middle, then data."""
    b = PartitionBuilder("walk")
    for n in range(120):
        b.batch([(b"k%d" % (n % 7), b"v" * (100 + 97 * (n % 23)))] * (1 + n % 5))
    b.batch([(b"t", b"x")], producer_id=8, transactional=True).marker(8, commit=True)
    for n in range(60):
        b.batch([(b"a%d" % n, b"w" * 5000)])
    return b.write(tmp_path) / "00000000000000000000.log"


@needs_kernels
@pytest.mark.parametrize("walk", ["batch_headers", "batch_producers"])
@pytest.mark.parametrize("window", [4096, 30_001, 200_000, 1 << 30])
def test_a_header_walk_in_windows_gives_what_one_walk_over_the_file_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, walk: str, window: int,
) -> None:
    """Windows smaller than one batch, cutting batches anywhere, and larger than the file: the same stop and rows."""
    path = _mixed_segment(tmp_path)
    kernel = getattr(accel, walk)
    with LogFile(path) as log:
        whole = kernel(bytes(log.buffer))
        assert whole is not None and whole[0] > 0
        monkeypatch.setattr(log_file, "HEADER_WINDOW", window)
        assert log.walk_headers(kernel) == whole
    stopped = whole[0] < path.stat().st_size  # batch_headers takes the transactional batch, not its marker;
    assert stopped  # batch_producers neither: both stop inside the file, and the windows stop at the same place


@needs_kernels
def test_a_header_walk_over_data_only_reaches_the_end_in_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = _segment(path, 4096, 200)
    monkeypatch.setattr(log_file, "HEADER_WINDOW", 50_000)
    with LogFile(path) as log:
        found = log.walk_headers(accel.batch_headers)
    assert found is not None and found[0] == len(data)
    assert found == accel.batch_headers(data)


@needs_kernels
def test_a_header_walk_declines_a_window_outside_the_buffer() -> None:
    data = encode_batch([Record(0, 1_000, b"k", b"v")], base_offset=0)
    for start, end in ((0, len(data) + 1), (3, 2), (-1, 5)):
        assert accel.batch_headers(data, start, end) is None
        assert accel.batch_producers(data, start, end) is None
    assert accel.batch_headers(data, len(data), len(data)) == (len(data), b"")


@needs_kernels
@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's /proc/self/smaps")
def test_a_header_walk_holds_one_window_resident_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk reads headers only, but the faults that bring them in map the pages around them: in one call
    over the file the whole file became resident (a clean's peak RSS grew with the segment size)."""
    path = tmp_path / "00000000000000000000.log"
    data = _segment(path, 4096, 1400)  # about 17 MiB
    monkeypatch.setattr(log_file, "HEADER_WINDOW", 256 * 1024)
    resident_after_each_call: list[int] = []

    def walk(buf: memoryview, start: int, end: int) -> tuple[int, bytes] | None:
        found = accel.batch_headers(buf, start, end)
        resident_after_each_call.append(_resident_kib(path))
        return found

    with LogFile(path) as log:
        assert log.walk_headers(walk) == accel.batch_headers(data)
        assert len(resident_after_each_call) >= len(data) // (2 * 256 * 1024)
        # one window and the pages mapped around its edges: the kernel maps whole page-cache folios (up to 2 MiB
        # here), not only the pages read
        assert max(resident_after_each_call) <= 256 + 2 * 2048 + 256 < len(data) // 1024 // 3
        assert _resident_kib(path) <= 8
        assert b"".join(bytes(b.buffer) for b in log.iter_batches()) == data
