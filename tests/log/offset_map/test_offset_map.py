"""The cleaner's offset map against a dict model, Kafka's capacity rule, and forced collisions."""

from __future__ import annotations

import hashlib
import pickle
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import ConfigError
from kcompact.log import offset_map as om
from kcompact.log.offset_map import OffsetMap, key_digests, runs

KeyDigest = Callable[[int], tuple[int, int]]


def _real_digest(key_id: int) -> tuple[int, int]:
    hi, lo = key_digests([b"key-%d" % key_id])
    return int(hi[0]), int(lo[0])


def _colliding_digest(key_id: int) -> tuple[int, int]:
    """Groups of four keys share their first 64 bits; bits 64-69 tell them apart."""
    return (key_id // 4) * 0x9E3779B97F4A7C15 % 2**64, key_id << 58


def _shared_key_digest(key_id: int) -> tuple[int, int]:
    """Groups of four keys share digest bits 0-81 (all of a run's ``key``); bits 82-87 differ."""
    return (key_id // 4) * 0x9E3779B97F4A7C15 % 2**64, (key_id << 40) | 0x5A5A


def _bucket_digest(key_id: int) -> tuple[int, int]:
    """Keys differ only in digest bits 0-15 (0-11 are those a run keeps in its directory)."""
    return (key_id << 48) | 0x1234_5678_9ABC, 0xFEDC_BA98_7654_3210


DIGESTS = {
    "real": _real_digest,
    "colliding": _colliding_digest,
    "shared_key": _shared_key_digest,
    "bucket": _bucket_digest,
}


@contextmanager
def _tiny_thresholds() -> Iterator[None]:
    """Flush, merge, mmap and bisect after a handful of keys, so small tests reach them: keep 2
    digest bits in directories of 4+ buckets (not 16 in 65536+), most runs refining them with
    stored bits, and look at windows of 8 keys (buckets of ~8 keys often overflow them)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(om, "_FLUSH_MIN_PUTS", 5)
        mp.setattr(runs, "_MERGE_CHUNK", 3)
        mp.setattr(runs, "_LOOKUP_CHUNK", 4)
        mp.setattr(runs, "_WINDOW", 8)
        mp.setattr(runs, "_BUCKET_KEYS", 8)
        mp.setattr(runs, "_MMAP_MIN_BYTES", 1)
        mp.setattr(runs, "IMPLIED_BITS", 2)
        yield


def _columns(digest: KeyDigest, key_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    pairs = [digest(k) for k in key_ids]
    return (
        np.array([h for h, _ in pairs], dtype=np.uint64),
        np.array([lo for _, lo in pairs], dtype=np.uint64),
    )


batches_st = st.lists(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 3)), max_size=30), max_size=12
)
gap_st = st.sampled_from([0, 0, 0, 5, 2**32, 2**33 + 7])


@pytest.mark.parametrize("digest_name", sorted(DIGESTS))
@given(batches=batches_st, start=st.integers(0, 2**40), gaps=st.lists(gap_st, min_size=12))
def test_unbounded_map_matches_a_dict(
    digest_name: str, batches: list[list[tuple[int, int]]], start: int, gaps: list[int]
) -> None:
    digest = DIGESTS[digest_name]
    with _tiny_thresholds():
        model: dict[int, int] = {}
        offset_map, offset = OffsetMap(), start
        for batch, gap in zip(batches, gaps, strict=False):
            offset += gap
            key_ids = [k for k, _ in batch]
            offsets = offset + np.cumsum([step for _, step in batch], dtype=np.int64)
            offset = int(offsets[-1]) if batch else offset
            hi, lo = _columns(digest, key_ids)
            assert offset_map.put_batch(hi, lo, offsets) == len(batch)
            model.update(zip(key_ids, offsets.tolist(), strict=True))
            if batch:
                assert offset_map.latest_offset == offset
        _check_against_model(offset_map, model, digest)
        offset_map.freeze()
        _check_against_model(offset_map, model, digest)


def _check_against_model(offset_map: OffsetMap, model: dict[int, int], digest: KeyDigest) -> None:
    queries = list(range(50))  # keys 41..49 are never put
    hi, lo = _columns(digest, queries)
    got = offset_map.get_batch(hi, lo)
    assert got.dtype == np.int64
    assert got.tolist() == [model.get(k, -1) for k in queries]
    assert offset_map.size == len(model)
    assert offset_map.latest_offsets_sorted().tolist() == sorted(model.values())
    assert not offset_map.full


def _kafka_model(
    batches: list[list[int]], offsets: list[list[int]], max_entries: int
) -> tuple[list[int], dict[int, int], int]:
    """SkimpyOffsetMap as the cleaner drives it: check ``size < max`` before each put."""
    accepted_counts: list[int] = []
    model: dict[int, int] = {}
    latest = -1
    for keys, offs in zip(batches, offsets, strict=True):
        accepted = 0
        for key, offset in zip(keys, offs, strict=True):
            if len(model) >= max_entries:
                break
            model[key] = latest = offset
            accepted += 1
        accepted_counts.append(accepted)
    return accepted_counts, model, latest


@pytest.mark.parametrize("digest_name", sorted(DIGESTS))
@given(
    batches=st.lists(st.lists(st.integers(0, 25), max_size=20), max_size=10),
    max_entries=st.integers(1, 22),
)
def test_bounded_map_stops_exactly_where_kafka_does(
    digest_name: str, batches: list[list[int]], max_entries: int
) -> None:
    digest = DIGESTS[digest_name]
    offsets, next_offset = [], 100
    for keys in batches:
        offsets.append(list(range(next_offset, next_offset + len(keys))))
        next_offset += len(keys) + 3
    expected_counts, model, latest = _kafka_model(batches, offsets, max_entries)
    with _tiny_thresholds():
        offset_map = OffsetMap(max_entries=max_entries)
        counts = []
        for keys, offs in zip(batches, offsets, strict=True):
            hi, lo = _columns(digest, keys)
            counts.append(offset_map.put_batch(hi, lo, np.array(offs, dtype=np.int64)))
        assert counts == expected_counts
        assert offset_map.latest_offset == latest
        assert offset_map.full == (len(model) == max_entries)
        offset_map.freeze()
        hi, lo = _columns(digest, list(range(30)))
        assert offset_map.get_batch(hi, lo).tolist() == [model.get(k, -1) for k in range(30)]
        assert offset_map.size == len(model)


def _put_keys(offset_map: OffsetMap, keys: list[bytes], offsets: list[int]) -> int:
    hi, lo = key_digests(keys)
    return offset_map.put_batch(hi, lo, np.array(offsets, dtype=np.int64))


def _get_keys(offset_map: OffsetMap, keys: list[bytes]) -> list[int]:
    found: list[int] = offset_map.get_batch(*key_digests(keys)).tolist()
    return found


def test_log_cleaner_stats_numbers() -> None:
    """LogCleanerTest.testLogCleanerStats: 4 slots x 0.75 = 3 entries; keys 0,1,0 at 2..4 fit."""
    offset_map = OffsetMap.for_dedupe_buffer(4 * 24, load_factor=0.75)
    assert (offset_map.slots, offset_map.max_entries) == (4, 3)
    assert _put_keys(offset_map, [b"0", b"1", b"0"], [2, 3, 4]) == 3
    assert offset_map.latest_offset + 1 == 5  # endOffset
    assert offset_map.size == 2
    assert not offset_map.full


def test_build_partial_offset_map_numbers() -> None:
    """LogCleanerTest.testBuildPartialOffsetMap: 3 slots x 0.75 = 2 entries, keys 2,3,4 from 2."""
    offset_map = OffsetMap.for_dedupe_buffer(3 * 24, load_factor=0.75)
    assert _put_keys(offset_map, [b"2", b"3", b"4"], [2, 3, 4]) == 2
    assert offset_map.latest_offset == 3
    assert offset_map.full
    assert _get_keys(offset_map, [b"0", b"2", b"3", b"4"]) == [-1, 2, 3, -1]


def test_full_map_refuses_even_a_key_it_already_holds() -> None:
    offset_map = OffsetMap(max_entries=2)
    assert _put_keys(offset_map, [b"a", b"b"], [0, 1]) == 2
    assert offset_map.full
    assert _put_keys(offset_map, [b"a"], [2]) == 0
    assert offset_map.latest_offset == 1
    assert _get_keys(offset_map, [b"a", b"b"]) == [0, 1]


def test_updates_below_the_bound_keep_being_accepted() -> None:
    offset_map = OffsetMap(max_entries=2)
    assert _put_keys(offset_map, [b"a", b"a", b"a"], [0, 1, 2]) == 3
    assert _put_keys(offset_map, [b"a", b"b", b"a", b"c"], [3, 4, 5, 6]) == 2  # b fills it
    assert offset_map.latest_offset == 4
    assert _get_keys(offset_map, [b"a", b"b", b"c"]) == [3, 4, -1]


def test_default_dedupe_buffer_sizing_matches_kafka() -> None:
    offset_map = OffsetMap.for_dedupe_buffer(128 * 1024 * 1024)
    assert (offset_map.slots, offset_map.max_entries) == (5_592_405, 5_033_164)


def test_dedupe_buffer_is_capped_at_2gib_like_kafka() -> None:
    offset_map = OffsetMap.for_dedupe_buffer(2**40, load_factor=1.0)
    assert offset_map.slots == (2**31 - 1) // 24


@pytest.mark.parametrize(
    ("buffer_bytes", "load_factor", "fragment"),
    [
        (24, 0.9, "expected floor(slots * load factor) >= 1, found 1 slots (24 bytes) * 0.9"),
        (47, 0.5, "found 1 slots (47 bytes) * 0.5"),
        (0, 0.9, "found 0 slots"),
        (2400, 0.0, "expected a value in (0, 1], found 0.0"),
        (2400, 1.5, "expected a value in (0, 1], found 1.5"),
    ],
)
def test_unusable_dedupe_buffer_is_refused(
    buffer_bytes: int, load_factor: float, fragment: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        OffsetMap.for_dedupe_buffer(buffer_bytes, load_factor)


def test_a_buffer_for_exactly_one_key_is_usable() -> None:
    """Kafka 4.1 only asserts slots * load_factor > 1 (Java assert, disabled in brokers)."""
    offset_map = OffsetMap.for_dedupe_buffer(48, load_factor=0.5)  # 2 slots * 0.5 == 1
    assert (offset_map.slots, offset_map.max_entries) == (2, 1)
    assert _put_keys(offset_map, [b"a", b"a"], [0, 1]) == 1  # full after one key, even for "a"


def test_capacity_below_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected at least 1 entry, found 0"):
        OffsetMap(max_entries=0)


def test_digests_are_deterministic_and_are_xxh3_128() -> None:
    keys = [b"", b"a", b"key-1", bytes(range(256))]
    hi, lo = key_digests(keys)
    again_hi, again_lo = key_digests([bytes(k) for k in keys])
    assert hi.dtype == lo.dtype == np.uint64
    assert np.array_equal(hi, again_hi) and np.array_equal(lo, again_lo)
    as_ints = [(int(h) << 64) | int(lo_) for h, lo_ in zip(hi, lo, strict=True)]
    assert as_ints == [xxhash.xxh3_128_intdigest(k) for k in keys]
    assert len(set(as_ints)) == len(keys)
    mv_hi, _ = key_digests([memoryview(b"xx-key-1")[3:]])
    assert int(mv_hi[0]) == int(hi[2])


def test_no_keys_no_digests() -> None:
    hi, lo = key_digests([])
    assert hi.shape == lo.shape == (0,)
    assert OffsetMap().get_batch(hi, lo).shape == (0,)
    assert OffsetMap().put_batch(hi, lo, np.empty(0, dtype=np.int64)) == 0


def test_keys_sharing_the_first_64_digest_bits_stay_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    def prefix_collision(key: bytes) -> bytes:  # every key gets the same first 8 bytes
        return b"\x5a" * 8 + hashlib.md5(key).digest()[:8]

    monkeypatch.setattr(om, "_hash128", prefix_collision)
    keys = [b"user-%d" % i for i in range(300)]
    hi, _ = key_digests(keys)
    assert len(set(hi.tolist())) == 1
    with _tiny_thresholds():
        offset_map = OffsetMap()
        for at in range(0, 300, 37):
            _put_keys(offset_map, keys[at : at + 37], list(range(at, at + len(keys[at : at + 37]))))
        _put_keys(offset_map, keys[::2], list(range(1000, 1150)))
        expected = [1000 + i // 2 if i % 2 == 0 else i for i in range(300)]
        assert _get_keys(offset_map, keys) == expected
        assert _get_keys(offset_map, [b"user-300", b"other"]) == [-1, -1]
        offset_map.freeze()
        assert _get_keys(offset_map, keys) == expected
        assert offset_map.size == 300


def _random_digests(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    hi = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
    return hi, rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)


def test_at_most_16_bytes_a_key_after_freeze() -> None:
    n = 300_000  # a directory of 2**16 buckets, ~4.6 keys each
    hi, lo = _random_digests(n, 7)
    offset_map = OffsetMap()
    for at in range(0, n, 10_000):
        offsets = np.arange(at, at + 10_000, dtype=np.int64) * 3
        offset_map.put_batch(hi[at : at + 10_000], lo[at : at + 10_000], offsets)
    offset_map.freeze()
    assert offset_map.get_batch(hi[:5], lo[:5]).tolist() == [0, 3, 6, 9, 12]
    assert offset_map.memory_bytes() == 15 * n + 8 * runs._WINDOW + 4 * (2**16 + 1)
    assert offset_map.memory_bytes() / n <= 16.0


def test_offsets_spanning_2_to_the_32_take_8_bytes_a_key() -> None:
    n = 300_000
    hi, lo = _random_digests(n, 8)
    wide = OffsetMap()
    offsets = np.arange(n, dtype=np.int64) * 2**20  # spans > 2**32 offsets
    wide.put_batch(hi, lo, offsets)
    wide.freeze()
    assert wide.memory_bytes() == 19 * n + 8 * runs._WINDOW + 4 * (2**16 + 1)
    assert np.array_equal(wide.get_batch(hi, lo), offsets)
    assert np.array_equal(wide.latest_offsets_sorted(), offsets)


def test_an_offset_below_the_first_one_widens_the_run() -> None:
    offset_map = OffsetMap()
    hi, lo = key_digests([b"a", b"b", b"c"])
    offset_map.put_batch(hi[:1], lo[:1], np.array([2**40], dtype=np.int64))
    assert offset_map.size == 1  # flushed: the map's base is now 2**40
    offset_map.put_batch(hi[1:], lo[1:], np.array([5, 2**40 + 2**33], dtype=np.int64))
    assert offset_map.get_batch(hi, lo).tolist() == [2**40, 5, 2**40 + 2**33]
    offset_map.freeze()
    assert offset_map.get_batch(hi, lo).tolist() == [2**40, 5, 2**40 + 2**33]


def test_a_big_map_with_finer_directories_matches_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """300k keys, 12 implied bits, 1-key buckets (so merges refine 2**17-2**18-bucket
    directories), merges in chunks of 5000 and outputs in their own mappings, given back."""
    monkeypatch.setattr(runs, "_BUCKET_KEYS", 1)
    monkeypatch.setattr(runs, "_MERGE_CHUNK", 5000)
    monkeypatch.setattr(om, "_FLUSH_MIN_PUTS", 20_000)
    monkeypatch.setattr(runs, "_RELEASE_SHIFT", 12)  # give back 4 KiB pages, as soon as consumed
    n, puts = 300_000, 600_000
    hi, lo = _random_digests(n, 9)
    ids = np.random.default_rng(10).integers(0, n, puts)
    offsets = np.arange(puts, dtype=np.int64) * 5 + 2**31
    offset_map = OffsetMap()
    for at in range(0, puts, 7000):
        sl = slice(at, at + 7000)
        assert offset_map.put_batch(hi[ids[sl]], lo[ids[sl]], offsets[sl]) == len(ids[sl])
    latest = np.full(n, -1, dtype=np.int64)
    np.maximum.at(latest, ids, offsets)  # offsets increase: the last put of each key wins
    assert np.array_equal(offset_map.get_batch(hi, lo), latest)
    offset_map.freeze()
    assert np.array_equal(offset_map.get_batch(hi, lo), latest)
    assert offset_map.size == np.count_nonzero(latest >= 0)
    assert np.array_equal(offset_map.latest_offsets_sorted(), np.sort(latest[latest >= 0]))


def test_a_map_survives_pickling_at_its_size() -> None:
    n = 300_000
    hi, lo = _random_digests(n, 11)
    offset_map = OffsetMap()
    offset_map.put_batch(hi, lo, np.arange(n, dtype=np.int64))
    offset_map.freeze()
    data = pickle.dumps(offset_map)
    assert len(data) < offset_map.memory_bytes() + 4096
    again = pickle.loads(data)
    assert np.array_equal(again.get_batch(hi, lo), np.arange(n))
    assert again.size == n


def test_keys_equal_on_the_first_100_digest_bits_are_one_key() -> None:
    """The documented collision model: bits 100-127 of the digest are not kept."""
    hi = np.full(3, 0x0123_4567_89AB_CDEF, dtype=np.uint64)
    lo = np.array(
        [
            0xFEDC_BA98_7654_3210,
            0xFEDC_BA98_7654_3210 ^ (1 << 27),
            0xFEDC_BA98_7654_3210 ^ (1 << 28),
        ],
        dtype=np.uint64,
    )  # bits 100, 99
    offset_map = OffsetMap()
    offset_map.put_batch(hi, lo, np.array([10, 11, 12], dtype=np.int64))
    assert offset_map.size == 2
    assert offset_map.get_batch(hi, lo).tolist() == [11, 11, 12]
    assert runs.COMPARED_BITS == 100


def test_mismatched_columns_are_a_caller_bug() -> None:
    hi, lo = key_digests([b"a", b"b"])
    with pytest.raises(ValueError, match="one offset per digest expected"):
        OffsetMap().put_batch(hi, lo, np.array([1], dtype=np.int64))
    with pytest.raises(ValueError, match="digest columns must be 1-D of one length"):
        OffsetMap().get_batch(hi, lo[:1])


def test_latest_offset_is_settable_and_starts_at_minus_one() -> None:
    offset_map = OffsetMap()
    assert offset_map.latest_offset == -1
    assert offset_map.latest_offsets_sorted().tolist() == []
    _put_keys(offset_map, [b"a"], [7])
    assert offset_map.latest_offset == 7
    offset_map.latest_offset = 41  # the cleaner's updateLatestOffset after a whole batch
    assert offset_map.latest_offset == 41
    assert _get_keys(offset_map, [b"a"]) == [7]


def test_a_batch_is_copied_unless_the_caller_gives_it_up() -> None:
    """By default the caller may reuse its arrays after ``put_batch``; with ``owned=True`` the map
    keeps them as they are (no copy: what pass 1 hands over per slice)."""
    import tracemalloc

    n = 100_000
    hi, lo = key_digests([b"k%d" % i for i in range(n)])
    offsets = np.arange(n, dtype=np.int64)
    answers = []
    for owned in (False, True):
        offset_map = OffsetMap()
        columns = (hi.copy(), lo.copy(), offsets.copy())
        tracemalloc.start()
        try:
            assert offset_map.put_batch(*columns, owned=owned) == n
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (peak >= 24 * n) == (not owned)  # three 8-byte columns copied, or none
        if not owned:
            for column in columns:
                column[:] = 0  # the caller reuses its arrays
        answers.append(offset_map.get_batch(hi, lo).tolist())
    assert answers[0] == answers[1] == offsets.tolist()


@pytest.mark.skipif(runs._MADV_DONTNEED is None, reason="no madvise(MADV_DONTNEED) on this platform")
def test_pages_a_merge_gives_back_are_freed_not_just_unmapped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A released prefix of a run's own mapping is really returned to the system: read again, it is
    zero-filled (a shared mapping would only drop it from this process and keep its memory, contents
    and all, until the whole mapping goes)."""
    monkeypatch.setattr(runs, "_RELEASE_SHIFT", 12)
    array = runs._alloc(1 << 20, np.dtype(np.uint64))  # 8 MiB: its own mapping
    array[:] = 1
    runs._release_prefix(array, 0, 1 << 16)  # the first 512 KiB
    assert not array[: 1 << 16].any() and array[1 << 16 :].all()
