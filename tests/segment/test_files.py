"""The durable-write primitives every writer shares: a replacement is all old or all new, and a failed one
leaves no temporary behind."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest

from kcompact.segment import files
from kcompact.segment.files import link_or_else, replacing, write_replacing


def test_a_replacement_is_renamed_over_the_old_file_and_the_directory_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "cleaner-offset-checkpoint"
    target.write_bytes(b"old")
    synced: list[Path] = []
    real = files.fsync_dir

    def recording(d: str | os.PathLike[str]) -> None:
        synced.append(Path(d))
        real(d)

    monkeypatch.setattr(files, "fsync_dir", recording)
    write_replacing(target, b"new")
    assert target.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    assert synced == [tmp_path]


def test_a_failed_replacement_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    target.write_bytes(b"old")
    with pytest.raises(OSError, match="No space left"), replacing(target) as scratch:
        scratch.write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_a_directory_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "export"
    with replacing(target, tmp_path / ".export.tmp") as scratch:
        scratch.mkdir()
        (scratch / "part-00000.parquet").write_bytes(b"rows")
    assert (target / "part-00000.parquet").read_bytes() == b"rows"
    with pytest.raises(RuntimeError), replacing(tmp_path / "second", tmp_path / ".second.tmp") as scratch:
        scratch.mkdir()
        (scratch / "part-00000.parquet").write_bytes(b"half")
        raise RuntimeError("interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_a_second_name_falls_back_as_asked_where_links_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "00000000000000000000.log"
    source.write_bytes(b"batches")

    def refused(*_args: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refused)
    link_or_else(source, tmp_path / "copy", "copy")
    link_or_else(source, tmp_path / "staged", "symlink")
    assert (tmp_path / "copy").read_bytes() == b"batches" and not (tmp_path / "copy").is_symlink()
    assert (tmp_path / "staged").is_symlink() and (tmp_path / "staged").resolve() == source.resolve()


def test_start_writeback_is_advice_the_bytes_and_the_fsync_stay_as_they_were(tmp_path: Path) -> None:
    """The cleaned segment's writer asks the disk to start on what it wrote every few MiB (``start_writeback``:
    Linux's ``sync_file_range``); the file reads back the same, a range past its end or a descriptor opened
    for reading is no error, and on Linux the call is really there."""
    if sys.platform.startswith("linux"):
        assert files._sync_file_range() is not None
    path = tmp_path / "00000000000000000000.log.cleaned"
    data = os.urandom(3 << 20)
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        files.start_writeback(out.fileno(), 0, len(data))
        files.start_writeback(out.fileno(), len(data), 1 << 30)  # past the end: nothing to do
        os.fsync(out.fileno())
    with open(path, "rb") as back:
        files.start_writeback(back.fileno(), 0, 0)
        assert back.read() == data
