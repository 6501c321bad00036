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
