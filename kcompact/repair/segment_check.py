"""One live segment as ``repair`` judges it: what stays in it, and whether it is written anew."""

from __future__ import annotations

from kcompact.repair.salvage import SegmentScan
from kcompact.segment.partition import SegmentFiles
from kcompact.segment.txn_index import AbortedTxn
from kcompact.value import mutable


@mutable
class SegmentCheck:
    """One live segment: what stays in it, and whether it must be rewritten."""

    files: SegmentFiles
    scan: SegmentScan
    rebuild_indexes: bool = False
    convert_legacy: bool = False  # its legacy entries become magic 2 batches (cleaner.cleaner_throws)
    txn_entries: tuple[AbortedTxn, ...] = ()  # what its .txnindex holds after the repair

    @property
    def rewrite(self) -> bool:
        """Whether repair writes this segment anew (through the swap protocol)."""
        return self.scan.log_changed or self.rebuild_indexes or self.convert_legacy

    @property
    def next_offset(self) -> int | None:
        """Offset after its last kept batch (None when nothing is kept)."""
        return self.scan.kept[-1].last_offset + 1 if self.scan.kept else None
