"""After a clean's first round, a block of a pass 2 window's size comes from glibc's heap, not from a fresh memory
map (``parallel._windows_from_the_heap``): a clean of many small compressed partitions otherwise faulted in and
zeroed every window's pages anew.

Each check runs in a fresh interpreter, whose malloc has seen nothing of this test process's allocations; what
it reads is glibc's own account (``mallinfo2``: the bytes held in mapped blocks).
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import PartitionBuilder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallinfo2"),
                                reason="glibc's mallinfo2 is not here (not glibc, or older than 2.33)")

_CHILD = """
import ctypes, sys
from pathlib import Path

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2

def mapped_by_a_window_block():
    from kcompact.cleaner.round.record_filter import RUN_BYTES
    before = libc.mallinfo2().hblkhd
    block = bytes(RUN_BYTES)  # what a window's decompressed records or output may take
    mapped = libc.mallinfo2().hblkhd - before
    del block
    return mapped

if sys.argv[1] == "clean":
    from kcompact.cleaner.round.options import CleanOptions
    from kcompact.cleaner.workers.bound_clean import clean_partition
    from kcompact.config.topic_config import defaults_with_overrides
    config = defaults_with_overrides({"cleanup.policy": "compact"})
    clean_partition(Path(sys.argv[2]), config, CleanOptions(now_ms=1 << 50, jobs=1))
print(mapped_by_a_window_block())
"""


def _mapped(*args: str) -> int:
    done = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[3])
    return int(done.stdout.split()[-1])


def test_a_window_sized_block_is_mapped_afresh_in_a_process_that_has_not_cleaned() -> None:
    assert _mapped("none") > 0  # the check can fail: glibc maps such a block by default


def test_after_a_round_a_window_sized_block_comes_from_the_heap(tmp_path: Path) -> None:
    b = PartitionBuilder("orders")
    for round_ in range(4):
        b.batch([(b"k%d" % (i % 50), b"v%d-%d" % (round_, i) * 20) for i in range(200)], compression=3)
    b.roll()
    b.batch([(b"k0", b"last")])
    part = b.write(tmp_path)
    assert _mapped("clean", str(part)) == 0
