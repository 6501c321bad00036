"""The dense-window membership pass 2 asks (``oracle._Membership``) answers as ``np.isin`` does, for queries
in increasing order as pass 2 asks and in any order, near the last member and past it, with windows that
fit the members and windows of full width."""

from __future__ import annotations

import numpy as np
import pytest

from kcompact.log.offset_map import oracle


@pytest.mark.parametrize("window", [8, 64, 1 << 20])
@pytest.mark.parametrize("seed", range(6))
def test_membership_is_isin(monkeypatch: pytest.MonkeyPatch, window: int, seed: int) -> None:
    monkeypatch.setattr(oracle, "_WINDOW", window)
    rng = np.random.default_rng(seed)
    members = np.unique(rng.integers(0, 300, size=rng.integers(1, 120))).astype(np.int64)
    membership = oracle._Membership(members)
    starts = np.sort(rng.integers(0, 330, size=40)) if seed % 2 else rng.integers(0, 330, size=40)
    for start in starts:
        queries = np.arange(start, start + rng.integers(1, 12), dtype=np.int64)
        assert membership.contains(queries).tolist() == np.isin(queries, members).tolist()


def test_a_small_log_gets_a_window_of_its_own_size() -> None:
    membership = oracle._Membership(np.array([100, 105, 180], dtype=np.int64))
    assert membership.contains(np.array([100, 101, 105], dtype=np.int64)).tolist() == [True, False, True]
    assert membership._window is not None and len(membership._window[1]) == 81
    assert membership.contains(np.array([180, 181], dtype=np.int64)).tolist() == [True, False]
    assert membership._window is not None and len(membership._window[1]) == oracle._WINDOW
