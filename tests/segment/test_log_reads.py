"""LogReads: a partition's small .log files read once for every check of a report, within a budget, and
walked to the same batches and the same errors as a fresh LogFile."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kcompact.errors import CorruptDataError
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Record
from kcompact.segment.log_file import READ_BELOW, LogFile
from kcompact.segment.log_reads import LogReads
from kcompact.segment.partition import SegmentFiles, open_partition


def _write(part: Path, base: int, batches: int, value_size: int = 10) -> bytes:
    data = b"".join(
        encode_batch([Record(base + i, 1_000 + i, b"k%d" % i, b"v" * value_size)], base_offset=base + i)
        for i in range(batches))
    (part / f"{base:020d}.log").write_bytes(data)
    return data


def _segments(part: Path) -> tuple[SegmentFiles, ...]:
    return open_partition(part).segments


def _walk(reads: LogReads, seg: SegmentFiles) -> list[bytes]:
    with reads.open(seg) as log:
        return [bytes(b.buffer) for b in log.iter_batches()]


def test_a_small_log_is_read_once_and_walks_the_same_every_time(tmp_path: Path, log_opens: Counter[str]) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    data = _write(part, 0, 5)
    (seg,) = _segments(part)
    with LogReads() as reads:
        walks = [_walk(reads, seg) for _ in range(3)]
        with reads.open(seg) as log:  # a walk from a later position still reads the same bytes
            second = next(log.iter_batches()).size_in_bytes
            assert [b.base_offset for b in log.iter_batches(second)] == [1, 2, 3, 4]
            assert log.size_in_bytes == len(data)
    assert walks == [walks[0]] * 3 and b"".join(walks[0]) == data
    assert log_opens == {seg.log_path.name: 1}


def test_an_interrupted_walk_is_not_replayed_as_whole(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    _write(part, 0, 4)
    (seg,) = _segments(part)
    with LogReads() as reads:
        with reads.open(seg) as log:
            assert next(log.iter_batches()).base_offset == 0  # the check stops after one batch
        with reads.open(seg) as log:
            assert [b.base_offset for b in log.iter_batches()] == [0, 1, 2, 3]


def test_past_the_budget_and_for_large_files_each_ask_opens_the_file(tmp_path: Path, log_opens: Counter[str]) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    first = _write(part, 0, 4)
    _write(part, 4, 4)
    _write(part, 8, READ_BELOW // 3000 + 2, value_size=3000)  # mapped, not read
    segments = _segments(part)
    assert segments[2].size_in_bytes >= READ_BELOW
    with LogReads(budget=len(first) + 1) as reads:  # room for the first file only
        for _ in range(2):
            for seg in segments:
                _walk(reads, seg)
    assert [log_opens[seg.log_path.name] for seg in segments] == [1, 2, 2]


def test_a_segment_that_does_not_parse_fails_the_same_way_on_every_walk(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    data = _write(part, 0, 3)
    (part / f"{0:020d}.log").write_bytes(data + b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x00\x40garbage!")
    (seg,) = _segments(part)
    with pytest.raises(CorruptDataError) as fresh, LogFile(seg.log_path) as log:
        list(log.iter_batches())
    with LogReads() as reads:
        for _ in range(2):
            with pytest.raises(CorruptDataError) as shared, reads.open(seg) as log:
                list(log.iter_batches())
            assert str(shared.value) == str(fresh.value)
            assert (shared.value.path, shared.value.position) == (str(seg.log_path), len(data))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc/self/fd")
def test_kept_files_hold_no_descriptor(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    for base in range(0, 200, 2):
        _write(part, base, 2)
    before = len(os.listdir("/proc/self/fd"))
    with LogReads() as reads:
        for seg in _segments(part):
            _walk(reads, seg)
        assert len(os.listdir("/proc/self/fd")) == before  # a partition of thousands of segments: no EMFILE


def test_without_replays_a_file_is_still_read_once_and_its_walks_are_not_kept(
    tmp_path: Path, log_opens: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``replay_walks=False`` (a ranking: each check walks a file once): one read, no walk kept, and a state loaded
    through it (by its C walk) is the state loaded through a replaying LogReads (a Python walk) and alone."""
    import kcompact.log.state.log_state as log_state_module
    from kcompact.config.topic_config import TopicConfig
    from kcompact.log.state.log_state import load_log_state

    part = tmp_path / "t-0"
    part.mkdir()
    _write(part, 0, 6)
    _write(part, 6, 3)
    for base in (0, 6):  # with indexes (empty: no batch reached the interval), no segment needs recovering
        for kind in ("index", "timeindex"):
            (part / f"{base:020d}.{kind}").write_bytes(b"")
    partition = open_partition(part)
    config = TopicConfig.defaults()
    alone = load_log_state(partition, config)
    quick_walks = Counter[str]()
    data_only = log_state_module._data_only
    monkeypatch.setattr(log_state_module, "_data_only",
                        lambda log, *a: quick_walks.update([log.path.name]) or data_only(log, *a))
    with LogReads(replay_walks=False) as reads:
        once = load_log_state(partition, config, reads)
        walked = [_walk(reads, seg) for seg in partition.segments]
        assert all(log._walked is None for log in reads._kept.values())
    assert quick_walks == {seg.log_path.name: 1 for seg in partition.segments}
    with LogReads() as reads:
        replayed = load_log_state(partition, config, reads)
    assert quick_walks == {seg.log_path.name: 1 for seg in partition.segments}  # a replaying read walks in Python
    def comparable(state: Any) -> Any:  # the producer replay compares by identity
        return replace(state, producers=None)

    assert comparable(once) == comparable(alone) == comparable(replayed)
    assert once.producers.producers() == alone.producers.producers()
    assert [len(w) for w in walked] == [6, 3]
    assert log_opens == {seg.log_path.name: 3 for seg in partition.segments}  # alone, then once for each LogReads
