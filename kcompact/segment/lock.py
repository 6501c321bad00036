"""Locks that keep kcompact away from a live broker and from other kcompact processes.

**The broker's lock.** A running broker holds an exclusive POSIX record lock over the whole of
``<log-dir>/.lock`` (Kafka's ``FileLock.tryLock``: the JVM's ``FileChannel.tryLock`` =
``fcntl(F_SETLK)``). The file stays after shutdown, so its existence says nothing; only the lock
does. We probe and take it the same way, with :func:`fcntl.lockf` — never :func:`fcntl.flock`, which
Linux keeps apart from record locks so a broker would not see it. :func:`log_dir_write_guard` holds
a *shared* lock on ``.lock`` while kcompact writes: other kcompact processes may hold it too, but a
broker starting meanwhile fails its ``tryLock`` and refuses the log dir instead of loading
half-written files. Like the broker, the guard creates ``.lock`` when it is missing (as the log
dir's owner when run as root, so the broker can still open it for writing).

**kcompact's own locks** live in regular files at the top of the log dir, never in a new directory
(Kafka ignores regular files there but fails on a directory whose name it cannot parse) and never
inside a partition directory (Kafka's loader would meet them):

* ``.kcompact-<partition-dir>.lock`` — exclusive, non-blocking: one kcompact process per partition;
* ``.kcompact-checkpoints.lock`` — exclusive, blocking: serialises read-modify-write of the log
  dir's checkpoint files.

One file per lock, named after what it guards, so that distinct partitions can never share a lock
(a single file with a byte range per partition would need a collision-free map from names to
ranges, which 63-bit offsets cannot give for every name). The files exist only while they are held,
so a log dir is left as the broker knows it: the holder unlinks its file *before* it closes it (and
so releases the lock). Deleting a lock file races with a process that opened it just before: that
process may then lock a file no longer at the path, while a third creates and locks a new one. So
every taker, once its lock is granted, compares the inode it holds with the one at the path
(``fstat`` against ``stat``) and starts again when they differ or the path is gone — the usual
protocol for lock files that are removed after use. A kill leaves its file behind, unlocked; the
next taker locks it and removes it, and so do files left by earlier kcompact versions, which kept
them (an earlier version running at the same time does not check the inode, so it may share a
lock with this one: run one version at a time).

POSIX record locks belong to a *process*, and closing any descriptor of a file drops all of the
process's locks on it; each lock file is opened once per holder, and threads of one process are kept
apart by ordinary mutexes, so a process never holds two descriptors of one lock file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kcompact.errors import FileAccessError, KcompactError, RefusedError
from kcompact.value import mutable

BROKER_LOCK_FILE = ".lock"
CHECKPOINT_LOCK_FILE = ".kcompact-checkpoints.lock"
PARTITION_LOCK_PREFIX = ".kcompact-"
PARTITION_LOCK_SUFFIX = ".lock"

_BUSY = (errno.EACCES, errno.EAGAIN)
_REMOVABLE_ATTEMPTS = 100  # non-blocking: each retry means another process released the lock meanwhile


@mutable
class _SharedHold:
    """This process's shared lock on one ``.lock`` file and how many guards use it."""

    fd: int
    holders: int = 0


_registry_lock = threading.Lock()
_shared_holds: dict[str, _SharedHold] = {}
_mutexes: dict[str, threading.Lock] = {}


def _key(path: Path) -> str:
    return str(path.parent.resolve() / path.name)


def _mutex(key: str) -> threading.Lock:
    with _registry_lock:
        return _mutexes.setdefault(key, threading.Lock())


def _open_lock_file(path: Path, *, writable: bool = True) -> int:
    """Open (creating when missing) a lock file; read-only for a shared lock (``writable=False``).

    A file found by the exclusive create may be removed by its holder before we open it (lock files
    exist only while held): then we create it after all.

    Raises:
        FileAccessError: the file is not there and the log dir refuses to create it (read-only, not
            this user's).
        RefusedError: the file cannot be opened otherwise (another user's, a missing log dir …).
    """
    try:
        while True:  # each turn means another process released the lock and removed its file meanwhile
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            except FileExistsError:
                existing = _open_existing(path, writable=writable)
                if existing is None:
                    continue  # its holder removed it between our two opens
                return existing
            if os.geteuid() == 0:  # hand a file we created to the log dir's owner (the broker's user)
                owner = os.stat(path.parent)
                os.fchown(fd, owner.st_uid, owner.st_gid)
            return fd
    except OSError as err:
        raise _lock_file_refusal(path, err) from err


def _lock_file_refusal(path: Path, err: OSError) -> KcompactError:
    """Why a lock file could not be opened: a log dir that refuses a new file (read-only, not this
    user's), or a file that is there but may not be opened (another user's kcompact left it)."""
    reason = err.strerror or str(err)
    exists = os.path.lexists(path)
    if not exists and (isinstance(err, PermissionError) or err.errno == errno.EROFS):
        return FileAccessError(path.parent, "write", reason)  # the create failed: the log dir refuses it
    if exists and isinstance(err, PermissionError):
        return RefusedError(f"cannot open lock file {path}: {reason} (a file another user's kcompact "
                            "left? remove it if no kcompact is running)", path=path)
    return RefusedError(f"cannot open lock file {path}: {reason}", path=path)


def _open_existing(path: Path, *, writable: bool) -> int | None:
    """Open a lock file that exists; None when it has gone.

    An exclusive (write) lock needs a descriptor open for writing, so a file we may not write is a
    refusal (``PermissionError``) for an exclusive taker; a shared taker (the broker's ``.lock``) reads.
    """
    try:
        return os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def _try_lock(fd: int, operation: int) -> bool:
    try:
        fcntl.lockf(fd, operation | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in _BUSY:
            return False
        raise
    return True


def broker_holds_lock(log_dir: str | os.PathLike[str]) -> bool:
    """Whether a running broker (any process) holds ``<log_dir>/.lock`` exclusively.

    Args:
        log_dir: one of the broker's ``log.dirs``.

    Returns:
        True when the exclusive lock is held; False when ``.lock`` is missing or unlocked (a stopped
        broker leaves the file behind), or when this process itself guards the log dir.

    Raises:
        RefusedError: ``.lock`` exists but cannot be opened, so a broker cannot be ruled out.
    """
    path = Path(log_dir) / BROKER_LOCK_FILE
    key = _key(path)
    with _registry_lock:
        if key in _shared_holds:
            return False  # our own shared lock excludes a broker; closing a probe fd would drop it
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError as err:
            raise RefusedError(f"cannot check {path} for a running broker: {err.strerror}", path=path) from err
        try:
            return not _try_lock(fd, fcntl.LOCK_SH)
        finally:
            os.close(fd)  # also releases the probe's lock


@contextmanager
def log_dir_write_guard(log_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Refuse to run next to a live broker, and keep one from starting while kcompact writes.

    Args:
        log_dir: the log dir kcompact is about to modify.

    Yields:
        Nothing; the shared lock on ``<log_dir>/.lock`` is held until the block exits. Guards
        nest and may be held by several threads and processes at once.

    Raises:
        RefusedError: a broker holds ``.lock``, or ``.lock`` cannot be opened or created.
    """
    path = Path(log_dir) / BROKER_LOCK_FILE
    key = _key(path)
    with _registry_lock:
        hold = _shared_holds.get(key)
        if hold is None:
            fd = _open_lock_file(path, writable=False)
            if not _try_lock(fd, fcntl.LOCK_SH):
                os.close(fd)
                raise RefusedError(
                    f"{path} is held by a running Kafka broker; stop it or work on a copy", path=path
                )
            hold = _shared_holds[key] = _SharedHold(fd)
        hold.holders += 1
    try:
        yield
    finally:
        with _registry_lock:
            hold.holders -= 1
            if hold.holders == 0:
                del _shared_holds[key]
                os.close(hold.fd)


def partition_lock_path(log_dir: str | os.PathLike[str], partition_dir_name: str) -> Path:
    """Where :func:`partition_lock` keeps its lock (``.kcompact-<partition_dir_name>.lock``).

    Args:
        log_dir: the log dir holding the partition.
        partition_dir_name: the partition directory's name.

    Returns:
        ``<log_dir>/.kcompact-<partition_dir_name>.lock``.

    Raises:
        ValueError: ``partition_dir_name`` is not a plain directory name.
    """
    if not partition_dir_name or os.sep in partition_dir_name or partition_dir_name in (".", ".."):
        raise ValueError(f"expected a partition directory name; found {partition_dir_name!r}")
    return Path(log_dir) / f"{PARTITION_LOCK_PREFIX}{partition_dir_name}{PARTITION_LOCK_SUFFIX}"


@contextmanager
def partition_lock(log_dir: str | os.PathLike[str], partition_dir_name: str) -> Iterator[None]:
    """Make sure no other kcompact process (or thread) works on this partition; never waits.

    Args:
        log_dir: the log dir holding the partition.
        partition_dir_name: the partition directory's name, e.g. ``orders-3``.

    Yields:
        Nothing; the lock is held until the block exits, and its file removed then.

    Raises:
        RefusedError: another kcompact process or thread holds it, or the lock file cannot be
            opened.
        ValueError: ``partition_dir_name`` is not a plain directory name.
    """
    path = partition_lock_path(log_dir, partition_dir_name)
    refused = RefusedError(
        f"another kcompact process is working on {partition_dir_name} in {log_dir} "
        f"(it holds {path.name})", path=Path(log_dir) / partition_dir_name
    )
    mutex = _mutex(_key(path))
    if not mutex.acquire(blocking=False):
        raise refused
    try:
        fd = _take_removable_lock(path, blocking=False)
        if fd is None:
            raise refused
        try:
            yield
        finally:
            _release_removable_lock(path, fd)
    finally:
        mutex.release()


@contextmanager
def checkpoint_lock(log_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Serialise kcompact's read-modify-write of the log dir's checkpoint files; waits its turn.

    Args:
        log_dir: the log dir whose checkpoint files are about to be rewritten.

    Yields:
        Nothing; the exclusive lock on ``<log_dir>/.kcompact-checkpoints.lock`` is held until exit,
        and the file removed then.

    Raises:
        RefusedError: the lock file cannot be opened or created.
    """
    path = Path(log_dir) / CHECKPOINT_LOCK_FILE
    with _mutex(_key(path)):
        fd = _take_removable_lock(path, blocking=True)
        if fd is None:  # pragma: no cover - a blocking lock is granted or raises
            raise RefusedError(f"cannot lock {path}", path=path)
        try:
            yield
        finally:
            _release_removable_lock(path, fd)


def _take_removable_lock(path: Path, *, blocking: bool) -> int | None:
    """Lock the file at ``path`` exclusively, creating it when missing (see the module docstring).

    A blocking taker may lock a file its holder has just removed any number of times while others
    take their turns before it (each time one of them made progress), so it tries until it holds the
    file at ``path``; a non-blocking one gives up after :data:`_REMOVABLE_ATTEMPTS` such turns.

    Returns:
        The descriptor holding the lock on the file that is at ``path`` now; None when ``blocking``
        is false and another process holds it.

    Raises:
        RefusedError: the file cannot be opened, or (non-blocking) kept being replaced under us.
    """
    attempt = 0
    while blocking or attempt < _REMOVABLE_ATTEMPTS:
        attempt += 1
        fd = _open_lock_file(path)
        try:
            if blocking:
                fcntl.lockf(fd, fcntl.LOCK_EX)
            elif not _try_lock(fd, fcntl.LOCK_EX):
                os.close(fd)
                return None
            if _is_at(fd, path):
                return fd
        except OSError as err:  # ENOLCK (a file system without record locks), …
            os.close(fd)
            raise RefusedError(f"cannot lock {path}: {err.strerror or err}", path=path) from err
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # we locked a file its holder removed on release: take the one there now
    raise RefusedError(f"{path}: the lock file kept being replaced; is another kcompact looping on it?")


def _is_at(fd: int, path: Path) -> bool:
    """Whether the file open as ``fd`` is the one at ``path`` (not unlinked or replaced since)."""
    held = os.fstat(fd)
    try:
        current = os.stat(path)
    except FileNotFoundError:
        return False
    return (held.st_dev, held.st_ino) == (current.st_dev, current.st_ino)


def _release_removable_lock(path: Path, fd: int) -> None:
    """Remove the lock file, then release the lock by closing it (in this order: module docstring)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # a file left behind is harmless: the next taker locks and removes it
    finally:
        os.close(fd)


def clear_abandoned_locks(log_dir: str | os.PathLike[str], partition_dir_name: str) -> list[str]:
    """Remove the lock files a dead process left for this partition: its partition lock, and the log
    dir's checkpoint lock when nobody holds it.

    The kernel released the dead process's record locks; only the files are left (see the module
    docstring). Each is taken without waiting and removed as its holder would: a file another process
    holds now is that holder's, and it removes it when done.

    Args:
        log_dir: the log dir holding the partition.
        partition_dir_name: the partition directory's name.

    Returns:
        The names of the files removed (none when the dead process held no lock).
    """
    removed = []
    for path in (partition_lock_path(log_dir, partition_dir_name), Path(log_dir) / CHECKPOINT_LOCK_FILE):
        mutex = _mutex(_key(path))
        if not os.path.lexists(path) or not mutex.acquire(blocking=False):
            continue  # no file, or a thread of this process holds it (and removes it when done)
        try:
            fd = _take_removable_lock(path, blocking=False)
            if fd is not None:
                _release_removable_lock(path, fd)
                removed.append(path.name)
        except KcompactError:
            pass  # it cannot be opened: left as it is (the next taker says why)
        finally:
            mutex.release()
    return removed


def clean_in_progress(partition_dir: str | os.PathLike[str]) -> str | None:
    """What shows a kcompact clean at work on a partition (or one that was interrupted), None when nothing.

    Probes ``.kcompact-<partition>.lock`` with a shared record lock, which fails while another process
    holds it (and never probes a lock this process holds), then looks for ``.cleaned`` / ``.swap``
    files, which exist only while a clean swaps its output in (or after one was killed doing so).

    Args:
        partition_dir: the partition directory.

    Returns:
        One phrase naming the evidence (``"another kcompact holds .kcompact-orders-0.lock"``), or None.
    """
    directory = Path(partition_dir)
    try:
        path = partition_lock_path(directory.parent, directory.name)
    except ValueError:
        return None
    if not _mutex(_key(path)).locked() and _held_elsewhere(path):
        return f"another kcompact holds {path.name}"
    try:
        swapping = sorted(p.name for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap")))
    except OSError:
        return None
    return f"{swapping[0]} is there (a clean swaps its output in through such files)" if swapping else None


def _held_elsewhere(path: Path) -> bool:
    """Whether another process holds the exclusive lock on the lock file at ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file: nobody holds it
    try:
        return not _try_lock(fd, fcntl.LOCK_SH)
    except OSError:
        return False
    finally:
        os.close(fd)


def explain_vanished(err: KcompactError) -> KcompactError:
    """A file that vanished while it was read because a clean replaced it, said as that clean, retry-able.

    Read-only commands take no lock, so a ``kcompact clean`` running beside them may swap a segment out
    between its listing and its read: the OS then says "No such file or directory" of a file that was
    there a moment ago. Where the partition shows a clean at work (:func:`clean_in_progress`), that is
    the error to give; any other error is returned as it is.

    Args:
        err: the error a read-only command met.

    Returns:
        A :class:`RefusedError` naming the partition and the clean, or ``err`` itself.
    """
    if not isinstance(err, FileAccessError) or err.reason != os.strerror(errno.ENOENT):
        return err
    vanished = Path(err.path)
    for candidate in (vanished.parent, vanished):
        evidence = clean_in_progress(candidate) if candidate.is_dir() else None
        if evidence is not None:
            return RefusedError(f"{candidate}: a kcompact clean is working on this partition ({evidence}); "
                                f"{vanished.name} changed while it was read: run the command again once the "
                                "clean is done", path=candidate)
    return err
