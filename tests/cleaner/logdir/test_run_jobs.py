"""``clean_path`` over a log dir with worker processes: the same run as in one process, failures alone,
no lost checkpoint entries, and the ``jobs`` each partition is given."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

import kcompact.cleaner.logdir.run as run_module
from kcompact.cleaner.disk.swap import remove_leftovers
from kcompact.cleaner.logdir.run import CleanRun, clean_path
from kcompact.cleaner.round.options import CleanOptions, CleanResult
from kcompact.errors import ConfigError
from kcompact.fork_pool import (
    PARTITION_WORK_BYTES,
    POOL_MIN_WORK_BYTES,
    fork_available,
    partition_workers,
)
from kcompact.records.batch import iter_batches
from kcompact.records.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET
from kcompact.records.crc import crc32c
from kcompact.segment.checkpoint import (
    read_offset_checkpoint,
    update_offset_checkpoint,
    write_offset_checkpoint,
)
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.conftest import REPO_ROOT

NOW = BASE_TS + 1_000_000
COMPACT = {"cleanup.policy": "compact"}
PARTITIONS = [("orders", 0), ("orders", 1), ("orders", 2), ("events", 0), ("events", 1)]
CORRUPT = "orders-1"
GONE = ("gone", 3)  # a cleaner checkpoint entry of a partition that is not in the log dir


def make_log_dir(log_dir: Path) -> Path:
    """Five partitions (two segments of overwrites, a tombstone, an active segment); orders-1's first
    record length is made negative (the batch's CRC made valid again), which only a clean's record
    decoding meets."""
    high_watermarks = {}
    for topic, number in PARTITIONS:
        b = PartitionBuilder(topic, number)
        for round_ in range(6):
            b.batch([(f"k{j % 7}".encode(), f"{topic}{number}-{round_}-{j}".encode())
                     for j in range(20 + number)])
            if round_ == 2:
                b.batch([(b"k0", None)]).roll()
        b.roll().batch([(b"x", b"1")])
        b.write(log_dir, high_watermark=None)
        high_watermarks[(topic, number)] = b.next_offset
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", high_watermarks)
    write_offset_checkpoint(log_dir / "cleaner-offset-checkpoint", {GONE: 7})
    segment = log_dir / CORRUPT / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[61] = 0x7F  # the first record's length varint (right after the 61-byte v2 header): -64
    first = next(iter_batches(bytes(data)))
    struct.pack_into(">I", data, CRC_OFFSET, crc32c(bytes(data[ATTRIBUTES_OFFSET : first.size_in_bytes])))
    segment.write_bytes(bytes(data))
    return log_dir


def digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def comparable(run: CleanRun, root: Path) -> Any:
    """The run with ``root`` in paths and messages replaced by ``<root>``, and without timings."""
    results = [asdict(result) for result in run.results]
    for row in results:
        row["stats"].pop("elapsed_s")
    text = json.dumps({"results": results, "failures": [asdict(f) for f in run.failures],
                       "notes": run.notes})
    return json.loads(text.replace(str(root), "<root>"))


def clean(log_dir: Path, jobs: int | None, **kwargs: Any) -> CleanRun:
    return clean_path(log_dir, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW), jobs=jobs, **kwargs)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_log_dir(tmp_path_factory.mktemp("template") / "logdir")


def copy_of(template: Path, where: Path) -> Path:
    where.mkdir()
    return Path(shutil.copytree(template, where / "logdir"))


def test_two_workers_give_the_serial_run_byte_for_byte(template: Path, tmp_path: Path) -> None:
    serial_dir, pooled_dir = copy_of(template, tmp_path / "serial"), copy_of(template, tmp_path / "pool")
    corrupt_before = digest(template / CORRUPT)
    serial, pooled = clean(serial_dir, 1), clean(pooled_dir, 2)
    assert comparable(pooled, pooled_dir.parent) == comparable(serial, serial_dir.parent)
    assert digest(pooled_dir) == digest(serial_dir)
    # the corrupt partition failed alone, was left as it was, and the others were cleaned
    (failure,) = pooled.failures
    assert failure.partition_dir == str(pooled_dir / CORRUPT)
    assert failure.error.endswith("at position 0: record 0 length out of range; expected 6..430 bytes, "
                                  "found -64")
    assert digest(pooled_dir / CORRUPT) == corrupt_before
    cleaned = sorted(Path(r.partition_dir).name for r in pooled.results)
    assert cleaned == ["events-0", "events-1", "orders-0", "orders-2"]
    assert all(r.skipped_reason is None and r.stats.superseded_removed > 0 for r in pooled.results)
    kept = {key: value for _offset, key, value in read_all_records(pooled_dir / "orders-0")}
    assert len(kept) == len(read_all_records(pooled_dir / "orders-0")) == 8  # each key once
    assert all((kept[f"k{j}".encode()] or b"").startswith(b"orders0-5-") for j in range(7))


def test_concurrent_partitions_keep_every_checkpoint_entry(template: Path, tmp_path: Path) -> None:
    log_dir = copy_of(template, tmp_path / "pool")
    run = clean(log_dir, 4)
    expected = {GONE: 7} | {(r.topic, r.partition): r.end_offset for r in run.results}
    assert len(expected) == 5  # four cleaned partitions and the line of one that is not here
    entries = read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint")
    assert entries == expected
    assert list(entries) == [GONE] + [(r.topic, r.partition) for r in run.results]  # cleaning order


def _bump(args: tuple[Path, int]) -> None:
    path, worker = args
    for round_ in range(20):
        update_offset_checkpoint(path, {(f"t{worker}", round_): round_ * 10 + worker})


def test_update_offset_checkpoint_loses_nothing_under_forked_writers(tmp_path: Path) -> None:
    """The property the pool relies on: read-modify-writes of one log dir's checkpoint from several
    processes at once keep every entry (each holds the log dir's checkpoint lock)."""
    path = tmp_path / "cleaner-offset-checkpoint"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_bump, [(path, worker) for worker in range(4)])
    entries = read_offset_checkpoint(path)
    assert entries == {(f"t{w}", r): r * 10 + w for w in range(4) for r in range(20)}


def test_progress_comes_back_to_the_parent(template: Path, tmp_path: Path) -> None:
    log_dir = copy_of(template, tmp_path / "pool")
    seen: dict[str, tuple[int, int]] = {}
    run = clean(log_dir, 2, progress=lambda name, done, total: seen.__setitem__(name, (done, total)))
    assert seen.keys() == {Path(r.partition_dir).name for r in run.results}  # not the corrupt one
    assert all(0 < done <= total for done, total in seen.values())


def test_the_parent_removes_the_deleted_files_the_workers_swaps_leave(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = copy_of(template, tmp_path / "pool")
    removed: list[tuple[int, str]] = []

    def recording(paths: list[str]) -> list[str]:
        removed.extend((os.getpid(), path) for path in paths)
        return remove_leftovers(paths)

    monkeypatch.setattr(run_module, "remove_leftovers", recording)
    run = clean(log_dir, 2)
    swapped = {Path(r.partition_dir).name for r in run.results if r.stats.groups}
    assert len(swapped) == len(PARTITIONS) - 1  # all but the corrupt one
    assert {pid for pid, _path in removed} == {os.getpid()}  # here, as each worker's outcome came
    assert {Path(path).parent.name for _pid, path in removed} == swapped
    assert all(path.endswith(".deleted") for _pid, path in removed)
    assert not list(log_dir.glob("*/*.deleted"))
    assert not [note for note in run.notes if ".deleted" in note]


@pytest.mark.parametrize("jobs", [0, -1])
def test_jobs_below_one_is_refused(template: Path, jobs: int) -> None:
    with pytest.raises(ConfigError, match=f"jobs: a number of worker processes; expected 1 or more, "
                                          f"found {jobs}"):
        clean(template, jobs)


def test_partition_workers_table(monkeypatch: pytest.MonkeyPatch) -> None:
    import kcompact.fork_pool as pool_module

    mib, cores = 1024 * 1024, 4
    monkeypatch.setattr(pool_module, "usable_cpus", lambda: cores)
    assert (POOL_MIN_WORK_BYTES, PARTITION_WORK_BYTES) == (20 * mib, 3 * mib // 2)
    assert partition_workers(None, []) == 1
    assert partition_workers(None, [1000 * mib]) == 1  # one partition: its own jobs decide
    assert partition_workers(4, [1000 * mib]) == 1
    assert partition_workers(None, [1 * mib] * 7) == 1  # 7 + 10.5 MiB of work: a pool would not pay
    assert partition_workers(None, [1 * mib] * 8) == min(cores, 8)  # 8 + 12 MiB
    assert partition_workers(None, [1] * 13) == 1  # 19.5 MiB of work: partitions' fixed costs count
    assert partition_workers(None, [1] * 14) == min(cores, 14)  # 21 MiB
    assert partition_workers(None, [8 * mib, 9 * mib]) == min(cores, 2)  # 17 + 3 MiB
    assert partition_workers(None, [mib] * 300) == cores
    assert partition_workers(1, [mib] * 300) == 1
    assert partition_workers(3, [1] * 5) == 3  # an explicit count is honoured even for tiny ones
    assert partition_workers(8, [1, 1]) == 2  # no more than the partitions
    assert partition_workers(100_000, [1] * 5) == 4  # nor than the cores
    assert partition_workers(100_000, [1] * 3) == 3


def refuse_large_pools(monkeypatch: pytest.MonkeyPatch, cores: int) -> list[int]:
    """Pretend to have ``cores`` cores; record each pool's size, refusing one larger than the cores
    before anything forks (so an unbounded ``jobs`` fails the test instead of exhausting memory)."""
    import kcompact.cleaner.workers.parallel as parallel_module
    import kcompact.fork_pool as pool_module

    sizes: list[int] = []
    original = pool_module.run_in_pool

    def guarded(items: Any, work: Any, workers: int, progress: Any, died: Any, **kwargs: Any) -> Any:
        sizes.append(workers)
        if workers > cores:
            raise AssertionError(f"a pool of {workers} processes")
        return original(items, work, workers, progress, died, **kwargs)

    original_pool = parallel_module._pool

    @contextmanager
    def guarded_pool(jobs: int, plan: Any, oracle: Any) -> Iterator[Any]:  # a partition's own workers
        if jobs > cores:
            raise AssertionError(f"a pool of {jobs} processes")
        with original_pool(jobs, plan, oracle) as pool:
            yield pool

    monkeypatch.setattr(pool_module, "usable_cpus", lambda: cores)
    monkeypatch.setattr(parallel_module, "usable_cpus", lambda: cores)
    monkeypatch.setattr(run_module, "run_in_pool", guarded)
    monkeypatch.setattr(parallel_module, "_pool", guarded_pool)
    return sizes


def test_a_huge_jobs_is_clamped_to_the_cores_and_said_once(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serial_dir, huge_dir = copy_of(template, tmp_path / "serial"), copy_of(template, tmp_path / "huge")
    sizes = refuse_large_pools(monkeypatch, cores=2)
    huge, serial = clean(huge_dir, 100_000), clean(serial_dir, 1)
    assert sizes == [2]
    clamped = ("--jobs 100000: 2 worker processes at a time, as many as the 5 partitions to clean and the "
               "2 usable cores allow")
    notes = comparable(serial, serial_dir.parent)["notes"]
    assert comparable(huge, huge_dir.parent)["notes"] == [*notes, clamped]
    assert digest(huge_dir) == digest(serial_dir)


def test_a_huge_jobs_for_one_partition_is_clamped_and_said_once(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kcompact.cleaner.workers.parallel as parallel_module

    log_dir = copy_of(template, tmp_path / "one")
    refuse_large_pools(monkeypatch, cores=2)
    monkeypatch.setattr(parallel_module, "CHUNK_MIN_BYTES", 100)  # several ranges in these small segments
    run = clean(log_dir / "orders-0", 100_000)
    assert [r.workers for r in run.results] == [2]
    assert run.notes[-1] == ("--jobs 100000: 2 worker processes at a time, as many as the round's segment "
                             "ranges and the 2 usable cores allow")
    monkeypatch.setattr(parallel_module, "CHUNK_MIN_BYTES", 1 << 30)  # one range per segment
    again = clean(copy_of(template, tmp_path / "two") / "orders-0", 100_000)
    assert [r.workers for r in again.results] == [2]  # two segments in the round
    nothing = clean(log_dir / "orders-0", 100_000)  # just cleaned: no round, no processes, no note
    assert [r.skipped_reason is not None for r in nothing.results] == [True]
    assert not any(note.startswith("--jobs") for note in nothing.notes)


def test_partition_workers_stay_one_without_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where fork is missing (or inside a pool worker) even an explicit --jobs runs in this process."""
    import kcompact.fork_pool as pool_module

    monkeypatch.setattr(pool_module, "fork_available", lambda: False)
    assert partition_workers(3, [1] * 5) == 1
    assert partition_workers(None, [1024 * 1024] * 300) == 1


def _recording(monkeypatch: pytest.MonkeyPatch, fail_on: str | None = None) -> None:
    """Make every clean record the ``jobs`` it was given (in its warnings, which come back pickled);
    workers are forked after this, so they inherit the patch."""
    from kcompact.cleaner.workers.bound_clean import clean_partition as original


    def clean_partition(path: Any, config: Any, options: CleanOptions, progress: Any = None,
                        **kwargs: Any) -> CleanResult:
        if fail_on is not None and Path(path).name == fail_on:
            raise RuntimeError(f"bug while cleaning {fail_on}")
        result = original(path, config, replace(options, dry_run=True), progress, **kwargs)
        result.warnings.append(f"jobs={options.jobs}")
        return result

    monkeypatch.setattr(run_module, "clean_partition", clean_partition)


def _jobs_seen(run: CleanRun) -> list[str]:
    return [w for r in run.results for w in r.warnings if w.startswith("jobs=")]


def test_a_pool_gives_each_partition_one_job_and_a_lone_partition_the_callers(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = copy_of(template, tmp_path / "pool")
    (log_dir / CORRUPT).rename(tmp_path / "moved-away")
    _recording(monkeypatch)
    pooled = _jobs_seen(clean(log_dir, 2))
    serial = _jobs_seen(clean(log_dir, 1))
    alone = _jobs_seen(clean(log_dir / "orders-0", 3))
    auto_alone = _jobs_seen(clean(log_dir / "orders-0", None))
    assert (pooled, serial, alone, auto_alone) == (["jobs=1"] * 4, ["jobs=1"] * 4, ["jobs=3"], ["jobs=None"])


def test_a_bug_in_a_worker_is_raised_in_the_parent(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = copy_of(template, tmp_path / "pool")
    _recording(monkeypatch, fail_on="orders-2")
    with pytest.raises(RuntimeError, match="bug while cleaning orders-2"):
        clean(log_dir, 2)


# In a fresh interpreter: a log dir's clean in two forked workers, each noting whether the rounds' passes were
# loaded before its first partition (inherited from this process) or had to be imported there.
POOLED_PASSES = """
import os, sys
from pathlib import Path
import kcompact.cleaner.logdir.run as run
from kcompact.cleaner.round.options import CleanOptions
notes = Path(sys.argv[2])
task = run._pooled_clean_task

def noting(*args, **kwargs):
    with notes.open("a") as out:
        out.write(f"{os.getpid()} {'kcompact.cleaner.workers.parallel' in sys.modules and 'numpy' in sys.modules}\\n")
    return task(*args, **kwargs)

run._pooled_clean_task = noting
done = run.clean_path(Path(sys.argv[1]), cli_overrides={"cleanup.policy": "compact"},
                      options=CleanOptions(now_ms=int(sys.argv[3])), jobs=2)
print(len(done.results), len(done.failures))
"""


@pytest.mark.skipif(not fork_available(), reason="needs fork")
def test_pool_workers_inherit_the_passes_from_the_parent(template: Path, tmp_path: Path) -> None:
    """Loaded once before the fork, not in each worker (numpy alone is about 75 ms of CPU a process)."""
    import subprocess
    import sys

    log_dir = copy_of(template, tmp_path / "pool")
    notes = tmp_path / "notes.txt"
    done = subprocess.run([sys.executable, "-c", POOLED_PASSES, str(log_dir), str(notes), str(NOW)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4", "1"]  # orders-1 is corrupt
    lines = notes.read_text().split("\n")[:-1]
    assert len({line.split()[0] for line in lines}) == 2  # two workers
    assert [line.split()[1] for line in lines] == ["True"] * 5


RANK_PARTITION = run_module.rank_partition  # as the module has it, before any test patches it


def _ranking_in(monkeypatch: pytest.MonkeyPatch, pids: Path, kill_on: str | None = None) -> None:
    """Make every partition's ranking note the process it ran in (one line in ``pids`` each), and the one
    named ``kill_on`` kill that process (SIGKILL) when it is a worker; pools fork after this, so their workers
    inherit the patch."""
    import os
    import signal

    def rank_partition(part_dir: Path, *args: Any) -> Any:
        if part_dir.name == kill_on and os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        with pids.open("a") as out:
            out.write(f"{os.getpid()}\n")
        return RANK_PARTITION(part_dir, *args)

    parent = os.getpid()
    monkeypatch.setattr(run_module, "rank_partition", rank_partition)


@pytest.mark.skipif(not fork_available(), reason="needs fork")
def test_a_ranking_in_workers_gives_the_serial_run(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From RANK_POOL_MIN_PARTITIONS candidates on (lowered here to the template's five), the ranking runs in
    a worker and in this process, and the run is the serial one: the same order, failures, notes and bytes."""
    import os

    monkeypatch.setattr(run_module, "RANK_POOL_MIN_PARTITIONS", 5)
    monkeypatch.setattr(run_module, "RANK_AHEAD", 0)  # the worker holds one at a time: this process takes some
    serial_dir, pooled_dir = copy_of(template, tmp_path / "serial"), copy_of(template, tmp_path / "pool")
    serial_pids, pooled_pids = tmp_path / "serial.pids", tmp_path / "pooled.pids"
    _ranking_in(monkeypatch, serial_pids)
    serial = clean(serial_dir, 1)
    _ranking_in(monkeypatch, pooled_pids)
    pooled = clean(pooled_dir, 2)
    assert comparable(pooled, pooled_dir.parent) == comparable(serial, serial_dir.parent)
    assert digest(pooled_dir) == digest(serial_dir)
    assert [r.partition_dir for r in pooled.results] == [r.partition_dir.replace("/serial/", "/pool/")
                                                          for r in serial.results]
    assert serial_pids.read_text().split() == [str(os.getpid())] * 5
    ranked_in = pooled_pids.read_text().split()
    assert len(ranked_in) == 5 and len(set(ranked_in)) == 2 and str(os.getpid()) in ranked_in  # here and a worker
    # below the threshold, or with --jobs 1, the ranking stays in this process
    monkeypatch.setattr(run_module, "RANK_POOL_MIN_PARTITIONS", 6)
    few_pids = tmp_path / "few.pids"
    _ranking_in(monkeypatch, few_pids)
    clean(copy_of(template, tmp_path / "few"), 2)
    assert few_pids.read_text().split() == [str(os.getpid())] * 5


@pytest.mark.skipif(not fork_available(), reason="needs fork")
def test_a_rank_from_a_worker_comes_without_its_loaded_state(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rank's state stays in the worker (taking it back costs the parent what the round's loading it again
    costs); ranked here, the task keeps it for the round. The order is the same either way."""
    import os

    from kcompact.cleaner.logdir.run import cleaner_order
    from kcompact.config.sources import ConfigSources

    monkeypatch.setattr(run_module, "RANK_POOL_MIN_PARTITIONS", 5)
    monkeypatch.setattr(run_module, "RANK_AHEAD", 0)
    log_dir = copy_of(template, tmp_path / "order")
    sources = ConfigSources(COMPACT, named_alone=False)
    here = cleaner_order(log_dir, sources, CleanOptions(now_ms=NOW), jobs=1)
    pids = tmp_path / "pids"
    _ranking_in(monkeypatch, pids)
    pooled = cleaner_order(log_dir, sources, CleanOptions(now_ms=NOW), jobs=2)
    assert [t.part_dir for t in pooled.tasks] == [t.part_dir for t in here.tasks] and len(here.tasks) == 5
    assert all(t.known is not None for t in here.tasks)
    with_state = [t for t in pooled.tasks if t.known is not None]
    assert 0 < len(with_state) < 5 and len(with_state) == pids.read_text().split().count(str(os.getpid()))
    def state(task: Any) -> Any:  # the producer replay compares by identity
        return replace(task.known.state, producers=None)

    assert [state(t) for t in with_state] == [state(t) for t in here.tasks if t.part_dir in
                                              {w.part_dir for w in with_state}]
    assert [replace(t, known=None) for t in pooled.tasks] == [replace(t, known=None) for t in here.tasks]
    assert pooled.failures == here.failures == [] and pooled.notes == here.notes


@pytest.mark.skipif(not fork_available(), reason="needs fork")
def test_a_ranking_worker_that_dies_fails_its_partition_alone(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_module, "RANK_POOL_MIN_PARTITIONS", 5)
    log_dir = copy_of(template, tmp_path / "pool")
    before = digest(log_dir / "orders-2")
    _ranking_in(monkeypatch, tmp_path / "pids", kill_on="orders-2")
    run = clean(log_dir, 2)
    failures = {Path(f.partition_dir).name: f.error for f in run.failures}
    assert failures.keys() == {"orders-2", CORRUPT}
    assert failures["orders-2"] == (f"{log_dir / 'orders-2'}: the worker process ranking it was killed by signal 9 "
                                    "(SIGKILL); nothing was changed (ranking only reads): clean it again")
    assert digest(log_dir / "orders-2") == before
    assert sorted(Path(r.partition_dir).name for r in run.results) == ["events-0", "events-1", "orders-0"]
    assert all(r.stats.superseded_removed > 0 for r in run.results)


def test_rank_workers_table(monkeypatch: pytest.MonkeyPatch) -> None:
    import kcompact.fork_pool as pool_module

    monkeypatch.setattr(pool_module, "usable_cpus", lambda: 4)
    monkeypatch.setattr(pool_module, "fork_available", lambda: True)
    assert run_module.RANK_POOL_MIN_PARTITIONS == 64
    assert run_module._rank_workers(None, 63) == 1
    assert run_module._rank_workers(None, 64) == 4
    assert run_module._rank_workers(2, 5000) == 2
    assert run_module._rank_workers(1, 5000) == 1
    assert run_module._rank_workers(100_000, 5000) == 4
