"""A real, small file system to fill to the last byte: a tmpfs mounted for one test (``mount -t tmpfs``).

Only root may mount. Where the tests do not run as root the fixture skips with the reason, unless
``KCOMPACT_REQUIRE_FULL_FS=1`` (set by ``.ci/run``, which runs as root) makes that a failure. Nothing is
mocked: a write past the end fails with ``ENOSPC`` from the kernel, as on the broker's full volume.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REQUIRE_FULL_FS = "KCOMPACT_REQUIRE_FULL_FS"
_CHUNKS = (1 << 20, 64 << 10, 4096, 512, 1)  # filling: large writes, then ever smaller ones to the last byte


def free_bytes(path: Path) -> int:
    """What an unprivileged writer may still write on ``path``'s volume (``f_bavail * f_frsize``)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(volume: Path, name: str = "filler") -> Path:
    """Write a file on ``volume`` until the kernel says ENOSPC for a single byte; return it."""
    path = volume / name
    with open(path, "ab", buffering=0) as file:
        for size in _CHUNKS:
            block = b"\0" * size
            while True:
                try:
                    file.write(block)
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
                    break
    assert free_bytes(volume) == 0
    return path


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_FULL_FS) == "1":
        pytest.fail(f"{REQUIRE_FULL_FS}=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``small_volume(size_in_bytes)``: a fresh tmpfs of that size mounted under ``tmp_path``, unmounted at
    teardown. Skips (fails under ``KCOMPACT_REQUIRE_FULL_FS=1``) where mounting is not possible."""
    yield from mounted_volumes(tmp_path)


def mounted_volumes(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """The body of :func:`small_volume`, for a test package that defines the fixture itself."""
    if os.geteuid() != 0:
        _unavailable("mounting a tmpfs needs root (the tests run as another user)")
    mounted: list[Path] = []

    def mount(size_in_bytes: int) -> Path:
        target = tmp_path / f"volume{len(mounted)}"
        target.mkdir(parents=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_in_bytes // 1024}k", "tmpfs",
                               str(target)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            _unavailable(f"mount -t tmpfs failed: {done.stderr.strip() or done.returncode}")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "--lazy", str(target)], check=True)


BROKER_UID = 65534  # nobody: a broker runs unprivileged, and the blocks kept for root are not its


def mounted_ext4_volumes(tmp_path: Path) -> Iterator[Callable[[int, int], Path]]:
    """``mount(size_in_bytes, reserved_percent)``: an ext4 file system in an image file, loop-mounted (root only),
    keeping that share of its blocks for root (``mkfs.ext4 -m``, 5 by default on real volumes), world-writable."""
    if os.geteuid() != 0:
        _unavailable("mounting an ext4 image needs root (the tests run as another user)")
    mounted: list[Path] = []

    def mount(size_in_bytes: int, reserved_percent: int) -> Path:
        image = tmp_path / f"ext4-{len(mounted)}.img"
        target = tmp_path / f"ext4-{len(mounted)}"
        target.mkdir(parents=True)
        with open(image, "wb") as file:
            file.truncate(size_in_bytes)
        for argv in (["mkfs.ext4", "-q", "-m", str(reserved_percent), str(image)],
                     ["mount", "-o", "loop", str(image), str(target)]):
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                _unavailable(f"{argv[0]} failed: {done.stderr.strip() or done.returncode}")
        mounted.append(target)
        target.chmod(0o777)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "--lazy", str(target)], check=True)


def fill_as_broker(volume: Path, name: str = "filler") -> Path:
    """:func:`fill` as an unprivileged user (:data:`BROKER_UID`): what the broker may write is then used up, and
    the blocks the file system keeps for root stay free."""
    pid = os.fork()
    if pid == 0:  # the child drops root and fills; any failure is its exit status
        try:
            os.chdir(volume)  # the test's tmp dirs are root's alone: reached by root, then written by the user
            os.setgid(BROKER_UID)
            os.setuid(BROKER_UID)
            fill(Path("."), name)
            os._exit(0)
        finally:  # the child never returns into the test
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return volume / name
