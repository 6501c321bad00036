"""The ``clean`` section of scripts/bench.py: kcompact clean on the issue's two shapes, against a plain copy.

Shapes (issue "kcompact clean", measured for Kafka's own cleaner on these 2-core machines):
  plain  2,000,000 uncompressed records, 100-byte values, 500,000 distinct keys, 200 per batch (~250 MB);
         Kafka: 3.1 s quiet (up to 5 s loaded), ~80 MB/s, ~650,000 records/s, ~410 MiB RSS, JVM start included
  zstd   400,000 zstd records, 1 KiB values, 100,000 keys, 50 per batch (~146 MB); Kafka: 3.6 s
Keys ``key-%012d`` uniform over the key space, values half random printable and half a fixed template,
64 MiB segments, timestamps 1 ms apart, written with kcompact's own writer; an empty active segment at the
end, so everything else is cleanable. The clean runs as ``kcompact clean --json`` in a child process (start-up
included, like Kafka's JVM start) on a fresh copy; the copy itself is the "plain copy of the same bytes".
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from kcompact.records.batch import encode_batch
from kcompact.records.record import Record
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.writer import write_segment

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
    base, size, batches, end = 0, 0, [], 0
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


def _child_clean(part: Path) -> tuple[float, dict[str, object], float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "kcompact", "clean", "--json", "--now-ms", str(FIRST_TS + 10**7), str(part)],
        capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "100"},
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"clean failed: {proc.stderr.strip()}")
    peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return seconds, json.loads(proc.stdout), peak


def bench_clean(args: object, workdir: Path) -> list[tuple[str, float, str]]:
    """Clean both shapes on fresh copies; report time, rates, RSS and the ratio to the copy."""
    scale = getattr(args, "clean_scale", 1.0)
    rows: list[tuple[str, float, str]] = []
    for name in SHAPES:
        source = generate(workdir, name, scale, getattr(args, "seed", 1))
        target = workdir / f"run-{name}"
        shutil.rmtree(target, ignore_errors=True)
        start = time.perf_counter()
        shutil.copytree(source.parent, target)
        copy_seconds = time.perf_counter() - start
        seconds, report, peak = _child_clean(target / source.name)
        stats = report["results"][0]["stats"]  # type: ignore[index]
        read = stats["bytes_read"]
        rows += [
            (f"{name}: bytes read", read / 1e6, "MB"),
            (f"{name}: records read", stats["records_read"], "rec"),
            (f"{name}: clean seconds (process start included)", seconds, "s"),
            (f"{name}: MB/s", read / seconds / 1e6, "MB/s"),
            (f"{name}: records/s", stats["records_read"] / seconds, "rec/s"),
            (f"{name}: size reduction", 100 * stats["size_reduction"], "%"),
            (f"{name}: offset map keys", stats["map_entries"], "rec"),
            (f"{name}: offset map bytes/key", stats["map_memory_bytes"] / max(1, stats["map_entries"]), "B"),
            (f"{name}: peak RSS of the clean process", peak, "MiB"),
            (f"{name}: plain copy of the same bytes seconds", copy_seconds, "s"),
            (f"{name}: clean / copy time ratio", seconds / copy_seconds, "x"),
        ]
        shutil.rmtree(target, ignore_errors=True)
    return rows
