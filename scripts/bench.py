"""kcompact benchmarks, one section per hot path.

    python scripts/bench.py                 # every section
    python scripts/bench.py scan            # one section
    python scripts/bench.py scan --json     # machine-readable
    python scripts/bench.py scan --workdir /tmp/kc-bench   # keep (and reuse) the generated data

Sections:
    inspect  inspect dirty-ratio over 10 000 partitions (scripts/bench_inspect.py has the keys report too).
    report kcompact report --from the Parquet rows of 100 000 partitions over 2 000 topics: the page's time and size.
    clean  kcompact clean on two benchmark shapes (scripts/bench_clean.py), against a plain copy.
    ratio  clean --jobs 1 and --jobs auto against cp -r and cp -r + sync of the same bytes and (--baseline DIR) another
           kcompact tree, interleaved, min and median (scripts/bench_ratio.py); --profile: time by stage.
    legacy clean legacy (magic 0/1) data, plain and gzip wrappers, against the same records as v2
           (scripts/bench_legacy.py): CPU seconds and their ratios; --baseline DIR: before and after.
    spark-scale  6 log dirs x 200 partitions at 1x and 10x the records: serial clean --jobs auto, spark clean
           on local[2] and on a standalone cluster of two workers; the driver's CPU and memory, bytes read
           (scripts/bench_spark_scale.py).
    start  CPU seconds of the imports a clean needs (numpy's share beside them; and once it rewrites) and of
           clean of a 13 KiB broker-written partition whose config is in a KRaft metadata log (and of README's
           sample partition, which rewrites), beside the goals (0.08 s, 0.12 s).
    tiny   clean LOG_DIR --jobs 1 of N tiny partitions (88 KB, eight segments) at two N (--tiny-counts):
           CPU ms per partition, which should not grow with N; --kafka: each N's wall, clean --jobs 1 and the
           default jobs, beside Kafka's cleaner over the same log dir in one JVM with two cleaner threads.
    codecs240  240 small compacted partitions, 60 each of gzip, snappy, lz4, zstd (~450 MB): clean LOG_DIR wall,
           --jobs 1 and the default jobs; --kafka: beside Kafka's cleaner as in tiny.
    scan   records.scan over a generated segment: scan_keys, scan_records and the rebuild of
           filter_v2_batch over every batch, with the C kernels and with the pure-Python
           reference, against the cost of copying the same bytes (shutil.copyfile, in memory).

Adding a section: write ``def bench_<name>(args, workdir) -> list[Row]`` and register it in
``SECTIONS``. A row is (metric, value, unit); ``--json`` prints ``{section: {metric: value}}``.

Data is generated deterministically (``--seed``) with kcompact's own writer (``encode_batch``), so
two runs on one machine measure the same bytes. Timings are wall-clock (``time.perf_counter``),
the fastest of ``--repeat`` passes, with the file in the page cache (it was just written; the
file copy includes unlinking the copy). Peak RSS is the process's ``ru_maxrss``, which includes the whole segment
read into memory.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kcompact.records.batch import iter_batches
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.batch_header import RecordBatch
from kcompact.records.filter import BatchRetention, filter_v2_batch
from kcompact.records.record import Record, decode_records, records_bytes
from kcompact.records.scan import accel, scan_keys, scan_records

Row = tuple[str, float, str]

SCAN_KEY_SPACE = 500_000  # keys key-%012d drawn uniformly from this many
SCAN_VALUE_SIZE = 100  # half random printable, half a fixed template
SCAN_RECORDS_PER_BATCH = 200
SCAN_FIRST_TIMESTAMP_MS = 1_700_000_000_000  # records are 1 ms apart from here
SCAN_DECODE_SAMPLE = 50_000  # records the full decoder is timed on, for comparison
_PRINTABLE = bytes(range(0x20, 0x7F))
_TO_PRINTABLE = bytes(_PRINTABLE[i % len(_PRINTABLE)] for i in range(256))  # bytes.translate table


@dataclass(frozen=True, slots=True)
class ScanData:
    """The generated segment: where it is and what it holds."""

    path: Path
    records: int
    batches: int
    size_in_bytes: int


def _scan_batches(rng: random.Random, records: int) -> Iterator[bytes]:
    """The segment's batches, in order: 200 records each, offsets from 0, timestamps 1 ms apart."""
    half = SCAN_VALUE_SIZE // 2
    template = (b"kcompact-bench-template-" * 4)[: SCAN_VALUE_SIZE - half]
    for base_offset in range(0, records, SCAN_RECORDS_PER_BATCH):
        n = min(SCAN_RECORDS_PER_BATCH, records - base_offset)
        noise = rng.randbytes(half * n).translate(_TO_PRINTABLE)
        batch = [
            Record(
                offset=base_offset + i,
                timestamp=SCAN_FIRST_TIMESTAMP_MS + base_offset + i,
                key=b"key-%012d" % rng.randrange(SCAN_KEY_SPACE),
                value=noise[i * half : (i + 1) * half] + template,
            )
            for i in range(n)
        ]
        yield encode_batch(batch, base_offset=base_offset)


def generate_scan_segment(workdir: Path, records: int, seed: int) -> ScanData:
    """Write (or reuse, when one with the same parameters exists) the scan section's segment."""
    directory = workdir / f"scan-{records}-{seed}-0"
    path = directory / "00000000000000000000.log"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".log.tmp")
        with partial.open("wb") as out:
            for batch in _scan_batches(random.Random(seed), records):
                out.write(batch)
        partial.rename(path)
    batches = -(-records // SCAN_RECORDS_PER_BATCH)
    return ScanData(path, records, batches, path.stat().st_size)


def _timed(fn: Callable[[], int], repeat: int = 1) -> tuple[float, int]:
    """Best wall-clock seconds of ``repeat`` runs (the least disturbed by other processes)."""
    best = float("inf")
    result = 0
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def _v2_batches(data: bytes) -> Iterator[RecordBatch]:
    """The segment's batches (the generated segment holds only v2 batches)."""
    for batch in iter_batches(data):
        if isinstance(batch, RecordBatch):
            yield batch


def _walk(data: bytes) -> int:
    return sum(1 for _batch in _v2_batches(data))


def _keys_pass(data: bytes) -> int:
    seen = 0
    for batch in _v2_batches(data):
        offsets, _keys = scan_keys(
            records_bytes(batch), base_offset=batch.base_offset, count=batch.records_count
        )
        seen += len(offsets)
    return seen


def _records_pass(data: bytes) -> int:
    seen = 0
    for batch in _v2_batches(data):
        columns = scan_records(
            records_bytes(batch), base_offset=batch.base_offset,
            base_timestamp=batch.base_timestamp, count=batch.records_count,
        )
        seen += columns.count
    return seen


def _rebuild_pass(data: bytes) -> float:
    """Seconds inside filter_v2_batch rebuilding every batch with every other record kept."""
    spent = 0.0
    for batch in _v2_batches(data):
        columns = scan_records(
            records_bytes(batch), base_offset=batch.base_offset,
            base_timestamp=batch.base_timestamp, count=batch.records_count,
        )
        keep = list(range(0, columns.count, 2))
        start = time.perf_counter()
        filter_v2_batch(batch, columns, keep, retention=BatchRetention.DELETE_EMPTY,
                        delete_horizon_ms=None)
        spent += time.perf_counter() - start
    return spent


def _kernel_rows(data: bytes, scan: ScanData, repeat: int, compiled: bool) -> list[Row]:
    """scan_keys, scan_records and the rebuild, with the C kernels or the pure-Python reference."""
    saved = accel.enabled
    accel.enabled = compiled
    try:
        keys_seconds, keys_seen = _timed(lambda: _keys_pass(data), repeat)
        records_seconds, records_seen = _timed(lambda: _records_pass(data), repeat)
        rebuild_seconds = min(_rebuild_pass(data) for _ in range(repeat))
    finally:
        accel.enabled = saved
    if not keys_seen == records_seen == scan.records:
        raise SystemExit(f"scan saw {keys_seen}/{records_seen} records; expected {scan.records}")
    tag, size = ("C" if compiled else "Python"), scan.size_in_bytes
    return [
        *_rate_rows(f"scan_keys [{tag}]", keys_seconds, scan.records, size),
        *_rate_rows(f"scan_records [{tag}]", records_seconds, scan.records, size),
        *_rate_rows(f"rebuild, half kept [{tag}]", rebuild_seconds, scan.records, size),
    ]  # bench_scan finds the seconds rows by the name before " ["


def _decode_pass(data: bytes, limit: int) -> int:
    seen = 0
    for batch in _v2_batches(data):
        seen += len(decode_records(batch))
        if seen >= limit:
            break
    return seen


def _copy_file(source: Path) -> int:
    target = source.with_name("copy.log")
    shutil.copyfile(source, target)
    target.unlink()
    return 0


def _copy_times(scan: ScanData, data: bytes, repeat: int) -> tuple[float, float]:
    """Seconds to copy the segment file, and to copy its bytes in memory."""
    file_seconds, _ = _timed(lambda: _copy_file(scan.path), repeat)
    # bytes(data) or data[:] would return the same object; a memoryview forces the copy
    memory_seconds, _ = _timed(lambda: len(bytes(memoryview(data))), repeat)
    return file_seconds, memory_seconds


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _rate_rows(name: str, seconds: float, records: int, size_in_bytes: int) -> list[Row]:
    return [
        (f"{name} seconds", seconds, "s"),
        (f"{name} records/s", records / seconds, "rec/s"),
        (f"{name} MB/s", size_in_bytes / seconds / 1e6, "MB/s"),
    ]


def bench_scan(args: argparse.Namespace, workdir: Path) -> list[Row]:
    """records.scan and the rebuild over a generated segment, C and Python, next to a copy."""
    started = time.perf_counter()
    scan = generate_scan_segment(workdir, args.records, args.seed)
    generate_seconds = time.perf_counter() - started
    data = scan.path.read_bytes()
    walk_seconds, batches = _timed(lambda: _walk(data), args.repeat)
    if batches != scan.batches:
        raise SystemExit(f"the walk saw {batches} batches; expected {scan.batches}")
    compiled = _kernel_rows(data, scan, args.repeat, True) if accel.kernels is not None else []
    reference = _kernel_rows(data, scan, args.repeat, False)
    decode_seconds, decoded = _timed(lambda: _decode_pass(data, SCAN_DECODE_SAMPLE), args.repeat)
    scan_rss = _peak_rss_mib()
    file_copy, memory_copy = _copy_times(scan, data, args.repeat)
    seconds = {name.split(" [")[0]: value
               for name, value, _ in compiled or reference if name.endswith(" seconds")}
    keys_seconds, records_seconds = seconds["scan_keys"], seconds["scan_records"]
    return [
        ("records", scan.records, "rec"),
        ("batches", scan.batches, "batch"),
        ("segment size", scan.size_in_bytes / 1e6, "MB"),
        ("generate (encode_batch) seconds, ~0 if reused", generate_seconds, "s"),
        ("C kernels built (kcompact.records.scan._accel): 1 yes, 0 no", float(bool(compiled)), "flag"),
        ("batch walk only (iter_batches) seconds", walk_seconds, "s"),
        *compiled,
        *reference,
        ("decode_records sample", decoded, "rec"),
        ("decode_records records/s", decoded / decode_seconds, "rec/s"),
        ("shutil.copyfile seconds", file_copy, "s"),
        ("in-memory bytes copy seconds", memory_copy, "s"),
        ("scan_keys / copyfile time ratio (C when built)", keys_seconds / file_copy, "x"),
        ("scan_records / copyfile time ratio (C when built)", records_seconds / file_copy, "x"),
        ("scan_keys / memory copy time ratio (C when built)", keys_seconds / memory_copy, "x"),
        ("peak RSS after the scans (segment in memory)", scan_rss, "MiB"),
        ("peak RSS after the copies (+ a second copy)", _peak_rss_mib(), "MiB"),
    ]


def _bench_clean(args: argparse.Namespace, workdir: Path) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_clean import bench_clean

    return bench_clean(args, workdir)


def _bench_ratio(args: argparse.Namespace, workdir: Path) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_ratio import bench_ratio

    return bench_ratio(args, workdir)


def _bench_legacy(args: argparse.Namespace, workdir: Path) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_legacy import bench_legacy

    return bench_legacy(args, workdir)


def _bench_inspect(args: argparse.Namespace, workdir: Path) -> list[Row]:
    """inspect dirty-ratio over a log dir of 10 000 small partitions (target: under 5 s), wall and CPU."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_inspect import NOW_MS, best_of, make_log_dir

    from kcompact.inspect.dirty_ratio import dirty_ratio_report

    log_dir = workdir / "inspect" / "logdir"
    if not (log_dir / "cleaner-offset-checkpoint").exists():  # made once per workdir (that file last)
        shutil.rmtree(workdir / "inspect", ignore_errors=True)
        log_dir = make_log_dir(workdir / "inspect", 10_000)
    cpu: list[float] = []

    def report() -> object:
        started = time.process_time()
        rows = dirty_ratio_report([log_dir], cli_overrides={}, now_ms=NOW_MS)
        cpu.append(time.process_time() - started)
        return rows

    seconds, rows = best_of(args.repeat, report)
    count = len(rows) if isinstance(rows, list) else 0
    return [
        ("dirty-ratio partitions", count, "part"),
        ("dirty-ratio seconds (target < 5)", seconds, "s"),
        ("dirty-ratio CPU seconds", min(cpu), "s"),
        ("dirty-ratio partitions/s", count / seconds, "part/s"),
    ]


def _bench_report(args: argparse.Namespace, workdir: Path) -> list[Row]:
    """``kcompact report --from`` 100 000 Parquet rows (2 000 topics), as a user runs it (a process of its own,
    start-up included; about 2 s on one core): wall seconds, and the page's size besides plotly.min.js."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ builders
    from plotly.offline import get_plotlyjs  # type: ignore[import-untyped]

    from tests.report.parquet_rows import many_rows_parquet

    rows = workdir / "report" / "ratio.parquet"
    if not (rows / "part-00000.parquet").exists():  # made once per workdir
        shutil.rmtree(workdir / "report", ignore_errors=True)
        (workdir / "report").mkdir(parents=True)
        many_rows_parquet(rows, 100_000, 2_000)
    page = workdir / "report" / "r.html"

    def report() -> int:
        page.unlink(missing_ok=True)
        subprocess.run([sys.executable, "-m", "kcompact", "report", "--from", str(rows), "--output", str(page)],
                       check=True, stdout=subprocess.DEVNULL)
        return page.stat().st_size

    seconds, size = _timed(report, args.repeat)
    return [
        ("report --from 100 000 rows, seconds", seconds, "s"),
        ("page size besides plotly.min.js", (size - len(get_plotlyjs())) / 1024, "KiB"),
    ]


SMALL_PARTITIONS = 200  # the log dir of the ``small`` section: this many copies of the 1 MB partition
SMALL_NOW_MS = 1_800_000_000_000  # every segment is old enough to clean


def _small_partition(workdir: Path, seed: int) -> Path:
    """A ~1 MB partition (keys over 2 000, 100 per batch, a 100-byte value each) and an active segment."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ builders
    from tests.partition_builder import PartitionBuilder

    log_dir = workdir / f"small-1mb-{seed}"
    if not (log_dir / "done").exists():
        shutil.rmtree(log_dir, ignore_errors=True)
        rng, builder = random.Random(seed), PartitionBuilder("small", 0)
        for _ in range(84):  # 84 batches of 100 records: 1.0 MB of segments
            builder.batch([(b"key-%06d" % rng.randrange(2_000), rng.randbytes(50).hex().encode())
                           for _ in range(100)])
        builder.roll().batch([(b"x", b"1")]).write(log_dir)
        (log_dir / "done").touch()
    return log_dir / "small-0"


def _small_log_dir(workdir: Path, partition: Path) -> Path:
    """SMALL_PARTITIONS copies of the partition (small-0 … small-199) in one log dir."""
    from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint

    log_dir = workdir / f"small-{SMALL_PARTITIONS}x-{partition.parent.name}"
    if not (log_dir / "done").exists():
        shutil.rmtree(log_dir, ignore_errors=True)
        for number in range(SMALL_PARTITIONS):
            shutil.copytree(partition, log_dir / f"small-{number}")
        (high_watermark,) = read_offset_checkpoint(partition.parent / "replication-offset-checkpoint").values()
        write_offset_checkpoint(log_dir / "replication-offset-checkpoint",
                                {("small", n): high_watermark for n in range(SMALL_PARTITIONS)})
        (log_dir / "done").touch()
    return log_dir


def _small_run(workdir: Path, argv: list[str], repeat: int, fresh: Path | None = None) -> float:
    """Best wall-clock seconds of ``python -m kcompact ARGV`` (process start included); with ``fresh``,
    on a new copy of that directory each time (ARGV's ``{copy}`` is its path). Bytecode is cached
    under ``workdir`` as an installed package has it, whatever PYTHONDONTWRITEBYTECODE says."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    best = float("inf")
    for attempt in range(repeat + 1):  # the first run writes the bytecode cache and is not counted
        copy = workdir / "small-copy"
        if fresh is not None:
            _fresh_copy(fresh, copy)
        cmd = [sys.executable, "-m", "kcompact", *(a.replace("{copy}", str(copy)) for a in argv)]
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        if attempt:
            best = min(best, time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return best


def bench_small(args: argparse.Namespace, workdir: Path) -> list[Row]:
    """Start-up and small inputs: --help, a 1 MB partition, and 200 x 1 MB partitions with jobs=1 vs auto."""
    from kcompact.fork_pool import usable_cpus

    partition = _small_partition(workdir, args.seed)
    log_dir = _small_log_dir(workdir, partition)
    clean = ["clean", "--json", "--now-ms", str(SMALL_NOW_MS), "--config", "cleanup.policy=compact"]
    repeat = max(args.repeat, 5)
    version_seconds = _small_run(workdir, ["--version"], repeat)
    help_seconds = _small_run(workdir, ["--help"], repeat)
    clean_help = _small_run(workdir, ["clean", "--help"], repeat)
    one = _small_run(workdir, [*clean, "{copy}/small-0"], repeat, fresh=partition.parent)
    serial = _small_run(workdir, [*clean, "--jobs", "1", "{copy}"], args.repeat, fresh=log_dir)
    auto = _small_run(workdir, [*clean, "--jobs", "auto", "{copy}"], args.repeat, fresh=log_dir)
    size = sum(p.stat().st_size for p in partition.glob("*.log"))
    return [
        ("usable cores", usable_cpus(), "cores"),
        ("kcompact --version seconds (interpreter + CLI start)", version_seconds, "s"),
        ("kcompact --help seconds", help_seconds, "s"),
        ("kcompact clean --help seconds", clean_help, "s"),
        ("partition size", size / 1e6, "MB"),
        ("clean 1 MB partition seconds (process start included)", one, "s"),
        (f"clean {SMALL_PARTITIONS} x 1 MB log dir, jobs=1 seconds", serial, "s"),
        (f"clean {SMALL_PARTITIONS} x 1 MB log dir, jobs=auto seconds", auto, "s"),
        ("jobs=auto speed-up", serial / auto, "x"),
    ]


TINY_SEGMENTS = 8  # the ``tiny`` section's partition: eight segments of ten 10-record batches, ~88 KB of .log


def _tiny_log_dir(workdir: Path, partitions: int, seed: int) -> Path:
    """``partitions`` copies of one ~88 KB partition of eight segments (keys over 300, a 100-byte value each)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ builders
    from kcompact.segment.checkpoint import write_offset_checkpoint
    from tests.partition_builder import PartitionBuilder

    log_dir = workdir / f"tiny-{partitions}x-{seed}"
    if not (log_dir / "done").exists():
        shutil.rmtree(log_dir, ignore_errors=True)
        rng, builder = random.Random(seed), PartitionBuilder("tiny", 0)
        for segment in range(TINY_SEGMENTS):
            if segment:
                builder.roll()
            for _ in range(10):
                builder.batch([(b"key-%04d" % rng.randrange(300), rng.randbytes(50).hex().encode())
                               for _ in range(10)])
        proto = builder.write(workdir / f"tiny-proto-{seed}", high_watermark=None)
        for number in range(partitions):
            shutil.copytree(proto, log_dir / f"tiny-{number}")
        write_offset_checkpoint(log_dir / "replication-offset-checkpoint",
                                {("tiny", n): builder.next_offset for n in range(partitions)})
        (log_dir / "done").touch()
    return log_dir


def _child_cpu_seconds(cmd: list[str], env: dict[str, str]) -> float:
    """User + system CPU seconds of one child process run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_tiny(args: argparse.Namespace, workdir: Path) -> list[Row]:
    """``clean LOG_DIR --jobs 1`` of N tiny partitions at two N (``--tiny-counts``): CPU ms per partition
    (best of ``--repeat``, each on a fresh copy, the process's start taken off), which should not grow with N.
    With ``--kafka``, each N's wall beside Kafka's cleaner (:func:`_beside_kafka`).
    The code measured is the ``kcompact`` that ``python -m kcompact`` imports from the working directory."""
    env = _bytecode_cached_env(workdir)
    start = min(_child_cpu_seconds([sys.executable, "-m", "kcompact", "--version"], env)
                for _ in range(args.repeat + 1))  # the interpreter's start, taken off each run below
    rows: list[Row] = [("process start (kcompact --version), CPU seconds", start, "s")]
    per_partition = []
    for partitions in args.tiny_counts:
        log_dir = _tiny_log_dir(workdir, partitions, args.seed)
        copy = workdir / "tiny-copy"
        best = float("inf")
        for attempt in range(args.repeat + 1):  # the first run writes the bytecode cache and is not counted
            _fresh_copy(log_dir, copy)
            seconds = _child_cpu_seconds([*_clean_command(["--jobs", "1"]), str(copy)], env)
            if attempt:
                best = min(best, seconds)
        per_partition.append((best - start) * 1000 / partitions)
        rows += [(f"clean {partitions} tiny partitions, CPU seconds", best, "s"),
                 (f"clean {partitions} tiny partitions, CPU ms per partition (start off)", per_partition[-1], "ms")]
        if args.kafka:
            rows += _beside_kafka(args, workdir, log_dir, f"{partitions} tiny partitions")
    rows.append(("per-partition CPU, largest N / smallest N", per_partition[-1] / per_partition[0], "x"))
    return rows


CODECS_240 = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # the codecs240 section's topics, 60 partitions each
CODECS_240_PARTITIONS = 60
CODECS_240_RECORDS = 36_000  # per partition: eight segments of 45 batches of 100 records, ~1.9 MB compressed
KAFKA_CLEANER_THREADS = 2  # log.cleaner.threads of the Kafka the log-dir shapes are measured against


def _codecs240_log_dir(workdir: Path, seed: int) -> Path:
    """240 small compacted partitions, 60 per codec (gzip, snappy, lz4, zstd), ~1.9 MB each: eight segments
    of 100-record batches, keys over 8,000, 100-byte values (50 random hex characters, 50 of a template), the
    last segment active."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ builders
    from kcompact.segment.checkpoint import write_offset_checkpoint
    from tests.partition_builder import PartitionBuilder

    log_dir = workdir / f"codecs240-{seed}"
    if (log_dir / "done").exists():
        return log_dir
    shutil.rmtree(log_dir, ignore_errors=True)
    high_watermarks: dict[tuple[str, int], int] = {}
    template = b"kcompact-bench-template-" * 3
    per_segment = CODECS_240_RECORDS // TINY_SEGMENTS
    for name, codec in CODECS_240.items():
        rng, builder = random.Random(seed), PartitionBuilder(f"codecs-{name}", 0)
        for segment in range(TINY_SEGMENTS):
            if segment:
                builder.roll()
            for _ in range(per_segment // 100):
                builder.batch([(b"key-%06d" % rng.randrange(8_000), rng.randbytes(25).hex().encode() + template[:50])
                               for _ in range(100)], compression=codec)
        proto = builder.write(workdir / f"codecs240-proto-{name}-{seed}", high_watermark=None)
        for number in range(CODECS_240_PARTITIONS):
            shutil.copytree(proto, log_dir / f"codecs-{name}-{number}")
            high_watermarks[(f"codecs-{name}", number)] = builder.next_offset
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", high_watermarks)
    (log_dir / "done").touch()
    return log_dir


def bench_codecs240(args: argparse.Namespace, workdir: Path) -> list[Row]:
    """240 small compacted partitions of four codecs in one log dir: ``clean LOG_DIR`` wall, ``--jobs 1`` and the
    default jobs, and with ``--kafka`` Kafka's cleaner on the same log dir beside them (:func:`_beside_kafka`)."""
    log_dir = _codecs240_log_dir(workdir, args.seed)
    size = sum(f.stat().st_size for f in log_dir.glob("*/*.log"))
    rows: list[Row] = [("log dir size (.log files)", size / 1e6, "MB")]
    return rows + _beside_kafka(args, workdir, log_dir, "240 partitions of 4 codecs")


def _bytecode_cached_env(workdir: Path) -> dict[str, str]:
    """The environment of a measured ``python -m kcompact``: bytecode cached under ``workdir``, as an installed
    package has it, whatever PYTHONDONTWRITEBYTECODE says."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    return env


def _clean_command(jobs: list[str]) -> list[str]:
    """``kcompact clean`` as the log-dir sections run it (every segment old enough), before its LOG_DIR."""
    return [sys.executable, "-m", "kcompact", "clean", "--json", "--now-ms", str(SMALL_NOW_MS), "--config",
            "cleanup.policy=compact", *jobs]


def _fresh_copy(source: Path, copy: Path) -> None:
    """``copy`` made anew from ``source`` and written back before the run it is for: else the kernel writes the
    copy's pages back 30 s after it was made (``vm.dirty_expire_centisecs``), in the middle of a long run, and the
    fsyncs of whichever tool runs then wait behind it (5,000 tiny partitions are 440 MB)."""
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    os.sync()


def _wall_seconds(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    """Wall-clock seconds of one child process run to its end (its start included)."""
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, cwd=cwd)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return seconds


def _beside_kafka(args: argparse.Namespace, workdir: Path, log_dir: Path, label: str) -> list[Row]:
    """Wall seconds of ``clean LOG_DIR --jobs 1``, of ``clean LOG_DIR`` (the default jobs) and, with ``--kafka``,
    of Kafka 4.1's cleaner over every partition of the same log dir in one JVM with ``KAFKA_CLEANER_THREADS``
    threads (``bench_kafka.kafka_clean_log_dir``; JVM start included as the interpreter's is): best of
    ``--repeat``, interleaved, each on a fresh copy, kcompact's bytecode cached by one uncounted run first."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_kafka import kafka_clean_log_dir, kafka_command

    env = _bytecode_cached_env(workdir)
    copy = workdir / "tiny-copy"
    kafka = kafka_command() if args.kafka else None
    if isinstance(kafka, str):
        print(kafka, file=sys.stderr)
    # the children run outside any source tree: ``python -m`` puts the cwd first on sys.path, before PYTHONPATH
    runs: dict[str, Callable[[], float]] = {
        "jobs 1": lambda: _wall_seconds([*_clean_command(["--jobs", "1"]), str(copy)], env, workdir),
        "default jobs": lambda: _wall_seconds([*_clean_command([]), str(copy)], env, workdir),
    }
    if args.baseline is not None:  # another source tree's default jobs, as ratio's --baseline
        base_env = {**env, "PYTHONPATH": str(args.baseline.resolve())}
        runs["baseline default jobs"] = lambda: _wall_seconds([*_clean_command([]), str(copy)], base_env, workdir)
    if isinstance(kafka, list):
        command = kafka
        runs["Kafka"] = lambda: kafka_clean_log_dir(
            command, sorted(p for p in copy.iterdir() if p.is_dir()), SMALL_NOW_MS, KAFKA_CLEANER_THREADS).seconds
    best = dict.fromkeys(runs, float("inf"))
    for attempt in range(args.repeat + 1):  # the first kcompact run writes the bytecode cache: not counted
        for name, run in runs.items():
            if attempt == 0 and name not in ("jobs 1", "baseline default jobs"):
                continue
            _fresh_copy(log_dir, copy)
            seconds = run()
            if attempt:
                best[name] = min(best[name], seconds)
    rows: list[Row] = [(f"{label}: clean --jobs 1, wall seconds", best["jobs 1"], "s"),
                       (f"{label}: clean (default jobs), wall seconds", best["default jobs"], "s")]
    if "Kafka" in best:
        rows += [(f"{label}: Kafka's cleaner, one JVM, {KAFKA_CLEANER_THREADS} threads, wall seconds",
                  best["Kafka"], "s"),
                 (f"{label}: clean --jobs 1 / Kafka", best["jobs 1"] / best["Kafka"], "x"),
                 (f"{label}: clean (default jobs) / Kafka", best["default jobs"] / best["Kafka"], "x")]
    if "baseline default jobs" in best:
        rows.append((f"{label}: baseline clean (default jobs), wall seconds", best["baseline default jobs"], "s"))
        if "Kafka" in best:
            rows.append((f"{label}: baseline clean (default jobs) / Kafka",
                         best["baseline default jobs"] / best["Kafka"], "x"))
    return rows


def _bench_spark(args: argparse.Namespace, workdir: Path) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_spark import bench_spark

    return bench_spark(args, workdir)


def _bench_spark_scale(args: argparse.Namespace, workdir: Path) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_spark_scale import bench_spark_scale

    return bench_spark_scale(args, workdir)


def _bench_distmap(args: argparse.Namespace, workdir: Path) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_distmap import bench_distmap

    return bench_distmap(args, workdir / "distmap")


START_FIXTURE = ("kraft37-consumer-offsets", "__consumer_offsets-6")  # 13 KiB, beside a 353 KB KRaft metadata log
START_GOALS = {"imports": 0.08, "clean": 0.12}  # CPU seconds
START_IMPORTS = ("kcompact.cli.main", "kcompact.cli.clean_cmd", "kcompact.cleaner.logdir.run")  # what a clean loads
START_PASSES = "kcompact.cleaner.workers.parallel"  # and what one loads once it rewrites (numpy, the map, pass 2)
START_SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "sample-logdir"  # README's: orders-0 rewritten


def _real_fixtures() -> Path:
    """The broker-written log dirs (as tests/conftest.py finds them: ``KCOMPACT_REAL_FIXTURES``, else ../shared)."""
    default = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"
    return Path(os.environ.get("KCOMPACT_REAL_FIXTURES", default))


def bench_start(args: argparse.Namespace, workdir: Path) -> list[Row]:
    """What a clean costs before its first byte: CPU seconds (user + system, best of ``--repeat``, at least 5,
    bytecode cached) of the interpreter, of numpy alone, of the imports a clean needs, and of ``kcompact clean``
    of a 13 KiB partition whose config comes from a KRaft metadata log, beside the goals."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"PYTHONPYCACHEPREFIX": str(workdir / "pycache"), "OPENBLAS_NUM_THREADS": "1"}  # as cli.main sets it
    repeat = max(args.repeat, 5)

    def best(cmd: list[str], fresh: Path | None = None, copy: Path | None = None) -> float:
        seconds = float("inf")
        for attempt in range(repeat + 1):  # the first run writes the bytecode cache and is not counted
            if fresh is not None and copy is not None:
                _fresh_copy(fresh, copy)
            cpu = _child_cpu_seconds(cmd, env)
            seconds = min(seconds, cpu) if attempt else seconds
        return seconds

    python = best([sys.executable, "-c", "pass"])
    numpy = best([sys.executable, "-c", "import numpy"])
    imports = best([sys.executable, "-c", f"import {', '.join(START_IMPORTS)}"])
    passes = best([sys.executable, "-c", f"import {', '.join(START_IMPORTS)}, {START_PASSES}"])
    copy = workdir / "start-copy"
    sample = best([sys.executable, "-m", "kcompact", "clean", "--now-ms", str(SMALL_NOW_MS), str(copy / "orders-0")],
                  fresh=START_SAMPLE, copy=copy)
    rows: list[Row] = [
        ("python -c pass, CPU seconds", python, "s"),
        ("import numpy, CPU seconds (interpreter included)", numpy, "s"),
        (f"imports a clean needs, CPU seconds (interpreter included; goal {START_GOALS['imports']})", imports, "s"),
        ("imports a clean needs, CPU seconds (interpreter's start off)", imports - python, "s"),
        ("imports a clean that rewrites segments needs (the passes too), CPU seconds", passes, "s"),
        ("kcompact clean fixtures/sample-logdir/orders-0 (rewrites its closed segments), CPU seconds", sample, "s"),
    ]
    fixture = _real_fixtures() / START_FIXTURE[0]
    if not fixture.is_dir():
        print(f"start: clean of {START_FIXTURE[0]} skipped: {fixture} absent (../shared not here)", file=sys.stderr)
        return rows
    clean = best([sys.executable, "-m", "kcompact", "clean", str(copy / START_FIXTURE[1])], fresh=fixture, copy=copy)
    return [*rows, (f"kcompact clean {'/'.join(START_FIXTURE)} (13 KiB; nothing to rewrite), CPU seconds "
                    f"(goal {START_GOALS['clean']})", clean, "s"),
            ("its KRaft metadata replay (353 KB, 4,928 records), CPU ms in process", _replay_ms(fixture, repeat), "ms")]


def _replay_ms(log_dir: Path, repeat: int) -> float:
    """CPU milliseconds of one replay of ``log_dir``'s ``__cluster_metadata-0`` (best of ``repeat``)."""
    from kcompact.config.kraft.metadata_state import load_metadata_state

    seconds = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        load_metadata_state(log_dir / "__cluster_metadata-0")
        seconds = min(seconds, time.process_time() - start)
    return seconds * 1000


SECTIONS: dict[str, Callable[[argparse.Namespace, Path], list[Row]]] = {
    "scan": bench_scan,
    "clean": _bench_clean,
    "ratio": _bench_ratio,
    "legacy": _bench_legacy,
    "inspect": _bench_inspect,
    "report": _bench_report,
    "small": bench_small,
    "tiny": bench_tiny,  # N tiny partitions at two N: per-partition CPU (--kafka: wall beside Kafka's)
    "codecs240": bench_codecs240,  # 240 small partitions of four codecs, ~450 MB: wall (--kafka: beside Kafka's)
    "start": bench_start,  # CPU before a clean's first byte: the imports, a 13 KiB KRaft partition's clean
    "spark": _bench_spark,
    "spark-scale": _bench_spark_scale,  # 6 log dirs x 200 partitions at two sizes, serial and Spark: minutes
    "distmap": _bench_distmap,  # 20 million keys, ~1 GB written: minutes
}


def _format(value: float, unit: str) -> str:
    if unit in ("rec", "batch", "part", "part/s", "cores"):
        return f"{value:,.0f}"
    if unit == "rec/s":
        return f"{value / 1e6:,.2f} M"
    return f"{value:,.3f}" if value < 100 else f"{value:,.1f}"


def _print_table(section: str, rows: list[Row]) -> None:
    width = max(len(name) for name, _, _ in rows)
    print(f"== {section} ==")
    for name, value, unit in rows:
        print(f"  {name:<{width}}  {_format(value, unit):>12} {unit}")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sections", nargs="*", metavar="SECTION",
                        help=f"sections to run (default: all of {', '.join(SECTIONS)})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--workdir", type=Path,
                        help="where generated data goes and is reused (default: a temp dir)")
    parser.add_argument("--records", type=int, default=2_000_000,
                        help="records in the scan segment (default: 2,000,000)")
    parser.add_argument("--clean-scale", type=float, default=1.0,
                        help="fraction of the clean shapes' record counts (default: 1.0 = the shapes' full size)")
    parser.add_argument("--baseline", type=Path,
                        help="ratio, legacy, tiny, codecs240: a kcompact source tree (extensions built in place) "
                             "to run beside this one")
    parser.add_argument("--kafka", action="store_true",
                        help="ratio, tiny, codecs240: also run Kafka's own cleaner (Java and its jars needed) in "
                             "every repetition")
    parser.add_argument("--profile", action="store_true",
                        help="ratio: also print each shape's clean time by stage (cProfile, in process)")
    parser.add_argument("--tiny-counts", type=lambda text: [int(n) for n in text.split(",")], default=[200, 1000],
                        help="the tiny section's two partition counts, comma-separated (default: 200,1000)")
    parser.add_argument("--seed", type=int, default=20250101, help="data generator seed")
    parser.add_argument("--repeat", type=int, default=3,
                        help="passes per measurement; the fastest counts (default: 3)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.sections if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section {', '.join(unknown)}; expected one of {', '.join(SECTIONS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections and print their results."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="kcompact-bench-") as temp:
        workdir = args.workdir or Path(temp)
        for section in args.sections or list(SECTIONS):
            rows = SECTIONS[section](args, workdir)
            results[section] = {name: value for name, value, _ in rows}
            if not args.json:
                _print_table(section, rows)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
