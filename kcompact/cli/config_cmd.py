"""``kcompact config show``: the configuration kcompact resolves for a partition, and where each value
came from (``--config``, topic override, dynamic broker config, server.properties, Kafka's default).

Also home of the options every command that resolves a configuration shares: ``--config``
(:func:`config_option`), the two files beside it, ``--server-properties`` and ``--metadata-dir``
(:func:`config_source_options`), the clock, ``--now-ms`` (:func:`now_ms_option`), and every command's
``--json`` (:func:`json_option`). Each command
keeps its own help wording, so those are arguments.

Only click (and :mod:`kcompact.cli.render`) are imported at module level so that ``kcompact --help``
stays fast; the library and rich are imported inside the command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click

from kcompact.cli import render
from kcompact.cli.help_text import with_examples

if TYPE_CHECKING:
    from kcompact.config.effective import EffectiveConfig

EPILOG = (
    "Exit codes: 0 success; 2 bad input (a bad --config, an unreadable file, a metadata log that "
    "does not parse); 1 a bug in kcompact (with a traceback)."
)
SERVER_PROPERTIES_HELP = "The broker's server.properties (default: $KCOMPACT_SERVER_PROPERTIES)."
METADATA_DIR_HELP = (
    "metadata.log.dir or its __cluster_metadata-0 (default: the one server.properties names, "
    "else the one beside the partition's log dir)."
)
METADATA_DIRS_HELP = METADATA_DIR_HELP.replace("the partition's", "each partition's")  # many paths

F = TypeVar("F", bound=Callable[..., object])
INT64_MAX = 2**63 - 1  # a Java long: Kafka's timestamps, and the delete horizons a clean stamps from the clock


def parse_now_ms(_ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """``--now-ms``: a clock in ms since the epoch, as a Java long holds it (0 up to 2^63 - 1)."""
    if value is not None and not 0 <= value <= INT64_MAX:
        raise click.BadParameter(
            f"a time in ms since the epoch; expected 0..{INT64_MAX}, found {value}", param=param)
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

    return click.option("--json", "as_json", is_flag=True, callback=remember, help=help_text)


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


@click.group("config", short_help="Topic configuration, resolved offline from the broker's files.",
             epilog=with_examples(EPILOG, "kcompact config show /tmp/kafka-logs/orders-0"))
def config_group() -> None:
    """Topic configuration as kcompact resolves it, offline, from the broker's own files."""


@config_group.command("show", short_help="A partition's effective configuration and each value's source.",
                      epilog=with_examples(
                          EPILOG,
                          "kcompact config show /tmp/kafka-logs/orders-0 --json",
                          "kcompact config show /tmp/kafka-logs/orders-0 --config segment.ms=3600000",
                      ))
@click.argument("partition_dir", type=click.Path(exists=True, file_okay=False, path_type=str))
@config_source_options("metadata.log.dir, or its __cluster_metadata-0 directory (default: the one "
                       "server.properties names, else the one beside the partition's log dir).")
@config_option("A topic configuration by Kafka's name; beats every other source. Repeatable.")
@json_option("Print one JSON object.")
def show_command(partition_dir: str, server_properties: str | None, metadata_dir: str | None,
                 config_pairs: tuple[str, ...], as_json: bool) -> None:
    """Print the effective configuration of PARTITION_DIR and the source of every value, in
    Kafka's order: --config > topic override > dynamic config of this broker > dynamic cluster
    default > server.properties > Kafka's default.

    Topic overrides and dynamic configs come from the KRaft metadata log (__cluster_metadata-0),
    the broker's node id from the log dir's meta.properties. Notes say what is unknown (an
    incomplete metadata history, an unknown topic id) and what kcompact assumes.
    """
    from kcompact.config.effective import partition_config
    from kcompact.config.topic_config import parse_config_pairs

    effective = partition_config(partition_dir, cli_overrides=parse_config_pairs(config_pairs),
                                 server_properties=server_properties, metadata_dir=metadata_dir)
    if as_json:
        render.emit_json(effective.as_dict())
    else:
        _render_table(effective)


def _render_table(effective: EffectiveConfig) -> None:
    from rich.table import Table

    from kcompact.config.effective import describe_source
    from kcompact.config.topic_config import format_value

    for label, shown in (
        ("topic id", effective.topic_id),
        ("node id", effective.node_id),
        ("server.properties", effective.server_properties),
        ("metadata log", _metadata_label(effective)),
    ):
        render.plain(f"{label}: {'-' if shown is None else shown}")
    # the name as a line of its own, not the table's title: a title wraps to the table's width
    render.plain(f"configuration of {effective.partition_dir.name}")
    table = Table(show_edge=False)
    table.add_column("key", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    for item in effective.values:
        if item.value is not None:
            table.add_row(item.key, format_value(item.value), describe_source(item))
    render.console().print(table)
    for note in effective.notes:
        render.plain(f"note: {note}")


def _metadata_label(effective: EffectiveConfig) -> str | None:
    if effective.metadata_dir is None:
        return None
    state = "complete" if effective.metadata_complete else "incomplete history"
    return f"{effective.metadata_dir} ({state})"
