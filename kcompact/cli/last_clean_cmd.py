"""``kcompact inspect last-clean``: parse, call one library function, render.

Registered into the ``inspect`` group by ``kcompact.cli.main``. Only click and
``kcompact.cli.render`` are imported here at import time (``kcompact --help`` stays fast); the
library is imported inside the command. ``--json`` prints the report object as it is (field names:
kcompact.inspect.last_clean); the text form is for people and may change.
"""

from __future__ import annotations

from typing import Any

import click

from kcompact.cli import render
from kcompact.cli.help_text import with_examples
from kcompact.cli.options import EPILOG, json_option, partition_config_options


@click.command("last-clean", short_help="When compaction provably last ran, and what piled up since.",
               epilog=with_examples(
                   EPILOG,
                   "kcompact inspect last-clean /tmp/kafka-logs/orders-0",
                   "kcompact inspect last-clean /tmp/kafka-logs/orders-0 --json",
               ))
@click.argument("partition_dir", type=click.Path(exists=True, file_okay=False, path_type=str))
@partition_config_options
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
    render.exit_if_corrupt(report)


def _undated_evidence(r: Any) -> str:
    """The evidence of a clean that carries no time: the checkpoint, empty batches."""
    found = []
    if r.checkpoint_offset is not None and r.first_dirty_offset == r.checkpoint_offset > r.log_start_offset:
        found.append(f"cleaner-offset-checkpoint says a clean reached offset {r.checkpoint_offset}")
    if r.empty_batches:
        found.append(f"{render.plural(r.empty_batches, 'empty batch', 'empty batches')} left by a clean")
    return "; ".join(found) or "see below"


def _print_last_clean(r: Any) -> None:
    name = f"{r.topic}-{r.partition}"
    if r.compacted and r.last_clean_after_ms is not None:
        render.plain(f"{name}: compaction provably ran after {render.utc_text(r.last_clean_after_ms)}")
    elif r.compacted:
        render.plain(f"{name}: compaction ran, at a time nothing here dates ({_undated_evidence(r)})")
    else:
        render.plain(f"{name}: no sign of compaction")
    gap = r.newest_gap
    if gap is None:
        contiguous = f"log start offset {r.log_start_offset}, log end offset {r.log_end_offset}: contiguous, no gap"
        first: render.Entry = ("offsets", [contiguous])
    else:
        after = "the log start" if gap.after_offset is None else f"offset {gap.after_offset}"
        where = "before" if gap.before_first_dirty else "inside"
        newest = (f"{render.plural(gap.missing_offsets, 'offset')} missing after {after}, up to offset "
                  f"{gap.next_offset} ({render.utc_text(gap.next_timestamp_ms)}), {where} the dirty section")
        missing = render.plural(r.missing_offsets, "missing offset")
        total = f"{render.plural(r.gaps, 'gap')} with {missing} in all"
        first = ("newest gap", [newest, total])
    checkpoint = "none" if r.checkpoint_offset is None else r.checkpoint_offset
    run = (f"offset {r.contiguous_since_offset}: {render.plural(r.records_since, 'record')} in one "
           "contiguous run, possibly never cleaned")
    dirty = (f"{r.dirty_records} at or after the first dirty offset {r.first_dirty_offset} "
             f"(checkpoint {checkpoint})")
    horizons = "no batch carries a delete horizon"
    if r.newest_delete_horizon_ms is not None:
        horizons = (f"{render.plural(r.delete_horizon_batches, 'batch', 'batches')} with a delete horizon, the newest "
                    f"{render.utc_text(r.newest_delete_horizon_ms)}: stamped by a clean at "
                    f"{render.utc_text(r.horizon_stamped_at_ms)}")
    render.print_entries([first, ("since", [run, dirty]), ("horizons", [horizons]),
                    ("empty batches", [f"{r.empty_batches} (left only by a clean)"]),
                    *render.corrupt_entry(r)])
    for warning in r.warnings:
        render.warning_line(warning)
