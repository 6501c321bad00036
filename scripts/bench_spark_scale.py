"""The ``spark-scale`` section of scripts/bench.py: many brokers' log dirs, serial ``clean`` against ``spark clean``.

What a cluster-sized run costs the *driver* is the question: the work is spread over executors, the driver
must not grow with the data. The layout simulates ``--log-dirs`` brokers (default 6), each a log dir of
``--partitions`` partitions (default 200) of small partitions with ``LARGE_PER_LOG_DIR`` large ones among
them, every partition two segments' worth of overwrites and an empty active segment (all cleanable). It is
written at each of ``--scales`` (default 1 and 10: ten times the records per partition, the partition count
unchanged), and each scale is cleaned three ways, each in a fresh child process:

* ``serial``: ``clean_path`` of each log dir in turn with ``jobs=None`` (``--jobs auto``), the whole
  process tree's CPU (its worker processes included) and its peak memory;
* ``local[2]``: ``spark_clean`` of all the log dirs on local[2];
* ``standalone``: the same on a standalone master with two workers on 127.0.0.1 (started here, stopped after).

For a Spark run it prints the session start-up apart from the job, the driver's own CPU seconds (the
driver's Python process, ``time.process_time``, and its JVM, from ``/proc``) and peak memory, and the bytes
the tasks' cleaners read: in all, per task at most, and over the segments' bytes (a clean reads the dirty
section twice — pass 1 and pass 2 — and its output once for the self-check). The goals it reports: the driver's
CPU flat from the smallest to the largest scale, and ``spark clean``'s job on local[2] within 1.3x of the
serial clean once the session's start-up is subtracted.

Run alone: ``python scripts/bench_spark_scale.py [WORKDIR] [--scales 1,10] [--log-dirs 6] [--partitions 200]
[--no-standalone]``; a child: ``--child KIND MASTER WORKDIR LOG_DIR...``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Record
from kcompact.segment.checkpoint import write_offset_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ builders and services
from tests.segment_writer import write_segment

SMALL_RECORDS = 400  # per partition at scale 1: ~50 KB
LARGE_RECORDS = 40_000  # ~5 MB at scale 1
LARGE_PER_LOG_DIR = 1
KEYS_PER_PARTITION = 100
VALUE_BYTES = 100
PER_BATCH = 200
FIRST_TS = 1_700_000_000_000
NOW_MS = FIRST_TS + 10**8
COMPACT = {"cleanup.policy": "compact"}
Row = tuple[str, float, str]


def _batches(rng: random.Random, start: int, end: int, keys: int) -> Iterator[bytes]:
    for base in range(start, end, PER_BATCH):
        n = min(PER_BATCH, end - base)
        recs = [Record(base + i, FIRST_TS + base + i, b"key-%09d" % rng.randrange(keys),
                       rng.randbytes(VALUE_BYTES // 2).hex().encode()) for i in range(n)]
        yield encode_batch(recs, base_offset=base)


def generate(workdir: Path, scale: int, log_dirs: int, partitions: int) -> list[Path]:
    """Write (or reuse) ``log_dirs`` log dirs of ``partitions`` partitions at ``scale``; return them."""
    root = workdir / f"scale{scale}-{log_dirs}x{partitions}"
    dirs = [root / f"broker-{b}" / "kafka-logs" for b in range(log_dirs)]
    if (root / "done").exists():
        return dirs
    shutil.rmtree(root, ignore_errors=True)
    for b, log_dir in enumerate(dirs):
        log_dir.mkdir(parents=True)
        ends = {}
        for p in range(partitions):
            large = p < LARGE_PER_LOG_DIR
            records = (LARGE_RECORDS if large else SMALL_RECORDS) * scale
            keys = KEYS_PER_PARTITION * (100 if large else 1)
            part = log_dir / f"events-{b * partitions + p}"
            rng = random.Random(b * 100_000 + p)
            half = records // 2 // PER_BATCH * PER_BATCH
            write_segment(part, 0, _batches(rng, 0, half, keys))
            write_segment(part, half, _batches(rng, half, records, keys))
            write_segment(part, records, [])
            ends[("events", b * partitions + p)] = records
        write_offset_checkpoint(log_dir / "replication-offset-checkpoint", ends)
    (root / "done").write_text("ok")
    return dirs


def _segment_bytes(log_dirs: list[Path]) -> int:
    return sum(p.stat().st_size for d in log_dirs for p in d.rglob("*.log"))


def _copies(log_dirs: list[Path], where: Path) -> list[Path]:
    shutil.rmtree(where, ignore_errors=True)
    out = []
    for d in log_dirs:
        target = where / d.parent.name / d.name
        shutil.copytree(d, target)
        out.append(target)
    os.sync()  # the copies' dirty pages are not the clean's to write back
    return out


def _jvm_cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mib() -> float:
    """This process's peak resident memory: ``VmHWM`` (``ru_maxrss`` would carry the parent's over ``exec``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(kind: str, master: str, workdir: Path, log_dirs: list[Path]) -> dict[str, Any]:
    """One run in this fresh process: copy the log dirs, clean them, measure."""
    from kcompact.cleaner.round.options import CleanOptions

    copies = _copies(log_dirs, workdir / f"copy-{kind}-{os.getpid()}")
    options = CleanOptions(now_ms=NOW_MS)
    result: dict[str, Any] = {"kind": kind, "master": master}
    if kind == "serial":
        from kcompact.cleaner.logdir.run import clean_path

        begun, cpu = time.perf_counter(), time.process_time()
        rows: list[dict[str, Any]] = []
        for log_dir in copies:
            run = clean_path(log_dir, cli_overrides=COMPACT, options=options, jobs=None)
            rows += [{"bytes_read": r.stats.bytes_read, "status": "cleaned"} for r in run.results]
            rows += [{"bytes_read": 0, "status": "failed", "error": f.error} for f in run.failures]
        result["job_s"] = time.perf_counter() - begun
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        result["driver_cpu_s"] = time.process_time() - cpu
        result["workers_cpu_s"] = children.ru_utime + children.ru_stime
        result["startup_s"] = 0.0
    else:
        from kcompact.spark.clean_job import spark_clean
        from kcompact.spark.session import spark_session

        started = time.perf_counter()
        spark = spark_session(master)
        cores = spark.sparkContext.defaultParallelism
        spark.sparkContext.parallelize(range(cores), cores).map(lambda x: x).collect()  # workers up
        result["startup_s"] = time.perf_counter() - started
        gateway = getattr(spark.sparkContext._gateway, "proc", None)  # the driver JVM py4j launched
        jvm_pid = gateway.pid if gateway is not None else None
        jvm_before = _jvm_cpu_s(jvm_pid)
        begun, cpu = time.perf_counter(), time.process_time()
        spark_run = spark_clean(spark, copies, cli_overrides=COMPACT, options=options)
        result["job_s"] = time.perf_counter() - begun
        result["driver_cpu_s"] = time.process_time() - cpu
        result["driver_jvm_cpu_s"] = _jvm_cpu_s(jvm_pid) - jvm_before
        rows = spark_run.as_dicts()
        spark.stop()
    result["driver_peak_rss_mib"] = _peak_rss_mib()
    result["partitions"] = len(rows)
    result["not_cleaned"] = [r for r in rows if r.get("status") not in ("cleaned", "nothing to clean")][:3]
    read = [int(r.get("bytes_read") or 0) for r in rows]
    result["bytes_read"] = sum(read)
    result["max_task_bytes_read"] = max(read, default=0)
    result["load_1m"] = os.getloadavg()[0]
    shutil.rmtree(copies[0].parent.parent, ignore_errors=True)
    return result


def _run_child(kind: str, master: str, workdir: Path, log_dirs: list[Path]) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", kind, master, str(workdir), *map(str, log_dirs)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench_spark_scale child {kind} failed: {proc.stderr.strip()[-2000:]}")
    found: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if found["not_cleaned"]:
        raise SystemExit(f"{kind}: partitions not cleaned: {found['not_cleaned']}")
    return found


def bench_spark_scale(args: argparse.Namespace, workdir: Path) -> list[Row]:
    """Serial against Spark over many log dirs, at each scale; the driver's cost against the data's."""
    scales = [int(s) for s in str(getattr(args, "scales", "1,10")).split(",")]
    log_dir_count, partitions = getattr(args, "log_dirs", 6), getattr(args, "partitions", 200)
    masters = [("local[2]", "local[2]")]
    services = None
    if getattr(args, "standalone", True):
        from tests.services import Services, start_spark

        services = Services(Path(tempfile.mkdtemp(prefix="kcompact-bench-spark-")))
        masters.append(("standalone", start_spark(services, workers=2)))
    rows: list[Row] = []
    driver_cpu: dict[str, list[float]] = {}
    try:
        for scale in scales:
            dirs = generate(workdir, scale, log_dir_count, partitions)
            total = _segment_bytes(dirs)
            label = f"x{scale} ({log_dir_count} log dirs x {partitions} partitions, {total / 1e6:.0f} MB)"
            rows.append((f"{label}: segment bytes", total / 1e6, "MB"))
            serial = _run_child("serial", "-", workdir, dirs)
            rows += [(f"{label} serial --jobs auto: wall", serial["job_s"], "s"),
                     (f"{label} serial: CPU (process + its workers)",
                      serial["driver_cpu_s"] + serial["workers_cpu_s"], "s"),
                     (f"{label} serial: peak memory (main process)", serial["driver_peak_rss_mib"], "MiB"),
                     (f"{label} serial: bytes read / segment bytes", serial["bytes_read"] / total, "x")]
            for name, master in masters:
                res = _run_child("spark", master, workdir, dirs)
                driver_cpu.setdefault(name, []).append(res["driver_cpu_s"])
                rows += [
                    (f"{label} {name}: session start-up", res["startup_s"], "s"),
                    (f"{label} {name}: job (wall, start-up excluded)", res["job_s"], "s"),
                    (f"{label} {name}: driver Python CPU", res["driver_cpu_s"], "s"),
                    (f"{label} {name}: driver JVM CPU", res["driver_jvm_cpu_s"], "s"),
                    (f"{label} {name}: driver peak memory (Python)", res["driver_peak_rss_mib"], "MiB"),
                    (f"{label} {name}: bytes read in all / segment bytes", res["bytes_read"] / total, "x"),
                    (f"{label} {name}: bytes read by the largest task", res["max_task_bytes_read"] / 1e6, "MB"),
                    (f"{label} {name}: job / serial wall", res["job_s"] / serial["job_s"], "x"),
                    (f"{label} {name}: machine load (1 min) after", res["load_1m"], ""),
                ]
    finally:
        if services is not None:
            services.stop()
    for name, cpus in driver_cpu.items():
        if len(cpus) > 1 and cpus[0] > 0:
            rows.append((f"{name}: driver Python CPU, x{scales[-1]} / x{scales[0]}", cpus[-1] / cpus[0], "x"))
    return rows


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", nargs="?", type=Path, default=Path("/tmp/kcompact-bench-spark-scale"))
    parser.add_argument("--scales", default="1,10", help="record-count multipliers, comma-separated")
    parser.add_argument("--log-dirs", type=int, default=6)
    parser.add_argument("--partitions", type=int, default=200, help="per log dir")
    parser.add_argument("--no-standalone", dest="standalone", action="store_false",
                        help="skip the standalone cluster run")
    return parser.parse_args(argv)


if __name__ == "__main__":
    if len(sys.argv) > 5 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3], Path(sys.argv[4]), [Path(p) for p in sys.argv[5:]])))
    else:
        parsed = _parse(sys.argv[1:])
        for metric, value, unit in bench_spark_scale(parsed, parsed.workdir):
            print(f"{metric:<78} {value:10.3f} {unit}")
