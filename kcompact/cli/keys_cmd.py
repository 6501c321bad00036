"""``kcompact inspect keys``: parse, call one library function, render.

Registered into the ``inspect`` group by ``kcompact.cli.main``. Only click and
``kcompact.cli.render`` are imported here at import time (``kcompact --help`` stays fast); the
library and rich are imported inside the command. ``--json`` prints the report object as it is
(field names: kcompact.inspect.keys); the text form is for people and may change.
"""

from __future__ import annotations

from typing import Any

import click

from kcompact.cli import render
from kcompact.cli.help_text import with_examples
from kcompact.cli.input_path import InputPath, storage_option
from kcompact.cli.options import EPILOG, json_option, partition_config_options


@click.command("keys", short_help="Keys, duplicates, tombstones, transactions; what a clean leaves.",
               epilog=with_examples(
                   EPILOG,
                   "kcompact inspect keys /tmp/kafka-logs/orders-0 --partitions 12",
                   "kcompact inspect keys /tmp/kafka-logs/__consumer_offsets-31 --top 5",
               ))
@click.argument("partition_dir", type=InputPath())
@partition_config_options
@click.option("--partitions", type=click.IntRange(min=1), default=None, metavar="N",
              help="The topic's partition count: count the keys Kafka's default partitioner "
                   "(murmur2) would send to another partition.")
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True, metavar="N",
              help="How many of the most duplicated keys (and, for __consumer_offsets, of the "
                   "consumer groups with the most bytes) to list.")
@storage_option
@json_option("Print the report as one JSON object.")
def keys_command(partition_dir: str, config_pairs: tuple[str, ...], now_ms: int | None,
                 server_properties: str | None, metadata_dir: str | None, partitions: int | None,
                 top: int, storage_pairs: tuple[str, ...], as_json: bool) -> None:
    """Read every record of PARTITION_DIR and report on its keys: distinct keys (whole log,
    dirty section, cleanable range), duplicates and their bytes, tombstones and when they become
    removable, transaction markers, aborted data and open transactions, exact record counts, what
    a clean now would leave (the cleaner's own dry run), the passes the broker's dedupe buffer
    needs, and the most duplicated keys. For a __consumer_offsets partition, also the consumer
    groups with the most bytes (records, duplicates, committed offsets held).

    Reads the whole log twice, plus the cleaner's dry run, and checks every batch's CRC (exits 2
    after the report when one fails); writes, renames or deletes no file of the log dir (the dry run
    of a partition with an interrupted clean's leftovers is staged as clean --dry-run stages it, in a
    .kcompact-rehearsal-* directory of links beside the log dir, removed when it ends).
    """
    from kcompact.cli.progress_view import progress_bar
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.inspect.keys import keys_report
    from kcompact.segment.remote import local_inputs, parse_storage_options

    with (local_inputs([partition_dir], parse_storage_options(storage_pairs)) as inputs,
          progress_bar(enabled=not as_json, verb="reading") as progress):
        report = inputs.named(keys_report(inputs.paths[0], cli_overrides=parse_config_pairs(config_pairs),
                                          now_ms=now_ms, partitions=partitions, top=top,
                                          server_properties=server_properties, metadata_dir=metadata_dir,
                                          progress=progress))
    if as_json:
        render.emit_json(report.as_dict())
    else:
        _print_keys(report)
    render.exit_if_corrupt(report)


def _print_keys(r: Any) -> None:
    rec = r.records
    render.plain(f"{r.topic}-{r.partition}: {render.plural(rec.records, 'record')} in "
                 f"{render.plural(rec.batches, 'batch', 'batches')}, {render.size_text(r.size_in_bytes)}")
    render.print_entries(_log_entries(r) + _clean_entries(r) + render.corrupt_entry(r))
    if r.top_duplicated_keys:
        _print_top_keys(r.top_duplicated_keys)
    if r.consumer_groups is not None:
        _print_groups(r.consumer_groups)
    for warning in r.warnings:
        render.warning_line(warning)


def _log_entries(r: Any) -> list[render.Entry]:
    rec, keys = r.records, r.keys
    offsets = (f"log start offset {r.log_start_offset}, log end offset {r.log_end_offset}, first dirty "
               f"{r.first_dirty_offset}, first uncleanable {r.first_uncleanable_offset}")
    records = (f"{rec.data_records} data, {rec.control_records} control, "
               f"{rec.keyless_records} keyless")
    uncommitted = (f"{rec.read_uncommitted} read_uncommitted (to the high watermark "
                   f"{r.high_watermark})")
    committed = (f"{rec.read_committed} read_committed (to the last stable offset "
                 f"{r.last_stable_offset})")
    distinct = (f"{keys.distinct_keys} distinct; {keys.dirty_distinct_keys} in the dirty section, "
                f"{keys.cleanable_distinct_keys} in the cleanable range")
    duplicates = (f"{keys.duplicate_records} of {render.plural(keys.keyed_records, 'keyed record')} "
                  f"({render.size_text(keys.duplicate_bytes)} of records, uncompressed) have a later record of "
                  "their key")
    return [
        ("offsets", [offsets]),
        ("records", [records]),
        ("consumers", [uncommitted, committed]),
        ("keys", [distinct]),
        ("duplicates", [duplicates]),
        ("tombstones", _tombstone_lines(r.tombstones)),
        ("transactions", _transaction_lines(r.transactions)),
    ]


def _tombstone_lines(tomb: Any) -> list[str]:
    head = f"{tomb.tombstones}, {tomb.with_delete_horizon} with a delete horizon"
    if tomb.oldest_offset is not None:
        head += f"; the oldest at offset {tomb.oldest_offset} ({render.utc_text(tomb.oldest_timestamp_ms)})"
    lines = [head]
    for g in tomb.groups:
        if g.kind == "superseded":
            lines.append(f"superseded: {g.tombstones}, removed by the next clean that covers them")
        elif g.kind == "no-horizon":
            lines.append(f"no horizon yet: {g.tombstones}, removable from "
                         f"{render.utc_text(g.removable_at_ms)} at the earliest")
        else:
            when = "now" if g.removable_now else f"from {render.utc_text(g.removable_at_ms)}"
            lines.append(f"horizon {render.utc_text(g.delete_horizon_ms)}: {g.tombstones}, removable {when}")
    return lines


def _transaction_lines(txn: Any) -> list[str]:
    head = (f"{txn.commit_markers} COMMIT and {txn.abort_markers} ABORT markers, "
            f"{render.plural(txn.aborted_transactions, 'aborted transaction')} "
            f"({render.plural(txn.aborted_records, 'record')}), {len(txn.open_transactions)} open")
    if txn.other_control_records:
        head += f", {render.plural(txn.other_control_records, 'other control record')}"
    lines = [head]
    for t in txn.open_transactions:
        lines.append(f"open: producer id {t.producer_id} (epoch {t.producer_epoch}) from offset "
                     f"{t.first_offset}, last write {render.utc_text(t.last_timestamp_ms)}")
    return lines


def _clean_entries(r: Any) -> list[render.Entry]:
    plan, p = r.dedupe, r.partitioner
    entries = [
        ("a clean now", _projection_lines(r.projection)),
        ("dedupe", _dedupe_lines(plan)),
    ]
    if p is not None:
        misplaced = (f"{render.plural(p.misplaced_keys, 'key')} ({render.plural(p.misplaced_records, 'record')}, "
                     f"{render.size_text(p.misplaced_bytes)}) belong to another of "
                     f"{render.plural(p.partitions, 'partition')}")
        entries.append(("partitioner", [misplaced]))
    return entries


def _dedupe_lines(plan: Any) -> list[str]:
    """What the broker's offset map needs for the cleanable range, in words a person can act on."""
    buffer = (f"log.cleaner.dedupe.buffer.size {render.size_text(plan.dedupe_buffer_size)} over "
              f"{render.plural(plan.cleaner_threads, 'cleaner thread')}")
    if plan.keys_to_map == 0:
        return [f"no key to map: nothing in the cleanable range ({buffer})"]
    if plan.passes is None:
        return [(f"{render.plural(plan.keys_to_map, 'key')} to map, but the broker's cleaner maps none "
                f"({buffer})")]
    holds = f"the broker's map holds {plan.keys_per_pass} keys a round ({buffer})"
    one = plan.one_pass_dedupe_buffer_size
    if plan.passes <= 1:
        return [f"{render.plural(plan.keys_to_map, 'key')} to map: one cleaning round; {holds}"]
    fix = ("no buffer size does it in one (more than 2 GiB a thread)" if one is None else
           f"a buffer of {render.size_text(one)} a thread does it in one")
    return [f"{render.plural(plan.keys_to_map, 'key')} to map: {plan.passes} cleaning rounds; {holds}", fix]


def _projection_lines(p: Any) -> list[str]:
    if not p.cleanable:
        return [f"changes nothing: {p.skipped_reason}"]
    saved = p.size_in_bytes_before - p.size_in_bytes_after
    share = saved / p.size_in_bytes_before if p.size_in_bytes_before else 0.0
    sizes = (f"{p.records_before} -> {p.records_after} records, {render.size_text(p.size_in_bytes_before)} -> "
             f"{render.size_text(p.size_in_bytes_after)} (-{render.percent_text(share)}), checkpoint -> "
             f"{p.end_offset}")
    removed = (f"removes {p.superseded_removed} superseded, "
               f"{render.plural(p.tombstones_removed, 'tombstone')}, {p.keyless_removed} keyless, "
               f"{p.aborted_records_removed} aborted, {render.plural(p.markers_removed, 'marker')}")
    return [sizes, removed]


def _print_top_keys(top: Any) -> None:
    from rich.table import Table

    table = Table(title="most duplicated keys", title_justify="left")
    table.add_column("records", justify="right")
    table.add_column("latest", justify="right")
    table.add_column("key", overflow="fold")
    for k in top:  # a key of __consumer_offsets / __transaction_state as inspect dump decodes it
        table.add_row(str(k.records), str(k.latest_offset), k.decoded or k.key)
    render.console().print(table)


def _print_groups(groups: Any) -> None:
    from rich.table import Table

    other = ""
    if groups.other_records:
        other = (f"; {render.plural(groups.other_records, 'record')} ({render.size_text(groups.other_bytes)}) of "
                 "other keys")
    title = f"consumer groups by bytes ({groups.groups} in all{other})"
    table = Table(title=title, title_justify="left")
    for name in ("bytes", "records", "dup bytes", "dup records", "offsets"):
        table.add_column(name, justify="right")
    table.add_column("group", overflow="fold")
    for g in groups.top:
        table.add_row(str(g.size_in_bytes), str(g.records), str(g.duplicate_bytes),
                      str(g.duplicate_records), str(g.offset_commit_keys), render.printable(g.group))
    render.console().print(table)
