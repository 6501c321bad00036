"""``run_in_pool``: outcomes in the items' order, progress relayed, a bug re-raised, and a worker that
dies costs only the item it held."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from kcompact.cleaner.workers.pool import WorkerDeath, run_in_pool
from kcompact.segment.lock import clear_abandoned_locks, partition_lock, partition_lock_path


def square_or_die(item: int, report: object) -> int:
    if item == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    if item == 5:
        os._exit(7)
    return item * item


def test_a_dead_worker_costs_only_its_item() -> None:
    deaths: list[tuple[int, str]] = []

    def died(item: int, death: WorkerDeath) -> int:
        deaths.append((item, death.describe()))
        return -1

    outcomes = run_in_pool(list(range(8)), square_or_die, 2, None, died)
    assert outcomes == [0, 1, 4, -1, 16, -1, 36, 49]
    assert sorted(deaths) == [(3, "killed by signal 9 (SIGKILL)"),
                              (5, "exited with status 7 before it gave a result")]


def test_progress_is_relayed_in_this_process() -> None:
    seen: list[tuple[str, int, int]] = []

    def work(item: int, report: object) -> int:
        assert callable(report)
        report(f"p{item}", item, 10)
        return item

    parent = os.getpid()
    assert run_in_pool([1, 2, 3], work, 2, lambda *args: seen.append(args), lambda i, d: -1) == [1, 2, 3]
    assert sorted(seen) == [("p1", 1, 10), ("p2", 2, 10), ("p3", 3, 10)]
    assert os.getpid() == parent


def test_a_bug_in_work_is_raised_here() -> None:
    def work(item: int, report: object) -> int:
        if item == 1:
            raise ZeroDivisionError("a bug")
        return item

    with pytest.raises(ZeroDivisionError, match="a bug"):
        run_in_pool([0, 1, 2, 3], work, 2, None, lambda i, d: -1)


def test_the_locks_a_killed_process_left_are_removed(tmp_path: Path) -> None:
    (tmp_path / "orders-0").mkdir()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: take the lock, and die holding it
        with partition_lock(tmp_path, "orders-0"):
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    path = partition_lock_path(tmp_path, "orders-0")
    assert path.exists()
    assert clear_abandoned_locks(tmp_path, "orders-0") == [path.name]
    assert not path.exists()
    with partition_lock(tmp_path, "orders-0"):  # and it is free
        assert clear_abandoned_locks(tmp_path, "orders-0") == []  # held by this process: left to it
        assert path.exists()


def test_an_error_here_lets_busy_workers_end_without_a_hang() -> None:
    def work(item: int, report: object) -> bytes:
        assert callable(report)
        report("p", item, 1)
        return b"x" * 1_000_000  # more than a pipe holds: a worker blocks until it is read

    def progress(name: str, done: int, total: int) -> None:
        raise KeyError("the progress view broke")

    with pytest.raises(KeyError, match="the progress view broke"):
        run_in_pool(list(range(6)), work, 2, progress, lambda i, d: b"")
