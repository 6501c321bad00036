"""Which partitions of a log dir a command works on: ``--topic``, ``--exclude-topic``, ``--partition``.

A broker's log dir holds hundreds of topics; an operator chasing one incident names a few. A
:class:`PartitionFilter` is the one value every command that takes a log dir is given. It is applied
where a log dir's partition directories are listed (:func:`require_partition_dirs`),
so a partition it leaves out is never opened, read, locked or changed.

A partition matches when

* its topic fully matches one of the ``topics`` patterns (Python regular expressions; none given: every
  topic), and
* its topic fully matches none of the ``exclude_topics`` patterns, and
* its partition number is one of ``partitions`` (none given: every number).

The topic is the one in the directory name (``orders-3``, ``orders-3.<id>-delete``), so a partition being
deleted or moved matches as its topic does; the commands then treat it as they always do.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.errors import ConfigError, KcompactError
from kcompact.segment.names import parse_partition_dir_name
from kcompact.segment.partition import is_partition_dir, iter_partition_dirs, iter_set_aside_dirs, named_path
from kcompact.segment.url import is_url
from kcompact.text import plural
from kcompact.value import frozen

if TYPE_CHECKING:
    from kcompact.segment.remote import StorageOptions


@frozen
class PartitionFilter:
    """The partitions a command works on (see the module docstring). Build it with :meth:`of`."""

    topics: tuple[re.Pattern[str], ...] = ()
    exclude_topics: tuple[re.Pattern[str], ...] = ()
    partitions: frozenset[int] = frozenset()

    @classmethod
    def of(cls, topics: Sequence[str] = (), exclude_topics: Sequence[str] = (),
           partitions: Iterable[int] = ()) -> PartitionFilter:
        """Compile the patterns of ``--topic`` and ``--exclude-topic``.

        Args:
            topics: regular expressions a topic must fully match (one of them).
            exclude_topics: regular expressions a topic must fully match none of.
            partitions: partition numbers to keep (empty: all).

        Returns:
            The filter.

        Raises:
            ConfigError: a pattern is not a regular expression, or a partition number is negative.
        """
        numbers = frozenset(partitions)
        negative = sorted(n for n in numbers if n < 0)
        if negative:
            raise ConfigError(f"--partition: a partition number; expected 0 or more, found {negative[0]}")
        return cls(_compile("--topic", topics), _compile("--exclude-topic", exclude_topics), numbers)

    def matches(self, topic: str, partition: int) -> bool:
        """Whether the partition ``topic``-``partition`` is selected."""
        if self.topics and not any(p.fullmatch(topic) for p in self.topics):
            return False
        if any(p.fullmatch(topic) for p in self.exclude_topics):
            return False
        return not self.partitions or partition in self.partitions

    def matches_dir(self, path: str | os.PathLike[str]) -> bool:
        """Whether a partition directory is selected (a name that is no partition's never is)."""
        name = parse_partition_dir_name(Path(path).name)
        return name is not None and self.matches(name.topic, name.partition)

    def select(self, dirs: Iterable[Path]) -> list[Path]:
        """The selected ones of ``dirs``, in their order."""
        return [d for d in dirs if self.matches_dir(d)]

    def describe(self) -> str:
        """The options as a user typed them, e.g. ``--topic 'orders.*' --partition 0``."""
        words = [f"--topic '{p.pattern}'" for p in self.topics]
        words += [f"--exclude-topic '{p.pattern}'" for p in self.exclude_topics]
        words += [f"--partition {n}" for n in sorted(self.partitions)]
        return " ".join(words) or "(no filter)"

    def require_match(self, part_dir: Path) -> None:
        """Refuse a partition directory named alone that the filter leaves out.

        Raises:
            KcompactError: ``part_dir`` is not selected.
        """
        if not self.matches_dir(part_dir):
            raise KcompactError(f"{part_dir}: does not match {self.describe()}; nothing to do")


@frozen
class FilterMatch:
    """How many partition directories under a command's paths a filter selected."""

    matched: int
    total: int


def count_matches(paths: Iterable[str | os.PathLike[str]], selection: PartitionFilter,
                  storage_options: StorageOptions | None = None) -> FilterMatch:
    """Count the partitions ``selection`` keeps under ``paths``, refusing when it keeps none.

    Args:
        paths: partition directories and/or log dirs, as a command was given them (URLs listed
            through fsspec).
        selection: the filter.
        storage_options: fsspec options for the URLs.

    Returns:
        The :class:`FilterMatch` (every partition directory of each log dir counts, including
        ``__cluster_metadata`` and those being deleted or moved).

    Raises:
        KcompactError: no partition directory under ``paths`` matches (one line naming the paths and
            the filter).
        FileAccessError: a log dir cannot be listed.
    """
    matched = total = 0
    named: list[str] = []
    for raw in paths:
        if is_url(raw):
            from kcompact.segment.remote import partition_dir_names  # fsspec's reading: for a URL only

            named.append(str(raw))
            names = [Path(name) for name in partition_dir_names(str(raw), storage_options or {})]
            total += len(names)
            matched += len(selection.select(names))
            continue
        path = named_path(raw)
        named.append(os.fspath(path))
        dirs = [path] if is_partition_dir(path) else list(iter_partition_dirs(path)) if path.is_dir() else []
        total += len(dirs)
        matched += len(selection.select(dirs))
    if not matched:
        raise KcompactError(f"no partition under {', '.join(named)} matches {selection.describe()} "
                            f"(0 of {total} partitions)")
    return FilterMatch(matched, total)


def sole_partition(paths: Iterable[str | os.PathLike[str]], selection: PartitionFilter) -> tuple[str, int]:
    """The one partition ``selection`` keeps under ``paths`` (a command about one partition's copies).

    Args:
        paths: partition directories and/or log dirs (one per replica).
        selection: the filter.

    Returns:
        ``(topic, partition)``.

    Raises:
        KcompactError: it keeps none, or more than one (the line names a few and says how to narrow it).
        FileAccessError: a log dir cannot be listed.
    """
    found: set[tuple[str, int]] = set()
    named: list[str] = []
    for raw in paths:
        path = named_path(raw)
        named.append(os.fspath(path))
        dirs = [path] if is_partition_dir(path) else list(iter_partition_dirs(path)) if path.is_dir() else []
        for part in selection.select(dirs):
            name = parse_partition_dir_name(part.name)
            if name is not None:
                found.add((name.topic, name.partition))
    if len(found) == 1:
        return next(iter(found))
    listed = ", ".join(f"{t}-{n}" for t, n in sorted(found)[:3]) + (", …" if len(found) > 3 else "")
    raise KcompactError(f"{selection.describe()} matches {len(found)} partitions under {', '.join(named)}"
                        f"{f' ({listed})' if found else ''}; expected one: narrow it (--partition N, an "
                        "exact --topic), or compare them all with spark inspect replicas")


def _compile(option: str, patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as err:
            raise ConfigError(f"{option} '{pattern}': not a regular expression ({err})") from err
    return tuple(compiled)


NAMED_LOG_DIRS = 3  # log dirs a message names before it counts the rest


def _log_dirs_below(root: str | os.PathLike[str]) -> list[Path]:
    """The directories just under ``root`` that are log dirs (a broker's data dir holding its ``log.dirs``): each
    holds a partition directory or a broker's ``meta.properties``."""
    try:
        children = sorted(entry for entry in Path(root).iterdir() if entry.is_dir())
    except OSError:
        return []
    return [child for child in children if (child / "meta.properties").is_file() or _holds_partition_dir(child)]


def _holds_partition_dir(directory: Path) -> bool:
    try:
        return any(parse_partition_dir_name(entry.name) is not None and entry.is_dir()
                   for entry in directory.iterdir())
    except OSError:
        return False


def require_partition_dirs(
    log_dir: str | os.PathLike[str], selection: PartitionFilter | None = None
) -> list[Path]:
    """Every partition directory of a log dir (as :func:`iter_partition_dirs`), refusing a directory
    that holds none: a wrong path (``/tmp``, an empty directory) must not pass for a log dir with
    nothing to do. A log dir whose partitions are then all skipped is not this case.

    Args:
        log_dir: the directory given as a log dir.
        selection: keep only the partitions it matches (``--topic``, ``--exclude-topic``,
            ``--partition``); None keeps all.

    Returns:
        Its (selected) partition directories, sorted by name; never empty.

    Raises:
        KcompactError: no directory under ``log_dir`` is a partition directory, or none matches
            ``selection``.
        FileAccessError: ``log_dir`` cannot be listed.
    """
    found = list(iter_partition_dirs(log_dir))
    if not found:
        set_aside = list(iter_set_aside_dirs(log_dir))
        if set_aside:
            raise KcompactError(
                f"no partition directories found under {os.fspath(log_dir)}: only "
                f"{plural(len(set_aside), 'partition')} Kafka set aside (being deleted or moved: "
                "-delete, -future, -stray); name one alone to read it")
        below = _log_dirs_below(log_dir)
        if below:
            shown = ", ".join(os.fspath(d) for d in below[:NAMED_LOG_DIRS])
            more = f" and {len(below) - NAMED_LOG_DIRS} more" if len(below) > NAMED_LOG_DIRS else ""
            raise KcompactError(
                f"no partition directories found under {os.fspath(log_dir)}: it holds "
                f"{plural(len(below), 'log dir')} ({shown}{more}); give those", path=log_dir)
        raise KcompactError(
            f"no partition directories found under {os.fspath(log_dir)} (expected a log dir, which "
            "holds <topic>-<partition> directories, or one of them)"
        )
    if selection is not None:
        kept = selection.select(found)
        if not kept:
            raise KcompactError(f"no partition under {os.fspath(log_dir)} matches {selection.describe()} "
                                f"(0 of {len(found)} partitions)")
        return kept
    return found
