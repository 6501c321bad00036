"""Kafka's text checkpoint files: offset checkpoints and ``leader-epoch-checkpoint`` (Kafka's ``CheckpointFile``).

``cleaner-offset-checkpoint``, ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``
and ``replication-offset-checkpoint`` sit at the top of a log dir and hold one line per partition;
the cleaner's says where each partition's dirty section starts. ``leader-epoch-checkpoint`` (per
partition) uses the same framing with two fields. Kafka's ``CheckpointFile`` reads them strictly — a
wrong version, a malformed line or a wrong count is an ``IOException`` that takes the log dir
offline — so we read them just as strictly and write them exactly as Kafka does: to ``<name>.tmp``,
fsync, atomic rename, fsync of the directory.

Layout (UTF-8 lines, ``\\n``-terminated as Kafka writes on Linux; ``\\r`` and ``\\r\\n`` also end a
line on read, as with Java's ``readLine``; fields split on runs of whitespace)::

    0                          version, exactly 0
    2                          number of entry lines
    orders 0 12345             <topic> <partition int32> <offset int64>
    __consumer_offsets 17 98   (leader-epoch-checkpoint: <epoch int32> <start_offset int64>)

An empty file reads as no entries, and so does a missing one (Kafka creates it empty on first use).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from kcompact.errors import CorruptCheckpointError, FileAccessError
from kcompact.records.varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from kcompact.segment.files import read_file, write_replacing
from kcompact.segment.lock import checkpoint_lock

CHECKPOINT_VERSION = 0
_LINE_END = re.compile(rb"\r\n|\r|\n")
_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")  # Java's \s
_JAVA_INT = re.compile(r"[+-]?[0-9]+")  # what Integer.parseInt / Long.parseLong accept (ASCII)
_INT32 = (INT32_MIN, INT32_MAX)
_INT64 = (INT64_MIN, INT64_MAX)
_TOPIC_FIELD_SHAPE = '"<topic> <partition> <offset>"'
_EPOCH_FIELD_SHAPE = '"<epoch> <start_offset>"'

Line = tuple[int, int, str]  # line number (1-based), byte position, text


def _lines(data: bytes) -> list[Line]:
    """Split like Java's ``readLine``: a final line without a terminator still counts."""
    lines: list[Line] = []
    start = 0
    for match in _LINE_END.finditer(data):
        lines.append(_line(data, len(lines) + 1, start, match.start()))
        start = match.end()
    if start < len(data):
        lines.append(_line(data, len(lines) + 1, start, len(data)))
    return lines


def _line(data: bytes, number: int, start: int, stop: int) -> Line:
    try:
        return (number, start, data[start:stop].decode("utf-8"))
    except UnicodeDecodeError as err:
        raise CorruptCheckpointError(
            f"line {number} is not UTF-8; expected text, found {data[start:stop]!r}",
            position=start + err.start,
        ) from err


def _java_int(text: str, bounds: tuple[int, int], line: Line, what: str) -> int:
    if _JAVA_INT.fullmatch(text) and bounds[0] <= int(text) <= bounds[1]:
        return int(text)
    raise CorruptCheckpointError(
        f"line {line[0]}: {what} is not a number; expected an integer in {bounds[0]}..{bounds[1]}, "
        f"found {text!r}",
        position=line[1],
    )


def _fields(line: Line, count: int, shape: str) -> list[str]:
    parts = _WHITESPACE.split(line[2])
    while parts and parts[-1] == "":  # Java's split drops trailing empty strings, not leading ones
        parts.pop()
    if len(parts) != count:
        raise CorruptCheckpointError(
            f"line {line[0]}: malformed entry; expected {shape}, found {line[2]!r}",
            position=line[1],
        )
    return parts


def _entry_lines(data: bytes) -> list[Line]:
    """Check the version and count of a checkpoint file and return its entry lines."""
    lines = _lines(data)
    if not lines:
        return []
    version = _java_int(lines[0][2], _INT32, lines[0], "the version")
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(
            f"line 1: unrecognised version; expected {CHECKPOINT_VERSION}, found {version}",
            position=0,
        )
    if len(lines) == 1:
        return []
    expected = _java_int(lines[1][2], (0, _INT32[1]), lines[1], "the entry count")
    entries = lines[2:]
    if len(entries) != expected:
        raise CorruptCheckpointError(
            f"entry count does not match; expected {expected} entries (line 2), "
            f"found {len(entries)}",
            position=lines[1][1],
        )
    return entries


def decode_offset_checkpoint(data: bytes) -> dict[tuple[str, int], int]:
    """Decode an offset checkpoint file.

    Args:
        data: the whole file.

    Returns:
        ``{(topic, partition): offset}`` in file order (a repeated partition keeps its first
        place and its last value, as Kafka's map does).

    Raises:
        CorruptCheckpointError: wrong version, malformed line, non-integer field or wrong entry
            count; the message names the line, ``position`` is where that line starts.
    """
    entries: dict[tuple[str, int], int] = {}
    for line in _entry_lines(data):
        topic, partition, offset = _fields(line, 3, _TOPIC_FIELD_SHAPE)
        key = (topic, _java_int(partition, _INT32, line, "the partition"))
        entries[key] = _java_int(offset, _INT64, line, "the offset")
    return entries


def encode_offset_checkpoint(entries: Mapping[tuple[str, int], int]) -> bytes:
    """Encode an offset checkpoint file exactly as Kafka writes it.

    Args:
        entries: ``{(topic, partition): offset}``, written in the mapping's order.

    Returns:
        The file's bytes.

    Raises:
        ValueError: a topic that is empty or contains whitespace, or a number outside int32/int64.
    """
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    for (topic, partition), offset in entries.items():
        if not topic or _WHITESPACE.search(topic):
            raise ValueError(f"topic must be non-empty without whitespace; found {topic!r}")
        if not (_INT32[0] <= partition <= _INT32[1] and _INT64[0] <= offset <= _INT64[1]):
            raise ValueError(f"partition or offset out of range; found {partition}, {offset}")
        lines.append(f"{topic} {partition} {offset}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def read_offset_checkpoint(path: str | os.PathLike[str]) -> dict[tuple[str, int], int]:
    """Read an offset checkpoint file (``cleaner-offset-checkpoint`` …).

    Args:
        path: the checkpoint file.

    Returns:
        ``{(topic, partition): offset}`` in file order; ``{}`` when the file is missing or empty.

    Raises:
        FileAccessError: the file cannot be read (permissions, an I/O error).
        CorruptCheckpointError: the file does not parse; the error names it and the line.
    """
    try:
        data = read_file(path)
    except FileNotFoundError:
        return {}
    try:
        return decode_offset_checkpoint(data)
    except CorruptCheckpointError as err:
        raise err.located(path) from err


_CHECKPOINT_CACHE: dict[Path, tuple[tuple[int, int, int], dict[tuple[str, int], int]]] = {}


def read_checkpoint_cached(path: Path) -> dict[tuple[str, int], int]:
    """:func:`read_offset_checkpoint`, parsed once per version of the file.

    A log dir of thousands of partitions would otherwise re-parse the same file for each of them. The
    cache key is the file's inode, size and mtime in ns, so a rewrite (tmp + rename) is always seen.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        _CHECKPOINT_CACHE.pop(path, None)
        return {}
    except OSError as err:
        raise FileAccessError.from_os_error(err, path, "read") from err
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _CHECKPOINT_CACHE.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    entries = read_offset_checkpoint(path)
    _CHECKPOINT_CACHE[path] = (key, entries)
    return entries


def write_offset_checkpoint(
    path: str | os.PathLike[str], entries: Mapping[tuple[str, int], int]
) -> None:
    """Replace an offset checkpoint file atomically (``.tmp``, fsync, rename, fsync directory).

    For a read-modify-write that other kcompact processes cannot interleave with, use
    :func:`update_offset_checkpoint`.

    Args:
        path: the checkpoint file.
        entries: ``{(topic, partition): offset}``, written in the mapping's order.

    Raises:
        ValueError: as :func:`encode_offset_checkpoint`; nothing is written then.
    """
    write_replacing(path, encode_offset_checkpoint(entries))


def update_offset_checkpoint(
    path: str | os.PathLike[str], updates: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """Set some partitions' entries of an offset checkpoint, keeping every other line.

    Runs under :func:`~kcompact.segment.lock.checkpoint_lock` of the file's log dir, so concurrent
    kcompact processes never drop each other's entries. Kafka's broker must not be running (hold
    :func:`~kcompact.segment.lock.log_dir_write_guard`): it rewrites these files on its own
    schedule. While this process holds the file's updates back (:func:`holding_updates`), they are
    only added to those held and nothing is read or written.

    Args:
        path: the checkpoint file (created when missing).
        updates: ``{(topic, partition): offset}`` to set; existing lines keep their place, new ones
            are appended in the given order.

    Returns:
        The entries now in the file; while updates are held back, the updates held so far.

    Raises:
        CorruptCheckpointError: the existing file does not parse (it is left untouched).
        ValueError: as :func:`encode_offset_checkpoint`.
    """
    target = Path(path)
    held = _HELD.get(_held_key(target))
    if held is not None:
        held.update(updates)
        return dict(held)
    return write_checkpoint_updates(target, updates)


def write_checkpoint_updates(
    path: str | os.PathLike[str], updates: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """:func:`update_offset_checkpoint` written now, whether or not this process holds updates back (the
    holder writes its batch with it).

    Raises:
        CorruptCheckpointError: the existing file does not parse (it is left untouched).
        ValueError: as :func:`encode_offset_checkpoint`.
    """
    target = Path(path)
    with checkpoint_lock(target.parent):
        # the cached parse is keyed by the file's identity: a rewrite by another process (tmp +
        # rename, a new inode) is always read again
        entries = dict(read_checkpoint_cached(target))
        entries.update(updates)
        write_offset_checkpoint(target, entries)
        _remember_written(target, entries)
    return entries


def _remember_written(path: Path, entries: dict[tuple[str, int], int]) -> None:
    """Seed :func:`read_checkpoint_cached` with what this process just wrote, so that a log dir's next
    lookup does not parse the whole file again."""
    try:
        st = path.stat()
    except OSError:
        _CHECKPOINT_CACHE.pop(path, None)
        return
    _CHECKPOINT_CACHE[path] = ((st.st_ino, st.st_size, st.st_mtime_ns), dict(entries))


_HELD: dict[str, dict[tuple[str, int], int]] = {}


def _held_key(path: Path) -> str:
    return os.path.abspath(path)


@contextmanager
def holding_updates(path: str | os.PathLike[str]) -> Iterator[dict[tuple[str, int], int]]:
    """Hold back this process's :func:`update_offset_checkpoint` calls on ``path`` for the block.

    A log dir's clean advances one line per partition; rewriting (and reading back) the whole file for each
    partition costs in the square of the log dir's partitions. Its driver holds the updates and writes them a
    batch at a time with :func:`update_offset_checkpoint`, always after those partitions' swaps are durable:
    the file may lag what was swapped (the next clean repeats those rounds, as after a kill before the
    checkpoint, Kafka's ``Cleaner.doClean`` then ``LogCleanerManager.doneCleaning``) and is never ahead of it.
    :func:`checkpoint_entry` sees the held updates.

    Args:
        path: the checkpoint file.

    Yields:
        The updates held, in the order they came (the caller writes them; on exit they are dropped).
    """
    key = _held_key(Path(path))
    held: dict[tuple[str, int], int] = {}
    outer = _HELD.get(key)
    _HELD[key] = held
    try:
        yield held
    finally:
        if outer is None:
            del _HELD[key]
        else:
            _HELD[key] = outer


def checkpoint_entry(path: Path, topic_partition: tuple[str, int]) -> int | None:
    """One partition's entry in an offset checkpoint file: an update this process holds back
    (:func:`holding_updates`), else the file's (parsed once per version, :func:`read_checkpoint_cached`)."""
    held = _HELD.get(_held_key(path)) if _HELD else None
    if held is not None and topic_partition in held:
        return held[topic_partition]
    return read_checkpoint_cached(path).get(topic_partition)


def decode_leader_epoch_checkpoint(data: bytes) -> list[tuple[int, int]]:
    """Decode a ``leader-epoch-checkpoint`` file.

    Args:
        data: the whole file.

    Returns:
        ``[(epoch, start_offset), …]`` in file order.

    Raises:
        CorruptCheckpointError: as :func:`decode_offset_checkpoint`.
    """
    entries = []
    for line in _entry_lines(data):
        epoch, start_offset = _fields(line, 2, _EPOCH_FIELD_SHAPE)
        entries.append(
            (
                _java_int(epoch, _INT32, line, "the epoch"),
                _java_int(start_offset, _INT64, line, "the start offset"),
            )
        )
    return entries


def read_leader_epoch_checkpoint(path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    """Read a partition's ``leader-epoch-checkpoint``.

    Args:
        path: the file.

    Returns:
        ``[(epoch, start_offset), …]``; ``[]`` when the file is missing or empty.

    Raises:
        FileAccessError: the file cannot be read (permissions, an I/O error).
        CorruptCheckpointError: the file does not parse; the error names it and the line.
    """
    try:
        data = read_file(path)
    except FileNotFoundError:
        return []
    try:
        return decode_leader_epoch_checkpoint(data)
    except CorruptCheckpointError as err:
        raise err.located(path) from err
