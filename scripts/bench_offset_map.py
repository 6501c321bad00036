"""Benchmark the cleaner's offset map: bytes per key, put/get keys/s, peak RSS for N distinct keys.

Usage::

    python scripts/bench_offset_map.py 10000000 [--batch 1000] [--get-batch 1000] [--bounded]

Digests for the map are random 128-bit values made chunk by chunk outside the timers (so the
bench itself holds ~one chunk, not N keys); hashing is timed separately on real ``bytes`` keys.
Gets query every present key once (in chunks) plus as many absent keys, after ``freeze``.
``--bounded`` gives the map ``max_entries = N`` so the Kafka capacity check runs as it fills.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from kcompact.cleaner.offset_map import OffsetMap, key_digests

CHUNK = 1 << 20  # digests generated at a time (outside the timers)


def _chunk(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False),
        rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False),
    )


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_hash(n: int) -> float:
    keys = [b"key-%012d" % i for i in range(n)]
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        key_digests(keys)
        best = min(best, time.perf_counter() - start)
    return n / best


def bench_put(offset_map: OffsetMap, n: int, batch: int) -> float:
    elapsed = 0.0
    for first in range(0, n, CHUNK):
        size = min(CHUNK, n - first)
        hi, lo = _chunk(first, size)
        offsets = np.arange(first, first + size, dtype=np.int64)
        start = time.perf_counter()
        for at in range(0, size, batch):
            end = at + batch
            accepted = offset_map.put_batch(hi[at:end], lo[at:end], offsets[at:end])
            if accepted != len(offsets[at:end]):
                raise SystemExit(f"map refused puts at offset {first + at + accepted}")
        elapsed += time.perf_counter() - start
    return elapsed


def bench_get(offset_map: OffsetMap, n: int, batch: int) -> tuple[float, int]:
    elapsed, queries = 0.0, 0
    absent_seed = n + 2**40
    for first in range(0, n, CHUNK):
        size = min(CHUNK, n - first)
        hi, lo = _chunk(first, size)
        miss_hi, miss_lo = _chunk(absent_seed + first, size)
        expected = np.arange(first, first + size, dtype=np.int64)
        start = time.perf_counter()
        for at in range(0, size, batch):
            end = at + batch
            got = offset_map.get_batch(hi[at:end], lo[at:end])
            missed = offset_map.get_batch(miss_hi[at:end], miss_lo[at:end])
            if not (np.array_equal(got, expected[at:end]) and (missed == -1).all()):
                raise SystemExit(f"wrong lookup result in keys {first + at}..{first + end}")
        elapsed += time.perf_counter() - start
        queries += 2 * size
    return elapsed, queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="distinct keys to put")
    parser.add_argument("--batch", type=int, default=1000, help="keys per put_batch call")
    parser.add_argument("--get-batch", type=int, default=1000, help="keys per get_batch call")
    parser.add_argument("--bounded", action="store_true", help="max_entries = n (Kafka check)")
    args = parser.parse_args()
    n = args.n

    rss_before = _rss_mib()
    offset_map = OffsetMap(max_entries=n if args.bounded else None)
    put_s = bench_put(offset_map, n, args.batch)
    start = time.perf_counter()
    offset_map.freeze()
    freeze_s = time.perf_counter() - start
    if offset_map.size != n:
        raise SystemExit(f"map holds {offset_map.size} keys, expected {n}")
    start = time.perf_counter()
    latest = offset_map.latest_offsets_sorted()
    sorted_s = time.perf_counter() - start
    del latest
    get_s, queries = bench_get(offset_map, n, args.get_batch)
    held = offset_map.memory_bytes()  # now with the lookup directory
    peak_rss = _rss_mib()
    hashed = bench_hash(min(n, 1_000_000))

    print(
        f"keys                     {n:,}  (put batch {args.batch}, get batch {args.get_batch}"
        f"{', bounded' if args.bounded else ''})"
    )
    print(f"hash (key_digests)       {hashed / 1e6:8.2f} M keys/s")
    print(f"put                      {n / put_s / 1e6:8.2f} M keys/s  ({put_s:.1f} s)")
    print(f"freeze                   {freeze_s:8.2f} s")
    print(f"put incl. freeze         {n / (put_s + freeze_s) / 1e6:8.2f} M keys/s")
    print(f"latest_offsets_sorted    {sorted_s:8.2f} s")
    print(f"get (half absent)        {queries / get_s / 1e6:8.2f} M keys/s  ({get_s:.1f} s)")
    print(f"bytes/key (frozen)       {held / n:8.2f}  ({held / 2**20:.0f} MiB, with directory)")
    print(f"peak RSS                 {peak_rss:8.0f} MiB  (before the map: {rss_before:.0f} MiB)")


if __name__ == "__main__":
    main()
