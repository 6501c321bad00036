"""The options and exit codes every command shares.

``--config`` (:func:`config_option`), the two files beside it, ``--server-properties`` and
``--metadata-dir`` (:func:`config_source_options`), the clock, ``--now-ms`` (:func:`now_ms_option`),
``--jobs`` (:func:`parse_jobs`) and every command's ``--json`` (:func:`json_option`). Each command
keeps its own help wording, so those are arguments.

Only click is imported here, so that ``kcompact --help`` stays fast.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

EXIT_OK = 0
EXIT_BUG = 1
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3  # inspect replicas, report (and their spark forms): replica copies diverge

_ENDS_WITHOUT_TEARDOWN: list[bool] = []  # set by a command that may (:func:`end_without_teardown`)


def end_without_teardown() -> None:
    """Let the console entry (``cli.main.main``) end the process as soon as this command has returned, without
    tearing the interpreter down (``os._exit`` once stdout and stderr are flushed): for a command whose every
    write is closed, and made durable where it must be, before it returns (``clean``: its swaps and checkpoint
    are fsynced, a kill at any point is recovered). Freeing a clean's objects and modules one by one took 30-40
    ms of its wall time (the bench's plain clean: 0.63-0.68 s against 0.60-0.64). Not where pyspark is loaded:
    its exit handler stops the JVM it started."""
    _ENDS_WITHOUT_TEARDOWN.append(True)


def ends_without_teardown() -> bool:
    """Whether the command that ran asked to end without tearing the interpreter down."""
    return bool(_ENDS_WITHOUT_TEARDOWN)


EPILOG = (
    "Exit codes: 0 success; 2 bad input or refused (one line on stderr names the file and byte "
    "position); 1 a bug in kcompact (with a traceback)."
)
GROUP_EPILOG = EPILOG.replace("(with a traceback).", "(with a traceback); 3 inspect replicas, report: "
                                                     "replica copies diverge.")
"""The exit codes of every command of a group (docs/safety.md's list): ``kcompact --help``, ``inspect``, ``spark``."""
SERVER_PROPERTIES_HELP = "The broker's server.properties (default: $KCOMPACT_SERVER_PROPERTIES)."
METADATA_DIR_HELP = (
    "metadata.log.dir or its __cluster_metadata-0 (default: the one server.properties names, "
    "else the one beside the partition's log dir)."
)
METADATA_DIRS_HELP = METADATA_DIR_HELP.replace("the partition's", "each partition's")  # many paths

F = TypeVar("F", bound=Callable[..., object])
# records.varint's INT64_MAX, not imported: --help loads no layer below the CLI (tests/cli/test_lazy_imports.py)
INT64_MAX = 2**63 - 1  # a Java long: Kafka's timestamps, and the delete horizons a clean stamps from the clock


def parse_now_ms(_ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """``--now-ms``: a clock in ms since the epoch, as a Java long holds it (0 up to 2^63 - 1)."""
    if value is not None and not 0 <= value <= INT64_MAX:
        raise click.BadParameter(
            f"a time in ms since the epoch; expected 0..{INT64_MAX}, found {value}", param=param)
    return value


def parse_safe_offset(_ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """``--safe-offset``: an offset of the partition's log, as a Java long holds it (0 up to 2^63 - 1);
    a value beyond would fence nothing, the opposite of what was asked."""
    if value is not None and not 0 <= value <= INT64_MAX:
        raise click.BadParameter(
            f"an offset of the partition's log; expected 0..{INT64_MAX}, found {value}", param=param)
    return value


def now_ms_option(help_text: str) -> Callable[[F], F]:
    """``--now-ms MS``: the clock the time rules use; negative or beyond a Java long is refused (exit 2).

    Args:
        help_text: the command's own help for it.

    Returns:
        The click decorator (the command gets ``now_ms``, None when absent).
    """
    return click.option("--now-ms", type=int, default=None, callback=parse_now_ms, metavar="MS",
                        help=help_text)


JSON_REQUESTED = "kcompact.json"  # key of click's ctx.meta (shared by nested contexts): --json was given


SOLE_REPLICA_HELP = (
    "This broker is the only replica of the partitions (replication factor 1): take each one's high watermark as "
    "its log end, as Kafka's leader sets it on start, not the replication-offset-checkpoint's (a broker that died "
    "leaves it far behind). Without it the KRaft metadata log decides: a partition whose replicas are this node "
    "alone (and its ISR holds it) is taken so; one the metadata log assigns elsewhere is never, flag or not.")


def sole_replica_option(function: F) -> F:
    """``--sole-replica`` (``sole_replica``), the same for every command that caps by the high watermark
    (``clean``, ``inspect dirty-ratio``, ``report``, ``inspect keys``, ``export`` and their Spark forms:
    ``log.rules.high_watermark.sole_replica_of``)."""
    return click.option("--sole-replica", is_flag=True, help=SOLE_REPLICA_HELP)(function)


def json_option(help_text: str) -> Callable[[F], F]:
    """``--json``, passed to the command as ``as_json``, and remembered for the error boundary.

    ``KcompactGroup`` (kcompact.cli.main) prints a deliberate failure as one line on stderr; when the
    command was given ``--json`` it also prints a JSON error object on stdout, so a script reading
    stdout gets JSON either way. Every command's ``--json`` is this option, so none is missed.

    Args:
        help_text: the command's own help for it (what its JSON holds).

    Returns:
        The click decorator.
    """

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            ctx.meta[JSON_REQUESTED] = True
        return value

    # eager: remembered before any other parameter is converted, so a refusal while converting one
    # (a URL given to --undo before --json) gets its JSON error object too
    return click.option("--json", "as_json", is_flag=True, is_eager=True, callback=remember, help=help_text)


def config_option(help_text: str) -> Callable[[F], F]:
    """``--config KEY=VALUE`` (repeatable), passed to the command as ``config_pairs``.

    Args:
        help_text: the command's own help for it (which settings matter there).

    Returns:
        The click decorator.
    """
    return click.option("--config", "config_pairs", multiple=True, metavar="KEY=VALUE", help=help_text)


def config_source_options(metadata_dir_help: str = METADATA_DIR_HELP) -> Callable[[F], F]:
    """``--server-properties FILE`` and ``--metadata-dir DIR``, in that order: the broker's files a
    partition's configuration is resolved from (``kcompact.config.effective.partition_config``).

    Args:
        metadata_dir_help: the help of ``--metadata-dir`` (where it is looked for by default).

    Returns:
        The click decorator (the command gets ``server_properties`` and ``metadata_dir``).
    """
    server_properties = click.option(
        "--server-properties", type=click.Path(exists=True, dir_okay=False, path_type=str),
        default=None, metavar="FILE", help=SERVER_PROPERTIES_HELP)
    metadata_dir = click.option(
        "--metadata-dir", type=click.Path(exists=True, file_okay=False, path_type=str),
        default=None, metavar="DIR", help=metadata_dir_help)

    def decorate(command: F) -> F:
        return server_properties(metadata_dir(command))

    return decorate


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


PARTITION_CONFIG_HELP = "A topic or cleaner configuration by Kafka's name. Repeatable."


def partition_config_options(command: Any) -> Any:
    """``--config``, ``--now-ms``, ``--server-properties`` and ``--metadata-dir`` of one partition's report,
    as clean and dirty-ratio take them (``inspect keys`` and ``inspect last-clean``)."""
    command = config_source_options(METADATA_DIR_HELP)(command)
    command = now_ms_option("The clock (default: now), in ms since the epoch.")(command)
    return config_option(PARTITION_CONFIG_HELP)(command)


def _absolute(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(os.path.abspath(v) for v in value)  # Spark executors: no path relative to the driver's cwd


_LOG_DIR_FENCE = ("In a log dir's clean a partition without a copy fences nothing (its row says so); a "
                  "partition named alone without one is refused.")


def fence_options(command: F) -> F:
    """``--replica-dirs DIR`` (repeatable) and ``--safe-offset OFFSET``: the replica fence.

    Passed to the command as ``replica_dirs`` (absolute paths) and ``safe_offset``.
    """
    return _fence_options(command, _LOG_DIR_FENCE)


def repair_fence_options(command: F) -> F:
    """:func:`fence_options` for ``repair --clean``, whose log dir cleans each partition as one named alone."""
    return _fence_options(command, "For --clean, of a partition or each partition of a log dir: one "
                                   "without a copy is not cleaned (the repair itself still runs).")


def _fence_options(command: F, without_a_copy: str) -> F:
    command = click.option(
        "--safe-offset", type=int, default=None, callback=parse_safe_offset, metavar="OFFSET",
        help="Replica fence: never remove a tombstone or transaction marker at or above OFFSET for "
             "its age (delete.retention.ms), so a follower that has not fetched it yet cannot miss "
             "it. One superseded by a newer record of its key still goes, as in Kafka. With "
             "--replica-dirs the lower fence wins. Values superseded only by records Kafka may truncate "
             "are kept by --replica-dirs' clean limit, not by this. An offset of "
             "one partition: refused for a log dir.")(command)
    return click.option(
        "--replica-dirs", "replica_dirs", multiple=True, callback=_absolute,
        type=click.Path(exists=True, file_okay=False, path_type=str), metavar="DIR",
        help="Replica fence from the other replicas' copies (partition dirs or log dirs; "
             "repeatable). Each copy fences at what Kafka leaves of it when it follows this one: the "
             "lower of its log end as Kafka's loader leaves it (an interrupted .swap completed, a torn "
             "tail cut) and where its leader-epoch lineage parts from this copy's (where Kafka "
             "truncates it); the lowest over the copies (and --safe-offset) is the fence. Where a "
             "copy's lineage parts from this one at D, Kafka may truncate this copy from D: it is "
             "cleaned only below D (the clean limit). Both are reported per partition. "
             f"{without_a_copy}"
    )(command)
