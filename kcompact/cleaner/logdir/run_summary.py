"""What a run over many partitions says once, instead of once per partition.

A log dir of a ZooKeeper-era broker copied without its ``replication-offset-checkpoint`` gives every
partition the same warning (only the log end offset in it differs), and a log dir holds many empty
partitions. Every partition's row keeps its own warning (``--json``, Parquet); a report for people says
how many partitions it concerns, in one line, and counts the empty partitions instead of listing them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from kcompact.log.rules.ranges import CleanableRange
from kcompact.log.state.log_state import NO_HIGH_WATERMARK_WARNING


def is_summarised(warning: str) -> bool:
    """Whether a partition's warning is one :func:`repeated_warning_notes` counts (a report over several
    partitions prints the count instead of the warning)."""
    return warning.startswith(NO_HIGH_WATERMARK_WARNING)


CLEANING_EFFECT = "a broker would clean nothing in them until they are replicated"
"""What a missing high watermark means to a report about cleaning."""


def repeated_warning_notes(warnings_per_partition: Iterable[Sequence[str]],
                           effect: str = CLEANING_EFFECT) -> list[str]:
    """One note per warning that repeats on several partitions, saying how many.

    Args:
        warnings_per_partition: each partition's warnings.
        effect: what it means to the report's command (``CLEANING_EFFECT``: cleaning).

    Returns:
        The notes (none when no such warning concerns two partitions or more).
    """
    count = sum(1 for warnings in warnings_per_partition if any(map(is_summarised, warnings)))
    if count < 2:
        return []
    return [(f"no replication-offset-checkpoint entry for {count} partitions: high watermark taken as "
             f"the log end ({effect})")]


def warning_lines(named_warnings: Sequence[tuple[str, Sequence[str]]], effect: str = CLEANING_EFFECT,
                  own_effect: Callable[[str], str] | None = None) -> list[str]:
    """What a report for people prints of its partitions' warnings: each naming its partition, once; the
    missing high watermark of several partitions in one line with their count (:func:`repeated_warning_notes`).

    Args:
        named_warnings: ``(partition name, its warnings)`` per partition.
        effect: what a missing high watermark means to the command, for the counted line.
        own_effect: rewrites one partition's own missing-high-watermark warning for the command (None: as it is).

    Returns:
        The lines, in partition order, the counted line last.
    """
    notes = repeated_warning_notes([warnings for _name, warnings in named_warnings], effect)
    concerns: dict[str, list[str]] = {}  # warning -> the partitions it concerns, in order
    for name, warnings in named_warnings:
        for warning in warnings:
            if is_summarised(warning):
                if notes:
                    continue
                warning = own_effect(warning) if own_effect is not None else warning
            if warning.startswith(f"{name}: "):  # it names its partition already
                concerns.setdefault(warning, [])
            elif name not in concerns.setdefault(warning, []):
                concerns[warning].append(name)
    return [f"{partitions_text(names)}: {warning}" if names else warning
            for warning, names in concerns.items()] + notes


NAMED_PARTITIONS = 3
"""How many partitions a line that stands for several names before it counts the rest."""


def partitions_text(names: Sequence[str]) -> str:
    """``orders-0``, ``orders-0, orders-1``, or ``5 partitions (orders-0, orders-1, orders-2 and 2 more)``
    (never an ellipsis, which would read as a name cut short)."""
    if len(names) <= NAMED_PARTITIONS:
        return ", ".join(names)
    rest = len(names) - NAMED_PARTITIONS
    return f"{len(names)} partitions ({', '.join(names[:NAMED_PARTITIONS])} and {rest} more)"


def holds_no_records(rng: CleanableRange | None) -> bool:
    """Whether a partition's range shows it empty: its log end is its log start."""
    return rng is not None and rng.log_end_offset == rng.log_start_offset


def empty_partitions_line(count: int) -> str:
    """The one line that stands for ``count`` empty partitions in a report for people."""
    return f"{count} empty partition{'' if count == 1 else 's'} (no records): nothing to clean"


def active_only_line(names: Sequence[str]) -> str:
    """The one line that stands for several partitions whose data is all in the active segment."""
    return (f"{partitions_text(names)}: data only in the active segment, which is never cleaned; --roll "
            "cleans it (--json: each one's detail)")


_SAMPLED_KEYED = re.compile(r"; all \d+ records sampled carry a key")
_SAMPLED_KEYLESS = re.compile(r"\b\d+ of \d+ records sampled have no key")


def skipped_lines(named_reasons: Sequence[tuple[str, str]]) -> list[str]:
    """What a report for people prints of a log dir's skipped partitions: one line per reason, naming the
    partition when it is alone, else counting them with a few names (``partitions_text``); the counts of
    each one's keyless sample (``keyless.KeylessSample.describe``) are left out where several share a line.

    Args:
        named_reasons: ``(partition name, why it was skipped)`` per skipped partition, in order.

    Returns:
        The lines, in the order each reason first appears.
    """
    by_gist: dict[str, list[tuple[str, str]]] = {}
    for name, reason in named_reasons:
        gist = _SAMPLED_KEYLESS.sub("most records sampled have no key", _SAMPLED_KEYED.sub("", reason))
        by_gist.setdefault(gist, []).append((name, reason))
    lines = []
    for gist, members in by_gist.items():
        if len(members) == 1:
            name, reason = members[0]
            lines.append(f"{name}: skipped — {reason}")
        else:
            lines.append(f"{partitions_text([name for name, _reason in members])}: skipped — {gist}")
    return lines
