"""The ``ratio`` section of scripts/bench.py: ``clean --jobs 1`` and the default ``clean --jobs auto``
against copying the same bytes, and against another kcompact tree, interleaved in one run; ``--profile``:
where a clean's time goes.

Per shape of ``bench_clean.SHAPES`` and per repetition (``--repeat``), back to back: ``cp -r`` of the
log dir, ``cp -r`` + ``sync``, ``kcompact clean --jobs 1`` and ``--jobs auto`` each on a fresh copy, and
with ``--baseline DIR`` the same two cleans by the kcompact source tree at DIR (``PYTHONPATH=DIR``; build
its extension in place first), every output checked identical to this tree's ``--jobs 1``. Interleaving
puts them all under the same load (the machine is shared); rows give the min and the median of the
repetitions and the load average. ``--jobs auto`` decides by the load too (``workers.parallel``): on a
busy machine it runs as ``--jobs 1``.

What a clean's CPU and peak RSS count: CPU, user + system of the clean process (its threads included)
plus its worker processes' (``RUSAGE_CHILDREN``); peak RSS, the clean process's own high-water mark
(``VmHWM``, its threads included) plus the largest worker's (``RUSAGE_CHILDREN``'s ``ru_maxrss`` is that
of the largest process only): exact for one process or threads, a lower bound with worker processes
(at most that sum plus one more worker's for each worker beyond the first that ran at once).

The floors (the machine's, one thread, measured in the same repetitions as the clean): **(a)**
``scripts/floor_clean.c``, compiled at run time with ``cc -O2``: read every input segment, CRC-32C every
input and output batch, write the kept bytes (the clean's output share), fsync; **(b)**, zstd shapes only,
python-zstandard at level 3 on bytes already in memory: decompress every input batch once and compress
again the share of each batch the clean rebuilds keeps (records kept in rebuilt batches over their
records), for as many batches as the clean rebuilds. The clean's CPU seconds (user + sys of its
process, start-up included) over (a), or over (a) + (b), is the ratio the speed goals are stated in.

``--kafka`` runs Kafka's own cleaner too (``bench_kafka``: one round in its own JVM, the broker's JVM options)
in every repetition, on a fresh copy, and checks kcompact's output against its output.

``--profile`` runs one clean of each shape in this process under ``cProfile`` and prints its time by
stage (the functions below, cumulative, so nested rows are already inside their parents), so the
next person sees where the time goes without a profiler of their own. Profiling slows Python calls,
so the shares of Python-heavy stages come out a little high.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_clean import FIRST_TS, SHAPES, _child_clean, _digests, generate
from bench_kafka import kafka_clean, kafka_command, same_as_kafka

Row = tuple[str, float, str]

# (label, file suffix, function name): cumulative time of each, as a share of the whole clean.
PROFILE_STAGES = [
    ("imports (kcompact.cli.main; first shape only: cached after)", "", "<module>"),
    ("load: log state (load_log_state)", "log_state.py", "load_log_state"),
    ("pass 1: build the offset map (whole)", "parallel.py", "build_offset_map"),
    ("  pass 1: runs of batches in C (scan_window_key_digests)", "records/scan/accel.py",
     "scan_window_key_digests"),
    ("  pass 1: key scan + hash, per batch (scan_key_digests)", "records/scan/__init__.py", "scan_key_digests"),
    ("  pass 1: key scan (scan_keys, legacy/reference)", "records/scan/__init__.py", "scan_keys"),
    ("  pass 1: hashing in Python (key_digests/digest_bytes)", "offset_map/__init__.py", "digest_bytes"),
    ("  pass 1: map puts (OffsetMap.put_batch)", "offset_map/__init__.py", "put_batch"),
    ("  pass 1: map sort/merge (OffsetMap._flush)", "offset_map/__init__.py", "_flush"),
    ("  pass 1: map freeze", "offset_map/__init__.py", "freeze"),
    ("oracle (sorted map offsets)", "oracle.py", "__init__"),
    ("pass 2: filter and write (whole)", "steps.py", "write_group"),
    ("  pass 2: windows of batches in C (take_runs)", "filter_windows.py", "take_runs"),
    ("    pass 2: C walk: headers, CRCs, records (scan_window_records)", "records/scan/accel.py",
     "scan_window_records"),
    ("    pass 2: C output: copy, drop, rebuild (emit_window)", "records/scan/accel.py", "emit_window"),
    ("  pass 2: record scan (scan_records)", "records/scan/__init__.py", "scan_records"),
    ("  pass 2: record decisions (keep_records)", "record_filter.py", "keep_records"),
    ("  pass 2: rebuild (filter_v2_batch)", "records/filter.py", "filter_v2_batch"),
    ("  pass 2: append + index (CleanedSegmentWriter.append_run)", "swap.py", "append_run"),
    ("CRC checks (crc_valid)", "batch_header.py", "crc_valid"),
    ("decompression (compression.decompress)", "records/compression.py",
     "decompress"),
    ("compression (compress)", "records/compression.py", "compress"),
    ("output self-check (check_cleaned_segment)", "verify_output.py", "check_cleaned_segment"),
    ("  self-check: C walk of plain output (batch_headers)", "records/scan/accel.py", "batch_headers"),
    ("swap + checkpoint (replace_segments)", "swap.py", "replace_segments"),
]


def _copy(source: Path, target: Path, sync: bool) -> float:
    shutil.rmtree(target, ignore_errors=True)
    command = f"cp -r '{source}' '{target}'" + (" && sync" if sync else "")
    start = time.perf_counter()
    subprocess.run(["sh", "-c", command], check=True)
    return time.perf_counter() - start


FLOOR_SOURCE = Path(__file__).resolve().parent / "floor_clean.c"
FLOOR_CRC = FLOOR_SOURCE.parent.parent / "kcompact" / "_native" / "crc32c.h"  # its CRC-32C, the kernels' own

# floor (b) in a child: reads the segments, then decompresses every batch once and compresses the kept
# share of the rebuilt ones again; prints its CPU seconds for that work alone (the reading is floor (a)'s)
_FLOOR_B = """
import sys, time, zstandard
rebuilt_per_mille, kept_per_mille = int(sys.argv[1]), int(sys.argv[2])
payloads = []
for path in sys.argv[3:]:
    data, at = open(path, "rb").read(), 0
    while at + 61 <= len(data):
        size = int.from_bytes(data[at + 8:at + 12], "big") + 12
        payloads.append(data[at + 61:at + size])
        at += size
started = time.process_time()
decompressor = zstandard.ZstdDecompressor()
compressor = zstandard.ZstdCompressor(level=3, write_content_size=False)
done = 0
for number, payload in enumerate(payloads):
    records = decompressor.decompressobj().decompress(payload)
    if (done + 1) * 1000 <= (number + 1) * rebuilt_per_mille:
        compressor.compress(records[: len(records) * kept_per_mille // 1000])
        done += 1
print(time.process_time() - started)
"""


def compile_floor(workdir: Path) -> Path:
    """floor (a)'s binary, compiled with ``cc -O2`` (once per workdir)."""
    binary = workdir / "floor_clean"
    newest = max(path.stat().st_mtime for path in (FLOOR_SOURCE, FLOOR_CRC))
    if not binary.exists() or binary.stat().st_mtime < newest:
        workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-o", str(binary), str(FLOOR_SOURCE)], check=True)
    return binary


def _segments(partition: Path) -> list[str]:
    return [str(path) for path in sorted(partition.glob("*.log")) if path.stat().st_size]


def _floor_a(binary: Path, partition: Path, out: Path, keep_per_mille: int) -> tuple[float, float]:
    """floor (a)'s wall and CPU seconds (user + sys of its process)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    start = time.perf_counter()
    proc = subprocess.Popen([str(binary), str(out), str(keep_per_mille), *_segments(partition)],
                            stdout=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"floor_clean exited {proc.returncode}")
    shutil.rmtree(out, ignore_errors=True)
    return seconds, usage.ru_utime + usage.ru_stime


def _floor_b(partition: Path, report: dict[str, Any]) -> float:
    """floor (b)'s CPU seconds (python-zstandard, level 3, one thread)."""
    read, rebuilt, copied = report["batches_read"], report["batches_rebuilt"], report["batches_copied"]
    per_batch = report["records_read"] / max(1, read)
    kept_in_rebuilt = report["records_written"] - copied * per_batch
    rebuilt_per_mille = 1000 * rebuilt // max(1, read)
    kept_per_mille = int(1000 * kept_in_rebuilt / max(1.0, rebuilt * per_batch))
    proc = subprocess.run([sys.executable, "-c", _FLOOR_B, str(rebuilt_per_mille), str(kept_per_mille),
                           *_segments(partition)], capture_output=True, text=True, check=True)
    return float(proc.stdout.strip())


def _summary(tag: str, values: list[float], unit: str = "s") -> list[Row]:
    return [(f"{tag} min", min(values), unit), (f"{tag} median", statistics.median(values), unit)]


def bench_ratio(args: object, workdir: Path) -> list[Row]:
    """cp -r, cp -r + sync, clean --jobs 1 and --jobs auto (and the baseline tree's), interleaved; min and median."""
    scale, seed = getattr(args, "clean_scale", 1.0), getattr(args, "seed", 1)
    repeat, baseline = max(1, getattr(args, "repeat", 3)), getattr(args, "baseline", None)
    rows: list[Row] = []
    floor_binary = compile_floor(workdir)
    kafka = kafka_command() if getattr(args, "kafka", False) else None
    if isinstance(kafka, str):
        print(kafka, file=sys.stderr)
    for name in SHAPES:
        source = generate(workdir, name, scale, seed)
        target = workdir / f"ratio-{name}"
        times: dict[str, list[float]] = {"cp": [], "sync": [], "clean": [], "auto": [], "base": [], "base_auto": [],
                                         "floor_a": [], "kafka": []}
        rss: dict[str, list[float]] = {"clean": [], "auto": [], "base": [], "base_auto": []}
        cpu: dict[str, list[float]] = {"clean": [], "auto": [], "base": [], "base_auto": [], "floor_a": [],
                                       "floor_b": [], "kafka": []}
        loads, identical, report = [], True, {}
        kafka_target, kafka_differs = workdir / f"kafka-{name}", None
        for _ in range(repeat):
            loads.append(os.getloadavg()[0])
            times["cp"].append(_copy(source.parent, target, sync=False))
            times["sync"].append(_copy(source.parent, target, sync=True))
            if isinstance(kafka, list):
                _copy(source.parent, kafka_target, sync=False)
                kafka_run = kafka_clean(kafka, kafka_target / source.name, FIRST_TS + 10**7)
                times["kafka"].append(kafka_run.seconds)
                cpu["kafka"].append(kafka_run.cpu_seconds)
            runs = [("clean", None, "1"), ("auto", None, "auto")]
            runs += [("base", baseline, "1"), ("base_auto", baseline, "auto")] if baseline else []
            outputs = []
            for key, tree, jobs in runs:
                _copy(source.parent, target, sync=False)
                run = _child_clean(target / source.name, jobs, pythonpath=tree)
                times[key].append(run.seconds)
                rss[key].append(run.own_rss_mib + run.worker_rss_mib)
                cpu[key].append(run.cpu_seconds + run.worker_cpu_seconds)
                outputs.append(_digests(target))
                if key == "clean":
                    report = run.report["results"][0]
                if key == "clean" and isinstance(kafka, list) and kafka_differs is None:
                    kafka_differs = same_as_kafka(target / source.name, kafka_target / source.name)
                    print(f"{name}: the same as Kafka's cleaner: "
                          f"{'yes' if not kafka_differs else 'no: ' + '; '.join(kafka_differs[:3])}",
                          file=sys.stderr)
            identical = identical and all(out == outputs[0] for out in outputs)
            keep = round(1000 * (1 - report["size_reduction"]))
            wall, floor_cpu = _floor_a(floor_binary, source, workdir / f"floor-{name}", keep)
            times["floor_a"].append(wall)
            cpu["floor_a"].append(floor_cpu)
            if SHAPES[name]["codec"]:
                cpu["floor_b"].append(_floor_b(source, report))
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(kafka_target, ignore_errors=True)
        rows += _shape_rows(name, times, rss, cpu, loads, report)
        if times["kafka"]:
            rows += _kafka_rows(name, times, cpu, kafka_differs or [])
        if baseline:
            for key, this, jobs in (("base", "clean", "1"), ("base_auto", "auto", "auto")):
                rows += _summary(f"{name}: baseline clean --jobs {jobs} seconds", times[key])
                rows += _summary(f"{name}: baseline --jobs {jobs} CPU seconds (user + sys, workers too)", cpu[key])
                rows.append((f"{name}: baseline --jobs {jobs} peak RSS (max; own + largest worker)",
                             max(rss[key]), "MiB"))
                rows.append((f"{name}: baseline / this, --jobs {jobs} (min/min)",
                             min(times[key]) / min(times[this]), "x"))
                rows.append((f"{name}: baseline --jobs {jobs} CPU / floor (min/min)", min(cpu[key]) / _floor(cpu), "x"))
        rows.append((f"{name}: every output identical to --jobs 1's (1 if yes)", float(identical), "yes"))
    if getattr(args, "profile", False):
        for name in SHAPES:
            print_profile(name, generate(workdir, name, scale, seed), workdir)
    return rows


def _kafka_rows(name: str, times: dict[str, list[float]], cpu: dict[str, list[float]],
                differs: list[str]) -> list[Row]:
    """Kafka's own cleaner beside the clean (``bench_kafka``): its times, the ratio the wall goal is stated in."""
    rows = _summary(f"{name}: Kafka's cleaner seconds (one round, JVM start included)", times["kafka"])
    rows += _summary(f"{name}: Kafka's cleaner CPU seconds (user + sys, every JVM thread)", cpu["kafka"])
    for key, jobs in (("clean", "1"), ("auto", "auto")):
        rows.append((f"{name}: clean --jobs {jobs} / Kafka's cleaner, wall (min/min)",
                     min(times[key]) / min(times["kafka"]), "x"))
        rows.append((f"{name}: clean --jobs {jobs} / Kafka's cleaner, wall (median/median)",
                     statistics.median(times[key]) / statistics.median(times["kafka"]), "x"))
    rows.append((f"{name}: output the same as Kafka's cleaner's (1 if yes)", float(not differs), "yes"))
    return rows


def _floor(cpu: dict[str, list[float]]) -> float:
    """The shape's floor in CPU seconds: (a), plus (b) where it has one (best of each)."""
    return min(cpu["floor_a"]) + (min(cpu["floor_b"]) if cpu["floor_b"] else 0.0)


def _shape_rows(name: str, times: dict[str, list[float]], rss: dict[str, list[float]],
                cpu: dict[str, list[float]], loads: list[float], report: dict[str, Any]) -> list[Row]:
    best = min(times["clean"])
    floor_name = "floor (a) + (b)" if cpu["floor_b"] else "floor (a)"
    rows = [(f"{name}: 1-minute load average, median", statistics.median(loads), "load")]
    rows += _summary(f"{name}: cp -r seconds", times["cp"])
    rows += _summary(f"{name}: cp -r + sync seconds", times["sync"])
    for key, jobs in (("clean", "1"), ("auto", "auto")):
        rows += _summary(f"{name}: clean --jobs {jobs} seconds", times[key])
        rows.append((f"{name}: clean --jobs {jobs} MB/s (best)", report["bytes_read"] / min(times[key]) / 1e6,
                     "MB/s"))
        rows += _summary(f"{name}: clean --jobs {jobs} CPU seconds (user + sys, workers too)", cpu[key])
        rows.append((f"{name}: clean --jobs {jobs} peak RSS (max; own + largest worker)", max(rss[key]), "MiB"))
    rows += _summary(f"{name}: floor (a) CPU seconds (C: read, CRC-32C, write, fsync)", cpu["floor_a"])
    rows.append((f"{name}: floor (a) MB/s (best wall)", report["bytes_read"] / min(times["floor_a"]) / 1e6,
                 "MB/s"))
    if cpu["floor_b"]:
        rows += _summary(f"{name}: floor (b) CPU seconds (zstd: decompress all, recompress rebuilt)",
                         cpu["floor_b"])
    rows.append((f"{name}: clean CPU / {floor_name} CPU (min/min)", min(cpu["clean"]) / _floor(cpu), "x"))
    rows.append((f"{name}: clean --jobs auto CPU / {floor_name} CPU (min/min)", min(cpu["auto"]) / _floor(cpu), "x"))
    rows.append((f"{name}: clean / cp -r (min/min)", best / min(times["cp"]), "x"))
    rows.append((f"{name}: clean / cp -r + sync (min/min)", best / min(times["sync"]), "x"))
    return rows


def print_profile(name: str, partition: Path, workdir: Path) -> None:
    """One in-process ``clean --jobs 1`` of a fresh copy under cProfile, printed by stage."""
    target = workdir / f"profile-{name}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(partition.parent, target)
    argv = ["clean", "--json", "--now-ms", str(FIRST_TS + 10**7), "--config",
            "cleanup.policy=compact", "--jobs", "1", str(target / partition.name)]
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    try:
        _run_cli(argv)
    finally:
        profiler.disable()
    total = time.perf_counter() - start
    shutil.rmtree(target, ignore_errors=True)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    print(f"== profile: {name} clean --jobs 1, {total:.3f} s under cProfile ==")
    for label, suffix, function in PROFILE_STAGES:
        seconds = _cumulative(stats, suffix, function)
        print(f"  {label:<58} {seconds:7.3f} s {100 * seconds / total:5.1f} %")


def _run_cli(argv: list[str]) -> None:
    import contextlib
    import io

    from kcompact.cli.main import cli  # imported here: its import time is a stage

    with contextlib.redirect_stdout(io.StringIO()):
        try:
            cli(args=argv, prog_name="kcompact")
        except SystemExit as done:
            if done.code not in (0, None):
                raise


def _cumulative(stats: dict[tuple[str, int, str], tuple[int, int, float, float, object]],
                suffix: str, function: str) -> float:
    """Cumulative seconds of ``function`` in files ending with ``suffix`` (module bodies: kcompact's
    own top-level imports, counted once each, outermost only)."""
    if function == "<module>":
        return max((cum for (path, _line, fn), (_c, _n, _t, cum, _callers) in stats.items()
                    if fn == "<module>" and path.endswith("kcompact/cli/main.py")), default=0.0)
    return sum(cum for (path, _line, fn), (_c, _n, _t, cum, _callers) in stats.items()
               if fn == function and path.endswith(suffix) and "kcompact" in path)
