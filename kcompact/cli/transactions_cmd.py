"""``kcompact inspect transactions``: producers and hanging transactions, offline.

Text mode prints per partition the producers as ``kafka-transactions.sh describe-producers`` does, then
one line per hanging transaction and the ``kafka-transactions.sh abort`` line that ends it; ``--json``
prints a JSON list of rows (docs/json.md, ``kcompact inspect transactions --json``).
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from kcompact.cli import render
from kcompact.cli.help_text import with_examples
from kcompact.cli.input_path import InputPath, storage_option
from kcompact.cli.options import (
    EPILOG,
    EXIT_BAD_INPUT,
    METADATA_DIRS_HELP,
    config_option,
    config_source_options,
    json_option,
    now_ms_option,
)


@click.command("transactions", short_help="Producers and hanging transactions, as a broker would load them.",
               epilog=with_examples(
                   EPILOG,
                   "kcompact inspect transactions /tmp/kafka-logs",
                   "kcompact inspect transactions /tmp/kafka-logs/orders-0 --json",
                   "kcompact inspect transactions /tmp/kafka-logs --bootstrap-server k1:9092",
               ))
@click.argument("paths", nargs=-1, required=True, type=InputPath())
@config_option("A configuration by Kafka's name (transaction.max.timeout.ms, producer.id.expiration.ms, "
               "…). Repeatable.")
@now_ms_option("The clock (default: now), in ms since the epoch.")
@config_source_options(METADATA_DIRS_HELP)
@click.option("--bootstrap-server", "broker", default="<broker:9092>", metavar="HOST:PORT",
              help="The broker the printed kafka-transactions.sh lines name (default: a placeholder).")
@storage_option
@json_option("Print a JSON list of rows (also for one partition).")
def transactions_command(paths: tuple[str, ...], config_pairs: tuple[str, ...], now_ms: int | None,
                         server_properties: str | None, metadata_dir: str | None, broker: str,
                         storage_pairs: tuple[str, ...], as_json: bool) -> None:
    """The producer state a broker rebuilds when it loads each partition of the given log dirs or
    partition dirs (the newest .snapshot plus the log after it): producer id, epoch, last sequence,
    last timestamp, coordinator epoch and the first offset of its open transaction.

    An open transaction whose producer was last heard of more than transaction.max.timeout.ms ago
    (default 900000) is hanging, by the rule of kafka-transactions.sh find-hanging: the report names
    the last stable offset it pins, the dirty bytes it holds back from the cleaner, and the
    kafka-transactions.sh abort line that ends it on the live cluster. Exits 2 when a partition's
    files do not parse (its row says why).
    """
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.inspect.transactions import transactions_report
    from kcompact.segment.remote import local_inputs, parse_storage_options

    with local_inputs(paths, parse_storage_options(storage_pairs)) as inputs:
        rows = inputs.named(transactions_report(
            inputs.paths, cli_overrides=parse_config_pairs(config_pairs), now_ms=now_ms,
            server_properties=server_properties, metadata_dir=metadata_dir, broker=broker))
    render_transactions(rows, as_json=as_json)
    if any(row.error for row in rows):
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


def render_transactions(rows: Sequence[object], *, as_json: bool) -> None:
    """Print the rows: a JSON list, or a producers table per partition and the hanging transactions."""
    from kcompact.cleaner.logdir.run_summary import warning_lines
    from kcompact.inspect.transactions import TransactionsRow

    typed = [row for row in rows if isinstance(row, TransactionsRow)]
    if as_json:
        render.emit_json([row.as_dict() for row in typed])
        return
    console = render.console()
    quiet = [row for row in typed if len(typed) > 1 and not row.error and not row.producers]
    for row in typed:
        name = f"{row.topic}-{row.partition}"
        if row.error:
            render.error_line(row.error)
            continue
        if row in quiet:
            continue
        source = ("the whole log" if row.snapshot_offset is None
                  else f"snapshot {row.snapshot_offset} plus the log after it")
        title = (f"{name}: {render.plural(len(row.producers), 'active producer')} (from {source}); "
                 f"last stable offset {row.last_stable_offset}, high watermark {row.high_watermark}")
        if not row.producers:
            render.plain(title)
            continue
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for column in ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                       "LastTimestamp", "CurrentTransactionStartOffset", "Hanging"):
            table.add_column(column, justify="right" if column != "Hanging" else "left")
        for p in row.producers:
            table.add_row(str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
                          str(p.last_sequence), str(p.last_timestamp),
                          "None" if p.current_transaction_start_offset is None
                          else str(p.current_transaction_start_offset),
                          "yes" if p.hanging else "")
        console.print(table)
        for txn in row.hanging:
            pin = (f"pins the last stable offset at {txn.last_stable_offset}, holding back "
                   f"{txn.dirty_bytes_held_back} dirty bytes from the cleaner" if txn.pins_last_stable_offset
                   else "an earlier open transaction pins the last stable offset")
            render.plain(f"{name}: hanging transaction of producer {txn.producer_id} (epoch "
                         f"{txn.producer_epoch}) from offset {txn.start_offset}, last heard of "
                         f"{txn.duration_ms} ms ago (> transaction.max.timeout.ms "
                         f"{row.transaction_max_timeout_ms}); {pin}. Abort it on the live cluster with:")
            render.plain(f"  {txn.abort_command}")
    if quiet:
        render.plain(f"{render.plural(len(quiet), 'partition')} without an active producer (listed with --json)")
    for line in warning_lines([(f"{row.topic}-{row.partition}", row.warnings) for row in typed],
                              HIGH_WATERMARK_EFFECT, _own_high_watermark_warning):
        render.warning_line(line)


HIGH_WATERMARK_EFFECT = "their last stable offsets are taken no higher than that"
"""What a missing high watermark means to a transactions report (the last stable offset is below it)."""


def _own_high_watermark_warning(warning: str) -> str:
    """One partition's missing-high-watermark warning, without what it means for cleaning."""
    from kcompact.log.state.log_state import NO_HIGH_WATERMARK_CLEANING

    return (f"{warning.removesuffix(NO_HIGH_WATERMARK_CLEANING)} as the high watermark "
            "(the last stable offset is taken no higher)")
