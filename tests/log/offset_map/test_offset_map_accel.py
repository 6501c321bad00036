"""The offset map's C flush kernel (``_runs.flush_puts``) against its numpy reference, on random,
skewed and hostile input; and the map built either way answers the same."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.log import offset_map as om
from kcompact.log.offset_map import OffsetMap, accel, key_digests, runs
from tests.records.scan.accel_compare import accel_switched, needs_c

U64_MAX = (1 << 64) - 1
# few distinct words, so that equal hi with different lo, repeated keys, and keys equal on the
# compared bits (lo differing only in its low 28 bits: one key) are common
_words = st.sampled_from([
    0, 1, 2, (1 << 28) - 1, 1 << 28, 1 << 63, U64_MAX, U64_MAX - 1, 0x8000_0000_0000_0001,
])  # fmt: skip
_puts = st.lists(st.tuples(_words | st.integers(0, U64_MAX), _words), max_size=120)
_chunks = st.lists(_puts, max_size=5)  # empty chunks and no chunk at all included
Pending = list[tuple[np.ndarray, np.ndarray, np.ndarray]]


@pytest.fixture(autouse=True)
def _kernels_on() -> Iterator[None]:
    """The kernels, when built, even where ``KCOMPACT_NO_ACCEL`` turned them off."""
    with accel_switched(accel.kernels is not None):
        yield


def _pending(chunks: list[list[tuple[int, int]]], first: int = 0, step: int = 1) -> Pending:
    """The chunks as ``OffsetMap._pending`` holds them, offsets increasing by ``step``."""
    pending, offset = [], first
    for puts in chunks:
        offsets = offset + step * np.arange(len(puts), dtype=np.int64)
        offset += step * len(puts)
        pending.append((np.array([h for h, _ in puts], dtype=np.uint64),
                        np.array([lo for _, lo in puts], dtype=np.uint64), offsets))
    return pending


def _columns_both_ways(pending: Pending) -> tuple[list[list[int]], list[list[int]]]:
    """``_flush_columns`` by the kernel and by the reference, each as plain lists."""
    found = []
    for on in (True, False):
        with accel_switched(on):
            consumed = list(pending)
            query, off = om._flush_columns(consumed)
            assert consumed == []  # the flush gives the chunks up
            found.append([query.top.tolist(), query.key.tolist(), query.mid.tolist(),
                          query.low.tolist(), off.tolist()])
    return found[0], found[1]


@needs_c
@settings(max_examples=400)
@given(_chunks, st.sampled_from([0, 2**31 - 5, 2**62]), st.sampled_from([1, 3, 0, -2, 2**32 + 1]))
def test_c_flush_equals_the_numpy_reference(
    chunks: list[list[tuple[int, int]]], first: int, step: int
) -> None:
    """Offsets increasing over a span of fewer than 2**28 ride in the sort (the kernel's usual
    case); others (a bigger span, repeated or decreasing offsets) are looked up by position."""
    pending = _pending(chunks, first, step)
    with accel_switched(True):
        assert accel.flush_puts(list(pending), runs.IMPLIED_BITS) is not None  # the kernel took it
    kernel, reference = _columns_both_ways(pending)
    assert kernel == reference


@needs_c
@settings(max_examples=100)
@given(_chunks)
def test_c_flush_with_fewer_implied_bits_equals_the_numpy_reference(
    chunks: list[list[tuple[int, int]]]
) -> None:
    """Tests shrink ``IMPLIED_BITS`` (tiny directories): the kernel reads it at each flush."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runs, "IMPLIED_BITS", 2)
        kernel, reference = _columns_both_ways(_pending(chunks))
    assert kernel == reference


def test_the_flush_takes_each_keys_last_put_on_100_bits() -> None:
    """Puts of keys equal on the compared bits are one key's; its last put wins (both ways)."""
    same = [(5, 1 << 40), (5, (1 << 40) | 7), (5, (1 << 40) | ((1 << 28) - 1))]
    other = [(5, 1 << 28), (4, 1 << 40)]
    pending = _pending([same[:2], other + same[2:]], first=10)
    for on in (False, True):
        with accel_switched(on):
            query, off = om._flush_columns(list(pending))
            assert off.tolist() == [13, 12, 14]  # (4, ..), (5, 1 << 28), (5, 1 << 40) ascending
            assert query.top.tolist() == [4, 5, 5]


@needs_c
@pytest.mark.parametrize("offsets", ["dense", "sparse", "shuffled"])
@pytest.mark.parametrize("keys", [1, 7, 1000, 300_000])
def test_c_flush_on_skewed_and_large_inputs(keys: int, offsets: str) -> None:
    rng = np.random.default_rng(keys)
    hi, lo = key_digests([b"k%d" % i for i in range(keys)])
    pending, at = [], 0
    for size in (1, 70_000, 3, 200_000, 130_000):  # chunks across the kernel's 4096-put blocks
        ids = rng.integers(0, keys, size)
        h = hi[ids]
        h[::5] &= np.uint64(0xFF)  # a fifth of the puts in the first bucket, many sharing hi
        pending.append((h, lo[ids], np.arange(at, at + size, dtype=np.int64) * 3))
        at += size
    if offsets == "sparse":  # a span of 2**28 or more
        pending = [(h, lo_, off * 1000) for h, lo_, off in pending]
    elif offsets == "shuffled":
        pending = [(h, lo_, rng.permutation(off)) for h, lo_, off in pending]
    kernel, reference = _columns_both_ways(pending)
    assert kernel == reference


@needs_c
@settings(max_examples=200)
@given(_chunks, st.sampled_from([2, 4, 8]), st.sampled_from([1, 0, 2**32 + 1]))
def test_c_flush_in_parts_joins_to_the_whole_flush(chunks: list[list[tuple[int, int]]], parts: int,
                                                   step: int) -> None:
    """Each part sorts the keys of its top-bit slice of ``hi``: the parts' columns, joined in part order, are
    the whole flush's (offsets that ride in the sort and offsets looked up by position alike)."""
    pending = _pending(chunks, 7, step)
    whole = accel.flush_puts(list(pending), runs.IMPLIED_BITS)
    split = [accel.flush_puts(list(pending), runs.IMPLIED_BITS, part, parts) for part in range(parts)]
    assert whole is not None and all(part is not None for part in split)
    assert tuple(b"".join(part[j] for part in split if part is not None) for j in range(5)) == whole


@needs_c
@pytest.mark.parametrize(("part", "parts"), [(0, 3), (2, 2), (-1, 2), (0, 16), (0, 0)])
def test_c_flush_declines_a_part_it_cannot_cut(part: int, parts: int) -> None:
    pending = _pending([[(1, 2), (3, 4)]])
    assert accel.flush_puts(pending, runs.IMPLIED_BITS, part, parts) is None


@needs_c
@pytest.mark.parametrize("keys", [300, 200_000])
def test_a_map_flushing_in_parts_on_threads_answers_as_one_flushing_whole(keys: int) -> None:
    """``OffsetMap.run_parts`` (the round's threads): its flushes from ``SPLIT_FLUSH_PUTS`` puts on sort the two
    halves of the keys at once, and the map holds what a map flushing each whole holds."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(keys)
    hi, lo = key_digests([b"k%d" % i for i in range(keys)])
    ids = rng.integers(0, keys, 600_000)
    calls: list[int] = []

    def on_threads(tasks: list) -> list:  # type: ignore[type-arg]
        calls.append(len(tasks))
        with ThreadPoolExecutor(len(tasks)) as executor:
            return list(executor.map(lambda task: task(), tasks))

    answers = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(om, "_FLUSH_MIN_PUTS", 1 << 18)
        for run_parts in (None, on_threads):
            offset_map = OffsetMap()
            offset_map.run_parts = run_parts
            for at in range(0, len(ids), 50_000):
                part = ids[at : at + 50_000]
                offset_map.put_batch(hi[part], lo[part], np.arange(at, at + len(part), dtype=np.int64))
            offset_map.freeze()
            answers.append((offset_map.get_batch(hi, lo).tolist(), offset_map.latest_offsets_sorted().tolist()))
    assert answers[0] == answers[1]
    assert calls and set(calls) == {om.FLUSH_PARTS}  # the flushes did run in parts


@needs_c
@pytest.mark.parametrize("pending", [
    [(np.zeros(3, np.uint64), np.zeros(2, np.uint64), np.zeros(3, np.int64))],  # lengths differ
    [(np.zeros(3, np.uint64), np.zeros(3, np.uint64), np.zeros(2, np.int64))],
    [(np.zeros(3, np.int64), np.zeros(3, np.uint64), np.zeros(3, np.int64))],  # signed hi
    [(np.zeros(3, np.uint64), np.zeros(3, np.uint64), np.zeros(3, np.uint64))],  # unsigned offsets
    [(np.zeros((2, 2), np.uint64), np.zeros((2, 2), np.uint64), np.zeros((2, 2), np.int64))],
    [(np.zeros(6, np.uint64)[::2], np.zeros(3, np.uint64), np.zeros(3, np.int64))],  # strided
    [(b"x" * 24, np.zeros(3, np.uint64), np.zeros(3, np.int64))],  # not uint64
    [(np.zeros(3, np.uint64), np.zeros(3, np.uint64))],  # not a triple
    [[np.zeros(3, np.uint64), np.zeros(3, np.uint64), np.zeros(3, np.int64)]],  # not a tuple
    ((np.zeros(3, np.uint64), np.zeros(3, np.uint64), np.zeros(3, np.int64)),),  # not a list
    "abc",
])
def test_c_flush_declines_what_it_does_not_take(pending: object) -> None:
    assert accel.flush_puts(pending, runs.IMPLIED_BITS) is None  # type: ignore[arg-type]


@needs_c
@pytest.mark.parametrize("implied_bits", [0, -1, 13, 2**70, 12.0, None])
def test_c_flush_declines_a_layout_it_cannot_pack(implied_bits: object) -> None:
    """Positions ride in lo's low 28 bits: more than 12 implied bits would compare them."""
    pending = [(np.zeros(3, np.uint64), np.zeros(3, np.uint64), np.zeros(3, np.int64))]
    assert accel.flush_puts(pending, implied_bits) is None  # type: ignore[arg-type]


@needs_c
@pytest.mark.parametrize("max_entries", [None, 4000, 4999])
def test_map_built_with_the_kernel_answers_as_the_reference_map(max_entries: int | None) -> None:
    keys = [b"key-%d" % i for i in range(5000)]
    hi, lo = key_digests(keys)
    answers = []
    for on in (False, True):
        rng = np.random.default_rng(7)
        with accel_switched(on):
            offset_map, accepted = OffsetMap(max_entries=max_entries), []
            for start in range(0, 200_000, 40_000):  # several flushes and merges
                ids = rng.integers(0, len(keys), 40_000)
                accepted.append(offset_map.put_batch(hi[ids], lo[ids], np.arange(start, start + 40_000)))
                offset_map._flush()
            offset_map.freeze()
            answers.append((accepted, offset_map.get_batch(hi, lo).tolist(),
                            offset_map.latest_offsets_sorted().tolist()))
    assert answers[0] == answers[1]
    assert (sum(answers[1][0]) < 200_000) == (max_entries is not None)  # the bound was reached


@needs_c
def test_c_flush_sorts_in_at_most_18_bytes_a_put() -> None:
    """The flush's sort is a clean's memory peak: 16 bytes a put (hi, and lo masked with the
    position in its free low bits) and the bucket directory, besides the chunks and the result."""
    import tracemalloc

    n = 1 << 18
    rng = np.random.default_rng(3)
    hi = rng.integers(0, 1 << 63, n, dtype=np.uint64)
    lo = rng.integers(0, 1 << 63, n, dtype=np.uint64)
    offsets = np.arange(n, dtype=np.int64)
    quarter = n // 4
    pending = [(hi[at : at + quarter], lo[at : at + quarter], offsets[at : at + quarter])
               for at in range(0, n, quarter)]
    tracemalloc.start()
    try:
        with accel_switched(True):
            found = accel.flush_puts(pending, runs.IMPLIED_BITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found is not None and len(found[0]) == 8 * n  # distinct keys: one result each
    assert peak - sum(map(len, found)) <= 18 * n + 4096  # and a few small objects


@settings(max_examples=300)
@given(st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(0, 60), max_size=200))
def test_latest_offsets_sort_as_numpy_sorts_them(offsets: list[int]) -> None:
    """The oracle's sorted offsets: marked over their span when dense and distinct, else sorted."""
    column = np.array(offsets, dtype=np.int64)
    assert om._sorted_distinct(column.copy()).tolist() == sorted(offsets)


@pytest.mark.parametrize("repeat", [False, True])
def test_latest_offsets_of_a_dense_map_come_out_sorted(repeat: bool) -> None:
    offsets = np.random.default_rng(5).permutation(50_000)[:20_000].astype(np.int64) + 1000
    if repeat:
        offsets[7] = offsets[8]  # not one per key: the marking would lose one, so it sorts
    result = om._sorted_distinct(offsets.copy())
    assert result.dtype == np.int64 and result.tolist() == sorted(offsets.tolist())


# digest words whose keys collide on a run's ``key`` (digest bits 0-75: hi and lo's top 12 bits)
# and differ in ``mid`` (lo bits 36-51) or ``low`` (lo bits 28-35)
_lo_words = st.sampled_from([0, 1 << 28, 1 << 36, 1 << 52, (1 << 52) | (1 << 36), U64_MAX])
_keys = st.lists(st.tuples(_words | st.integers(0, U64_MAX), _lo_words), min_size=1, max_size=80)
_BASE = 1000


def _run_of(keys: list[tuple[int, int]], offsets: list[int]) -> runs.Run:
    query, off = om._flush_columns_reference(
        [(np.array([h for h, _ in keys], np.uint64), np.array([lo for _, lo in keys], np.uint64),
          np.array(offsets[: len(keys)], np.int64))])
    return runs.Run.encode(query, off, _BASE)


def _fold_both_ways(run: runs.Run, query: runs.Query, off: np.ndarray) -> list[list[object]]:
    """``_fold_into`` by the kernel and by the reference, each on its own copy of ``run``:
    what comes back and what the run then holds."""
    import pickle

    found = []
    for on in (True, False):
        copy = pickle.loads(pickle.dumps(run))
        with accel_switched(on):
            rest, rest_off = om._fold_into(copy, query, off)
        found.append([rest.top.tolist(), rest.key.tolist(), rest.mid.tolist(), rest.low.tolist(),
                      rest_off.tolist(), copy.rest.tobytes(), copy.wide, copy.offsets().tolist()])
    return found


@needs_c
@settings(max_examples=300)
@given(_keys, _keys, st.lists(st.sampled_from([_BASE, _BASE + 7, 2**32 + _BASE]), min_size=80,
                              max_size=80),
       st.sampled_from([_BASE + 5, _BASE - 1, _BASE + 2**32]))
def test_c_fold_into_a_run_equals_the_numpy_reference(
    run_keys: list[tuple[int, int]], put_keys: list[tuple[int, int]], run_offsets: list[int],
    put_offset: int,
) -> None:
    """Keys the run holds get their new offsets in place; the others come back, in order. Offsets
    a narrow run cannot hold (below its base, 2**32 past it) are the reference's (it widens)."""
    run = _run_of(run_keys, run_offsets)
    query, off = om._flush_columns_reference(
        [(np.array([h for h, _ in put_keys], np.uint64), np.array([lo for _, lo in put_keys], np.uint64),
          put_offset + np.arange(len(put_keys), dtype=np.int64))])
    kernel, reference = _fold_both_ways(run, query, off)
    assert kernel == reference
    fits = run.wide or (int(off.min()) >= _BASE and int(off.max()) < _BASE + 2**32)
    with accel_switched(True):
        taken = accel.fold_into_run(run.columns(), (query.top, query.key, query.mid, query.low), off)
    assert (taken is not None) == fits


@needs_c
def test_c_fold_declines_a_run_it_cannot_write() -> None:
    run = _run_of([(5, 0), (6, 1 << 36)], [_BASE, _BASE + 1])
    query, off = om._flush_columns_reference(
        [(np.array([5], np.uint64), np.array([0], np.uint64), np.array([_BASE + 9], np.int64))])
    rest = run.rest.view(np.uint8)
    rest.flags.writeable = False
    before = run.rest.tobytes()
    found = accel.fold_into_run((run.key, rest, run.starts, run.bits, run.base),
                                (query.top, query.key, query.mid, query.low), off)
    assert found is None and run.rest.tobytes() == before
    found = accel.fold_into_run((run.key, run.rest.view(np.uint8), run.starts, run.bits + 1, run.base),
                                (query.top, query.key, query.mid, query.low), off)
    assert found is None and run.rest.tobytes() == before  # a directory of another size
    for bad in ([0] * (len(run.starts) - 1) + [len(run.key) + 9], [1] + [len(run.key)] * (len(run.starts) - 1)):
        found = accel.fold_into_run(
            (run.key, run.rest.view(np.uint8), np.array(bad, dtype=run.starts.dtype), run.bits, run.base),
            (query.top, query.key, query.mid, query.low), off)
        assert found is None and run.rest.tobytes() == before  # a directory not the run's own


def _merge_both_ways(a: runs.Run, b: runs.Run) -> list[list[object]]:
    """``merge_runs`` by the kernel and by the reference, on copies: the run each writes."""
    import pickle

    found = []
    for on in (True, False):
        a_copy, b_copy = pickle.loads(pickle.dumps(a)), pickle.loads(pickle.dumps(b))
        with accel_switched(on):
            merged = runs.merge_runs(a_copy, b_copy)
        found.append([merged.key.tolist(), merged.rest.tobytes(), merged.starts.tolist(),
                      merged.starts.dtype, merged.wide, merged.base, merged.bits])
    return found


@needs_c
@settings(max_examples=300)
@given(_keys, _keys, st.sampled_from([_BASE, _BASE + 2**32]), st.sampled_from([_BASE, _BASE + 2**32]),
       st.sampled_from([1, 2, 3, 1 << 16]), st.booleans())
def test_c_merge_of_two_runs_equals_the_numpy_reference(
    a_keys: list[tuple[int, int]], b_keys: list[tuple[int, int]], a_offset: int, b_offset: int,
    chunk: int, small: bool,
) -> None:
    """Narrow and wide runs, keys sharing digest bits 0-75 across the two, steps of a few keys;
    with 2 implied bits (``small``) the runs' directories are finer than the implied bits."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runs, "_MERGE_CHUNK", chunk)
        mp.setattr(runs, "_MMAP_MIN_BYTES", 1)  # outputs in their own mappings, given back
        if small:
            mp.setattr(runs, "IMPLIED_BITS", 2)
            mp.setattr(runs, "_BUCKET_KEYS", 2)
        a = _run_of(a_keys, [a_offset + i for i in range(len(a_keys))])
        free_bits = 64 - (runs.IMPLIED_BITS + 24)  # lo's bits no key is told apart by
        held = {(h, lo >> free_bits) for h, lo in a_keys}
        b_keys = [(h, lo) for h, lo in b_keys if (h, lo >> free_bits) not in held]  # no key in both
        if not b_keys:
            return
        b = _run_of(b_keys, [b_offset + i for i in range(len(b_keys))])
        kernel, reference = _merge_both_ways(a, b)
    assert kernel == reference


@needs_c
def test_c_merge_declines_what_it_does_not_take() -> None:
    """Nothing is written then: ``merge_runs`` falls back to numpy only before its first step."""
    a = _run_of([(5, 0), (9, 0)], [_BASE, _BASE + 1])
    b = _run_of([(7, 0)], [_BASE + 2**32])  # wide
    padded, rest = runs.Run.allocate(3, wide=True)
    padded[:] = 7
    starts = np.zeros((1 << a.bits) + 1, dtype=np.uint32)
    out = (padded, rest.view(np.uint8), starts, a.bits, _BASE)
    narrow_rest = np.zeros(3 * 7, dtype=np.uint8)
    for args in [
        (a.columns(), b.columns(), (padded, narrow_rest, starts, a.bits, _BASE), 12, 0, 0, 3),
        (a.columns(), b.columns(), (padded, rest.view(np.uint8), starts[:-1], a.bits, _BASE), 12, 0, 0, 3),
        (a.columns(), b.columns(), out, 12, 0, 0, 4),  # past the output's end
        (a.columns(), b.columns(), out, 12, 3, 0, 3),  # past a's end
        (a.columns(), b.columns(), out, 13, 0, 0, 3),  # more implied bits than the directories
        (a.columns()[:2] + (a.starts + 1, *a.columns()[3:]), b.columns(), out, 12, 0, 0, 3),  # not a's
        (a.columns(), b.columns()[:2] + (b.starts * 5, *b.columns()[3:]), out, 12, 0, 0, 3),  # not b's
    ]:
        assert accel.merge_runs_step(*args) is None
        assert padded.tolist() == [7] * len(padded) and not starts.any()
    assert accel.merge_runs_step(a.columns(), b.columns(), out, 12, 0, 0, 3) == (2, 1)
    assert padded[:3].tolist() == [a.key[0], b.key[0], a.key[1]] and starts.sum() == 3
