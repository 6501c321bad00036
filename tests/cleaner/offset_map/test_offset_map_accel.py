"""The offset map's C flush kernel (``_accel.last_puts``) against its numpy reference, on random,
skewed and hostile input; and the map built either way answers the same."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.cleaner import offset_map as om
from kcompact.cleaner.offset_map import OffsetMap, key_digests
from kcompact.cleaner.offset_map.runs import compared_mask
from kcompact.records.scan import accel
from tests.records.scan.accel_compare import accel_switched, needs_c

U64_MAX = (1 << 64) - 1
# few distinct words, so that equal hi with different lo, and repeated keys, are common
_words = st.sampled_from([0, 1, 2, 1 << 63, U64_MAX, U64_MAX - 1, 0x8000_0000_0000_0001])
_puts = st.lists(st.tuples(_words | st.integers(0, U64_MAX), _words), max_size=300)


def _columns(puts: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([h for h, _ in puts], dtype=np.uint64),
            np.array([lo for _, lo in puts], dtype=np.uint64))


@needs_c
@settings(max_examples=300)
@given(_puts)
def test_c_last_puts_equals_the_numpy_reference(puts: list[tuple[int, int]]) -> None:
    hi, lo = _columns(puts)
    found = accel.last_puts(hi, lo)
    assert found is not None
    expected = om._last_puts_reference(hi, lo)
    assert np.frombuffer(found, dtype=np.int64).tolist() == expected.tolist()


@needs_c
@settings(max_examples=300)
@given(_puts)
def test_c_last_puts_of_masked_digests_equals_the_numpy_reference(puts: list[tuple[int, int]]) -> None:
    """What the flush passes (lo masked to the compared bits): the kernel's packed sort."""
    hi, lo = _columns(puts)
    lo &= compared_mask()
    found = accel.last_puts(hi, lo)
    assert found is not None
    assert np.frombuffer(found, dtype=np.int64).tolist() == om._last_puts_reference(hi, lo).tolist()


@needs_c
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("keys", [1, 7, 1000, 300_000])
def test_c_last_puts_on_skewed_and_large_inputs(keys: int, masked: bool) -> None:
    rng = np.random.default_rng(keys)
    ids = rng.integers(0, keys, 400_000)
    hi, lo = key_digests([b"k%d" % i for i in range(keys)])
    hi, lo = hi[ids], lo[ids] & (compared_mask() if masked else np.uint64(2**64 - 1))
    hi[::5] &= np.uint64(0xFF)  # a fifth of the puts in the first bucket, many sharing hi
    found = accel.last_puts(hi, lo)
    assert found is not None
    assert np.array_equal(np.frombuffer(found, dtype=np.int64), om._last_puts_reference(hi, lo))


@needs_c
@pytest.mark.parametrize("columns", [
    (np.zeros(3, np.uint64), np.zeros(2, np.uint64)),  # lengths differ
    (np.zeros(3, np.int64), np.zeros(3, np.uint64)),  # signed
    (np.zeros((2, 2), np.uint64), np.zeros((2, 2), np.uint64)),  # not 1-D
    (np.zeros(6, np.uint64)[::2], np.zeros(3, np.uint64)),  # not contiguous
    (b"x" * 24, np.zeros(3, np.uint64)),  # not uint64
    ("abc", None),
])
def test_c_last_puts_declines_what_it_does_not_take(columns: tuple[object, object]) -> None:
    assert accel.last_puts(*columns) is None


@needs_c
def test_map_built_with_the_kernel_answers_as_the_reference_map() -> None:
    rng = np.random.default_rng(7)
    keys = [b"key-%d" % i for i in range(5000)]
    hi, lo = key_digests(keys)
    answers = []
    for on in (False, True):
        with accel_switched(on):
            offset_map = OffsetMap()
            for start in range(0, 200_000, 40_000):  # several flushes and merges
                ids = rng.integers(0, len(keys), 40_000)
                offset_map.put_batch(hi[ids], lo[ids], np.arange(start, start + 40_000))
                offset_map._flush()
            offset_map.freeze()
            answers.append((offset_map.get_batch(hi, lo).tolist(), offset_map.latest_offsets_sorted().tolist()))
        rng = np.random.default_rng(7)
    assert answers[0] == answers[1]


@needs_c
@pytest.mark.parametrize("masked", [False, True])
def test_c_last_puts_sorts_in_at_most_18_bytes_a_put(masked: bool) -> None:
    """The flush's sort is a clean's memory peak: 16 bytes a put for masked digests (hi, lo and the
    position in its free low bits), 12 else (hi and position), and the bucket directory; not 26."""
    import tracemalloc

    n = 1 << 18
    rng = np.random.default_rng(3)
    hi = rng.integers(0, 1 << 63, n, dtype=np.uint64)
    lo = rng.integers(0, 1 << 63, n, dtype=np.uint64) & (compared_mask() if masked else np.uint64(2**64 - 1))
    tracemalloc.start()
    try:
        found = accel.last_puts(hi, lo)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found is not None and len(found) == 8 * n  # distinct keys: one result each
    assert peak - len(found) <= (18 if masked else 14) * n + 4096  # and a few small objects


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
