"""The replica fence: tombstones and transaction markers the other replicas may not have yet stay.

Why: Kafka's cleaner is per replica and uncoordinated. ``Cleaner.shouldRetainRecord`` drops a tombstone
once its batch's delete horizon (``now + delete.retention.ms``, stamped by an earlier round) has passed,
and ``Cleaner.cleanInto`` drops a discardable transaction marker the same way, whether or not every
follower has fetched them. A follower that had not reaches past the removed offset on its next fetch and
keeps the older value for good (a deleted key comes back), or keeps transaction data whose marker it
never sees. The fence is the lowest offset every replica holds (the minimum of their log ends), or an
offset the operator gives: a tombstone or marker at or above it is never removed *for its age*. Removing a
tombstone because a newer record of its key supersedes it is unaffected (that record reaches the lagging
replica too, so the replicas still agree), as is removing aborted data.

Without a fence (``None``) every rule here answers as Kafka does, so a clean without the option writes
the same bytes as before.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["age_removal_allowed", "fence_offset"]


def fence_offset(safe_offset: int | None, replica_log_ends: Iterable[int]) -> int | None:
    """The fence of a round: the lowest of the given offset and the other replicas' log ends.

    Args:
        safe_offset: ``--safe-offset`` (None: not given).
        replica_log_ends: the log end offset of each other replica's copy of the partition.

    Returns:
        The fence, or None when neither was given (no fence: Kafka's rules alone).
    """
    candidates = list(replica_log_ends)
    if safe_offset is not None:
        candidates.append(safe_offset)
    return min(candidates) if candidates else None


def age_removal_allowed(offset: int, fence: int | None) -> bool:
    """Whether a tombstone or marker at ``offset`` may be removed because its delete horizon passed.

    Args:
        offset: the record's offset (for a marker, its batch's base offset).
        fence: the round's fence, or None.

    Returns:
        False at or above the fence; True below it, or with no fence.
    """
    return fence is None or offset < fence
