"""A log dir's clean writes ``cleaner-offset-checkpoint`` a batch of partitions at a time: what it costs per
partition does not grow with the log dir's partitions, and a kill between a partition's swap and its batch's
write loses nothing (the next clean repeats those rounds; the checkpoint is never ahead of the swaps). The
``stat`` calls and partition listings (``open_partition``) of a partition's clean are few and flat in N too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kcompact.segment.checkpoint as checkpoint_module
import kcompact.segment.partition as partition_module
from kcompact.cleaner.logdir.run import CHECKPOINT_BATCH_PARTITIONS, CHECKPOINT_CRASH_POINT, clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from tests.builders import BASE_TS, PartitionBuilder, read_all_records

NOW = BASE_TS + 1_000_000
COMPACT = {"cleanup.policy": "compact"}


def make_log_dir(log_dir: Path, partitions: int) -> Path:
    """``partitions`` tiny partitions (three segments of overwrites and an active one)."""
    high_watermarks = {}
    for number in range(partitions):
        b = PartitionBuilder("tiny", number)
        for round_ in range(3):
            b.batch([(f"k{j % 5}".encode(), f"{number}-{round_}-{j}".encode()) for j in range(10)]).roll()
        b.batch([(b"x", b"1")])
        b.write(log_dir, high_watermark=None)
        high_watermarks[("tiny", number)] = b.next_offset
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", high_watermarks)
    return log_dir


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts of checkpoint parses (lines parsed), checkpoint writes and fsyncs in this process."""
    counts: Counter[str] = Counter()
    decode, encode, fsync = (checkpoint_module.decode_offset_checkpoint,
                             checkpoint_module.encode_offset_checkpoint, os.fsync)

    def counted_decode(data: bytes) -> dict[tuple[str, int], int]:
        entries = decode(data)
        counts["parsed lines"] += len(entries)
        return entries

    def counted_encode(entries: dict[tuple[str, int], int]) -> bytes:
        counts["written lines"] += len(entries)
        return encode(entries)

    def counted_fsync(fd: int) -> None:
        counts["fsyncs"] += 1
        fsync(fd)

    monkeypatch.setattr(checkpoint_module, "decode_offset_checkpoint", counted_decode)
    monkeypatch.setattr(checkpoint_module, "encode_offset_checkpoint", counted_encode)
    monkeypatch.setattr(os, "fsync", counted_fsync)
    _count_stats_and_listings(monkeypatch, counts)
    yield counts


def _count_stats_and_listings(monkeypatch: pytest.MonkeyPatch, counts: Counter[str]) -> None:
    """Count ``os.stat``/``os.lstat`` (``Path.stat``, ``exists``, ``is_file`` … go through them),
    ``os.scandir``/``os.listdir`` (``Path.iterdir`` goes through the latter) and ``open_partition``, wherever a
    module of kcompact imported it."""
    stat, lstat, open_partition = os.stat, os.lstat, partition_module.open_partition
    scandir, listdir = os.scandir, os.listdir

    def counted_scandir(*args: Any, **kwargs: Any) -> Any:
        counts["directory listings"] += 1
        return scandir(*args, **kwargs)

    def counted_listdir(*args: Any, **kwargs: Any) -> list[str]:
        counts["directory listings"] += 1
        return listdir(*args, **kwargs)

    def counted_stat(*args: Any, **kwargs: Any) -> os.stat_result:
        counts["stats"] += 1
        return stat(*args, **kwargs)

    def counted_lstat(*args: Any, **kwargs: Any) -> os.stat_result:
        counts["stats"] += 1
        return lstat(*args, **kwargs)

    def counted_open(*args: Any, **kwargs: Any) -> partition_module.Partition:
        counts["partition listings"] += 1
        return open_partition(*args, **kwargs)

    monkeypatch.setattr(os, "stat", counted_stat)
    monkeypatch.setattr(os, "lstat", counted_lstat)
    monkeypatch.setattr(os, "scandir", counted_scandir)
    monkeypatch.setattr(os, "listdir", counted_listdir)
    for name, module in list(sys.modules.items()):
        if name.startswith("kcompact") and getattr(module, "open_partition", None) is open_partition:
            monkeypatch.setattr(module, "open_partition", counted_open)


def _per_partition(tmp_path: Path, counts: Counter[str], partitions: int) -> dict[str, float]:
    log_dir = make_log_dir(tmp_path / f"n{partitions}", partitions)
    counts.clear()
    run = clean_path(log_dir, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW), jobs=1)
    assert len(run.results) == partitions and not run.failures
    assert all(result.checkpoint_written for result in run.results)
    return {name: counts[name] / partitions
            for name in ("parsed lines", "written lines", "fsyncs", "stats", "partition listings",
                         "directory listings")}


def test_checkpoint_cost_per_partition_does_not_grow_with_partitions(
    tmp_path: Path, counted: Counter[str]
) -> None:
    few = _per_partition(tmp_path, counted, 20)
    many = _per_partition(tmp_path, counted, 4 * CHECKPOINT_BATCH_PARTITIONS)
    # one read-modify-write per batch: lines parsed and written per partition are bounded by the batch
    # (the file is re-read only when another process rewrote it), not by the log dir's partitions
    assert many["written lines"] <= 3 and many["parsed lines"] <= 1
    assert few["written lines"] <= 1 and few["parsed lines"] <= 1
    # per partition: the three .cleaned files and the swap's one directory sync (Kafka's: LocalLog.replaceSegments
    # flushes the directory once, after its last rename); per batch two more
    assert many["fsyncs"] <= few["fsyncs"] <= 4 + 2
    assert many["fsyncs"] <= 4 + 2 * 4 / (4 * CHECKPOINT_BATCH_PARTITIONS) + 0.01
    # a partition of four segments: listed twice (ranked, its commit: its round goes on with the ranking's
    # listing while the state's look finds nothing changed; three before), each listing a stat of each .log;
    # the rest a few stats a file where no listing tells (120 a partition before they were cut, 60 before the
    # round's space check took its sizes from its listing; resolving the log dir's path for its locks takes one
    # a component of it, a few of these); the run's own, spread over 20 partitions, make up the few partitions'
    # more
    assert many["partition listings"] == few["partition listings"] == 2
    assert many["stats"] <= min(few["stats"], 52)
    # those two, the state's two looks (ranked, its round), the unsettled files' two, the settling's one and the
    # swap's one (eight a partition; ten before the settling planned from its one listing, nine before the round
    # took the ranking's listing)
    assert many["directory listings"] <= min(few["directory listings"], 8 + 0.01)  # and the run's own, spread


def _kcompact(*args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KCOMPACT_CRASH_AT"}
    if crash_at is not None:
        env["KCOMPACT_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-m", "kcompact", *args], env=env, capture_output=True, text=True,
                          check=False)


def _tree(log_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(log_dir)): p.read_bytes() for p in sorted(log_dir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_kill_before_the_batched_checkpoint_write_loses_nothing(tmp_path: Path, jobs: str) -> None:
    """Killed when every partition is swapped but the checkpoint batch not yet written: the records a
    consumer reads are those of an unkilled clean, the checkpoint is not ahead (not written at all), and the
    next clean repeats the rounds and ends byte for byte where an unkilled clean ends."""
    log_dir = make_log_dir(tmp_path / "killed", 6)
    reference = shutil.copytree(log_dir, tmp_path / "reference")
    before = {number: read_all_records(log_dir / f"tiny-{number}") for number in range(6)}
    args = ["clean", "--now-ms", str(NOW), "--config", "cleanup.policy=compact", "--jobs", jobs]

    killed = _kcompact(*args, str(log_dir), crash_at=CHECKPOINT_CRASH_POINT)

    assert killed.returncode == 137, killed.stderr
    assert read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint") == {}  # lags, never ahead
    for number in range(6):
        latest = {key: value for _offset, key, value in before[number]}
        after = {key: value for _offset, key, value in read_all_records(log_dir / f"tiny-{number}")}
        assert after == latest
    assert _kcompact(*args, str(reference)).returncode == 0
    again = _kcompact(*args, str(log_dir))
    assert again.returncode == 0, again.stderr
    assert read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint") == read_offset_checkpoint(
        reference / "cleaner-offset-checkpoint")
    assert {n: p for n, p in _tree(log_dir).items() if "lock" not in n} == {
        n: p for n, p in _tree(reference).items() if "lock" not in n}


def test_a_batch_that_cannot_be_written_fails_its_partitions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a round's own checkpoint write that fails: each partition of the batch is a failure saying the cleaned
    segments are in place and the next clean repeats the round."""
    import kcompact.cleaner.logdir.run as run_module

    def refuse(path: Path, updates: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_module, "write_checkpoint_updates", refuse)
    log_dir = make_log_dir(tmp_path / "full", 3)
    run = clean_path(log_dir, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW), jobs=1)
    assert run.results == []
    assert [(Path(f.partition_dir).name, f.error) for f in run.failures] == [
        (f"tiny-{n}", f"{log_dir / 'cleaner-offset-checkpoint'}: cannot advance the cleaner checkpoint to 30 "
                      "(No space left on device); the cleaned segments are in place and consistent, the checkpoint "
                      "stays behind them, so the next clean repeats this round") for n in range(3)]
    assert not (log_dir / "cleaner-offset-checkpoint").exists()
