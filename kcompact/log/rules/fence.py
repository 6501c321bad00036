"""The replica fence and the clean limit: what the other replicas may still need stays, and so does what
Kafka may truncate from this copy.

Why: Kafka's cleaner is per replica and uncoordinated. ``Cleaner.shouldRetainRecord`` drops a tombstone
once its batch's delete horizon (``now + delete.retention.ms``, stamped by an earlier round) has passed,
and ``Cleaner.cleanInto`` drops a discardable transaction marker the same way, whether or not every
follower has fetched them. A follower that had not reaches past the removed offset on its next fetch and
keeps the older value for good (a deleted key comes back), or keeps transaction data whose marker it
never sees.

The fence is what Kafka leaves of each other copy once it follows this one: the lower of its log end as
Kafka's loader recovers it (an interrupted swap completed, a torn tail cut: ``segment.recovery``) and the
offset where its leader-epoch lineage parts from this copy's (Kafka truncates it there:
``segment.lineage``); the round's fence is the lowest over the copies and ``--safe-offset``. A tombstone or
marker at or above it is never removed *for its age*. Removing a tombstone because a newer record of its key
supersedes it is unaffected (that record reaches the lagging replica too, so the replicas still agree), as
is removing aborted data.

The clean limit is the other direction: where another copy's lineage parts from this one at D, this copy's
records from D on are Kafka's to truncate when this copy follows that one. A record there must not supersede
one below D (the older value would be gone once the newer is truncated), so the cleanable range ends at D
as the high watermark ends it (``rules.ranges``: whole segments below it).

Without a fence (``None``) every rule here answers as Kafka does, so a clean without the options writes
the same bytes as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kcompact.errors import RefusedError
from kcompact.value import frozen

__all__ = [
    "SAFE_OFFSET",
    "WHY_COMPLETED_SWAP",
    "WHY_LINEAGE",
    "WHY_LOG_END",
    "WHY_SAFE_OFFSET",
    "WHY_TORN_TAIL",
    "CleanLimit",
    "CopyFence",
    "ReplicaFence",
    "age_removal_allowed",
    "clean_limit",
    "fence_lines",
    "refuse_log_dir_safe_offset",
    "replica_fence",
]

SAFE_OFFSET = "--safe-offset"  # ``set_by`` of a fence the operator gave
WHY_LOG_END = "log end"
WHY_LINEAGE = "lineage"
WHY_COMPLETED_SWAP = "completed swap"
WHY_TORN_TAIL = "torn tail"
WHY_SAFE_OFFSET = "safe offset"


@frozen
class CopyFence:
    """One other copy: its log end as Kafka loads it, where its lineage parts from this copy's, its fence.

    Attributes:
        path: its partition directory.
        log_end: its log end once loaded and recovered.
        lineage_parts_at: where its lineage parts from this copy's; None where they agree.
        end_why: what sets ``log_end``: :data:`WHY_LOG_END`, :data:`WHY_TORN_TAIL` or
            :data:`WHY_COMPLETED_SWAP`.
    """

    path: str
    log_end: int
    lineage_parts_at: int | None
    end_why: str = WHY_LOG_END

    @property
    def fence(self) -> int:
        """What Kafka leaves of this copy once it follows the cleaned one."""
        return self.log_end if self.lineage_parts_at is None else min(self.log_end, self.lineage_parts_at)

    @property
    def why(self) -> str:
        return WHY_LINEAGE if self.fence != self.log_end else self.end_why

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "log_end": self.log_end, "lineage_parts_at": self.lineage_parts_at,
                "fence": self.fence}


@frozen
class ReplicaFence:
    """The round's fence: the offset, who set it and why, and every copy's part.

    Attributes:
        offset: the fence.
        set_by: the copy that sets it, or :data:`SAFE_OFFSET`.
        why: :data:`WHY_LOG_END`, :data:`WHY_LINEAGE`, :data:`WHY_COMPLETED_SWAP`, :data:`WHY_TORN_TAIL` or
            :data:`WHY_SAFE_OFFSET`.
        copies: the other copies, in the order given.
    """

    offset: int
    set_by: str
    why: str
    copies: tuple[CopyFence, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The row key ``fence`` of a clean's report."""
        return {"offset": self.offset, "set_by": self.set_by, "why": self.why,
                "copies": [copy.as_dict() for copy in self.copies]}


@frozen
class CleanLimit:
    """Where this copy's cleanable range ends because Kafka may truncate it from there.

    Attributes:
        offset: the offset D: records from D on may be truncated.
        copy: the copy whose lineage parts from this one at D.
        why: :data:`WHY_LINEAGE`.
    """

    offset: int
    copy: str
    why: str = WHY_LINEAGE

    def as_dict(self) -> dict[str, Any]:
        """The row key ``clean_limit`` of a clean's report."""
        return {"offset": self.offset, "copy": self.copy, "why": self.why}


def replica_fence(safe_offset: int | None, copies: Sequence[CopyFence]) -> ReplicaFence | None:
    """The round's fence: the lowest of the copies' fences and ``--safe-offset`` (a copy first on a tie).

    Args:
        safe_offset: ``--safe-offset`` (None: not given).
        copies: the other copies of the partition.

    Returns:
        The fence, or None when neither was given (no fence: Kafka's rules alone).
    """
    lowest = min(copies, key=lambda copy: copy.fence, default=None)
    if lowest is not None and (safe_offset is None or lowest.fence <= safe_offset):
        return ReplicaFence(lowest.fence, lowest.path, lowest.why, tuple(copies))
    if safe_offset is not None:
        return ReplicaFence(safe_offset, SAFE_OFFSET, WHY_SAFE_OFFSET, tuple(copies))
    return None


def clean_limit(copies: Sequence[CopyFence], log_end_offset: int) -> CleanLimit | None:
    """Where this copy's cleaning stops: the lowest offset where a copy's lineage parts from it, below its end.

    Args:
        copies: the other copies of the partition.
        log_end_offset: this copy's log end.

    Returns:
        The limit, or None when every lineage agrees with this copy's.
    """
    parted = [copy for copy in copies if copy.lineage_parts_at is not None and copy.lineage_parts_at < log_end_offset]
    lowest = min(parted, key=lambda copy: copy.lineage_parts_at or 0, default=None)
    return None if lowest is None or lowest.lineage_parts_at is None else CleanLimit(lowest.lineage_parts_at,
                                                                                     lowest.path)


def age_removal_allowed(offset: int, fence: int | None) -> bool:
    """Whether a tombstone or marker at ``offset`` may be removed because its delete horizon passed.

    Args:
        offset: the record's offset (for a marker, its batch's base offset).
        fence: the round's fence, or None.

    Returns:
        False at or above the fence; True below it, or with no fence.
    """
    return fence is None or offset < fence


_WHY_WORDS = {
    WHY_LOG_END: "its log end",
    WHY_TORN_TAIL: "its log end once Kafka's recovery cuts its torn tail",
    WHY_COMPLETED_SWAP: "its log end once Kafka's log loader completes its interrupted swap",
}


def fence_lines(fence: dict[str, Any] | None, limit: dict[str, Any] | None) -> list[str]:
    """A clean report's lines for its fence and clean limit (the row keys ``fence`` and ``clean_limit``).

    Args:
        fence: :meth:`ReplicaFence.as_dict`, or None.
        limit: :meth:`CleanLimit.as_dict`, or None.

    Returns:
        One line each that is given.
    """
    lines = []
    if fence is not None:
        offset, who, why = fence["offset"], fence["set_by"], fence["why"]
        if why == WHY_SAFE_OFFSET:
            lines.append(f"replica fence at offset {offset}: set by {SAFE_OFFSET}")
        elif why == WHY_LINEAGE:
            lines.append(f"replica fence at offset {offset}: set by {who} (its leader-epoch lineage parts from "
                         f"this copy at {offset})")
        else:
            lines.append(f"replica fence at offset {offset}: set by {who} ({_WHY_WORDS[why]})")
    if limit is not None:
        lines.append(f"cleaned only below offset {limit['offset']}: {limit['copy']}'s lineage parts from this "
                     f"copy at {limit['offset']}, so Kafka may truncate this copy from there when it follows "
                     "that replica")
    return lines


def refuse_log_dir_safe_offset(target: Path, safe_offset: int | None) -> None:
    """``--safe-offset`` for a log dir: refused, since one partition's offsets mean nothing in another's
    log (``--replica-dirs`` fences each partition of a log dir by its own copies).

    Raises:
        RefusedError: ``safe_offset`` is given.
    """
    if safe_offset is not None:
        raise RefusedError(f"{target}: --safe-offset is an offset of one partition's log; name that "
                           "partition directory alone (for a log dir, --replica-dirs fences each "
                           "partition by its own copies); nothing was changed")
