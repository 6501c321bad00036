"""The ``clean`` section of scripts/bench.py: kcompact clean on two benchmark shapes, against a plain copy.

Shapes (Kafka's own cleaner on them: ``bench.py ratio --kafka`` measures it in the same run):
  plain  2,000,000 uncompressed records, 100-byte values, 500,000 distinct keys, 200 per batch (~253 MB);
         Kafka 4.1's cleaner, one round, JVM start included, the broker's JVM options: 2.4-2.6 s
  zstd   400,000 zstd records, 1 KiB values, 100,000 keys, 50 per batch (~176 MB); Kafka's cleaner: 2.25-2.3 s
  (The 3.1 s and 3.6 s quoted before were a benchmark's outside the project, on its own data: its zstd shape is
  146 MB of other values.)
Keys ``key-%012d`` uniform over the key space, values half random printable and half a fixed template,
64 MiB segments, timestamps 1 ms apart, written with kcompact's own writer; an empty active segment at the
end, so everything else is cleanable. The clean runs as ``kcompact clean --json --jobs N`` in a child process
(start-up included, like Kafka's JVM start) on a fresh copy; the copy itself is the "plain copy of the same
bytes".

Per shape: one *reference* clean (``KCOMPACT_NO_ACCEL=1``: the records layer in pure Python; ``--jobs 1``),
then ``--jobs 1`` and ``--jobs auto``, each checked file by file (sha256 of every file of the log dir)
against the reference: "identical: yes/no" on stderr, and a row. Peak RSS is the clean process's own
(``VmHWM``: Linux's ``ru_maxrss`` carries over exec the peak of the process it was forked from) and,
separately, the largest of its worker processes' (``RUSAGE_CHILDREN`` read in the child; forked workers share
the parent's pages until they write, so the two do not simply add up).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Record
from kcompact.segment.checkpoint import write_offset_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ builders
from tests.segment_writer import write_segment

Row = tuple[str, float, str]
SEGMENT_BYTES = 64 * 1024 * 1024
FIRST_TS = 1_700_000_000_000
_PRINTABLE = bytes(range(0x20, 0x7F))
_TO_PRINTABLE = bytes(_PRINTABLE[i % len(_PRINTABLE)] for i in range(256))
SHAPES = {
    "plain": {"records": 2_000_000, "keys": 500_000, "value": 100, "per_batch": 200, "codec": 0},
    "zstd": {"records": 400_000, "keys": 100_000, "value": 1024, "per_batch": 50, "codec": 4},
}


def _batches(rng: random.Random, shape: dict[str, int], scale: float) -> Iterator[tuple[int, bytes]]:
    records = int(shape["records"] * scale)
    value_size, per_batch = shape["value"], shape["per_batch"]
    half = value_size // 2
    template = (b"kcompact-bench-template-" * (value_size // 24 + 1))[: value_size - half]
    for base in range(0, records, per_batch):
        n = min(per_batch, records - base)
        noise = rng.randbytes(half * n).translate(_TO_PRINTABLE)
        recs = [Record(base + i, FIRST_TS + base + i, b"key-%012d" % rng.randrange(shape["keys"]),
                       noise[i * half:(i + 1) * half] + template) for i in range(n)]
        yield base + n, encode_batch(recs, base_offset=base, compression=shape["codec"])


def generate(workdir: Path, name: str, scale: float, seed: int) -> Path:
    """Write (or reuse) the shape's log dir; return its partition directory."""
    log_dir = workdir / f"clean-{name}-{scale}-{seed}"
    part = log_dir / "bench-0"
    if (log_dir / "done").exists():
        return part
    shutil.rmtree(log_dir, ignore_errors=True)
    part.mkdir(parents=True)
    base, size, end, batches_end = 0, 0, 0, 0
    batches: list[bytes] = []
    for end, batch in _batches(random.Random(seed), SHAPES[name], scale):
        if size + len(batch) > SEGMENT_BYTES and batches:
            write_segment(part, base, batches)
            base, size, batches = batches_end, 0, []
        batches.append(batch)
        size += len(batch)
        batches_end = end
    write_segment(part, base, batches)
    write_segment(part, end, [])  # the empty active segment
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("bench", 0): end})
    (log_dir / "done").write_text("ok")
    return part


# Runs ``kcompact clean`` in this child process, then reports its own peak RSS and the largest of its
# worker processes' (RUSAGE_CHILDREN), which ``ru_maxrss`` of the bench process cannot tell apart.
_CHILD = """
import os, resource, runpy, sys
sys.argv = ["kcompact", *sys.argv[1:]]
me, end = os.getpid(), os._exit

def measured():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    workers = children.ru_maxrss
    # this process's own peak: ru_maxrss carries over exec the peak of the bench process it was forked from
    try:
        peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
    except (OSError, IndexError):
        peak = usage.ru_maxrss
    print(f"RSS {peak} {workers} {usage.ru_utime + usage.ru_stime} {children.ru_utime + children.ru_stime}",
          file=sys.stderr, flush=True)

def measured_end(status):  # clean ends its process without teardown (os._exit): measure it there too
    if os.getpid() == me:  # not a forked worker's end
        measured()
    end(status)

os._exit = measured_end
try:
    runpy.run_module("kcompact", run_name="__main__")
except SystemExit as done:
    code = done.code
else:
    code = 0
measured()
sys.exit(code)
"""


@dataclass(frozen=True)
class ChildRun:
    """One ``kcompact clean --json`` child: wall seconds, its report, peak RSS (MiB) of it and of its
    largest worker."""

    seconds: float
    report: dict[str, Any]
    own_rss_mib: float
    worker_rss_mib: float
    cpu_seconds: float = 0.0  # user + system of the clean process itself, its threads included (less load-sensitive)
    worker_cpu_seconds: float = 0.0  # user + system of its worker processes (RUSAGE_CHILDREN)


def _child_clean(part: Path, jobs: str, *, reference: bool = False, pythonpath: Path | None = None) -> ChildRun:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["COLUMNS"] = "100"
    # bytecode cached as an installed package has it (paths under the prefix mirror each source tree)
    env["PYTHONPYCACHEPREFIX"] = str(part.parent.parent / "pycache")
    if pythonpath is not None:  # another kcompact source tree (scripts/bench_ratio.py --baseline)
        env["PYTHONPATH"] = str(pythonpath)
    if reference:
        env["KCOMPACT_NO_ACCEL"] = "1"  # the records layer's pure-Python path
    command = [sys.executable, "-c", _CHILD, "clean", "--json", "--now-ms", str(FIRST_TS + 10**7),
               "--config", "cleanup.policy=compact", "--jobs", jobs, str(part)]
    start = time.perf_counter()
    # cwd away from any source tree: ``python -c`` puts the cwd first on sys.path, before PYTHONPATH
    proc = subprocess.run(command, capture_output=True, text=True, check=False, env=env, cwd=part.parent.parent)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"clean failed: {proc.stderr.strip()}")
    rss = [line.split() for line in proc.stderr.splitlines() if line.startswith("RSS ")][-1]
    return ChildRun(seconds, json.loads(proc.stdout), int(rss[1]) / 1024, int(rss[2]) / 1024, float(rss[3]),
                    float(rss[4]))


def _digests(log_dir: Path) -> dict[str, str]:
    """sha256 of every file under ``log_dir`` (lock files aside), by relative path."""
    return {
        str(path.relative_to(log_dir)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(log_dir.rglob("*"))
        if path.is_file() and not path.name.endswith(".lock")
    }


def _fresh_copy(source: Path, target: Path) -> float:
    shutil.rmtree(target, ignore_errors=True)
    start = time.perf_counter()
    shutil.copytree(source.parent, target)
    return time.perf_counter() - start


def _rows(name: str, jobs: str, run: ChildRun, copy_seconds: float, identical: bool) -> list[Row]:
    stats = run.report["results"][0]  # a flat row: the CleanStats counters are its keys
    read, seconds, tag = stats["bytes_read"], run.seconds, f"{name} jobs={jobs}"
    return [
        (f"{tag}: clean seconds (process start included)", seconds, "s"),
        (f"{tag}: MB/s", read / seconds / 1e6, "MB/s"),
        (f"{tag}: records/s", stats["records_read"] / seconds, "rec/s"),
        (f"{tag}: peak RSS of the clean process", run.own_rss_mib, "MiB"),
        (f"{tag}: peak RSS of its largest worker", run.worker_rss_mib, "MiB"),
        (f"{tag}: clean / copy time ratio", seconds / copy_seconds, "x"),
        (f"{tag}: identical to the reference (1 if yes)", float(identical), "yes"),
    ]


def bench_clean(args: object, workdir: Path) -> list[Row]:
    """Clean both shapes with jobs=1 and auto on fresh copies; check the bytes against the reference
    (pure Python, one process); report time, rates, RSS and the ratio to the copy."""
    scale = getattr(args, "clean_scale", 1.0)
    rows: list[Row] = []
    for name in SHAPES:
        source = generate(workdir, name, scale, getattr(args, "seed", 1))
        target = workdir / f"run-{name}"
        _fresh_copy(source, target)
        reference = _child_clean(target / source.name, "1", reference=True)
        expected = _digests(target)
        stats = reference.report["results"][0]
        rows += [
            (f"{name}: bytes read", stats["bytes_read"] / 1e6, "MB"),
            (f"{name}: records read", stats["records_read"], "rec"),
            (f"{name}: size reduction", 100 * stats["size_reduction"], "%"),
            (f"{name}: offset map keys", stats["map_entries"], "rec"),
            (f"{name}: offset map bytes/key", stats["map_memory_bytes"] / max(1, stats["map_entries"]), "B"),
            (f"{name} reference (KCOMPACT_NO_ACCEL=1, jobs=1): clean seconds", reference.seconds, "s"),
        ]
        for jobs in ("1", "auto"):
            copy_seconds = _fresh_copy(source, target)
            rows.append((f"{name} jobs={jobs}: 1-minute load average before the run",
                         os.getloadavg()[0], "load"))  # auto uses workers only on spare CPUs
            run = _child_clean(target / source.name, jobs)
            identical = _digests(target) == expected
            print(f"{name} jobs={jobs}: identical: {'yes' if identical else 'no'}", file=sys.stderr)
            rows += _rows(name, jobs, run, copy_seconds, identical)
        rows.append((f"{name}: plain copy of the same bytes seconds", copy_seconds, "s"))
        shutil.rmtree(target, ignore_errors=True)
    return rows
