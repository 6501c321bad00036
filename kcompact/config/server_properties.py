"""Read a broker's ``server.properties`` exactly as Java's ``Properties.load`` does.

Why: the broker's static config is the lowest explicit layer of a topic's effective config (see
:mod:`kcompact.config.topic_config`), and it names the log directories and the node id. Kafka reads
the file with ``Properties.load(InputStream)``, so this module follows that grammar:

* the file is ISO-8859-1; a natural line ends at ``\\n``, ``\\r`` or ``\\r\\n``;
* a line whose first non-blank character is ``#`` or ``!`` is a comment, a blank line is skipped;
* a line ending in an odd number of backslashes continues on the next line, whose leading blanks
  (space, tab, form feed) are dropped; comment lines never continue;
* the key ends at the first unescaped ``=``, ``:`` or blank; blanks, then at most one ``=``/``:``,
  then blanks separate it from the value;
* in keys and values ``\\t \\n \\r \\f`` and ``\\uXXXX`` are escapes, any other ``\\c`` is ``c``;
* a later duplicate key replaces an earlier one.

:func:`read_server_properties_cached` reads a file once per (path, size, mtime): resolving the config
of every partition of a log dir must not re-read the same ``server.properties`` and ``meta.properties``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from kcompact.errors import ConfigError

BLANKS = " \t\f"
SEPARATORS = "=:"
SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
DEFAULT_LOG_DIR = "/tmp/kafka-logs"  # Kafka's log.dir default, used when log.dirs is unset
PROPERTIES_CACHE_SIZE = 64  # distinct files kept: a server.properties plus a meta.properties per log dir


def _natural_lines(text: str) -> Iterator[str]:
    """Split on ``\\n``, ``\\r`` or ``\\r\\n`` (``str.splitlines`` would also split on \\x0b etc.)."""
    return iter(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _logical_lines(text: str) -> Iterator[str]:
    """Join continued lines, drop comments and blank lines; keep escapes for the key/value split."""
    lines = _natural_lines(text)
    for line in lines:
        stripped = line.lstrip(BLANKS)
        if not stripped or stripped[0] in "#!":
            continue
        logical = stripped
        while _continues(logical):
            logical = logical[:-1]
            nxt = next(lines, None)
            if nxt is None:
                break
            logical += nxt.lstrip(BLANKS)
        yield logical


def _split_key(line: str) -> tuple[str, str]:
    """Split a logical line into its raw (still escaped) key and value."""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in SEPARATORS or char in BLANKS:
            break
        index += 1
    key, rest = line[:index], line[index:]
    rest = rest.lstrip(BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(BLANKS)
    return key, rest


def _unescape(raw: str, line_number: int) -> str:
    out: list[str] = []
    index = 0
    while index < len(raw):
        char = raw[index]
        if char != "\\" or index + 1 >= len(raw):
            out.append(char)
            index += 1
            continue
        code = raw[index + 1]
        if code == "u":
            digits = raw[index + 2 : index + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(
                    f"properties entry {line_number}: malformed \\uXXXX escape; "
                    f"expected 4 hex digits, found {digits!r}"
                )
            out.append(chr(int(digits, 16)))
            index += 6
            continue
        out.append(SIMPLE_ESCAPES.get(code, code))
        index += 2
    return "".join(out)


def decode_properties(text: str) -> dict[str, str]:
    """Parse the text of a Java ``.properties`` file.

    Args:
        text: the file's content (already decoded; Kafka reads ISO-8859-1).

    Returns:
        Key to value, in file order; a later duplicate replaces the earlier value.

    Raises:
        ConfigError: a malformed ``\\uXXXX`` escape (Java throws IllegalArgumentException).
    """
    props: dict[str, str] = {}
    for number, line in enumerate(_logical_lines(text), start=1):
        raw_key, raw_value = _split_key(line)
        props[_unescape(raw_key, number)] = _unescape(raw_value, number)
    return props


def read_server_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a broker's ``server.properties`` (or any Java properties file).

    Args:
        path: the file.

    Returns:
        Key to value as :func:`decode_properties` gives them.

    Raises:
        ConfigError: the file cannot be read, or has a malformed escape (the message names it).
    """
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("iso-8859-1")
    except OSError as err:
        raise ConfigError(f"{os.fspath(path)}: cannot read properties file: {err.strerror}") from err
    try:
        return decode_properties(text)
    except ConfigError as err:
        raise ConfigError(f"{os.fspath(path)}: {err}") from None


@functools.lru_cache(maxsize=PROPERTIES_CACHE_SIZE)
def _read_once(path: Path, _size_in_bytes: int, _mtime_ns: int) -> Mapping[str, str]:
    return read_server_properties(path)


def read_server_properties_cached(path: str | os.PathLike[str]) -> dict[str, str]:
    """:func:`read_server_properties`, read again only when the file's size or mtime changed.

    Args:
        path: the file.

    Returns:
        Key to value (a fresh dict the caller may change).

    Raises:
        ConfigError: the file cannot be read, or has a malformed escape (the message names it).
    """
    absolute = Path(path).absolute()
    try:
        stat = absolute.stat()
    except OSError as err:
        raise ConfigError(f"{os.fspath(path)}: cannot read properties file: {err.strerror}") from err
    return dict(_read_once(absolute, stat.st_size, stat.st_mtime_ns))


def _split_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def log_dirs(props: Mapping[str, str]) -> list[str]:
    """The broker's data directories: ``log.dirs`` if set, else ``log.dir`` (Kafka's order).

    Args:
        props: the broker's properties.

    Returns:
        The directories, in configured order (``/tmp/kafka-logs`` when neither key is set).

    Raises:
        ConfigError: the setting is present but lists no directory.
    """
    key = "log.dirs" if props.get("log.dirs") is not None else "log.dir"
    dirs = _split_list(props.get(key, DEFAULT_LOG_DIR))
    if not dirs:
        raise ConfigError(f"{key}: no log directory; expected a comma-separated list, found ''")
    return dirs


def metadata_log_dir(props: Mapping[str, str]) -> str:
    """Where ``__cluster_metadata-0`` lives: ``metadata.log.dir``, else the first log dir.

    Args:
        props: the broker's properties.

    Returns:
        The directory that holds the KRaft metadata partition.

    Raises:
        ConfigError: no log directory is configured at all.
    """
    configured = props.get("metadata.log.dir", "").strip()
    return configured or log_dirs(props)[0]


def node_id(props: Mapping[str, str]) -> int | None:
    """The broker's node id: ``node.id``, else the older ``broker.id``; None when neither is set.

    Args:
        props: the broker's properties.

    Returns:
        The id, or None.

    Raises:
        ConfigError: the value is not an integer.
    """
    for key in ("node.id", "broker.id"):
        value = props.get(key)
        if value is None:
            continue
        try:
            return int(value.strip(), 10)
        except ValueError:
            raise ConfigError(f"{key}={value}: not a valid int") from None
    return None
