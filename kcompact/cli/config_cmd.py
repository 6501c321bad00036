"""``kcompact config show``: the configuration kcompact resolves for a partition, and where each value
came from (``--config``, topic override, dynamic broker config, server.properties, Kafka's default).

Only click (and :mod:`kcompact.cli.render`) are imported at module level so that ``kcompact --help``
stays fast; the library and rich are imported inside the command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kcompact.cli import render
from kcompact.cli.help_text import with_examples
from kcompact.cli.options import config_option, config_source_options, json_option

if TYPE_CHECKING:
    from kcompact.config.effective import EffectiveConfig

EPILOG = (
    "Exit codes: 0 success; 2 bad input (a bad --config, an unreadable file, a metadata log that "
    "does not parse); 1 a bug in kcompact (with a traceback)."
)


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
    from kcompact.segment.partition import refuse_log_dir

    refuse_log_dir(partition_dir)  # a log dir named like a partition (kafka-logs-1) has no topic config
    effective = partition_config(partition_dir, cli_overrides=parse_config_pairs(config_pairs),
                                 server_properties=server_properties, metadata_dir=metadata_dir)
    if as_json:
        render.emit_json(effective.as_dict())
    else:
        _render_table(effective)


def _render_table(effective: EffectiveConfig) -> None:
    from rich.table import Table

    from kcompact.config.config_keys import format_value
    from kcompact.config.effective import describe_source

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
