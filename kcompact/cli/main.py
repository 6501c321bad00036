"""The ``kcompact`` command line: click commands that parse, call one library function, and render.

Exit codes (documented in ``kcompact --help`` and README.md):

* 0 — success (for ``inspect dump``: every batch was valid);
* 2 — bad input or a refusal: corrupt, truncated or unreadable data, a bad option value, a live broker
  holding the log dir, another kcompact on the same partition. One line on stderr names the file and byte
  position. With ``--json`` the command also prints, on stdout, one line holding a JSON error object::

      {"error": {"message": "<the stderr line without its 'kcompact: error: ' prefix>",
                 "kind": "<the KcompactError subclass, e.g. TruncatedDataError, FileAccessError;
                          UsageError for click's own refusal of an option value or path>",
                 "path": "<file>" | null, "position": <byte position> | null,
                 "offset": <Kafka offset> | null, "exit_code": 2}}

  A run over a log dir that fails for some partitions only is not this case: its normal JSON carries
  them (``clean``: ``failures``; ``inspect dirty-ratio``: each row's ``error``), and it exits 2 too.
* 1 — a bug in kcompact: a traceback is printed; please report it.

Both are decided once, in :class:`KcompactGroup` (every command's ``--json`` is
``config_cmd.json_option``, which tells it ``--json`` was given).

Imports of the library happen inside the commands so that ``kcompact --help`` stays fast.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

from kcompact import __version__
from kcompact.cli import render
from kcompact.cli.config_cmd import (
    JSON_REQUESTED,
    METADATA_DIRS_HELP,
    config_option,
    config_source_options,
    json_option,
    now_ms_option,
)
from kcompact.cli.help_text import with_examples
from kcompact.cli.input_path import InputPath

if TYPE_CHECKING:
    from kcompact.errors import KcompactError

EXIT_OK = 0
EXIT_BUG = 1
EXIT_BAD_INPUT = 2

EPILOG = (
    "Exit codes: 0 success; 2 bad input or refused (one line on stderr names the file and byte "
    "position); 1 a bug in kcompact (with a traceback)."
)


class KcompactGroup(click.Group):
    """A click group that turns kcompact's deliberate errors into one line and exit code 2.

    The library turns the OS's refusals (an unreadable segment, a read-only directory) into a
    ``FileAccessError`` where it touches the files; an ``OSError`` that still escapes with a file name
    is the same bad input, and gets the same one line here. One without a file name is a bug.
    """

    def invoke(self, ctx: click.Context) -> Any:
        from kcompact.errors import FileAccessError, KcompactError

        json_asked = "--json" in ctx.args  # the subcommand's arguments (click empties ctx.args on invoke)
        try:
            return super().invoke(ctx)
        except KcompactError as err:
            _fail(ctx, err)
        except BrokenPipeError:  # `kcompact inspect dump … | head`
            sys.stderr.close()
            ctx.exit(EXIT_OK)
        except OSError as err:
            if err.filename is None:
                raise
            _fail(ctx, FileAccessError.from_os_error(err))
        except click.UsageError as err:  # click prints it (usage, one error line) and exits 2
            if json_asked and not ctx.meta.get(JSON_ERROR_SENT):
                _emit_json_error(ctx, err.format_message(), "UsageError")
            raise


JSON_ERROR_SENT = "kcompact.json-error-sent"  # ctx.meta: nested groups print one JSON error object


def _fail(ctx: click.Context, err: KcompactError) -> NoReturn:
    """Exit 2 with the error's one line on stderr, and its JSON object on stdout after ``--json``."""
    from kcompact.segment.lock import explain_vanished  # the CLI imports lazily

    err = explain_vanished(err)  # a file a running clean swapped out: say so
    render.error_line(str(err))
    if ctx.meta.get(JSON_REQUESTED):
        _emit_json_error(ctx, str(err), type(err).__name__, err.path, err.position, err.offset)
    ctx.exit(EXIT_BAD_INPUT)


def _emit_json_error(ctx: click.Context, message: str, kind: str, path: str | None = None,
                     position: int | None = None, offset: int | None = None) -> None:
    """The ``--json`` error object on stdout (once per command line; README's exit-code paragraph)."""
    ctx.meta[JSON_ERROR_SENT] = True
    render.emit_json_line({"error": {"message": message, "kind": kind, "path": path, "position": position,
                                     "offset": offset, "exit_code": EXIT_BAD_INPUT}})


def parse_jobs(_ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--jobs``: a number of worker processes (1 or more); ``auto`` or absent gives None (auto)."""
    if value is None or value.strip().lower() == "auto":
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise click.BadParameter(
            f"a number of worker processes; expected 1 or more, or 'auto', found {value!r}", param=param
        )
    return number


@click.group(cls=KcompactGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=with_examples(
    EPILOG,
    "kcompact inspect dirty-ratio /tmp/kafka-logs",
    "kcompact clean /tmp/kafka-logs/orders-0 --dry-run",
))
@click.version_option(__version__, prog_name="kcompact")
def cli() -> None:
    """Offline compactor, inspector and repair tool for Apache Kafka partition logs.

    Works on the files of a stopped broker (or a copy of them): reads and writes Kafka 4.1's on-disk
    format exactly, and refuses to write to a log dir a running broker holds.
    """


@cli.group(cls=KcompactGroup, short_help="Read-only reports: dump, dirty ratio, keys, last clean.",
           epilog=with_examples(
               EPILOG,
               "kcompact inspect dump /tmp/kafka-logs/orders-0 --records",
               "kcompact inspect keys /tmp/kafka-logs/orders-0",
           ))
def inspect() -> None:
    """Read-only reports: dump segments and indexes, dirty ratio, keys, last clean."""


@inspect.command("dump", short_help="Print segments and indexes, as kafka-dump-log does.", epilog=with_examples(
    EPILOG,
    "kcompact inspect dump /tmp/kafka-logs/orders-0/00000000000000000000.log",
    "kcompact inspect dump /tmp/kafka-logs/orders-0 --verify-index --json",
))
@click.argument("path", type=click.Path(exists=True, path_type=str))
@click.option("--records", is_flag=True, help="Also print every record of every batch.")
@click.option(
    "--verify-index", is_flag=True, help="Check .index/.timeindex/.txnindex files against the log."
)
@json_option("One JSON object per line (see README).")
def dump_command(path: str, records: bool, verify_index: bool, as_json: bool) -> None:
    """Print the batches of a .log file (or every segment of a partition directory), or the entries
    of a .index, .timeindex or .txnindex file — what kafka-dump-log shows.

    Exits 2 after printing everything it could when a batch fails its CRC, a record does not parse,
    an index disagrees with the log, or the file's framing breaks off.
    """
    from kcompact.cli.dump_view import render_dump
    from kcompact.inspect.dump import dump_path

    items = dump_path(path, records=records, verify_index=verify_index)
    problems = render_dump(items, as_json=as_json)
    if problems:
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


@inspect.command("dirty-ratio", short_help="What the broker's cleaner sees: dirty ratio, eligibility, order.",
                 epilog=with_examples(
                     EPILOG,
                     "kcompact inspect dirty-ratio /tmp/kafka-logs",
                     "kcompact inspect dirty-ratio /tmp/kafka-logs/orders-0 --json",
                 ))
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=str))
@config_option("A topic configuration by Kafka's name (min.cleanable.dirty.ratio, …). Repeatable.")
@now_ms_option("The clock (default: now), in ms since the epoch.")
@config_source_options(METADATA_DIRS_HELP)
@json_option("Print a JSON list of rows (also for one partition).")
def dirty_ratio_command(paths: tuple[str, ...], config_pairs: tuple[str, ...], now_ms: int | None,
                        server_properties: str | None, metadata_dir: str | None, as_json: bool) -> None:
    """What the broker's log cleaner sees, per partition of the given log dirs or partition dirs:
    clean and dirty bytes, the dirty ratio against min.cleanable.dirty.ratio, whether it is eligible,
    the rule that stops cleaning, and the order in which the cleaner would pick partitions.

    Reads sizes, checkpoints, index tails and batch headers, and checks the CRC of every batch of
    the dirty section (what the next clean's offset map reads; the clean section is not read). Exits
    2 when a partition's files do not parse or one of those batches fails its CRC (its row says why).
    """
    from kcompact.cli.dirty_ratio_view import render_dirty_ratio
    from kcompact.cli.progress_view import progress_bar
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.inspect.dirty_ratio import dirty_ratio_report

    with progress_bar(enabled=not as_json, verb="reading", counts=True) as progress:
        rows = dirty_ratio_report(paths, cli_overrides=parse_config_pairs(config_pairs), now_ms=now_ms,
                                  server_properties=server_properties, metadata_dir=metadata_dir,
                                  progress=progress)
    render_dirty_ratio(rows, as_json=as_json)
    if any(row.error for row in rows):
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


@cli.command("clean", short_help="Compact a partition or a log dir as Kafka's log cleaner would.",
             epilog=with_examples(
                 EPILOG,
                 "kcompact clean /tmp/kafka-logs/orders-0 --dry-run",
                 "kcompact clean /tmp/kafka-logs --roll --jobs 4 --json > report.json",
                 "kcompact clean /var/zk-era-logs --assume-compact --dry-run",
             ))
@click.argument("path", type=InputPath(refuse_as="clean"))
@config_option("A topic configuration, by Kafka's name (cleanup.policy, segment.bytes, "
               "delete.retention.ms, min.compaction.lag.ms, …). Repeatable.")
@now_ms_option("The clock the time rules use (default: now), in ms since the epoch.")
@click.option("--roll", is_flag=True,
              help="First roll a new empty active segment at the log end, so data in the current "
                   "active segment becomes cleanable (as a broker does on segment.ms).")
@click.option("--from-start", is_flag=True,
              help="Re-clean from the log start (drops expired tombstones and markers everywhere).")
@click.option("--dry-run", is_flag=True, help="Compute everything, write nothing; report what would go.")
@click.option("--dedupe-buffer-size", type=click.IntRange(min=1), default=None, metavar="BYTES",
              help="Behave like a broker with this log.cleaner.dedupe.buffer.size: each cleaner "
                   "thread's map holds BYTES / log.cleaner.threads (at most 2 GiB), and the round "
                   "stops where it is full. --config log.cleaner.dedupe.buffer.size=BYTES does the "
                   "same (this option wins); a value in server.properties or a dynamic broker config "
                   "bounds nothing (it is the broker's memory budget). Default: no bound, one round "
                   "cleans everything.")
@click.option("--only-eligible", is_flag=True,
              help="For a log dir: clean only partitions the broker's cleaner would pick now.")
@click.option("--assume-compact", is_flag=True,
              help="Compact partitions whose cleanup.policy is unknown (no metadata log, an "
                   "incomplete history, a topic id it does not know; no --config), except those "
                   "whose data is mostly keyless. Never a topic the metadata log shows without an "
                   "override (known: Kafka's default delete). Without it they are skipped (refused "
                   "when named alone).")
@click.option("--allow-keyless-loss", is_flag=True,
              help="Compact a partition whose cleanup.policy includes compact from an explicit "
                   "source (topic override, broker config, --config with the partition named "
                   "alone) although most of its records have no key: compaction deletes them (a "
                   "topic made compacted after they were written). Without it such a partition is "
                   "skipped (refused when named alone) with the count of keyless records.")
@config_source_options(METADATA_DIRS_HELP)
@click.option("--jobs", default=None, callback=parse_jobs, metavar="N|auto",
              help="Worker processes for a log dir's partitions (for one partition: its own "
                   "parallelism). Default auto: one per core once there is enough to do (about "
                   "80 ms of work: 20 MiB, counting 1.5 MiB per partition), else 1. A larger N "
                   "than the usable cores or the work (partitions; a partition's segment ranges) "
                   "is clamped to them, and the report says so.")
@json_option("Print the report as JSON.")
def clean_command(
    path: str,
    config_pairs: tuple[str, ...],
    now_ms: int | None,
    roll: bool,
    from_start: bool,
    dry_run: bool,
    dedupe_buffer_size: int | None,
    only_eligible: bool,
    assume_compact: bool,
    allow_keyless_loss: bool,
    server_properties: str | None,
    metadata_dir: str | None,
    jobs: int | None,
    as_json: bool,
) -> None:
    """Compact PATH (a partition directory, or every compacted partition of a log dir) exactly as one
    round of Kafka 4.1's log cleaner would, while the broker is stopped.

    Compacts only a partition known to be compacted: its cleanup.policy includes compact by
    --config, a topic override in the KRaft metadata log, a broker config, or because it is
    __consumer_offsets/__transaction_state. Others are skipped with the reason (exit 0 for a log
    dir; exit 2 for a partition named alone); see --assume-compact. A partition whose records are
    mostly keyless is compacted only with --allow-keyless-loss.

    Refuses to write while a broker holds the log dir's .lock. Crash-safe: an interrupted clean is
    finished or rolled back by the next run (and by a broker), and the cleaner checkpoint is advanced
    only after every segment is swapped in. The dirty ratio is reported, it does not gate a manual clean.
    """
    from kcompact.cleaner.logdir.run import clean_path
    from kcompact.cleaner.partition import CleanOptions
    from kcompact.cli.clean_view import render_clean
    from kcompact.cli.progress_view import progress_bar
    from kcompact.config.topic_config import parse_config_pairs

    overrides = parse_config_pairs(config_pairs)
    options = CleanOptions(now_ms=now_ms, from_start=from_start, dedupe_buffer_size=dedupe_buffer_size,
                           dry_run=dry_run, roll=roll)
    with progress_bar(enabled=not as_json) as progress:
        run = clean_path(path, cli_overrides=overrides, options=options, only_eligible=only_eligible,
                         progress=progress, server_properties=server_properties,
                         metadata_dir=metadata_dir, jobs=jobs, assume_compact=assume_compact,
                         allow_keyless_loss=allow_keyless_loss)
    render_clean(run, as_json=as_json)
    if run.failures:
        raise click.exceptions.Exit(EXIT_BAD_INPUT)


def _register_optional_commands() -> None:
    """Commands that live in their own modules (each imports only click at import time)."""
    import importlib

    for module, group, name in (
        ("kcompact.cli.keys_cmds", "inspect", "keys_command"),
        ("kcompact.cli.keys_cmds", "inspect", "last_clean_command"),
        ("kcompact.cli.repair_cmd", "cli", "repair_command"),
        ("kcompact.cli.config_cmd", "cli", "config_group"),
        ("kcompact.cli.spark_cmds", "cli", "spark_group"),
        ("kcompact.cli.export_cmd", "cli", "export_command"),
    ):
        try:
            command = getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise  # a real import bug inside the command module
            continue  # that command is not part of this build
        (inspect if group == "inspect" else cli).add_command(command)


_register_optional_commands()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="kcompact")


if __name__ == "__main__":  # pragma: no cover
    main()
