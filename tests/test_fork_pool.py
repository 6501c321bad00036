"""``run_in_pool``: outcomes in the items' order, progress relayed, a bug re-raised, and a worker that
dies costs only the item it held. ``stream_in_pool``: outcomes in order as they are taken, and a
worker that dies is an error at its item's place, never a wait for ever."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from kcompact.fork_pool import WorkerDeath, run_in_pool, stream_in_pool
from kcompact.segment.lock import clear_abandoned_locks, partition_lock, partition_lock_path


def square_or_die(item: int, report: object) -> int:
    if item == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    if item == 5:
        os._exit(7)
    return item * item


@pytest.mark.parametrize("ahead", [0, 1, 3])
def test_a_dead_worker_costs_only_its_item(ahead: int) -> None:
    """Also where each worker holds items beyond its own (``ahead``): those a dead worker held and had not
    started are done by another."""
    deaths: list[tuple[int, str]] = []

    def died(item: int, death: WorkerDeath) -> int:
        deaths.append((item, death.describe()))
        return -1

    outcomes = run_in_pool(list(range(8)), square_or_die, 2, None, died, ahead=ahead)
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


class Died(Exception):
    pass


def died_error(item: int, death: WorkerDeath) -> BaseException:
    return Died(f"item {item}: {death.describe()}")


def test_a_stream_yields_in_order_and_a_dead_worker_fails_at_its_item(tmp_path: Path) -> None:
    started = tmp_path / "started"
    started.mkdir()

    def work(item: int) -> int:
        (started / str(item)).touch()
        if item == 4:
            os.kill(os.getpid(), signal.SIGKILL)
        return item * item

    taken: list[int] = []
    with pytest.raises(Died, match=r"^item 4: killed by signal 9 \(SIGKILL\)$"):
        taken.extend(stream_in_pool(list(range(40)), work, 2, died_error, ahead=1))
    assert taken == [0, 1, 4, 9]  # every item before the dead one, as a serial loop would
    assert max(int(p.name) for p in started.iterdir()) < 4 + 2 * 2  # no item started long after it
    assert multiprocessing.active_children() == []


def test_a_stream_raises_a_work_error_at_its_place() -> None:
    def work(item: int) -> int:
        if item in (3, 6):
            raise ValueError(f"bad item {item}")
        return item

    taken: list[int] = []
    with pytest.raises(ValueError, match="bad item 3"):
        taken.extend(stream_in_pool(list(range(10)), work, 2, died_error, ahead=2))
    assert taken == [0, 1, 2]
    assert multiprocessing.active_children() == []


def test_a_stream_closed_early_ends_its_busy_workers_at_once() -> None:
    def work(item: int) -> int:
        if item > 0:
            time.sleep(60)
        return item

    begun = time.monotonic()
    stream = stream_in_pool(list(range(10)), work, 2, died_error, ahead=2)
    assert next(stream) == 0
    stream.close()
    assert multiprocessing.active_children() == []
    assert time.monotonic() - begun < 30


def pid_of(item: int, report: object) -> tuple[int, int]:
    return item, os.getpid()


def test_with_here_this_process_takes_items_beside_the_workers() -> None:
    """``here``: ``workers - 1`` forks, and this process takes the next item whenever it does not wait on one;
    the outcomes are in the items' order whoever made them."""
    parent = os.getpid()
    outcomes = run_in_pool(list(range(40)), pid_of, 2, None, lambda i, d: (-1, -1),
                           here=lambda item: (item, parent))
    assert [item for item, _ in outcomes] == list(range(40))
    makers = {pid for _, pid in outcomes}
    assert parent in makers and len(makers) == 2  # this process and one worker


def test_with_here_a_dead_worker_still_costs_only_its_item() -> None:
    parent = os.getpid()
    outcomes = run_in_pool(list(range(8)), square_or_die, 2, None, lambda i, d: -1, ahead=3,
                           here=lambda item: square_or_die(item, None) if item not in (3, 5) else -1)
    assert outcomes == [0, 1, 4, -1, 16, -1, 36, 49]
    assert os.getpid() == parent


def test_with_here_an_error_here_ends_the_workers_and_is_raised() -> None:
    def here(item: int) -> int:
        raise ZeroDivisionError("a bug here")

    with pytest.raises(ZeroDivisionError, match="a bug here"):
        run_in_pool(list(range(20)), square_or_die, 2, None, lambda i, d: -1, here=here)
    assert multiprocessing.active_children() == []



def pid_or_die(item: int, report: object) -> tuple[int, int]:
    if item == 3:
        os._exit(7)
    return item, os.getpid()


def test_taken_sees_each_outcome_a_worker_gave_once_in_this_process() -> None:
    """``taken``: called in this process, once for each outcome a worker gave; not for the outcomes ``here``
    made, nor for a dead worker's (``died``'s)."""
    parent = os.getpid()
    taken: list[tuple[tuple[int, int], int]] = []  # the outcome, the process that took it
    outcomes = run_in_pool(list(range(30)), pid_or_die, 2, None, lambda item, death: (item, -1), ahead=1,
                           here=lambda item: (item, parent),
                           taken=lambda one: taken.append((one, os.getpid())))
    assert [item for item, _pid in outcomes] == list(range(30))
    from_workers = [one for one in outcomes if one[1] not in (parent, -1)]
    assert from_workers and sorted(one for one, _pid in taken) == from_workers
    assert {pid for _one, pid in taken} == {parent}
    taken.clear()
    outcomes = run_in_pool(list(range(8)), pid_or_die, 2, None, lambda item, death: (item, -1), ahead=1,
                           taken=lambda one: taken.append((one, os.getpid())))
    assert outcomes[3] == (3, -1) and sorted(one for one, _pid in taken) == outcomes[:3] + outcomes[4:]
