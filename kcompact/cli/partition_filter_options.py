"""``--topic``, ``--exclude-topic`` and ``--partition``: the options of every command that takes a log dir.

:func:`partition_filter_options` adds the three options to a command with one line, builds the
:class:`~kcompact.segment.partition_filter.PartitionFilter` they describe (a bad regular expression is
refused with one line, exit 2), counts the partitions it matches under the command's paths before the
command does any work (none: exit 2 with one line), says the count on stderr (stdout stays the
command's report, JSON included), and hands the command the filter as ``selection`` (None when no
option was given: the command works on every partition, as before).

Only click is imported at module level so that ``kcompact --help`` stays fast.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

TOPIC_HELP = ("Only partitions whose topic fully matches REGEX (a Python regular expression). "
              "Repeatable: a topic matching any of them.")
EXCLUDE_HELP = "Leave out partitions whose topic fully matches REGEX. Repeatable."
PARTITION_HELP = "Only partitions numbered N. Repeatable."


Command = Callable[..., Any]
"""A click command's callback: its parameters are its options' names, whatever they are."""


def partition_filter_options(paths_param: str) -> Callable[[Command], Command]:
    """The three filter options, applied to the paths the command's ``paths_param`` holds.

    Args:
        paths_param: the name of the command's path argument (one path, a tuple of paths, or None
            when the command was asked for something else, e.g. ``repair --undo``).

    Returns:
        The click decorator; the command gets ``selection`` (a ``PartitionFilter`` or None) instead
        of the three options' values.
    """

    def decorate(command: Command) -> Command:
        @functools.wraps(command)
        def run(*args: Any, topic_patterns: tuple[str, ...], exclude_topic_patterns: tuple[str, ...],
                partition_numbers: tuple[int, ...], **kwargs: Any) -> Any:
            selection = None
            if topic_patterns or exclude_topic_patterns or partition_numbers:
                selection = _selection(topic_patterns, exclude_topic_patterns, partition_numbers,
                                       kwargs.get(paths_param), kwargs.get("storage_pairs", ()))
            return command(*args, selection=selection, **kwargs)

        options = (
            click.option("--topic", "topic_patterns", multiple=True, metavar="REGEX", help=TOPIC_HELP),
            click.option("--exclude-topic", "exclude_topic_patterns", multiple=True, metavar="REGEX",
                         help=EXCLUDE_HELP),
            click.option("--partition", "partition_numbers", multiple=True, metavar="N",
                         type=click.IntRange(min=0), help=PARTITION_HELP),
        )
        decorated: Command = run
        for option in reversed(options):
            decorated = option(decorated)
        return decorated

    return decorate


def _selection(topics: tuple[str, ...], excluded: tuple[str, ...], partitions: tuple[int, ...],
               paths: str | tuple[str, ...] | None, storage_pairs: tuple[str, ...]) -> Any:
    """The filter, its matches counted and said (raises ``KcompactError`` when none match)."""
    from kcompact.cli.render import plural
    from kcompact.segment.partition_filter import PartitionFilter, count_matches
    from kcompact.segment.remote import parse_storage_options

    selection = PartitionFilter.of(topics, excluded, partitions)
    if paths:  # None or none given: the command was asked for something else (repair --undo, report --from)
        match = count_matches((paths,) if isinstance(paths, str) else paths, selection,
                              parse_storage_options(storage_pairs))
        click.echo(f"kcompact: {selection.describe()} matched {match.matched} of "
                   f"{plural(match.total, 'partition')}", err=True)
    return selection
