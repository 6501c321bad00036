"""``kcompact inspect keys`` and ``kcompact inspect last-clean``: parse, call one library function,
render.

Registered into the ``inspect`` group by ``kcompact.cli.main``. Only click and
``kcompact.cli.render`` are imported here at import time (``kcompact --help`` stays fast); the
library and rich are imported inside the commands. ``--json`` prints the report object as it is
(field names: kcompact.inspect.keys and kcompact.inspect.last_clean); the text form is for people
and may change.
"""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from typing import Any

import click

from kcompact.cli import render
from kcompact.cli.config_cmd import (
    METADATA_DIR_HELP,
    config_option,
    config_source_options,
    json_option,
    now_ms_option,
)
from kcompact.cli.help_text import with_examples

EPILOG = (
    "Exit codes: 0 success; 2 bad input or refused (one line on stderr names the file and byte "
    "position); 1 a bug in kcompact (with a traceback)."
)
LABEL_WIDTH = 14
TEXT_WIDTH = 80
CONFIG_HELP = "A topic or cleaner configuration by Kafka's name. Repeatable."


def _config_options(command: Any) -> Any:
    """--config, --now-ms, --server-properties and --metadata-dir, as clean and dirty-ratio."""
    command = config_source_options(METADATA_DIR_HELP)(command)
    command = now_ms_option("The clock (default: now), in ms since the epoch.")(command)
    return config_option(CONFIG_HELP)(command)


@click.command("keys", short_help="Keys, duplicates, tombstones, transactions; what a clean leaves.",
               epilog=with_examples(
                   EPILOG,
                   "kcompact inspect keys /tmp/kafka-logs/orders-0 --partitions 12",
                   "kcompact inspect keys /tmp/kafka-logs/__consumer_offsets-31 --top 5",
               ))
@click.argument("partition_dir", type=click.Path(exists=True, file_okay=False, path_type=str))
@_config_options
@click.option("--partitions", type=click.IntRange(min=1), default=None, metavar="N",
              help="The topic's partition count: count the keys Kafka's default partitioner "
                   "(murmur2) would send to another partition.")
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True, metavar="N",
              help="How many of the most duplicated keys (and, for __consumer_offsets, of the "
                   "consumer groups with the most bytes) to list.")
@json_option("Print the report as one JSON object.")
def keys_command(partition_dir: str, config_pairs: tuple[str, ...], now_ms: int | None,
                 server_properties: str | None, metadata_dir: str | None, partitions: int | None,
                 top: int, as_json: bool) -> None:
    """Read every record of PARTITION_DIR and report on its keys: distinct keys (whole log,
    dirty section, cleanable range), duplicates and their bytes, tombstones and when they become
    removable, transaction markers, aborted data and open transactions, exact record counts, what
    a clean now would leave (the cleaner's own dry run), the passes the broker's dedupe buffer
    needs, and the most duplicated keys. For a __consumer_offsets partition, also the consumer
    groups with the most bytes (records, duplicates, committed offsets held).

    Reads the whole log twice, plus the cleaner's dry run, and checks every batch's CRC (exits 2
    after the report when one fails); writes nothing.
    """
    from kcompact.cli.progress_view import progress_bar
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.inspect.keys import keys_report

    with progress_bar(enabled=not as_json, verb="reading") as progress:
        report = keys_report(partition_dir, cli_overrides=parse_config_pairs(config_pairs),
                             now_ms=now_ms, partitions=partitions, top=top,
                             server_properties=server_properties, metadata_dir=metadata_dir,
                             progress=progress)
    if as_json:
        render.emit_json(report.as_dict())
    else:
        _print_keys(report)
    _exit_if_corrupt(report)


@click.command("last-clean", short_help="When compaction provably last ran, and what piled up since.",
               epilog=with_examples(
                   EPILOG,
                   "kcompact inspect last-clean /tmp/kafka-logs/orders-0",
                   "kcompact inspect last-clean /tmp/kafka-logs/orders-0 --json",
               ))
@click.argument("partition_dir", type=click.Path(exists=True, file_okay=False, path_type=str))
@_config_options
@json_option("Print the report as one JSON object.")
def last_clean_command(partition_dir: str, config_pairs: tuple[str, ...], now_ms: int | None,
                       server_properties: str | None, metadata_dir: str | None,
                       as_json: bool) -> None:
    """When did compaction provably last run on PARTITION_DIR? Finds the newest offset gap (records
    only a clean removes) and the timestamp of the record after it, counts the records of the
    contiguous, possibly never cleaned run since, and reads delete horizons (a clean stamps them
    at its time + delete.retention.ms) and empty batches. Reads batch headers and checks every
    batch's CRC (exits 2 after the report when one fails); writes nothing.
    """
    from kcompact.cli.progress_view import progress_bar
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.inspect.last_clean import last_clean_report

    with progress_bar(enabled=not as_json, verb="reading") as progress:
        report = last_clean_report(partition_dir, cli_overrides=parse_config_pairs(config_pairs),
                                   now_ms=now_ms, server_properties=server_properties,
                                   metadata_dir=metadata_dir, progress=progress)
    if as_json:
        render.emit_json(report.as_dict())
    else:
        _print_last_clean(report)
    _exit_if_corrupt(report)


def _exit_if_corrupt(report: Any) -> None:
    """After the report: exit 2 with the first CRC failure when a batch failed its CRC."""
    if report.corrupt_batches:
        from kcompact.cli.main import EXIT_BAD_INPUT

        more = report.corrupt_batches - 1
        render.error_line(report.crc_error + (f" ({more} more batch(es) fail theirs)" if more else ""))
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


# --- text output ---------------------------------------------------------------------------------


def _utc(ms: int | None) -> str:
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {plural or word + 's'}"


Entry = tuple[str, list[str]]  # a label and its lines (before wrapping)


def _print_entries(entries: list[Entry]) -> None:
    """Labelled entries, wrapped at 80 columns under a 14-column label (paths are not broken)."""
    for label, parts in entries:
        for i, part in enumerate(parts):
            first = (label if i == 0 else "").ljust(LABEL_WIDTH)
            render.plain(textwrap.fill(part, width=TEXT_WIDTH, initial_indent=first,
                                       subsequent_indent=" " * LABEL_WIDTH,
                                       break_on_hyphens=False, break_long_words=False))


def _print_keys(r: Any) -> None:
    rec = r.records
    render.plain(f"{r.topic}-{r.partition}: {_plural(rec.records, 'record')} in "
                 f"{_plural(rec.batches, 'batch', 'batches')}, {r.size_in_bytes} bytes")
    _print_entries(_log_entries(r) + _clean_entries(r) + _corrupt_entry(r))
    if r.top_duplicated_keys:
        _print_top_keys(r.top_duplicated_keys)
    if r.consumer_groups is not None:
        _print_groups(r.consumer_groups)
    for warning in r.warnings:
        render.warning_line(warning)


def _log_entries(r: Any) -> list[Entry]:
    rec, keys = r.records, r.keys
    offsets = (f"{r.log_start_offset}..{r.log_end_offset}, first dirty {r.first_dirty_offset}, "
               f"first uncleanable {r.first_uncleanable_offset}")
    records = (f"{rec.data_records} data, {rec.control_records} control, "
               f"{rec.keyless_records} keyless")
    uncommitted = (f"{rec.read_uncommitted} read_uncommitted (to the high watermark "
                   f"{r.high_watermark})")
    committed = (f"{rec.read_committed} read_committed (to the last stable offset "
                 f"{r.last_stable_offset})")
    distinct = (f"{keys.distinct_keys} distinct; {keys.dirty_distinct_keys} in the dirty section, "
                f"{keys.cleanable_distinct_keys} in the cleanable range")
    duplicates = (f"{keys.duplicate_records} of {keys.keyed_records} keyed records "
                  f"({keys.duplicate_bytes} bytes) have a later record of their key")
    return [
        ("offsets", [offsets]),
        ("records", [records]),
        ("consumers", [uncommitted, committed]),
        ("keys", [distinct]),
        ("duplicates", [duplicates]),
        ("tombstones", _tombstone_lines(r.tombstones)),
        ("transactions", _transaction_lines(r.transactions)),
    ]


def _corrupt_entry(r: Any) -> list[Entry]:
    if not r.corrupt_batches:
        return []
    failing = _plural(r.corrupt_batches, "batch fails its CRC", "batches fail their CRC")
    line = f"{failing}; `kcompact clean` refuses the partition, `kcompact repair` sets them aside"
    return [("corrupt", [line])]


def _tombstone_lines(tomb: Any) -> list[str]:
    head = f"{tomb.tombstones}, {tomb.with_delete_horizon} with a delete horizon"
    if tomb.oldest_offset is not None:
        head += f"; the oldest at offset {tomb.oldest_offset} ({_utc(tomb.oldest_timestamp_ms)})"
    lines = [head]
    for g in tomb.groups:
        if g.kind == "superseded":
            lines.append(f"superseded: {g.tombstones}, removed by the next clean that covers them")
        elif g.kind == "no-horizon":
            lines.append(f"no horizon yet: {g.tombstones}, removable from "
                         f"{_utc(g.removable_at_ms)} at the earliest")
        else:
            when = "now" if g.removable_now else f"from {_utc(g.removable_at_ms)}"
            lines.append(f"horizon {_utc(g.delete_horizon_ms)}: {g.tombstones}, removable {when}")
    return lines


def _transaction_lines(txn: Any) -> list[str]:
    head = (f"{txn.commit_markers} COMMIT and {txn.abort_markers} ABORT markers, "
            f"{_plural(txn.aborted_transactions, 'aborted transaction')} "
            f"({_plural(txn.aborted_records, 'record')}), {len(txn.open_transactions)} open")
    if txn.other_control_records:
        head += f", {txn.other_control_records} other control records"
    lines = [head]
    for t in txn.open_transactions:
        lines.append(f"open: producer id {t.producer_id} (epoch {t.producer_epoch}) from offset "
                     f"{t.first_offset}, last write {_utc(t.last_timestamp_ms)}")
    return lines


def _clean_entries(r: Any) -> list[Entry]:
    plan, p = r.dedupe, r.partitioner
    passes = "no cleaner thread" if plan.passes is None else _plural(plan.passes, "pass", "passes")
    one = plan.one_pass_dedupe_buffer_size
    need = "more than 2 GiB a thread" if one is None else f"a {one}-byte buffer"
    threads = _plural(plan.cleaner_threads, "thread")
    capacity = (f"{plan.keys_to_map} keys to map, {plan.keys_per_pass} a pass "
                f"({plan.dedupe_buffer_size} bytes / {threads})")
    entries = [
        ("a clean now", _projection_lines(r.projection)),
        ("dedupe", [capacity, f"{passes}; one pass needs {need}"]),
    ]
    if p is not None:
        misplaced = (f"{p.misplaced_keys} keys ({p.misplaced_records} records, "
                     f"{p.misplaced_bytes} bytes) belong to another of {p.partitions} partitions")
        entries.append(("partitioner", [misplaced]))
    return entries


def _projection_lines(p: Any) -> list[str]:
    if not p.cleanable:
        return [f"changes nothing: {p.skipped_reason}"]
    saved = p.size_in_bytes_before - p.size_in_bytes_after
    share = saved / p.size_in_bytes_before if p.size_in_bytes_before else 0.0
    sizes = (f"{p.records_before} -> {p.records_after} records, {p.size_in_bytes_before} -> "
             f"{p.size_in_bytes_after} bytes (-{render.percent_text(share)}), checkpoint -> {p.end_offset}")
    removed = (f"removes {p.superseded_removed} superseded, "
               f"{_plural(p.tombstones_removed, 'tombstone')}, {p.keyless_removed} keyless, "
               f"{p.aborted_records_removed} aborted, {_plural(p.markers_removed, 'marker')}")
    return [sizes, removed]


def _print_top_keys(top: Any) -> None:
    from rich.table import Table

    table = Table(title="most duplicated keys", title_justify="left")
    table.add_column("records", justify="right")
    table.add_column("latest", justify="right")
    table.add_column("key", overflow="fold")
    for k in top:
        table.add_row(str(k.records), str(k.latest_offset), k.key)
    render.console().print(table)


def _print_groups(groups: Any) -> None:
    from rich.table import Table

    other = ""
    if groups.other_records:
        other = (f"; {_plural(groups.other_records, 'record')} ({groups.other_bytes} bytes) of "
                 "other keys")
    title = f"consumer groups by bytes ({groups.groups} in all{other})"
    table = Table(title=title, title_justify="left")
    for name in ("bytes", "records", "dup bytes", "dup records", "offsets"):
        table.add_column(name, justify="right")
    table.add_column("group", overflow="fold")
    for g in groups.top:
        table.add_row(str(g.size_in_bytes), str(g.records), str(g.duplicate_bytes),
                      str(g.duplicate_records), str(g.offset_commit_keys), _printable(g.group))
    render.console().print(table)


def _printable(text: str) -> str:
    """Text as is when printable, else with escapes: data must not drive the terminal."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _undated_evidence(r: Any) -> str:
    """The evidence of a clean that carries no time: the checkpoint, empty batches."""
    found = []
    if r.checkpoint_offset is not None and r.first_dirty_offset == r.checkpoint_offset > r.log_start_offset:
        found.append(f"cleaner-offset-checkpoint says a clean reached offset {r.checkpoint_offset}")
    if r.empty_batches:
        found.append(f"{_plural(r.empty_batches, 'empty batch', 'empty batches')} left by a clean")
    return "; ".join(found) or "see below"


def _print_last_clean(r: Any) -> None:
    name = f"{r.topic}-{r.partition}"
    if r.compacted and r.last_clean_after_ms is not None:
        render.plain(f"{name}: compaction provably ran after {_utc(r.last_clean_after_ms)}")
    elif r.compacted:
        render.plain(f"{name}: compaction ran, at a time nothing here dates ({_undated_evidence(r)})")
    else:
        render.plain(f"{name}: no sign of compaction")
    gap = r.newest_gap
    if gap is None:
        contiguous = f"{r.log_start_offset}..{r.log_end_offset}: contiguous, no gap"
        first: Entry = ("offsets", [contiguous])
    else:
        after = "the log start" if gap.after_offset is None else f"offset {gap.after_offset}"
        where = "before" if gap.before_first_dirty else "inside"
        newest = (f"{_plural(gap.missing_offsets, 'offset')} missing after {after}, up to offset "
                  f"{gap.next_offset} ({_utc(gap.next_timestamp_ms)}), {where} the dirty section")
        missing = _plural(r.missing_offsets, "missing offset")
        total = f"{_plural(r.gaps, 'gap')} with {missing} in all"
        first = ("newest gap", [newest, total])
    checkpoint = "none" if r.checkpoint_offset is None else r.checkpoint_offset
    run = (f"offset {r.contiguous_since_offset}: {_plural(r.records_since, 'record')} in one "
           "contiguous run, possibly never cleaned")
    dirty = (f"{r.dirty_records} at or after the first dirty offset {r.first_dirty_offset} "
             f"(checkpoint {checkpoint})")
    horizons = "no batch carries a delete horizon"
    if r.newest_delete_horizon_ms is not None:
        horizons = (f"{r.delete_horizon_batches} batches with a delete horizon, the newest "
                    f"{_utc(r.newest_delete_horizon_ms)}: stamped by a clean at "
                    f"{_utc(r.horizon_stamped_at_ms)}")
    _print_entries([first, ("since", [run, dirty]), ("horizons", [horizons]),
                    ("empty batches", [f"{r.empty_batches} (left only by a clean)"]),
                    *_corrupt_entry(r)])
    for warning in r.warnings:
        render.warning_line(warning)
