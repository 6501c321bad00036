"""The ``legacy`` section of scripts/bench.py: cleaning legacy (magic 0/1) data against the same records as v2.

Shapes, all the same 120,000 records (offsets 0.., timestamps 1 ms apart, keys ``key-%d`` drawn from 2,000,
100-byte values; the lead's measurement of issue 27), written with kcompact's own writers into one segment
and an empty active segment, so that everything is cleanable:
  legacy         magic 1, one uncompressed message per entry (~17 MB)
  legacy-gzip    magic 1, gzip wrappers of 100 messages
  v2             magic 2, 200 records a batch, uncompressed
  v2-gzip        magic 2, gzip batches of 100 records (the wrappers' v2 counterpart)
  v2-single      magic 2, one record a batch (a legacy message's v2 counterpart, batch for entry)
  legacy-distinct, v2-distinct: legacy and v2 (200 a batch) with every key distinct: every record kept
                 (v2 batches are copied whole; every legacy message becomes a v2 batch of one record)

Each is cleaned by ``kcompact clean --json --jobs 1`` in a child process (scripts/bench_clean.py's, start-up
included) on a fresh copy, the best of ``--repeat``; the rows give wall and CPU seconds (user + system of the
clean process: what a loaded machine disturbs least), MB/s over the CPU time, peak RSS, and each legacy
shape's CPU-time ratio to its v2 counterparts. The child's CPU time includes the interpreter's start and
imports (a clean with nothing to clean: the "start-up" row), which dwarf a clean this size; so each shape
is also cleaned by ``clean_partition`` in this process (a fresh copy, ``process_time``), and the ratios
of those times are the clean's own. Every legacy clean is checked file by file against the
pure-Python reference (``KCOMPACT_NO_ACCEL=1``). With ``--baseline DIR`` (another kcompact source tree, its
extension built in place) the legacy shapes are also cleaned by that tree, so before and after come out of
one run, on one machine load.
"""

from __future__ import annotations

import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import defaults_with_overrides
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Record
from kcompact.segment.checkpoint import write_offset_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_clean import FIRST_TS, ChildRun, _child_clean, _digests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ builders
from tests.encoders import encode_legacy_message, encode_legacy_wrapper
from tests.segment_writer import write_segment

Row = tuple[str, float, str]
NOW_MS = FIRST_TS + 10**7  # the --now-ms of bench_clean's children
RECORDS = 120_000
KEYS = 2_000
VALUE_SIZE = 100
GZIP = 1
SHAPES = ("legacy", "legacy-gzip", "v2", "v2-gzip", "v2-single", "legacy-distinct", "v2-distinct")
COUNTERPARTS = {"legacy": ("v2", "v2-single"), "legacy-gzip": ("v2-gzip", "v2-single"),
                "legacy-distinct": ("v2-distinct",)}


def _records(seed: int, distinct: bool) -> list[Record]:
    rng = random.Random(seed)
    return [Record(offset, FIRST_TS + offset,
                   b"key-%d" % (offset if distinct else rng.randrange(KEYS)), rng.randbytes(VALUE_SIZE))
            for offset in range(RECORDS)]


def _groups(records: list[Record], size: int) -> list[list[Record]]:
    return [records[at : at + size] for at in range(0, len(records), size)]


def _entries(shape: str, records: list[Record]) -> list[bytes]:
    shape = shape.removesuffix("-distinct")
    if shape == "legacy":
        return [encode_legacy_message(offset=r.offset, magic=1, key=r.key, value=r.value,
                                      timestamp=r.timestamp) for r in records]
    if shape == "legacy-gzip":
        return [encode_legacy_wrapper(g, magic=1, compression=GZIP) for g in _groups(records, 100)]
    per_batch, codec = {"v2": (200, 0), "v2-gzip": (100, GZIP), "v2-single": (1, 0)}[shape]
    return [encode_batch(g, base_offset=g[0].offset, compression=codec) for g in _groups(records, per_batch)]


def generate(workdir: Path, shape: str, seed: int) -> Path:
    """Write (or reuse) the shape's log dir; return its partition directory."""
    log_dir = workdir / f"legacy-{shape}-{seed}"
    part = log_dir / "bench-0"
    if (log_dir / "done").exists():
        return part
    shutil.rmtree(log_dir, ignore_errors=True)
    end = 0 if shape == "empty" else RECORDS
    if end:
        write_segment(part, 0, _entries(shape, _records(seed, shape.endswith("-distinct"))))
    write_segment(part, end, [])  # the empty active segment
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("bench", 0): end})
    (log_dir / "done").write_text("ok")
    return part


_warmed: set[str] = set()  # trees whose bytecode cache the first clean has written (not counted)


def _best(source: Path, target: Path, repeat: int, **kwargs: Any) -> ChildRun:
    """The clean of a fresh copy with the least CPU time of ``repeat``."""
    runs = []
    tree = str(kwargs.get("pythonpath"))
    extra = 0 if tree in _warmed else 1
    _warmed.add(tree)
    for _ in range(max(1, repeat) + extra):
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source.parent, target)
        runs.append(_child_clean(target / source.name, "1", **kwargs))
    return min(runs[extra:], key=lambda run: run.cpu_seconds)


def _in_process(source: Path, target: Path, repeat: int) -> float:
    """The least CPU seconds of ``clean_partition`` itself (no interpreter start, no imports) on a fresh
    copy, in this process: the clean's own throughput."""
    config = defaults_with_overrides({"cleanup.policy": "compact"})
    best = float("inf")
    for _ in range(max(1, repeat)):
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source.parent, target)
        started = time.process_time()
        clean_partition(target / source.name, config, CleanOptions(now_ms=NOW_MS, jobs=1))
        best = min(best, time.process_time() - started)
    return best


def _rows(tag: str, run: ChildRun) -> list[Row]:
    read = run.report["results"][0]["bytes_read"]
    return [
        (f"{tag}: CPU seconds (user + system)", run.cpu_seconds, "s"),
        (f"{tag}: wall seconds", run.seconds, "s"),
        (f"{tag}: MB/s of CPU time", read / run.cpu_seconds / 1e6, "MB/s"),
        (f"{tag}: peak RSS", run.own_rss_mib, "MiB"),
    ]


def bench_legacy(args: object, workdir: Path) -> list[Row]:
    """Clean each shape (and, with ``--baseline``, the legacy ones with that tree too); CPU ratios."""
    seed, repeat = getattr(args, "seed", 1), getattr(args, "repeat", 3)
    baseline: Path | None = getattr(args, "baseline", None)
    rows: list[Row] = []
    cpu: dict[str, float] = {}
    inside: dict[str, float] = {}
    for shape in SHAPES:
        source = generate(workdir, shape, seed)
        target = workdir / f"run-legacy-{shape}"
        rows.append((f"{shape}: segment size", source.joinpath("00000000000000000000.log").stat().st_size / 1e6,
                     "MB"))
        run = _best(source, target, repeat)
        cpu[shape] = run.cpu_seconds
        rows += _rows(shape, run)
        inside[shape] = _in_process(source, target, repeat)
        rows.append((f"{shape}: CPU seconds of clean_partition in process", inside[shape], "s"))
        if shape in COUNTERPARTS:
            produced = _digests(target)
            _best(source, target, 1, reference=True)
            same = _digests(target) == produced
            rows.append((f"{shape}: identical to the reference (KCOMPACT_NO_ACCEL=1), 1 if yes", float(same),
                         "yes"))
            if baseline is not None:
                before = _best(source, target, repeat, pythonpath=baseline)
                rows += _rows(f"{shape} [baseline {baseline.name}]", before)
                rows.append((f"{shape} [baseline]: identical output, 1 if yes",
                             float(_digests(target) == produced), "yes"))
                rows.append((f"{shape}: baseline / this tree CPU time", before.cpu_seconds / run.cpu_seconds, "x"))
        shutil.rmtree(target, ignore_errors=True)
    start = _best(generate(workdir, "empty", seed), workdir / "run-legacy-empty", repeat).cpu_seconds
    shutil.rmtree(workdir / "run-legacy-empty", ignore_errors=True)
    rows.append(("start-up: CPU seconds of a clean with nothing to clean", start, "s"))
    for shape, counterparts in COUNTERPARTS.items():
        for other in counterparts:
            rows.append((f"{shape} / {other} CPU time", cpu[shape] / cpu[other], "x"))
            rows.append((f"{shape} / {other} CPU time of clean_partition in process",
                         inside[shape] / inside[other], "x"))
    return rows
