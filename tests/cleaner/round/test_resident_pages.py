"""A clean holds a window of a large segment resident, not the whole segment: its peak RSS does not grow with the
segment size (Kafka's default segment is 1 GiB), with ``--jobs 1`` and on the default's two threads alike. The
walks that read a whole file — the load's, both passes', a range's walk to its start, the self-check of the
output — let the pages behind them go, the C runs and the batch-by-batch walks alike (the latter are what
transactional data, e.g. Kafka Streams' compacted changelogs under exactly-once, goes through). The two threads
hold little more than one: a second window and about one chunk's output waiting to be appended."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.partition_builder import PartitionBuilder

_CHILD = """
import sys
from kcompact.cli.main import main
if sys.argv[1] == "threads":  # jobs=None's two threads, whatever the machine's load
    from kcompact.cleaner.workers import parallel
    parallel._room_for_threads = lambda: True
    ran = parallel.run_two_threads
    def counted(*args, **kwargs):
        print("on two threads", file=sys.stderr)
        return ran(*args, **kwargs)
    parallel.run_two_threads = counted
del sys.argv[1]
sys.argv = ["kcompact", *sys.argv[1:]]

def peak():
    status = open("/proc/self/status").read()
    print(status.split("VmHWM:")[1].split()[0], file=sys.stderr, flush=True)  # this process's own peak, KiB

import os
me, end = os.getpid(), os._exit
def measured_end(code):  # a clean ends without teardown (options.end_without_teardown): read the peak there
    if os.getpid() == me:  # not a forked worker's end
        peak()
    end(code)
os._exit = measured_end
try:
    main()
except SystemExit as done:
    code = done.code
peak()
sys.exit(code)
"""


def _peak_of_clean(part: Path, runner: str, cwd: Path) -> int:
    """The peak RSS (bytes) of ``kcompact clean`` of ``part`` in a process of its own: ``--jobs 1`` ("one"),
    or the default forced onto its two threads ("threads")."""
    size = (part / "00000000000000000000.log").stat().st_size
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, runner, "clean", "--json", "--config", "cleanup.policy=compact",
         *(["--jobs", "1"] if runner == "one" else []), str(part)],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "100"}, cwd=cwd, check=False)
    assert done.returncode == 0, done.stderr
    assert ("on two threads" in done.stderr) == (runner == "threads")
    assert (part / "00000000000000000000.log").stat().st_size < size / 2  # cleaned: a key in four kept
    return int(done.stderr.strip().splitlines()[-1]) * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc/self/status")
@pytest.mark.parametrize(("transactional", "threads_extra_mib"), [(False, 8), (True, 16)], ids=["data", "transactions"])
def test_a_clean_of_a_large_segment_holds_a_window_of_it_not_all(tmp_path: Path, transactional: bool,
                                                                 threads_extra_mib: int) -> None:
    # records of 100 KB (a C run reads few of them per slice) or, in transactions, 20 KB (walked batch by batch)
    count, value = (6000, 20_000) if transactional else (1200, 100_000)
    b = PartitionBuilder("large")
    for n in range(count):
        b.batch([(b"k%d" % (n % (count // 4)), b"v" * value)], producer_id=90 if transactional else -1,
                transactional=transactional)
        if transactional and n % 10 == 9:
            b.marker(90, commit=True)
    b.roll()
    part = b.write(tmp_path / "one")
    size = (part / "00000000000000000000.log").stat().st_size
    assert size > 115_000_000
    copy = tmp_path / "threads" / part.name
    shutil.copytree(part, copy)
    peaks = {runner: _peak_of_clean(where, runner, tmp_path) for runner, where in (("one", part), ("threads", copy))}
    # a walk holding the whole segment made a peak above its size (149-154 MiB here; on two threads, where each
    # range's walk from the segment's start held the pages it passed, 236-253 MiB); a window of it: 45-59 MiB,
    # most of it the interpreter and its libraries
    for runner, peak in peaks.items():
        assert peak < 0.6 * size, f"{runner}: peak RSS {peak >> 20} MiB for a {size >> 20} MiB segment"
    # two threads add a second window and a chunk's output waiting to be appended: 1-4 MiB here for the C runs,
    # 6-13 for the batch-by-batch walk (with an arena per thread and the finished chunks' output waiting whole:
    # 11-16 and 17-20)
    extra = peaks["threads"] - peaks["one"]
    assert extra < threads_extra_mib << 20, (
        f"two threads' peak RSS {peaks['threads'] >> 20} MiB, one thread's {peaks['one'] >> 20} MiB")
