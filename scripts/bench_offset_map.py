"""Benchmark the cleaner's offset map: bytes per key, build peak, put/get keys/s, RSS for N keys.

Usage::

    python scripts/bench_offset_map.py [N] [--batch 1000] [--get-batch 1000] [--bounded]
    python scripts/bench_offset_map.py --huge            # N = 100,000,000 in one pass
    python scripts/bench_offset_map.py --clean-shape     # bench clean's pass 1 + 2 (2M records)

Distinct keys (default): N random 128-bit digests (default 1,000,000) made chunk by chunk outside the
timers, so the bench holds ~one chunk, not N keys; hashing is timed separately on real ``bytes`` keys.
Gets query every present key once (in chunks) plus as many absent keys, after ``freeze``.
``--bounded`` gives the map ``max_entries = N`` so the Kafka capacity check runs as it fills.

``--clean-shape`` replays what ``kcompact clean`` does to the map on scripts/bench_clean.py's plain
shape: 2,000,000 records over 500,000 keys (uniform), one ``put_batch`` per 200-record batch, then
``freeze``, ``latest_offsets_sorted`` and one ``get_batch`` per batch for every record.

"build peak" is the growth of the process's peak RSS from before the map to the end of ``freeze``,
over the frozen map's ``memory_bytes()`` (the design goal: at most 1.5).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from kcompact.log.offset_map import OffsetMap, key_digests

CHUNK = 1 << 18  # digests made at a time, outside the timers (6 MiB)
HUGE = 100_000_000
CLEAN_RECORDS, CLEAN_KEYS, CLEAN_BATCH = 2_000_000, 500_000, 200


def _chunk(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False),
        rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False),
    )


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _current_rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


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
        del hi, lo, offsets  # before the next chunk is made
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


def distinct_keys(args: argparse.Namespace) -> None:
    n = HUGE if args.huge else args.n
    rss_before = _current_rss_mib()
    offset_map = OffsetMap(max_entries=n if args.bounded else None)
    put_s = bench_put(offset_map, n, args.batch)
    start = time.perf_counter()
    offset_map.freeze()
    freeze_s = time.perf_counter() - start
    build_peak = _rss_mib() - rss_before
    if offset_map.size != n:
        raise SystemExit(f"map holds {offset_map.size} keys, expected {n}")
    steady = offset_map.memory_bytes()
    start = time.perf_counter()
    latest = offset_map.latest_offsets_sorted()
    sorted_s = time.perf_counter() - start
    del latest
    get_s, queries = bench_get(offset_map, n, args.get_batch)
    held = offset_map.memory_bytes()
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
    print(
        f"build peak / frozen map  {build_peak * 2**20 / steady:8.2f}  "
        f"(RSS grew {build_peak:.0f} MiB building a {steady / 2**20:.0f} MiB map)"
    )
    print(f"peak RSS                 {peak_rss:8.0f} MiB  (before the map: {rss_before:.0f} MiB)")
    print(f"total (put+freeze+get)   {put_s + freeze_s + get_s:8.1f} s")


def clean_shape(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(11)
    key_hi, key_lo = _chunk(5, CLEAN_KEYS)
    ids = rng.integers(0, CLEAN_KEYS, CLEAN_RECORDS)
    hi, lo = key_hi[ids], key_lo[ids]
    offsets = np.arange(CLEAN_RECORDS, dtype=np.int64)
    latest = np.full(CLEAN_KEYS, -1, dtype=np.int64)
    np.maximum.at(latest, ids, offsets)  # offsets increase: the last put of each key wins
    expected = latest[ids]
    best = {"put": float("inf"), "get": float("inf")}
    for _ in range(args.repeat):
        offset_map = OffsetMap()
        start = time.perf_counter()
        for at in range(0, CLEAN_RECORDS, CLEAN_BATCH):
            end = at + CLEAN_BATCH
            offset_map.put_batch(hi[at:end], lo[at:end], offsets[at:end])
        offset_map.freeze()
        offset_map.latest_offsets_sorted()
        best["put"] = min(best["put"], time.perf_counter() - start)
        got = np.empty(CLEAN_RECORDS, dtype=np.int64)
        start = time.perf_counter()
        for at in range(0, CLEAN_RECORDS, CLEAN_BATCH):
            end = at + CLEAN_BATCH
            got[at:end] = offset_map.get_batch(hi[at:end], lo[at:end])
        best["get"] = min(best["get"], time.perf_counter() - start)
        if not np.array_equal(got, expected):
            raise SystemExit("wrong lookup result")
    print(
        f"clean shape: {CLEAN_RECORDS:,} records, {CLEAN_KEYS:,} keys, batches of {CLEAN_BATCH}; "
        f"best of {args.repeat}"
    )
    print(
        f"put + freeze + latest    {CLEAN_RECORDS / best['put'] / 1e6:8.2f} M records/s  "
        f"({best['put']:.2f} s)"
    )
    print(
        f"get                      {CLEAN_RECORDS / best['get'] / 1e6:8.2f} M records/s  "
        f"({best['get']:.2f} s)"
    )
    print(f"bytes/key (frozen)       {offset_map.memory_bytes() / offset_map.size:8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=1_000_000, help="distinct keys to put")
    parser.add_argument("--huge", action="store_true", help=f"N = {HUGE:,} (one pass, ~2 GiB)")
    parser.add_argument("--batch", type=int, default=1000, help="keys per put_batch call")
    parser.add_argument("--get-batch", type=int, default=1000, help="keys per get_batch call")
    parser.add_argument("--bounded", action="store_true", help="max_entries = n (Kafka check)")
    parser.add_argument("--clean-shape", action="store_true", help="bench clean's map workload")
    parser.add_argument("--repeat", type=int, default=3, help="--clean-shape runs (best kept)")
    args = parser.parse_args()
    if args.clean_shape:
        clean_shape(args)
    else:
        distinct_keys(args)


if __name__ == "__main__":
    main()
