"""The ``distmap`` section of scripts/bench.py: the distributed offset map on 20 million distinct keys.

    python scripts/bench_distmap.py                      # 20M keys, a budget that forces the Spark path
    python scripts/bench_distmap.py --keys 2000000 --workdir /tmp/kc-distmap   # smaller, data kept

Shape: ``keys`` distinct keys ``key-%012d`` written once each in order, then ``keys / 10`` overwrites
spread over the key space (``(r * 2654435761) mod keys``), 1,000 records per uncompressed batch, 16-byte
values, timestamps 1 ms apart; 64 MiB segments, then an empty active segment, the high watermark at the
log end (everything but the active segment is cleanable). ``segment.bytes`` is 128 MiB, so the round
has one output group per two segments.

Generation: one batch is encoded with kcompact's ``encode_batch`` as a template; every batch is that
template's record section with the key digits patched in (fixed widths keep every varint the same),
framed by kcompact's ``encode_records_batch`` (header, CRC-32C) and written with ``write_segment``
(indexes). A sample of batches is decoded back and checked.

Measured, each in a child process on its own copy: the serial ``clean_partition`` (unbounded map,
default jobs) and ``clean_partition_distributed`` on ``local[*]`` with ``--map-budget`` below the
map's size (``needs_distributed_map`` must say so). Reported: wall seconds of each clean (the Spark
session's start apart), peak RSS of the serial process, of the Spark driver's Python process, of the
JVM (driver and executors in local mode) and of the Python workers together (sampled), and whether every
file of the two partitions (and the cleaner checkpoint) is the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from kcompact.records.batch import iter_batches
from kcompact.records.batch_encoding import encode_batch, encode_records_batch
from kcompact.records.batch_header import RecordBatch
from kcompact.records.record import Record, decode_records, records_bytes
from kcompact.records.scan import scan_records
from kcompact.segment.checkpoint import write_offset_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ builders
from tests.segment_writer import write_segment

Row = tuple[str, float, str]

KEYS = 20_000_000
PER_BATCH = 1000
VALUE = b"distmap-value-16"  # 16 bytes
KEY_DIGITS = 12  # key-%012d
KEY_PREFIX = len(b"key-")
SEGMENT_BYTES = 64 * 1024 * 1024
CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(128 * 1024 * 1024)}
FIRST_TS = 1_700_000_000_000
NOW_MS = FIRST_TS + 10**9
MAP_BUDGET = 256 * 1024 * 1024  # 20M keys x 24 bytes = 480 MB: over it
_POWERS = 10 ** np.arange(KEY_DIGITS - 1, -1, -1, dtype=np.int64)


def key_ids(first: int, count: int, keys: int) -> np.ndarray:
    """The key number of records ``first .. first + count - 1`` (see the module docstring)."""
    r = np.arange(first, first + count, dtype=np.int64)
    return np.where(r < keys, r, (r * 2654435761) % keys)


class BatchTemplate:
    """One encoded batch of ``PER_BATCH`` records whose key digits are replaced per batch."""

    def __init__(self) -> None:
        recs = [Record(i, FIRST_TS + i, b"key-%012d" % i, VALUE) for i in range(PER_BATCH)]
        batch = next(iter_batches(encode_batch(recs, base_offset=0)))
        if not isinstance(batch, RecordBatch):
            raise SystemExit("bench_distmap: the template batch did not decode as a v2 batch")
        self.raw = np.frombuffer(bytes(records_bytes(batch)), dtype=np.uint8)
        cols = scan_records(self.raw.tobytes(), base_offset=0, base_timestamp=FIRST_TS, count=PER_BATCH)
        starts = np.frombuffer(cols.key_starts, dtype=np.int64)
        self.digit_at = starts[:, None] + KEY_PREFIX + np.arange(KEY_DIGITS)
        self.record_starts = np.frombuffer(cols.record_starts, dtype=np.int64)

    def batch(self, base_offset: int, ids: np.ndarray) -> bytes:
        """The batch at ``base_offset`` whose records carry keys ``ids``."""
        raw = self.raw.copy()
        digits = (ids[:, None] // _POWERS) % 10 + ord("0")
        raw[self.digit_at[: len(ids)]] = digits.astype(np.uint8)
        ts = FIRST_TS + base_offset
        return encode_records_batch(raw[: self._end(len(ids))].tobytes(), count=len(ids),
                                    base_offset=base_offset, last_offset_delta=len(ids) - 1,
                                    base_timestamp=ts, max_timestamp=ts + len(ids) - 1)

    def _end(self, count: int) -> int:
        return len(self.raw) if count == PER_BATCH else int(self.record_starts[count])


def generate(workdir: Path, keys: int) -> tuple[Path, int, float]:
    """Write (or reuse) the partition; return its directory, its record count and the seconds taken."""
    log_dir = workdir / f"distmap-{keys}"
    part, records = log_dir / "bench-0", keys + keys // 10
    if (log_dir / "done").exists():
        return part, records, 0.0
    started = time.perf_counter()
    shutil.rmtree(log_dir, ignore_errors=True)
    part.mkdir(parents=True)
    template, base, size = BatchTemplate(), 0, 0
    batches: list[bytes] = []
    for first in range(0, records, PER_BATCH):
        data = template.batch(first, key_ids(first, min(PER_BATCH, records - first), keys))
        if size + len(data) > SEGMENT_BYTES and batches:
            write_segment(part, base, batches)
            base, size, batches = first, 0, []
        batches.append(data)
        size += len(data)
    write_segment(part, base, batches)
    write_segment(part, records, [])  # the empty active segment
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("bench", 0): records})
    _check_sample(part, keys)
    (log_dir / "done").write_text("ok")
    return part, records, time.perf_counter() - started


def _check_sample(part: Path, keys: int) -> None:
    """Decode the first and last batch of every segment with kcompact's decoder and check the keys."""
    for log in sorted(part.glob("*.log")):
        batches = [b for b in iter_batches(log.read_bytes()) if isinstance(b, RecordBatch)]
        for batch in batches[:1] + batches[-1:]:
            recs = decode_records(batch)
            want = key_ids(batch.base_offset, len(recs), keys)
            if [r.key for r in recs] != [b"key-%012d" % k for k in want.tolist()]:
                raise SystemExit(f"{log}: generated keys do not decode back at {batch.base_offset}")


def tree_digest(log_dir: Path) -> dict[str, str]:
    """sha256 of every file of the log dir (kcompact's empty lock files aside)."""
    out = {}
    for path in sorted(log_dir.rglob("*")):
        if path.is_file() and not path.name.endswith(".lock") and path.name != "done":
            with path.open("rb") as fh:
                out[str(path.relative_to(log_dir))] = hashlib.file_digest(fh, "sha256").hexdigest()
    return out


# --- the two cleans, each in a child process ---------------------------------------------------


def _clean_serial(part: Path) -> dict[str, Any]:
    from kcompact.cleaner.round.options import CleanOptions
    from kcompact.cleaner.workers.bound_clean import clean_partition
    from kcompact.config.topic_config import defaults_with_overrides

    config = defaults_with_overrides(CONFIG)
    started = time.perf_counter()
    result = clean_partition(part, config, CleanOptions(now_ms=NOW_MS))
    return {"seconds": time.perf_counter() - started, "stats": result.stats.as_dict(),
            "rss_mib": _rss_mib(resource.RUSAGE_SELF)}


def _clean_distributed(part: Path, budget: int) -> dict[str, Any]:
    from kcompact.cleaner.round.options import CleanOptions
    from kcompact.config.topic_config import defaults_with_overrides
    from kcompact.spark.distributed_map import clean_partition_distributed, needs_distributed_map
    from kcompact.spark.session import spark_session

    config = defaults_with_overrides(CONFIG)
    options = CleanOptions(now_ms=NOW_MS)
    started = time.perf_counter()
    needs = needs_distributed_map(part, config, options, budget)
    estimate = time.perf_counter() - started
    started = time.perf_counter()
    spark = spark_session()
    session = time.perf_counter() - started
    sampler = _TreeSampler(spark.sparkContext._gateway.proc.pid)  # type: ignore[union-attr]
    started = time.perf_counter()
    result = clean_partition_distributed(spark, part, config, options)
    seconds = time.perf_counter() - started
    sampler.stop()
    spark.stop()
    return {"seconds": seconds, "session_seconds": session, "estimate_seconds": estimate,
            "needs": needs, "stats": result.stats.as_dict(), "rss_mib": _rss_mib(resource.RUSAGE_SELF),
            "jvm_mib": sampler.jvm_peak / 1024, "workers_mib": sampler.workers_peak / 1024}


def _rss_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


class _TreeSampler:
    """Peak RSS (KiB) of the JVM and, summed, of every process below it (the Python workers)."""

    def __init__(self, jvm_pid: int) -> None:
        self.jvm_pid, self.jvm_peak, self.workers_peak = jvm_pid, 0, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(0.2):
            tree = _descendants(self.jvm_pid)
            self.jvm_peak = max(self.jvm_peak, _status_kib(self.jvm_pid, "VmHWM:"))
            self.workers_peak = max(self.workers_peak, sum(_status_kib(p, "VmRSS:") for p in tree))


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _child(kind: str, part: Path, budget: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", kind, "--map-budget", str(budget), str(part)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} clean failed:\n{proc.stderr[-4000:]}")
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


# --- the section ---------------------------------------------------------------------------------


def bench_distmap(args: object, workdir: Path) -> list[Row]:
    """Generate, clean both ways on fresh copies, compare; the rows of the section."""
    keys = getattr(args, "distmap_keys", KEYS)
    budget = getattr(args, "map_budget", MAP_BUDGET)
    source, records, generate_seconds = generate(workdir, keys)
    runs = {}
    for kind in ("serial", "distributed"):
        target = workdir / f"run-{kind}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source.parent, target, ignore=shutil.ignore_patterns("done"))
        runs[kind] = _child(kind, target / source.name, budget)
    same = tree_digest(workdir / "run-serial") == tree_digest(workdir / "run-distributed")
    serial, dist = runs["serial"], runs["distributed"]
    size = sum(p.stat().st_size for p in source.glob("*.log"))
    rows: list[Row] = [
        ("distinct keys", keys, "rec"),
        ("records", records, "rec"),
        ("partition MB", size / 1e6, "MB"),
        ("generate seconds (0 when reused)", generate_seconds, "s"),
        ("map budget MiB", budget / 2**20, "MiB"),
        ("needs_distributed_map (1 = yes)", float(dist["needs"]), "x"),
        ("needs_distributed_map seconds", dist["estimate_seconds"], "s"),
        ("serial clean seconds", serial["seconds"], "s"),
        ("serial peak RSS", serial["rss_mib"], "MiB"),
        ("serial map keys", serial["stats"]["map_entries"], "rec"),
        ("serial map MiB", serial["stats"]["map_memory_bytes"] / 2**20, "MiB"),
        ("spark session start seconds", dist["session_seconds"], "s"),
        ("distributed clean seconds", dist["seconds"], "s"),
        ("distributed map keys", dist["stats"]["map_entries"], "rec"),
        ("distributed groups", dist["stats"]["groups"], "x"),
        ("driver (Python) peak RSS", dist["rss_mib"], "MiB"),
        ("JVM (driver + local executors) peak RSS", dist["jvm_mib"], "MiB"),
        ("Python workers peak RSS, summed", dist["workers_mib"], "MiB"),
        ("same bytes as the serial clean (1 = yes)", float(same), "x"),
    ]
    for kind in runs:
        shutil.rmtree(workdir / f"run-{kind}", ignore_errors=True)
    if not same:
        raise SystemExit("the distributed clean differs from the serial clean")
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the section alone (or, with ``--child``, one clean of it)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", dest="distmap_keys", type=int, default=KEYS)
    parser.add_argument("--map-budget", type=int, default=MAP_BUDGET)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--child", choices=("serial", "distributed"), help=argparse.SUPPRESS)
    parser.add_argument("partition", nargs="?", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "serial":
        print(json.dumps(_clean_serial(args.partition)))
        return 0
    if args.child == "distributed":
        print(json.dumps(_clean_distributed(args.partition, args.map_budget)))
        return 0
    workdir = args.workdir or Path(os.environ.get("TMPDIR", "/tmp")) / "kcompact-bench-distmap"
    workdir.mkdir(parents=True, exist_ok=True)
    for name, value, unit in bench_distmap(args, workdir):
        print(f"{name:<45} {value:>16,.3f} {unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
