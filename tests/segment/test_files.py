"""The durable-write primitives every writer shares: a replacement is all old or all new, and a failed one
leaves no temporary behind."""

from __future__ import annotations

import errno
import os
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
