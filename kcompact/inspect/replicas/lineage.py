"""Where two replicas' leader-epoch lineages part: the offset a follower truncates to.

Why: a replica's ``leader-epoch-checkpoint`` lists ``(epoch, start offset)``: the offsets from each start
to the next were written under that leader epoch. Two replicas hold the same log up to the first offset
their lineages assign to different epochs. That is the offset Kafka's truncation on becoming follower
finds: the follower asks the leader, by ``OffsetsForLeaderEpoch``, for the end of its latest epoch
(``LeaderEpochFileCache.endOffsetFor``: the start of the leader's next higher epoch, or its log end) and
truncates there, repeating with lower epochs until both agree (KIP-101, KIP-279). Offline, with both
lineages at hand, it is one walk over the entries' start offsets.

A lineage is truncated at its start as the log start moves (``LeaderEpochFileCache.truncateFromStart``),
so the walk starts where both lineages know the epoch, and ends at the lower log end (the shorter log is
behind, not divergent).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

__all__ = ["Lineage", "epoch_at", "lineage_divergence"]

Lineage = Sequence[tuple[int, int]]  # (epoch, start offset), in file order (ascending)


def epoch_at(lineage: Lineage, offset: int) -> int | None:
    """The leader epoch ``lineage`` assigns to ``offset`` (None before its first entry).

    Args:
        lineage: ``(epoch, start offset)`` entries, ascending.
        offset: an offset.

    Returns:
        The epoch of the last entry starting at or below ``offset``.
    """
    i = bisect.bisect_right([start for _epoch, start in lineage], offset) - 1
    return lineage[i][0] if i >= 0 else None


def lineage_divergence(a: Lineage, a_end: int, b: Lineage, b_end: int) -> int | None:
    """The first offset both logs hold that the two lineages assign to different epochs.

    Args:
        a: one replica's lineage.
        a_end: that replica's log end offset.
        b: the other's.
        b_end: its log end offset.

    Returns:
        The offset, or None when they agree on every offset both hold (or one lineage is empty:
        nothing to compare).
    """
    if not a or not b:
        return None
    first = max(a[0][1], b[0][1])
    end = min(a_end, b_end)
    starts = sorted({first} | {s for _e, s in a if s > first} | {s for _e, s in b if s > first})
    for offset in starts:
        if offset >= end:
            break
        if epoch_at(a, offset) != epoch_at(b, offset):
            return offset
    return None
