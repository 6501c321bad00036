"""The live-broker guard and kcompact's own locks, tested across real processes.

POSIX record locks are per process, so the "broker" (and the competing kcompact) is always a child
process: a tiny Python snippet that takes ``fcntl.lockf`` the way the JVM's ``FileChannel.tryLock``
does.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kcompact.errors import RefusedError
from kcompact.segment.lock import (
    broker_holds_lock,
    checkpoint_lock,
    log_dir_write_guard,
    partition_lock,
    partition_lock_path,
)
from tests.conftest import REPO_ROOT

# Holds an exclusive record lock on argv[1] (created if missing) until its stdin closes.
_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""

# A broker starting up: tries the exclusive lock without waiting, reports, exits.
_TRY_EXCLUSIVE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    print("refused")
else:
    print("acquired")
"""

# Another kcompact process asking for a partition lock.
_OTHER_KCOMPACT = """
import sys
from kcompact.errors import RefusedError
from kcompact.segment.lock import partition_lock
try:
    with partition_lock(sys.argv[1], sys.argv[2]):
        print("acquired")
except RefusedError as err:
    print("refused:", err)
"""


@contextmanager
def held_by_child(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` held by another process for the duration of the block."""
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        yield
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)


def run_child(snippet: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", snippet, *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO_ROOT,
        check=True,
    )
    return done.stdout.strip()


def test_no_broker_without_a_lock_file(tmp_path: Path) -> None:
    assert broker_holds_lock(tmp_path) is False
    assert not (tmp_path / ".lock").exists()  # probing creates nothing


def test_lock_file_left_by_a_stopped_broker_means_nothing(tmp_path: Path) -> None:
    (tmp_path / ".lock").touch()
    assert broker_holds_lock(tmp_path) is False
    with log_dir_write_guard(tmp_path):
        pass


def test_running_broker_is_detected_and_refused(tmp_path: Path) -> None:
    with held_by_child(tmp_path / ".lock"):
        assert broker_holds_lock(tmp_path) is True
        with pytest.raises(RefusedError) as info, log_dir_write_guard(tmp_path):
            pytest.fail("the guard let us in next to a live broker")
        assert str(info.value) == (
            f"{tmp_path / '.lock'} is held by a running Kafka broker; stop it or work on a copy"
        )
    assert broker_holds_lock(tmp_path) is False


def test_guard_creates_the_lock_file_and_keeps_a_broker_from_starting(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    with log_dir_write_guard(tmp_path):
        assert lock.is_file()
        assert run_child(_TRY_EXCLUSIVE, str(lock)) == "refused"
    assert run_child(_TRY_EXCLUSIVE, str(lock)) == "acquired"


def test_guards_nest_and_probing_inside_one_does_not_drop_it(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    with log_dir_write_guard(tmp_path):
        with log_dir_write_guard(tmp_path):
            assert broker_holds_lock(tmp_path) is False
        # The inner guard's exit and the probe must leave the outer guard's lock in place.
        assert run_child(_TRY_EXCLUSIVE, str(lock)) == "refused"
    assert run_child(_TRY_EXCLUSIVE, str(lock)) == "acquired"


def test_two_kcompact_processes_may_guard_the_same_log_dir(tmp_path: Path) -> None:
    guard_in_child = (
        "import sys\nfrom kcompact.segment.lock import log_dir_write_guard\n"
        "with log_dir_write_guard(sys.argv[1]):\n    print('guarded')\n"
    )
    with log_dir_write_guard(tmp_path):
        assert run_child(guard_in_child, str(tmp_path)) == "guarded"


def test_partition_lock_excludes_another_process(tmp_path: Path) -> None:
    with partition_lock(tmp_path, "orders-3"):
        answer = run_child(_OTHER_KCOMPACT, str(tmp_path), "orders-3")
        assert answer.startswith("refused: another kcompact process is working on orders-3")
        assert run_child(_OTHER_KCOMPACT, str(tmp_path), "orders-4") == "acquired"
    assert run_child(_OTHER_KCOMPACT, str(tmp_path), "orders-3") == "acquired"


def test_partition_lock_refuses_when_another_process_holds_it(tmp_path: Path) -> None:
    with (
        held_by_child(partition_lock_path(tmp_path, "orders-3")),
        pytest.raises(RefusedError, match="another kcompact process is working on orders-3"),
        partition_lock(tmp_path, "orders-3"),
    ):
        pytest.fail("two holders of one partition lock")


def test_partition_lock_excludes_a_second_holder_in_this_process(tmp_path: Path) -> None:
    with partition_lock(tmp_path, "orders-3"):
        with (
            pytest.raises(RefusedError, match="working on orders-3"),
            partition_lock(tmp_path, "orders-3"),
        ):
            pass
        # The refused attempt must not have released the first holder's lock.
        assert run_child(_OTHER_KCOMPACT, str(tmp_path), "orders-3").startswith("refused")


def test_locks_are_regular_files_at_the_top_of_the_log_dir_removed_on_release(tmp_path: Path) -> None:
    with (
        log_dir_write_guard(tmp_path),
        partition_lock(tmp_path, "orders-3"),
        checkpoint_lock(tmp_path),
    ):
        entries = sorted(p.name for p in tmp_path.iterdir())
        assert entries == [".kcompact-checkpoints.lock", ".kcompact-orders-3.lock", ".lock"]
        assert all((tmp_path / name).is_file() for name in entries)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock"]  # the broker's own, as it left it
    with pytest.raises(ValueError, match="partition directory name"):
        partition_lock_path(tmp_path, "../elsewhere")


def test_a_lock_file_left_by_a_killed_or_older_kcompact_is_taken_and_removed(tmp_path: Path) -> None:
    stale = [partition_lock_path(tmp_path, "orders-3"), tmp_path / ".kcompact-checkpoints.lock"]
    for path in stale:
        path.touch()  # unlocked: its process is gone
    with partition_lock(tmp_path, "orders-3"), checkpoint_lock(tmp_path):
        assert run_child(_OTHER_KCOMPACT, str(tmp_path), "orders-3").startswith("refused")
    assert not any(path.exists() for path in stale)


def test_a_lock_file_replaced_before_our_lock_took_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder we raced released (removing the file) and another process created a new one between
    our open and our lock: we locked a file nobody else will open again, so we must go again."""
    path = partition_lock_path(tmp_path, "orders-3")
    real_lockf = fcntl.lockf
    replaced: list[int] = []

    def lockf_after_a_release(fd: int, operation: int, *args: int) -> object:
        if not replaced:
            replaced.append(os.fstat(fd).st_ino)
            path.unlink()  # the holder releases: unlink, then close
            path.touch()  # a newcomer creates the file again (and is slower to lock it)
        return real_lockf(fd, operation, *args)

    monkeypatch.setattr(fcntl, "lockf", lockf_after_a_release)  # the module kcompact.segment.lock calls
    with partition_lock(tmp_path, "orders-3"):
        assert replaced and path.stat().st_ino != replaced[0]
        assert run_child(_OTHER_KCOMPACT, str(tmp_path), "orders-3").startswith("refused")
    assert not path.exists()


def test_a_lock_file_removed_between_our_two_opens_is_created_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our exclusive create finds the holder's file, which the holder removes (on release) before we open
    it: that is no refusal, the file is simply created again (under load this failed a checkpoint update)."""
    path = tmp_path / ".kcompact-checkpoints.lock"
    path.touch()  # a holder's file
    real_open = os.open
    removed: list[bool] = []

    def open_racing_a_release(file: str | os.PathLike[str], flags: int, *args: int) -> int:
        if Path(file) == path and flags & os.O_EXCL and not removed:
            try:
                return real_open(file, flags, *args)
            finally:
                removed.append(True)
                path.unlink()  # the holder releases between our two opens
        return real_open(file, flags, *args)

    monkeypatch.setattr(os, "open", open_racing_a_release)
    with checkpoint_lock(tmp_path):
        assert removed and path.exists()
    assert not path.exists()


def test_a_blocking_taker_outlasts_any_number_of_released_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint-lock waiter that keeps locking files their holders removed (each time another process
    took its turn first) waits on; a non-blocking partition lock gives up after a bounded number of turns."""
    from kcompact.segment import lock

    turns = {"left": 3 * lock._REMOVABLE_ATTEMPTS}
    real_is_at = lock._is_at

    def removed_for_a_while(fd: int, path: Path) -> bool:
        turns["left"] -= 1
        return turns["left"] < 0 and real_is_at(fd, path)

    monkeypatch.setattr(lock, "_is_at", removed_for_a_while)
    with checkpoint_lock(tmp_path):
        assert turns["left"] == -1
    turns["left"] = 3 * lock._REMOVABLE_ATTEMPTS
    with pytest.raises(RefusedError, match="kept being replaced"), partition_lock(tmp_path, "orders-3"):
        pass


# Holds kcompact's checkpoint lock until stdin closes, then releases it as kcompact does.
_CHECKPOINT_HOLDER = """
import sys
from kcompact.segment.lock import checkpoint_lock
with checkpoint_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()
"""


def test_a_checkpoint_lock_waiter_follows_the_file_its_holder_removed(tmp_path: Path) -> None:
    """The waiter's lock is granted on the file the holder unlinked on release: it must lock the file
    now at the path (a new one), or a third process could hold that one at the same time."""
    seen: list[bool] = []
    holder = subprocess.Popen([sys.executable, "-c", _CHECKPOINT_HOLDER, str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"

    def take() -> None:
        with checkpoint_lock(tmp_path):
            seen.append((tmp_path / ".kcompact-checkpoints.lock").exists())

    waiter = threading.Thread(target=take)
    waiter.start()
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(timeout=10)
    waiter.join(timeout=10)
    assert seen == [True] and not (tmp_path / ".kcompact-checkpoints.lock").exists()


def test_checkpoint_lock_waits_for_another_process(tmp_path: Path) -> None:
    acquired = threading.Event()

    def take() -> None:
        with checkpoint_lock(tmp_path):
            acquired.set()

    with held_by_child(tmp_path / ".kcompact-checkpoints.lock"):
        waiter = threading.Thread(target=take)
        waiter.start()
        assert not acquired.wait(0.3)  # blocked while the other process holds it
    assert acquired.wait(10)
    waiter.join()


def test_checkpoint_lock_serialises_threads(tmp_path: Path) -> None:
    inside, overlaps = [0], []

    def work() -> None:
        for _ in range(20):
            with checkpoint_lock(tmp_path):
                inside[0] += 1
                overlaps.append(inside[0])
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [1] * 80


def test_a_lock_file_that_cannot_be_opened_is_a_refusal(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-log-dir"
    refused = "cannot open lock file .*No such file"
    with pytest.raises(RefusedError, match=refused), log_dir_write_guard(missing):
        pass
    with pytest.raises(RefusedError, match=refused), partition_lock(missing, "orders-3"):
        pass
    with pytest.raises(RefusedError, match="cannot open lock file"), checkpoint_lock(missing):
        pass
