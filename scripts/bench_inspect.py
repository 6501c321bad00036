"""Benchmark the inspect reports on generated data (no test asserts on it; it prints the figures).

    python scripts/bench_inspect.py                     # both measurements
    python scripts/bench_inspect.py --partitions 10000  # dirty-ratio over a log dir of N partitions
    python scripts/bench_inspect.py --records 1000000   # inspect keys over N records
    python scripts/bench_inspect.py --json

dirty-ratio: a log dir of ``--partitions`` small partitions (topic ``bench``, three closed segments
of four 5-record batches each plus an active segment; a third have no cleaner checkpoint, a third
are clean up to the second segment, a third up to the active one), with replication and cleaner
checkpoints holding one line per partition as a broker's do. Every partition directory is a byte
copy of one template (offsets start at 0 in each), so generation is quick. ``dirty_ratio_report`` is
timed over the whole log dir, best of ``--repeat``; the target is under 10 s for 10 000 partitions.

keys: one partition of ``--records`` records (keys ``key-%08d`` over ``--records // 4`` distinct
keys, 100-byte values, a tombstone every 50 records, batches of 200, segments of 100 000 records),
timed through ``keys_report`` with ``partitions=12`` (two scans of the log, murmur2 of every keyed
record, the cleaner's dry run). Peak RSS is the process's high-water mark, before and after the keys
report.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kcompact.inspect.dirty_ratio import dirty_ratio_report
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Record

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests/ builders
from kcompact.segment.checkpoint import write_offset_checkpoint
from tests.partition_builder import BASE_TS, PartitionBuilder
from tests.segment_writer import write_segment

TOPIC = "bench"
NOW_MS = BASE_TS + 3_600_000
SEGMENTS = 3
BATCHES_PER_SEGMENT = 4
RECORDS_PER_BATCH = 5
KEYS_BATCH = 200
KEYS_SEGMENT = 100_000


def make_log_dir(root: Path, partitions: int) -> Path:
    """A log dir of ``partitions`` copies of one small template partition, with checkpoints."""
    template = PartitionBuilder("template", 0)
    for _ in range(SEGMENTS):
        for i in range(BATCHES_PER_SEGMENT):
            template.batch([(b"k%d" % (i % 3), b"v" * 20)] * RECORDS_PER_BATCH)
        template.roll()
    template.batch([(b"a", b"b")])
    source = template.write(root / "template", high_watermark=None)
    files = sorted(source.iterdir())
    log_dir = root / "logdir"
    log_dir.mkdir()
    for p in range(partitions):
        part = log_dir / f"{TOPIC}-{p}"
        part.mkdir()
        for f in files:
            shutil.copyfile(f, part / f.name)
    segment_records = BATCHES_PER_SEGMENT * RECORDS_PER_BATCH
    write_offset_checkpoint(
        log_dir / "replication-offset-checkpoint",
        {(TOPIC, p): template.next_offset for p in range(partitions)},
    )
    write_offset_checkpoint(
        log_dir / "cleaner-offset-checkpoint",
        {(TOPIC, p): (p % 3) * segment_records for p in range(partitions) if p % 3},
    )
    return log_dir


def make_keys_partition(root: Path, records: int, seed: int) -> Path:
    """One partition of ``records`` records for the keys report, written segment by segment."""
    rng = random.Random(seed)
    part = root / "keys-logdir" / f"{TOPIC}-0"
    space = max(records // 4, 1)
    for base in range(0, records, KEYS_SEGMENT):
        batches = []
        for start in range(base, min(base + KEYS_SEGMENT, records), KEYS_BATCH):
            batch = [
                Record(offset, BASE_TS + offset, b"key-%08d" % rng.randrange(space),
                       None if offset % 50 == 49 else rng.randbytes(50).hex().encode())
                for offset in range(start, min(start + KEYS_BATCH, records))
            ]
            batches.append(encode_batch(batch, base_offset=start))
        write_segment(part, base, batches)
    active = Record(records, BASE_TS + records, b"active", b"1")
    write_segment(part, records, [encode_batch([active], base_offset=records)])
    checkpoint = part.parent / "replication-offset-checkpoint"
    write_offset_checkpoint(checkpoint, {(TOPIC, 0): records + 1})
    return part


def best_of(repeat: int, run: Callable[[], object]) -> tuple[float, object]:
    """The fastest of ``repeat`` runs (seconds) and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
    return best, result


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-keys", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kc-bench-inspect-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        log_dir = make_log_dir(root, args.partitions)
        figures["dirty_ratio_generate_s"] = time.perf_counter() - started
        seconds, rows = best_of(
            args.repeat,
            lambda: dirty_ratio_report([log_dir], cli_overrides={}, now_ms=NOW_MS),
        )
        if not isinstance(rows, list) or len(rows) != args.partitions:
            raise SystemExit(f"dirty_ratio: expected {args.partitions} rows, found {rows!r:.80}")
        figures["dirty_ratio_partitions"] = args.partitions
        figures["dirty_ratio_s"] = seconds
        figures["dirty_ratio_partitions_per_s"] = args.partitions / seconds
        if not args.skip_keys:
            from kcompact.inspect.keys import keys_report

            part = make_keys_partition(root, args.records, args.seed)
            figures["rss_before_keys_mib"] = _peak_rss_mib()
            seconds, _report = best_of(
                1, lambda: keys_report(part, cli_overrides={}, now_ms=NOW_MS, partitions=12)
            )
            figures["keys_records"] = args.records
            figures["keys_s"] = seconds
            figures["keys_records_per_s"] = args.records / seconds
    figures["peak_rss_mib"] = _peak_rss_mib()
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for name, value in figures.items():
        print(f"{name:32} {value:14,.2f}")
    if figures["dirty_ratio_s"] >= 10 and args.partitions >= 10_000:
        print("dirty_ratio: over the 10 s target")


if __name__ == "__main__":
    main()
