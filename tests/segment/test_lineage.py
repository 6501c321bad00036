"""Leader-epoch lineages (``segment.lineage``): the cache's own operations, and Kafka's truncation walk
(``tests/kafka/referee``'s ``LineageWalk`` runs the same cases through Kafka's ``LeaderEpochFileCache``)."""

from __future__ import annotations

import pytest

from kcompact.segment.lineage import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    assign,
    end_offset_for,
    lineage_divergence,
    loaded_lineage,
    truncate_from_end,
    truncate_from_start,
    truncation_offset,
)

Entries = list[tuple[int, int]]

# (follower lineage, follower end, leader lineage, leader end, where Kafka truncates the follower)
WALKS: list[tuple[Entries, int, Entries, int, int]] = [
    # an unclean election: the new leader (epoch 1 from 40) and the old one, which wrote epoch 0 up to 63
    ([(0, 0)], 63, [(0, 0), (1, 40)], 50, 40),
    ([(0, 0), (1, 40)], 50, [(0, 0)], 63, 40),
    # a lagging follower on the leader's lineage: nothing to truncate
    ([(0, 0)], 30, [(0, 0), (1, 40)], 50, 30),
    ([(0, 0), (1, 40)], 50, [(0, 0)], 30, 30),  # the lagging one leads: the other is cut at its end
    # the follower had an epoch the leader never saw (2 from 120): two requests, cut at 120
    ([(0, 0), (1, 100), (2, 120)], 130, [(0, 0), (1, 100)], 150, 120),
    # epochs the follower never had (1 at 2 on one, 2 at 2 on the other): an intermediate cut, then done
    ([(0, 0), (2, 2)], 4, [(0, 0), (1, 2)], 4, 2),
    # lineages truncated from the start: the leader answers an epoch below its first one with its start
    ([(1, 0), (3, 40), (4, 80)], 100, [(3, 50), (4, 80)], 100, 100),
    ([(2, 0)], 30, [(3, 10)], 40, 10),
    # a follower without a lineage sends no epoch: cut at the leader's end only
    ([], 60, [(0, 0), (1, 40)], 50, 50),
]


@pytest.mark.parametrize("follower, follower_end, leader, leader_end, truncated", WALKS)
def test_truncation_offset(follower: Entries, follower_end: int, leader: Entries, leader_end: int,
                           truncated: int) -> None:
    assert truncation_offset(follower, follower_end, leader, leader_end) == truncated


@pytest.mark.parametrize("a, a_end, b, b_end, parted", [
    ([(0, 0), (1, 40)], 50, [(0, 0)], 63, 40),  # diverged: both ways the same offset
    ([(0, 0), (1, 40)], 50, [(0, 0)], 30, None),  # a lagging copy: behind, not divergent
    ([(0, 0), (1, 40)], 50, [(0, 0), (1, 40)], 70, None),  # ahead on the same lineage
    ([(0, 0), (1, 40)], 50, [(0, 0), (1, 40), (2, 45)], 48, 45),  # the old leader's unreplicated tail
    ([(0, 0), (1, 40), (5, 48)], 49, [(0, 0), (1, 40)], 50, 48),  # a tail entry beyond the other's end
])
def test_lineage_divergence_both_ways(a: Entries, a_end: int, b: Entries, b_end: int, parted: int | None) -> None:
    assert lineage_divergence(a, a_end, b, b_end) == parted
    assert lineage_divergence(b, b_end, a, a_end) == parted


def test_end_offset_for_answers_as_leader_epoch_file_cache() -> None:
    lineage = [(1, 10), (3, 20), (4, 30)]
    assert end_offset_for(lineage, 4, 45) == (4, 45)  # the latest epoch: the log end
    assert end_offset_for(lineage, 3, 45) == (3, 30)
    assert end_offset_for(lineage, 2, 45) == (1, 20)  # an epoch it never had: the one below, ended by the next
    assert end_offset_for(lineage, 0, 45) == (0, 10)  # below every epoch: itself, and the first start
    assert end_offset_for(lineage, 5, 45) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert end_offset_for(lineage, UNDEFINED_EPOCH, 45) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_the_cache_keeps_its_entries_monotonic_and_cut_to_the_log() -> None:
    assert assign([(0, 0), (2, 5)], 1, 7) == ((0, 0), (1, 7))  # a lower epoch removes the later entry
    assert assign([(0, 0), (2, 5)], 3, 5) == ((0, 0), (3, 5))  # the same start: the later epoch replaces it
    assert assign([(0, 0), (2, 5)], 2, 9) == ((0, 0), (2, 5))  # nothing new
    assert truncate_from_end([(0, 0), (2, 5), (3, 9)], 9) == ((0, 0), (2, 5))
    assert truncate_from_start([(0, 0), (2, 5), (3, 9)], 6) == ((2, 6), (3, 9))
    assert truncate_from_start([(0, 0), (2, 5)], 5) == ((2, 5),)
    assert loaded_lineage([(0, 0), (2, 5), (1, 7), (4, 12)], 3, 12) == ((0, 3), (1, 7))


def test_recovery_adds_the_epochs_of_the_batches_it_walks_above_the_latest() -> None:
    """``LogSegment.recover``: a batch whose epoch is above the cache's latest starts that epoch at its base."""
    assert loaded_lineage([(0, 0), (2, 3)], 0, 5, [(2, 3), (10, 4)]) == ((0, 0), (2, 3), (10, 4))
    assert loaded_lineage([(0, 0), (5, 3)], 0, 9, [(4, 6), (5, 7)]) == ((0, 0), (5, 3))  # none above 5
    assert loaded_lineage([], 0, 9, [(-1, 0), (3, 2), (3, 4)]) == ((3, 2),)  # -1: no epoch (legacy entries)
