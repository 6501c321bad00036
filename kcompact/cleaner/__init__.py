"""Kafka's log cleaner, offline: one cleaning round of one partition, exactly as Kafka 4.1 does it.

The algorithm
=============

A compacted partition's log is split by ``cleaner-offset-checkpoint`` into the *clean section*
``[log_start, first_dirty)`` — already compacted once, its keys unique among themselves — and the *dirty
section* ``[first_dirty, log_end)``. Only the part of the dirty section below the *first uncleanable
offset* is cleaned: the active segment, data at or above the high watermark or inside a still-open
transaction, and segments younger than ``min.compaction.lag.ms`` are never touched (``log/rules/ranges.py``).
One round:

1. **Facts** (``log/state/log_state.py``). One pass over batch *headers* of every segment gives each segment's
   next offset and timestamps, replays producer state (who is still an active producer, which transactions
   are open below the high watermark: the last stable offset), and collects aborted transactions from the
   ``.txnindex`` files (plus those the data shows where an index is missing). No record payload is read.
2. **Range** (``log/rules/ranges.py``, with its values and the why-not-cleanable wording). First dirty offset
   from the checkpoint (reset to the log start when it lies below it or past the log end), first uncleanable
   offset rounded down to a segment base, the dirty ratio.
3. **Offset map** (``round/mapping.py`` filling ``log/offset_map/``). Scan the dirty range once: for every
   record with a key in a data batch that is not aborted transactional data, map a 128-bit digest of the key
   to its offset (later wins; tombstones included; control batches and keyless records skipped). With
   ``--dedupe-buffer-size`` the map is bounded exactly like Kafka's SkimpyOffsetMap and the round ends where
   it fills up; ``end_offset = map.latest_offset + 1``.
4. **Groups** (``log/rules/grouping.py``). Every segment below ``end_offset`` — from the start of the log, so
   the clean section is filtered again with the new map — is grouped greedily into runs that fit one output
   segment (``segment.bytes``, ``segment.index.bytes``, the 32-bit relative-offset window).
5. **Filter** (``round/filtering.py`` driving ``log/rules/policy.py`` and ``log/rules/transactions.py``). Each group
   is streamed batch by batch into ``<base>.log.cleaned``. Per batch: the transaction bookkeeping, then
   Kafka's batch decision (keep an empty shell for an active producer's last batch or for the round's last
   batch; drop aborted data and expired markers), then per record: keep it when it is the latest for its key
   (or beyond the map), drop keyless records, keep tombstones until the batch's delete horizon. A batch
   whose records all survive and needs no new horizon is copied byte for byte; otherwise it is rebuilt with
   Kafka's rules (original base offset and last offset delta, same codec at its default level, horizon
   stamped as ``now + delete.retention.ms`` when a tombstone or an empty-transaction marker survives).
   Legacy (magic 0/1) batches are always rewritten as v2 (Kafka ≥ 4.0, KAFKA-13093).
6. **Indexes** (``segment/index_builder.py``). ``.index`` and ``.timeindex`` are built per batch exactly as
   Kafka 4.1 appends them (KAFKA-806: identical to what log recovery rebuilds); ``.txnindex`` gets the
   original entries of the ABORT markers kept in this round. Before the swap every ``.cleaned`` output is
   read back and checked (``round/verify_output.py``: batch framing, CRCs, offsets ascending and in range,
   the offset and time indexes against the log).
7. **Swap** (``disk/swap.py``), per group, Kafka's ``replaceSegments`` protocol: write and fsync the ``.cleaned``
   files; rename them ``.swap``; rename the replaced segments' files (and the producer snapshots of bases that
   disappear) ``.deleted``; rename ``.swap`` to the final names; fsync the directory (once, after the last rename,
   as Kafka does); delete the ``.deleted`` files (a log dir's pooled worker leaves that to its parent process). A
   crash anywhere leaves a directory that Kafka's loader — and ``swap.recover_interrupted_swaps`` — completes or
   rolls back so that every segment group is wholly old or wholly new. With ``--scratch-dir`` the outputs are
   written and checked in another volume's directory and each group is brought in from there (``disk/scratch.py``:
   copied in beside its old segments and swapped as above, or on a volume with no room, evacuated: its old files
   deleted first, under a manifest that the next ``clean --scratch-dir`` settles from).
8. **Checkpoint**. Only after every group is swapped, ``cleaner-offset-checkpoint`` is advanced to
   ``end_offset`` (atomic rewrite under kcompact's checkpoint lock, other lines untouched), so it never runs
   ahead of what was swapped. In a log dir's clean the partitions' lines are written a batch at a time
   (``logdir/run.py``), after their swaps: the file may lag (a kill then repeats those rounds), never lead.

How the code runs it
====================

The sub-packages are layers, each importing only those below it (an import-linter contract holds them):
``logdir/`` (a log dir) over ``workers/`` (processes, and the entry point every caller uses) over
``round/`` (the serial round of one partition, its steps and passes) over ``disk/`` (the only cleaner code that
writes, renames or deletes segment files). Below the cleaner, ``kcompact.log`` holds Kafka's log model the
read-only commands share: ``log/state/`` and ``log/offset_map/`` over ``log/rules/`` (Kafka's pure rules).

``workers/bound_clean.py``'s ``clean_partition`` is the one entry point (``kcompact clean``, the partition pool
and the Spark tasks all call it): the serial round's own, ``round/partition_round.py``'s ``clean_partition``,
with ``choose_runner`` bound, which hands passes 1 and 2 to threads or worker processes where they pay,
importing ``workers/parallel.py`` with the first round that has passes to run, so that a clean with nothing to
do loads neither the workers nor numpy. The round reads top-down from lock to checkpoint,
runs its passes itself (``steps.run_passes``) unless a runner is chosen or given (Spark's distributed map),
and knows nothing of workers. It runs the round as separable steps (``round/steps.py``): ``plan_round``, the
one planner (``plan_clean`` runs it on a partition directory), freezes steps 1–2 into a picklable
``CleanPlan`` (``round/plan.py``; the options in ``round/options.py``), ``segment_key_entries`` is pass 1 over
one segment, ``write_group`` is pass 2 over one group, and ``commit_clean`` is steps 7–8. Pass 2 asks its
keep-or-drop question of an *oracle* (``log/offset_map/oracle.py``): the in-memory offset map, the retention
rules (``disk/retention.py``, for ``compact,delete``), or the sorted (digest, offset) runs the Spark path's
distributed map produces. On one machine the steps run:

* in this process, or split by segment byte ranges (``round/chunks.py``) over forked worker processes
  (``workers/parallel.py``; each worker is seeded with the transaction state replayed from batch headers,
  bulk results come back through temporary files, ``workers/spill.py``), the parent appending the batches
  and building the indexes so the bytes do not depend on the number of workers;
* for a log dir, ``logdir/run.py`` orders the partitions as the broker's cleaner would (``log/rules/ranges.py``'s
  ``pick_order``) and ``fork_pool.py`` cleans several at once, each in its own process; the checkpoint
  lines are then settled into cleaning order.

The output is byte-identical whatever the number of workers, and to the pure-Python reference of the
record scan (the C kernels in ``kcompact/records/scan``).

Where kcompact deliberately differs from a broker, the report says so: without a
``replication-offset-checkpoint`` entry the high watermark is taken as the log end (a broker would clean
nothing), and aborted transactions missing from a lost ``.txnindex`` are recovered from the data. And
where a broker's cleaner does not check CRCs (it would drop, copy or rebuild a corrupt batch, laundering
the damage), step 5 checks the CRC of every batch it reads and refuses the partition
(``BatchCrcError``, pointing to ``kcompact repair``). A partition whose only replica is this broker (the KRaft
metadata's replicas and ISR, or ``--sole-replica``) takes its log end as its high watermark, as the broker's
leader does on start (``rules.high_watermark``), not the stale checkpoint a dead broker leaves; a torn append
at its end is refused with where Kafka's recovery truncates it and the ``repair`` that cuts it there.
"""
