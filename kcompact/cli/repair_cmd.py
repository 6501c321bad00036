"""``kcompact repair``: verify a partition (or every partition of a log dir), repair it without losing a
batch, and undo a repair.

Parses the options, calls :func:`kcompact.repair.repair.repair_partition`,
:func:`kcompact.repair.log_dir.repair_log_dir` (or :func:`kcompact.repair.undo.undo_repair`) and renders the
result (a log dir's in ``repair_log_dir_view``); the library is imported inside the command so
``kcompact --help`` stays fast. Exit codes: 0 when the partition (every partition of the log dir) is sound
(``--dry-run``: nothing but what a broker settles itself as it loads it) or was repaired with nothing left that
blocks cleaning; 2 when problems were found by a dry run, remain after the repair, the ``--clean`` failed, a
partition's repair failed or was refused, or the repair was refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from kcompact.cli import render
from kcompact.cli.help_text import with_examples
from kcompact.cli.input_path import InputPath
from kcompact.cli.options import (
    METADATA_DIRS_HELP,
    config_option,
    config_source_options,
    json_option,
    now_ms_option,
    parse_jobs,
    repair_fence_options,
)
from kcompact.cli.partition_filter_options import partition_filter_options
from kcompact.cli.repair_view import EXIT_PROBLEMS, render_partition
from kcompact.errors import RefusedError

if TYPE_CHECKING:
    from kcompact.segment.partition_filter import PartitionFilter

EPILOG = (
    "Exit codes: 0 sound (dry run: nothing Kafka does not settle itself as it starts) or repaired (for a log "
    "dir: every partition); 2 problems found (dry run) or "
    "left, a partition that could not be repaired, bad input or refused (one line on stderr names the "
    "file and byte position); 1 a bug in kcompact (with a traceback)."
)


UNDO_FORM = "--undo BACKUP_DIR"
UNDO_OWN_PARAMS = frozenset({"undo_dir", "dry_run", "as_json"})
"""The parameters ``--undo`` takes; the backup's manifest names the partition, so no PARTITION_DIR."""


class RepairCommand(click.Command):
    """``repair`` has two forms, and its usage line shows both (also above every usage error)."""

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS] PARTITION_DIR|LOG_DIR...")
        formatter.write_usage(ctx.command_path, f"{UNDO_FORM} [--dry-run] [--json]", prefix="   or: ")


@click.command("repair", cls=RepairCommand,
               short_help="Verify and repair a partition or log dir, losing no valid batch.",
               epilog=with_examples(
                   EPILOG,
                   "kcompact repair /tmp/kafka-logs/orders-0 --dry-run",
                   "kcompact repair --undo /backup/orders-0",
                   "kcompact repair /tmp/kafka-logs --topic 'orders.*' --jobs 2 --dry-run",
               ))
@click.argument("partition_dirs", nargs=-1, metavar="PARTITION_DIR|LOG_DIR...", type=InputPath(refuse_as="repair"))
@partition_filter_options("partition_dirs")
@click.option("--dry-run", is_flag=True, help="Report the problems and the plan; write nothing.")
@json_option("Print the report as JSON.")
@click.option("--backup-dir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Where originals and quarantined bytes go (default: next to the log dir, in "
                   "<log dir>.kcompact-backup/; never inside the log dir).")
@click.option("--clean", is_flag=True,
              help="Then compact the repaired partition (as `kcompact clean`). --assume-compact, "
                   "--allow-keyless-loss, --now-ms, --replica-dirs and --safe-offset are for it alone "
                   "(refused without it).")
@click.option("--assume-compact", is_flag=True,
              help="For --clean: as `kcompact clean --assume-compact` (compact where "
                   "cleanup.policy is unknown; never where its last known one is an explicit one "
                   "without compact).")
@click.option("--allow-keyless-loss", is_flag=True,
              help="For --clean: as `kcompact clean --allow-keyless-loss` (compact an explicitly "
                   "compacted partition although most of its records have no key; they are deleted).")
@config_option("A topic configuration by Kafka's name (index.interval.bytes, and for --clean "
               "cleanup.policy, delete.retention.ms, …). Repeatable.")
@now_ms_option("The clock of --clean (default: now), in ms since the epoch.")
@repair_fence_options
@config_source_options(METADATA_DIRS_HELP)
@click.option("--jobs", default=None, callback=parse_jobs, metavar="N|auto",
              help="For a log dir: worker processes verifying and repairing its partitions (as "
                   "`kcompact clean --jobs`). Default auto.")
@click.option("--undo", "undo_dir", metavar="BACKUP_DIR", default=None, type=InputPath(refuse_as="repair --undo"),
              help="Put back, byte for byte, the partition a repair changed, from the backup it printed "
                   "(the manifest names the partition): alone, or with --dry-run or --json. A directory of "
                   "backups (a log dir repair's, or <log dir>.kcompact-backup) undoes each not undone yet, "
                   "newest first, every partition's checked before any change.")
def repair_command(
    partition_dirs: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
    backup_dir: str | None,
    clean: bool,
    assume_compact: bool,
    allow_keyless_loss: bool,
    config_pairs: tuple[str, ...],
    now_ms: int | None,
    replica_dirs: tuple[str, ...],
    safe_offset: int | None,
    server_properties: str | None,
    metadata_dir: str | None,
    jobs: int | None,
    undo_dir: str | None,
    selection: PartitionFilter | None = None,
) -> None:
    """Verify PARTITION_DIR the way a broker recovering from an unclean shutdown would, say which
    problems make the broker's cleaner give up on it, and repair them while the broker is stopped.

    Every batch that passes its CRC is kept: past a damaged region the next valid batch is found
    (Kafka's own recovery would truncate everything after it); the damaged bytes go to a quarantine
    file in the backup; a torn tail alone (an append cut short by a crash or a full volume) is cut in
    place, at the byte where Kafka's recovery cuts it, writing nothing beside the segment (on a full volume
    give --backup-dir on another one); an index that breaks a broker's reads is rebuilt as Kafka 4.1 builds it (a valid
    one another broker version wrote is reported as informational and left alone); an interrupted clean
    is finished or rolled back as Kafka's loader would; a checkpoint entry Kafka would reset is reset; a
    legacy (magic 0/1) segment Kafka's cleaner throws on is rewritten as magic 2 batches of the same
    records. Each finding says its impact: it breaks the broker, its cleaner, Kafka settles it itself,
    or it is informational. Every file that changes is backed up first (with a manifest recording the
    partition after every step); `--undo BACKUP_DIR` restores it, and refuses when anything the repair
    cannot have written changed since.

    Given a LOG_DIR, verifies every partition (in worker processes, --jobs), repairs those that need it
    with one backup each (--backup-dir DIR: DIR/<partition>), and prints one summary table; causes of
    the whole log dir (a broker's lock, a read-only log dir, a checkpoint file that does not parse) are
    said once. Every report lists what the repair gives up: per damaged region of a segment its byte
    range, its offsets and how many records it held (unknown where the bytes do not decode).
    """
    from kcompact.segment.url import is_url  # kept off the --help path

    if backup_dir is not None and is_url(backup_dir):  # else it would become a local ./s3:/… directory
        raise RefusedError(f"{backup_dir}: --backup-dir of repair expected a local POSIX directory, found "
                           "a URL (the backup is written with rename and fsync); nothing changed")
    if undo_dir is not None:
        _refuse_with_undo()
        _undo(undo_dir, dry_run=dry_run, as_json=as_json)
        return
    _refuse_clean_only_options(clean)
    if not partition_dirs:
        raise click.UsageError("missing PARTITION_DIR or LOG_DIR (or --undo BACKUP_DIR)")

    from kcompact.cli.progress_view import progress_bar
    from kcompact.config.topic_config import parse_config_pairs
    from kcompact.repair.repair import RepairOptions, repair_partition
    from kcompact.segment.partition import is_partition_dir

    overrides = tuple(parse_config_pairs(config_pairs).items())
    options = RepairOptions(dry_run=dry_run, backup_dir=None if backup_dir is None else Path(backup_dir),
                            clean=clean, config_overrides=overrides, now_ms=now_ms,
                            assume_compact=assume_compact, allow_keyless_loss=allow_keyless_loss,
                            server_properties=server_properties, metadata_dir=metadata_dir,
                            replica_dirs=replica_dirs, safe_offset=safe_offset)
    if len(partition_dirs) > 1 and options.backup_dir is not None:
        raise click.UsageError("--backup-dir takes one PARTITION_DIR or LOG_DIR (each PATH's backups go next "
                               "to its own log dir without it)")
    outcomes: list[tuple[str, dict[str, Any], bool]] = []
    for path in partition_dirs:
        if len(partition_dirs) > 1 and not as_json:
            render.plain(f"{path}:" if not outcomes else f"\n{path}:")
        if not is_partition_dir(path):
            from kcompact.cli.repair_log_dir_view import repair_log_dir_command_body

            outcomes.append((path, *repair_log_dir_command_body(path, options, selection, jobs, as_json=as_json)))
            continue
        with progress_bar(enabled=not as_json, verb="reading") as progress:
            result = repair_partition(path, options, progress)
        if not as_json:
            render_partition(result)
        outcomes.append((path, result.as_dict(), result.ok))
    if as_json:
        render.emit_json(outcomes[0][1] if len(outcomes) == 1
                         else {"runs": [{"path": path, **report} for path, report, _ok in outcomes]})
    if not all(ok for _path, _report, ok in outcomes):
        raise click.exceptions.Exit(EXIT_PROBLEMS)


CLEAN_ONLY_OPTIONS = (("assume_compact", "--assume-compact"), ("allow_keyless_loss", "--allow-keyless-loss"),
                      ("now_ms", "--now-ms"), ("replica_dirs", "--replica-dirs"), ("safe_offset", "--safe-offset"))
"""The options only ``--clean`` uses (parameter name, option), in the order a refusal names them."""


def _refuse_clean_only_options(clean: bool) -> None:
    """Without ``--clean``, an option only the clean uses would be ignored: refuse it (a usage error)."""
    if clean:
        return
    ctx = click.get_current_context()
    given = [option for name, option in CLEAN_ONLY_OPTIONS
             if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
    if given:
        one = len(given) == 1
        raise click.UsageError(f"{', '.join(given)} {'is' if one else 'are'} for --clean only; give --clean "
                               f"or leave {'it' if one else 'them'} out")


def _refuse_with_undo() -> None:
    """``--undo`` with anything but ``--dry-run`` or ``--json``: a usage error naming what was given."""
    ctx = click.get_current_context()
    given = [param.opts[0] if isinstance(param, click.Option) else "PARTITION_DIR|LOG_DIR"
             for param in ctx.command.params
             if param.name not in UNDO_OWN_PARAMS and param.name is not None
             and ctx.get_parameter_source(param.name) not in (None, ParameterSource.DEFAULT)]
    if given:
        raise click.UsageError("--undo takes a BACKUP_DIR only (its manifest names the partition it puts "
                               f"back), with --dry-run or --json; found {', '.join(given)}")


def _undo(undo_dir: str, *, dry_run: bool, as_json: bool) -> None:
    from dataclasses import asdict

    from kcompact.repair.undo import undo_backups

    results = undo_backups(undo_dir, dry_run=dry_run)
    one = len(results) == 1 and Path(results[0].backup_dir) == Path(undo_dir)  # a backup named: its object
    if as_json:
        render.emit_json(asdict(results[0]) if one else {"backups": [asdict(result) for result in results]})
        return
    verb = "would" if dry_run else "did"
    for result in results:
        render.plain(f"{result.partition_dir}: undo from {result.backup_dir} ({verb}: "
                     f"remove {len(result.removed)}, restore {render.plural(len(result.restored), 'file')})")
        for name in result.removed:
            render.plain(f"  remove  {name}")
        for name in result.restored:
            render.plain(f"  restore {name}")
        for note in result.notes:
            render.plain(f"  {note}")
    if not one:
        done = "would undo" if dry_run else "undid"
        render.plain(f"{done} {render.plural(len(results), 'backup')} under {undo_dir}")
