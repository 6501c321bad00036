"""open_partition: one listing, file types from it, a stat only per live segment's .log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kcompact.segment.partition import open_partition


def test_listing_stats_only_the_segment_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = tmp_path / "orders-0"
    part.mkdir()
    for base in (0, 20, 40):
        for suffix in ("log", "index", "timeindex", "txnindex"):
            (part / f"{base:020d}.{suffix}").write_bytes(b"")
    (part / "00000000000000000060.index").write_bytes(b"")  # an orphan index
    (part / "00000000000000000020.log.cleaned").write_bytes(b"")
    (part / "00000000000000000040.snapshot").write_bytes(b"")
    (part / "00000000000000000080.log").mkdir()  # a directory with a segment's name: a stray
    (part / "partition.metadata").write_text("version: 0\n")
    stats: list[str] = []
    real_stat = os.stat

    def counting(path: str | os.PathLike[str], *args: object, **kwargs: bool) -> os.stat_result:
        stats.append(os.fspath(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counting)
    partition = open_partition(part)
    monkeypatch.undo()
    assert sorted(Path(p).name for p in stats if Path(p).parent == part) == [
        f"{b:020d}.log" for b in (0, 20, 40)]  # fmt: skip
    assert [s.base_offset for s in partition.segments] == [0, 20, 40]
    assert [s.txn_index_path for s in partition.segments] == [part / f"{b:020d}.txnindex" for b in (0, 20, 40)]
    assert partition.orphan_indexes == (part / "00000000000000000060.index",)
    assert partition.leftovers == (part / "00000000000000000020.log.cleaned",)
    assert partition.snapshots == (part / "00000000000000000040.snapshot",)
    assert partition.strays == (part / "00000000000000000080.log",)
    assert partition.other_files == (part / "partition.metadata",)
