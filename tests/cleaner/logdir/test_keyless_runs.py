"""The keyless sample counts runs of plain v2 batches in C (``key_counts._run``): the per-batch walk
(``accel.enabled`` off) is the reference, on every broker-written partition and on made-up logs holding what
the C window does not take (control batches, transactions, legacy entries, each codec) or must not count
(batches below the cleaner checkpoint, one straddling it), at every budget and checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcompact.cleaner.logdir.keyless import KeylessSample, count_keyless, sample_keyless
from kcompact.cleaner.round import accel as accel_windows
from kcompact.cleaner.round import key_counts
from kcompact.records.compression import decompress
from kcompact.records.scan import accel
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.partition import iter_partition_dirs, open_partition
from tests.conftest import real_fixture
from tests.encoders import encode_legacy_message
from tests.partition_builder import PartitionBuilder

pytestmark = pytest.mark.skipif(not accel.enabled or accel_windows.kernels is None,
                                reason="the C window this test compares is off or not built")


def samples(part: Path, monkeypatch: pytest.MonkeyPatch, budget: int | None) -> tuple[KeylessSample, ...]:
    """(C runs, per-batch walk) of one sample."""
    found = []
    for enabled in (True, False):
        with monkeypatch.context() as m:
            m.setattr(accel, "enabled", enabled)
            found.append(sample_keyless(open_partition(part), budget))
    return tuple(found)


def mixed(tmp_path: Path) -> Path:
    """Plain, keyless, empty-keyed, transactional (committed and aborted), markers, legacy entries, and
    every codec, over four segments."""
    b = PartitionBuilder("mixed")
    b.batch([(b"k%d" % i, b"v") for i in range(3)]).batch([(None, b"x"), (b"", b"e")])
    b.batch([(b"t", b"v"), (None, b"n")], producer_id=7, transactional=True).marker(7, commit=True)
    b.batch([(None, b"y%d" % i) for i in range(4)]).roll()
    for codec in (1, 2, 3, 4):
        b.batch([(b"c%d" % codec, b"v"), (None, b"w")], compression=codec)
        b.batch([(None, b"p"), (b"q", b"v")])
    b.batch([(b"a", b"v")], producer_id=9, transactional=True).marker(9, commit=False).roll()
    for i in range(3):
        b.segments[-1].batches.append(encode_legacy_message(
            offset=b.next_offset, magic=1, key=None if i % 2 else b"l", value=b"v", timestamp=b.ts))
        b.next_offset += 1
    b.batch([(b"after", b"legacy"), (None, b"z")]).roll()
    b.batch([(None, b"last")] * 2).batch([(b"k", b"last")])
    return b.write(tmp_path)


def test_the_runs_count_the_broker_written_partitions_as_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = 0
    for log_dir in sorted(p for p in real_fixture().iterdir() if p.is_dir()):
        for part in iter_partition_dirs(log_dir):
            for budget in (None, 1, 5000, 256 * 1024):
                with_runs, walked = samples(part, monkeypatch, budget)
                assert with_runs == walked, (part, budget)
            checked += walked.records > 0
    assert checked > 20  # the fixtures' data partitions, not only empty ones


def test_the_runs_count_every_kind_of_batch_as_the_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = mixed(tmp_path)
    taken = []
    window_run = key_counts._run

    def counted(*args: object) -> tuple[int, int, int] | None:
        run = window_run(*args)  # type: ignore[arg-type]
        taken.append(run is not None)
        return run

    monkeypatch.setattr(key_counts, "_run", counted)
    for checkpoint in [None, *range(0, 41)]:
        if checkpoint is not None:  # a checkpoint inside a batch: that batch counts whole
            write_offset_checkpoint(tmp_path / "cleaner-offset-checkpoint", {("mixed", 0): checkpoint})
        for budget in (None, 1, 61, 100, 150, 300, 700, 1000, 5000):
            with_runs, walked = samples(part, monkeypatch, budget)
            assert with_runs == walked, (checkpoint, budget)
    assert sum(taken) > 100  # the C runs were compared, not the walk with itself
    write_offset_checkpoint(tmp_path / "cleaner-offset-checkpoint", {("mixed", 0): 0})
    assert count_keyless(open_partition(part)) == KeylessSample(36, 18, exhaustive=True)


def test_a_batch_below_the_checkpoint_inside_a_run_is_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = PartitionBuilder("odd")
    b.batch([(None, b"a")] * 3).batch([(b"k", b"v")] * 2)
    b.next_offset = 1  # a batch whose offsets go back below the checkpoint: the walk skips it
    b.batch([(None, b"below")]).batch([(None, b"c"), (b"k", b"v")])
    part = b.write(tmp_path)
    write_offset_checkpoint(tmp_path / "cleaner-offset-checkpoint", {("odd", 0): 3})
    with_runs, walked = samples(part, monkeypatch, None)
    assert with_runs == walked == KeylessSample(4, 1, start=3, exhaustive=True)


def test_compressed_batches_are_counted_in_c_and_leave_nothing_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sample decompresses each codec's batches in the C run, as pass 1 does, but keeps none of their records
    for a pass 2 that never follows it (pass 1 itself, asked to keep them, does)."""
    b = PartitionBuilder("codecs")
    for codec in (1, 2, 3, 4):
        for i in range(3):
            b.batch([(b"c%d-%d-%d" % (codec, i, j), b"v" * 200) for j in range(20)] + [(None, b"w")], compression=codec)
    part = b.write(tmp_path)
    runs: list[tuple[int, int, int] | None] = []
    window_run = key_counts._run

    def counted(*args: object) -> tuple[int, int, int] | None:
        run = window_run(*args)  # type: ignore[arg-type]
        runs.append(run)
        return run

    monkeypatch.setattr(key_counts, "_run", counted)
    accel_windows.forget_inflated()  # the default budget: a run that keeps would hold every batch
    with_runs, walked = samples(part, monkeypatch, None)
    assert with_runs == walked == KeylessSample(12 * 21, 12, exhaustive=True)
    log_size = (part / "00000000000000000000.log").stat().st_size
    assert runs[0] == (log_size, 12 * 21, 12)  # every batch of every codec, in one C run (then the walk's None)
    assert accel_windows.kernels is not None and accel_windows.kernels.inflated_held() == 0
    log = (part / "00000000000000000000.log").read_bytes()
    accel_windows.scan_window_key_digests(log, 0, len(log), 0, 1 << 16, 0, decompress, None, 0)
    assert accel_windows.kernels.inflated_held() > 0  # what keep=False leaves out
    accel_windows.forget_inflated()
