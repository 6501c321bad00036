"""Counters of one cleaning round: what Kafka's cleaner logs after a clean, plus what kcompact removed and why."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import TYPE_CHECKING

from kcompact.records.filter import FilteredBatch, Outcome
from kcompact.value import mutable

if TYPE_CHECKING:
    from kcompact.log.rules.policy import BatchDecision
    from kcompact.segment.log_file import AnyBatch

_SET_ONCE = frozenset({"map_entries", "map_memory_bytes", "groups", "elapsed_s"})


@mutable
class CleanStats:
    """Bytes, records and batches read and written, and the reasons records went."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    records_scanned: int = 0  # records read while building the offset map
    batches_read: int = 0
    batches_copied: int = 0  # kept byte for byte
    batches_rebuilt: int = 0
    empty_batches_retained: int = 0  # 61-byte shells for producer state / the round's last batch
    batches_dropped: int = 0
    superseded_removed: int = 0  # a later record has the same key
    tombstones_removed: int = 0
    invalid_records: int = 0  # keyless records (Kafka's "invalid messages")
    aborted_records_removed: int = 0
    markers_removed: int = 0
    map_entries: int = 0
    map_memory_bytes: int = 0
    groups: int = 0
    elapsed_s: float = 0.0

    def note_batch_deleted(self, batch: AnyBatch, decision: BatchDecision, control_type: int | None) -> None:
        """A batch dropped whole without reading its records (aborted data, an expired marker)."""
        self.batches_dropped += 1
        self.records_read += batch.records_count if batch.magic >= 2 else 0
        self.note_discarded(batch, batch.records_count if batch.magic >= 2 else 0, control_type)

    def note_discarded(self, batch: AnyBatch, count: int, control_type: int | None) -> None:
        """All records of a batch go for a batch-level reason."""
        if batch.is_control:
            self.markers_removed += count
        else:
            self.aborted_records_removed += count

    def note_output(self, out: FilteredBatch, count: int) -> None:
        """Account for what happened to one batch's output."""
        self.records_written += out.records_kept
        if out.outcome is Outcome.COPIED:
            self.batches_copied += 1
        elif out.outcome is Outcome.REBUILT:
            self.batches_rebuilt += 1
        elif out.outcome is Outcome.EMPTY:
            self.empty_batches_retained += 1
        else:
            self.batches_dropped += 1

    def add(self, other: CleanStats) -> None:
        """Add another part's counters to these (a group's, a chunk's, the offset map's).

        Every counter is a sum; the offset map's size and memory, ``groups`` and ``elapsed_s`` are
        set once by whoever owns them, so they are taken only where these are still zero.
        """
        for name in _SUMS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in _SET_ONCE:
            if not getattr(self, name):
                setattr(self, name, getattr(other, name))

    @property
    def size_reduction(self) -> float:
        """Fraction of the bytes read that did not survive (0.0 when nothing was read)."""
        return 0.0 if not self.bytes_read else 1.0 - self.bytes_written / self.bytes_read

    def as_dict(self) -> dict[str, int | float]:
        """JSON-ready counters."""
        out: dict[str, int | float] = asdict(self)
        out["size_reduction"] = round(self.size_reduction, 6)
        return out


# the counters :meth:`CleanStats.add` sums, named once (``fields`` each call cost a round's adds more than the sums)
_SUMS = tuple(f.name for f in fields(CleanStats) if f.name not in _SET_ONCE)
