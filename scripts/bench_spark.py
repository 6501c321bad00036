"""The ``spark`` section of scripts/bench.py: ``spark clean`` of 16 partitions of ~30 MB, local[1] vs local[2].

Shape: 16 partitions in one log dir, each 240,000 uncompressed records of 100-byte values (half
random printable, half a fixed template) over 60,000 keys ``key-%012d``, 200 records per batch, one ~30 MB
segment and an empty active segment (so everything is cleanable), written with kcompact's own writer
(``--clean-scale`` scales the record count, ``--seed`` the data).

Each master runs in its own child process, so each start-up is a cold one (JVM, SparkContext, Python
workers): the child starts the session (timed: **start-up**), runs a trivial job on every core so the
Python workers are up, runs ``WARMUP_JOBS`` clean jobs whose times are not counted (the first is reported:
the driver JVM interprets the scheduler and Py4J paths until its JIT compiles them, and its CPU per job falls
from ~2 s to ~0.3 s over the first jobs, measured with /proc), then ``--repeat`` times copies the log dir
afresh and syncs (not timed) and times ``spark_clean`` on the copy (**steady-state** job time). Throughput is the bytes
the cleaner read over the fastest job; the ratio local[2] / local[1] is meant to be >= 1.6
on these 2-core machines; it needs both cores free, so the machine's load average is reported beside it,
and the partitions' summed clean and CPU seconds (a partition waiting for a core shows clean seconds above
its CPU).
The serial ``clean_path`` (jobs=1, this process) is timed once for reference.

Then the same log dir on local[2] with one task per partition (``--task-bytes 1``, no packing) and
the serial ``clean_path`` with 2 worker processes; and a second shape, ``SMALL_PARTITIONS`` partitions
of ``SMALL_RECORDS`` records (~0.26 MB each), where a Spark task's fixed cost (~20 ms) is most of a
partition's work: local[2] packed (the default) against one task per partition.

Export (``--export``, also the last section of the full run): one partition of ``EXPORT_RECORDS``
records (~1.3 MB), written as Parquet by ``kcompact export`` (in-process, pyarrow) and by ``kcompact
spark export --master local[2]``, each a fresh command as a user runs it; Spark's session **start-up**
(its ``startup_s``) is reported apart from the **work** (the command's wall time minus it).

Run alone: ``python scripts/bench_spark.py [--export] [WORKDIR]``; as a child: ``--child MASTER LOG_DIR REPEAT
TASK_BYTES`` (0 = automatic packing).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Record
from kcompact.segment.checkpoint import write_offset_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ builders
from tests.segment_writer import write_segment

PARTITIONS = 16
RECORDS = 240_000
SMALL_PARTITIONS = 400
SMALL_RECORDS = 2_000
EXPORT_RECORDS = 10_000
KEYS = 60_000
VALUE_BYTES = 100
PER_BATCH = 200
FIRST_TS = 1_700_000_000_000
NOW_MS = FIRST_TS + 10**8
COMPACT = {"cleanup.policy": "compact"}  # the generated log dir has no metadata log to say so
MASTERS = ("local[1]", "local[2]")
WARMUP_JOBS = 3
_PRINTABLE = bytes(range(0x20, 0x7F))
_TO_PRINTABLE = bytes(_PRINTABLE[i % len(_PRINTABLE)] for i in range(256))

Row = tuple[str, float, str]


def _batches(rng: random.Random, records: int) -> Iterator[bytes]:
    half = VALUE_BYTES // 2
    template = (b"kcompact-bench-template-" * (VALUE_BYTES // 24 + 1))[: VALUE_BYTES - half]
    for base in range(0, records, PER_BATCH):
        n = min(PER_BATCH, records - base)
        noise = rng.randbytes(half * n).translate(_TO_PRINTABLE)
        recs = [Record(base + i, FIRST_TS + base + i, b"key-%012d" % rng.randrange(KEYS),
                       noise[i * half:(i + 1) * half] + template) for i in range(n)]
        yield encode_batch(recs, base_offset=base)


def generate(workdir: Path, scale: float, seed: int, partitions: int = PARTITIONS,
             per_partition: int = RECORDS) -> Path:
    """Write (or reuse) a log dir of ``partitions`` partitions of ``per_partition`` records; return it."""
    records = max(PER_BATCH, int(per_partition * scale))
    log_dir = workdir / f"spark-{partitions}x{records}-seed{seed}-logdir"  # not "<name>-<int>": a partition's
    if (log_dir / "done").exists():
        return log_dir
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    for partition in range(partitions):
        part = log_dir / f"bench-{partition}"
        write_segment(part, 0, _batches(random.Random(seed * 1000 + partition), records))
        write_segment(part, records, [])
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint",
                            {("bench", p): records for p in range(partitions)})
    (log_dir / "done").write_text("ok")
    return log_dir


def child(master: str, log_dir: Path, repeat: int, task_bytes: int | None = None) -> dict[str, Any]:
    """In a fresh process: start-up, warm-up, then the fastest of ``repeat`` cleans of fresh copies."""
    from kcompact.cleaner.round.options import CleanOptions
    from kcompact.spark.clean_job import spark_clean
    from kcompact.spark.session import spark_session

    started = time.perf_counter()
    spark = spark_session(master)
    startup = time.perf_counter() - started
    cores = spark.sparkContext.defaultParallelism
    spark.sparkContext.parallelize(range(cores), cores).map(lambda x: x).collect()  # workers up
    times, read, cpu, busy = [], 0, 0.0, 0.0
    for i in range(WARMUP_JOBS + repeat):
        copy = log_dir.parent / f"{log_dir.name}-copy{i}-{os.getpid()}-logdir"
        shutil.copytree(log_dir, copy)
        os.sync()  # the copy's dirty pages are not the clean's to write back
        begun = time.perf_counter()
        run = spark_clean(spark, [copy], cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW_MS),
                          task_bytes=task_bytes)
        times.append(time.perf_counter() - begun)
        rows = run.as_dicts()
        shutil.rmtree(copy)
        if any(r["status"] != "cleaned" for r in rows):
            raise SystemExit(f"spark clean on {master} did not clean everything: {rows}")
        if i >= WARMUP_JOBS and times[-1] == min(times[WARMUP_JOBS:]):
            read = sum(r["bytes_read"] for r in rows)
            cpu = sum(r["task_cpu_s"] for r in rows)
            busy = sum(r["elapsed_s"] for r in rows)
    spark.stop()
    return {"master": master, "cores": cores, "startup_s": startup, "first_s": times[0],
            "clean_s": min(times[WARMUP_JOBS:]), "bytes_read": read, "task_cpu_s": cpu, "task_elapsed_s": busy,
            "load_1m": os.getloadavg()[0]}


def _run_child(master: str, log_dir: Path, repeat: int, task_bytes: int | None = None) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", master, str(log_dir), str(repeat), str(task_bytes or 0)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench_spark child {master} failed: {proc.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _serial_seconds(log_dir: Path, jobs: int = 1) -> float:
    from kcompact.cleaner.logdir.run import clean_path
    from kcompact.cleaner.round.options import CleanOptions

    copy = log_dir.parent / f"{log_dir.name}-serial-logdir"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(log_dir, copy)
    os.sync()
    begun = time.perf_counter()
    clean_path(copy, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW_MS), jobs=jobs)
    seconds = time.perf_counter() - begun
    shutil.rmtree(copy)
    return seconds


def bench_spark(args: object, workdir: Path) -> list[Row]:
    """Start-up and steady-state ``spark clean`` throughput on local[1] and local[2]; their ratio."""
    log_dir = generate(workdir, getattr(args, "clean_scale", 1.0), getattr(args, "seed", 1))
    repeat = max(1, getattr(args, "repeat", 3))
    found = {master: _run_child(master, log_dir, repeat) for master in MASTERS}
    rows: list[Row] = [("MB the cleaner read (16 partitions)", found[MASTERS[0]]["bytes_read"] / 1e6, "MB")]
    for master, res in found.items():
        rows += [
            (f"{master}: session start-up (cold, JVM included)", res["startup_s"], "s"),
            (f"{master}: first spark clean job (JIT cold, not counted)", res["first_s"], "s"),
            (f"{master}: spark clean job (after {WARMUP_JOBS} warm-up jobs, fastest)", res["clean_s"], "s"),
            (f"{master}: steady-state throughput", res["bytes_read"] / res["clean_s"] / 1e6, "MB/s"),
            (f"{master}: partitions' summed clean seconds", res["task_elapsed_s"], "s"),
            (f"{master}: partitions' summed CPU seconds", res["task_cpu_s"], "s"),
            (f"{master}: job seconds beyond the cleans' (their sum / cores)",
             res["clean_s"] - res["task_elapsed_s"] / res["cores"], "s"),
            (f"{master}: machine load average (1 min) after", res["load_1m"], ""),
        ]
    one, two = (found[m]["clean_s"] for m in MASTERS)
    rows.append(("local[2] / local[1] throughput", one / two, "x"))
    rows.append(("serial clean_path (jobs=1) of the same log dir", _serial_seconds(log_dir), "s"))
    rows.append(("serial clean_path (jobs=2) of the same log dir", _serial_seconds(log_dir, 2), "s"))
    rows.append(("local[2], one task per partition (--task-bytes 1): job", _run_child(
        MASTERS[1], log_dir, repeat, task_bytes=1)["clean_s"], "s"))
    return rows + _small_partitions(args, workdir, repeat) + bench_export(workdir)


def bench_export(workdir: Path) -> list[Row]:
    """``kcompact export`` against ``kcompact spark export`` of one small partition: start-up apart from work."""
    log_dir = generate(workdir / "export", 1.0, 1, partitions=1, per_partition=EXPORT_RECORDS)
    size = sum(p.stat().st_size for p in log_dir.rglob("*.log"))
    plain_s, _ = _export_command(["export"], log_dir, workdir / "export-plain")
    spark_s, summary = _export_command(["spark", "export", "--master", MASTERS[1]], log_dir,
                                       workdir / "export-spark")
    return [
        ("export: MB of segments (one partition)", size / 1e6, "MB"),
        ("kcompact export (pyarrow, no Spark): whole command", plain_s, "s"),
        ("kcompact spark export local[2]: whole command", spark_s, "s"),
        ("kcompact spark export local[2]: session start-up", summary["startup_s"], "s"),
        ("kcompact spark export local[2]: work (command minus start-up)", spark_s - summary["startup_s"], "s"),
    ]


def _export_command(command: list[str], log_dir: Path, output: Path) -> tuple[float, dict[str, Any]]:
    shutil.rmtree(output, ignore_errors=True)
    begun = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kcompact", *command, str(log_dir), "--output", str(output),
                           "--json"], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - begun
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {proc.stderr.strip()[-2000:]}")
    shutil.rmtree(output)
    summary: dict[str, Any] = json.loads(proc.stdout)
    return seconds, summary


def _small_partitions(args: object, workdir: Path, repeat: int) -> list[Row]:
    """Many small partitions, where a Spark task's fixed cost is most of the work: packed or not."""
    log_dir = generate(workdir, getattr(args, "clean_scale", 1.0), getattr(args, "seed", 1),
                       partitions=SMALL_PARTITIONS, per_partition=SMALL_RECORDS)
    packed = _run_child(MASTERS[1], log_dir, repeat)
    alone = _run_child(MASTERS[1], log_dir, repeat, task_bytes=1)
    label = f"{SMALL_PARTITIONS} small partitions"
    return [
        (f"{label}: MB the cleaner read", packed["bytes_read"] / 1e6, "MB"),
        (f"{label}, local[2], packed (default): job", packed["clean_s"], "s"),
        (f"{label}, local[2], one task per partition: job", alone["clean_s"], "s"),
        (f"{label}: serial clean_path (jobs=2)", _serial_seconds(log_dir, 2), "s"),
    ]


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]) or None)))
    else:
        export_only = "--export" in sys.argv[1:]
        given = [arg for arg in sys.argv[1:] if arg != "--export"]
        target = Path(given[0]) if given else Path("/tmp/kcompact-bench-spark")
        for name, value, unit in (bench_export(target) if export_only else bench_spark(object(), target)):
            print(f"{name:<60} {value:10.3f} {unit}")
