"""``inspect transactions``: the producer state a broker rebuilds on load, and the hanging transactions.

Why: the most common reason a compacted partition stops compacting is a transaction that never ended. It
pins the last stable offset, so the cleaner's range stops there (``UnifiedLog.lastStableOffset``). Kafka
shows this only on a live cluster (``kafka-transactions.sh describe-producers`` and ``find-hanging``);
offline, the same facts come from the files.

The producer state is the one :func:`kcompact.log.state.log_state.load_log_state` rebuilds, as
``ProducerStateManager`` does on load: the newest usable ``.snapshot`` plus every batch after it
(:class:`kcompact.log.rules.producer_state.ProducerStateReplay`); producers Kafka's loader would
expire (no open transaction, idle for ``producer.id.expiration.ms``) are left out and counted.

A producer with an open transaction is *hanging* by the rule of ``TransactionsCommand``'s
``find-hanging``: ``now - lastTimestamp > transaction.max.timeout.ms`` (the producer's last timestamp:
its last batch's max timestamp, or its last marker's). For each one the report gives the last stable
offset it pins, the dirty bytes the cleaner would gain were it aborted (the cleanable range recomputed
without it, by :func:`kcompact.log.rules.ranges.compute_cleanable_range`), and the
``kafka-transactions.sh abort`` line that ends it on the live cluster.

The producer state comes from batch headers (producer id, epoch, sequence, timestamps) and markers, so
every batch the state replays (from the snapshot's offset on, else the whole log) has its CRC checked: a
flipped byte there would show a producer or an open transaction that never was. A partition with one
that fails is a row with ``error`` (the first failure's file and byte position, ``kcompact repair``
to set it aside) and no producers, and the command exits 2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from kcompact.clock import run_clock_ms
from kcompact.errors import KcompactError
from kcompact.inspect.context import CrcTally, InspectContext, load_inspect_context
from kcompact.log.rules.producer_state import ProducerState
from kcompact.log.rules.ranges import compute_cleanable_range
from kcompact.log.state.log_state import LogState
from kcompact.segment.names import parse_partition_dir_name
from kcompact.segment.partition import is_partition_dir, named_path
from kcompact.segment.partition_filter import require_partition_dirs
from kcompact.text import plural
from kcompact.value import frozen, mutable

BROKER_PLACEHOLDER = "<broker:9092>"
ABORT_COMMAND = (
    "kafka-transactions.sh --bootstrap-server {broker} abort --topic {topic} --partition {partition} "
    "--start-offset {start_offset}"
)


@frozen
class ProducerRow:
    """One active producer, as ``kafka-transactions.sh describe-producers`` shows it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_transaction_start_offset: int | None
    hanging: bool


@frozen
class HangingTransaction:
    """An open transaction older than ``transaction.max.timeout.ms`` (``find-hanging``'s rule)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int
    duration_ms: int  # now - last timestamp
    pins_last_stable_offset: bool  # the earliest open transaction below the high watermark
    last_stable_offset: int  # the LSO while it stays open
    dirty_bytes_held_back: int  # what the cleaner's dirty section would gain were it aborted
    abort_command: str


@mutable
class TransactionsRow:
    """One partition's report (the ``--json`` object)."""

    topic: str
    partition: int
    partition_dir: str
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    snapshot_offset: int | None = None  # the .snapshot the state starts from (None: the whole log)
    transaction_max_timeout_ms: int = 0
    producer_id_expiration_ms: int = 0
    now_ms: int = 0
    producers: list[ProducerRow] = field(default_factory=list)
    expired_producers: int = 0
    hanging: list[HangingTransaction] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def transactions_report(
    paths: Iterable[str | Path],
    *,
    cli_overrides: Mapping[str, str],
    now_ms: int | None = None,
    server_properties: str | Path | None = None,
    metadata_dir: str | Path | None = None,
    broker: str = BROKER_PLACEHOLDER,
) -> list[TransactionsRow]:
    """The producer state and hanging transactions of every partition under ``paths``.

    Args:
        paths: partition directories or log dirs.
        cli_overrides: ``--config`` pairs (``transaction.max.timeout.ms``, ``producer.id.expiration.ms``).
        now_ms: the clock (None: now).
        server_properties: the broker's server.properties, if any.
        metadata_dir: ``metadata.log.dir`` or its ``__cluster_metadata-0``, if any.
        broker: what the abort lines name after ``--bootstrap-server``.

    Returns:
        One row per partition, in path order; a partition that does not load, or one of whose
        replayed batches fails its CRC, has ``error`` set (and no producers).

    Raises:
        KcompactError: a path is neither a partition directory nor a log dir holding one.
    """
    rows = []
    now = run_clock_ms(now_ms)  # one clock for every partition
    for part in _partition_dirs(paths):
        try:
            ctx = load_inspect_context(part, cli_overrides=cli_overrides, now_ms=now,
                                       server_properties=server_properties, metadata_dir=metadata_dir)
        except KcompactError as err:
            rows.append(_empty_row(part, error=str(err)))
            continue
        rows.append(checked_transactions(ctx, broker=broker))
    return rows


def checked_transactions(ctx: InspectContext, *, broker: str = BROKER_PLACEHOLDER) -> TransactionsRow:
    """One loaded partition's row of :func:`transactions_report`: its replayed batches' CRCs checked first.

    Args:
        ctx: the partition as :func:`kcompact.inspect.context.load_inspect_context` loads it.
        broker: what the abort lines name after ``--bootstrap-server``.

    Returns:
        Its row; ``error`` set (and no producers) when a replayed batch fails its CRC.
    """
    crc = _check_replayed_batches(ctx.state)
    if crc.first_error is not None:
        more = crc.corrupt_batches - 1
        failing = plural(more, "more batch fails its CRC", "more batches fail their CRCs")
        return _empty_row(ctx.state.partition.path, error=crc.first_error + (f" ({failing})" if more else ""))
    return partition_transactions(ctx, broker=broker)


def _check_replayed_batches(state: LogState) -> CrcTally:
    """The CRC of every batch the producer state replays: those from the snapshot's offset on
    (``ProducerStateManager`` loads the snapshot, then the log after it), else the whole log."""
    tally = CrcTally()
    start = state.snapshot_offset or 0
    for seg in state.segments:
        if seg.next_offset <= start:
            continue
        with seg.files.open() as log:
            for batch in log.iter_batches():
                if batch.last_offset >= start:
                    tally.check(log.path, batch)
    return tally


def _partition_dirs(paths: Iterable[str | Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        target = named_path(path)
        found.extend([target] if is_partition_dir(target) else require_partition_dirs(target))
    return found


def _empty_row(part: Path, *, error: str | None = None) -> TransactionsRow:
    parsed = parse_partition_dir_name(part.name)
    topic, number = (part.name, -1) if parsed is None else (parsed.topic, parsed.partition)
    return TransactionsRow(topic=topic, partition=number, partition_dir=str(part), error=error)


def partition_transactions(ctx: InspectContext, *, broker: str = BROKER_PLACEHOLDER) -> TransactionsRow:
    """The report of one loaded partition.

    Args:
        ctx: the partition as :func:`kcompact.inspect.context.load_inspect_context` loads it.
        broker: what the abort lines name after ``--bootstrap-server``.

    Returns:
        Its row.
    """
    state, config, now = ctx.state, ctx.config, ctx.now_ms
    row = _empty_row(state.partition.path)
    row.log_start_offset, row.log_end_offset = state.log_start_offset, state.log_end_offset
    row.high_watermark, row.last_stable_offset = state.high_watermark, ctx.rng.last_stable_offset
    row.snapshot_offset = state.snapshot_offset
    row.transaction_max_timeout_ms = config.transaction_max_timeout_ms
    row.producer_id_expiration_ms = config.producer_id_expiration_ms
    row.now_ms = now
    row.warnings = list(state.warnings)
    active = state.producers.last_records_of_active_producers(now, config.producer_id_expiration_ms)
    every = state.producers.producers()
    row.expired_producers = len(every) - len(active)
    for producer_id in sorted(active):
        producer = every[producer_id]
        hanging = is_hanging(producer, now, config.transaction_max_timeout_ms)
        row.producers.append(ProducerRow(
            producer_id, producer.producer_epoch, producer.last_sequence, producer.last_timestamp,
            producer.coordinator_epoch, producer.current_txn_first_offset, hanging))
        if hanging:
            row.hanging.append(_hanging(ctx, producer, row, broker))
    row.hanging.sort(key=lambda txn: txn.start_offset)
    return row


def is_hanging(producer: ProducerState, now_ms: int, max_timeout_ms: int) -> bool:
    """``find-hanging``'s candidate rule: an open transaction whose producer was last heard of more
    than ``transaction.max.timeout.ms`` ago (``TransactionsCommand.collectCandidateOpenTransactions``).

    Args:
        producer: the producer's state.
        now_ms: the clock.
        max_timeout_ms: ``transaction.max.timeout.ms``.

    Returns:
        Whether its open transaction is hanging.
    """
    return (producer.current_txn_first_offset is not None
            and now_ms - producer.last_timestamp > max_timeout_ms)


def _hanging(ctx: InspectContext, producer: ProducerState, row: TransactionsRow,
             broker: str) -> HangingTransaction:
    start = producer.current_txn_first_offset
    assert start is not None  # only open transactions hang
    pins = ctx.rng.first_unstable_offset is not None and ctx.rng.first_unstable_offset == max(
        start, ctx.rng.log_start_offset) and start < ctx.rng.high_watermark
    held_back = _dirty_bytes_without(ctx, producer.producer_id) - ctx.rng.dirty_bytes if pins else 0
    command = ABORT_COMMAND.format(broker=broker, topic=row.topic, partition=row.partition,
                                   start_offset=start)
    return HangingTransaction(
        producer.producer_id, producer.producer_epoch, producer.coordinator_epoch, start,
        producer.last_timestamp, ctx.now_ms - producer.last_timestamp, pins,
        min(start, ctx.rng.high_watermark), held_back, command)


def _dirty_bytes_without(ctx: InspectContext, producer_id: int) -> int:
    """The dirty bytes of the cleanable range were ``producer_id``'s transaction decided now."""
    inputs = ctx.state.range_inputs(ctx.config, ctx.now_ms)
    others = [txn for txn in ctx.state.producers.open_transactions() if txn.producer_id != producer_id]
    first = others[0] if others else None
    inputs = dataclasses.replace(inputs, first_unstable_offset=None if first is None else first.first_offset,
                                 open_txn=first)
    return compute_cleanable_range(inputs).dirty_bytes
