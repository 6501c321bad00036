"""``CleanStats.add`` sums every counter and takes the set-once ones (the map's size and memory, the groups,
the time) only where they are still zero."""

from __future__ import annotations

from dataclasses import fields

from kcompact.cleaner.round.stats import CleanStats

SET_ONCE = {"map_entries", "map_memory_bytes", "groups", "elapsed_s"}


def test_add_sums_counters_and_sets_the_rest_once() -> None:
    names = [f.name for f in fields(CleanStats)]
    mine = CleanStats(**{name: i + 1 for i, name in enumerate(names)})
    theirs = CleanStats(**{name: 100 * (i + 1) for i, name in enumerate(names)})
    mine.add(theirs)
    for i, name in enumerate(names):
        assert getattr(mine, name) == (i + 1 if name in SET_ONCE else 101 * (i + 1)), name
    unset = CleanStats()
    unset.add(theirs)
    assert unset == theirs
