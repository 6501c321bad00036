"""Offline repair of partitions a broker cannot load cleanly or its cleaner gives up on, losing nothing.

The promise
===========

After ``kcompact repair``, a broker opening the partition after an unclean shutdown — full recovery: every
batch's framing and CRC, indexes rebuilt and compared, leftovers of an interrupted clean settled — finds
nothing to change, and every record of every batch that passed its CRC before the repair is still in the
log (or, for a CRC-valid batch whose base offset — outside the CRC — was damaged beyond proof, in the
quarantine, reported). Every file that changes is backed up first; ``--undo`` restores them byte for byte.

How
===

1. **Verify** (``verify.py``, ``indexes.py``, texts in ``findings.py``). Each segment is walked by
   ``salvage.scan_segment``: where Kafka's recovery would stop and truncate (deleting every later
   segment, ``LogSegment.recover``), the walk resynchronises on the next whole batch that passes its CRC and continues
   the offsets, so only the damaged bytes are lost to the log. Length and base-offset fields (outside the
   CRC) are restored when the batch's CRC and its neighbours prove the value. Indexes are compared with what
   Kafka 4.1 builds from the repaired log; the ``.txnindex`` with the aborted transactions the data shows.
   Leftovers, orphaned indexes, strays, the cleaner checkpoint and the log start are checked too. Each
   finding says whether it makes the broker's cleaner mark the partition uncleanable, and why
   (``LogCleaner.CleanerThread`` marks the partition uncleanable).
2. **Repair** (``repair.py``), under the live-broker guard and the partition lock: back up
   (``backup.py``), settle an interrupted swap as Kafka's loader does, then rewrite each damaged segment
   through the cleaner's writer and crash-safe swap protocol — one writer, the cleaner's
   (``cleaner/swap.py``) — with the damaged bytes moved to the quarantine, and reset or salvage the
   cleaner checkpoint. ``--clean`` then compacts the repaired partition.
3. **Undo** (``undo.py``).
"""

from __future__ import annotations


