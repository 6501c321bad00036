"""A partition directory's identity file, ``partition.metadata`` (a log dir's ``meta.properties``, a Java
properties file, is read by ``kcompact.config.server_properties``).

* ``<partition-dir>/partition.metadata`` binds the directory to its topic's id; Kafka refuses to
  load a partition whose file does not parse or carries the zero id; :func:`read_partition_topic_id` is
  the one reader kcompact uses. Layout (no trailing newline)::

      version: 0
      topic_id: <Uuid.toString: URL-safe base64 of 16 bytes, no padding, 22 characters>

  Each line is split on ``:`` followed by whitespace, as Kafka's ``PartitionMetadataReadBuffer``
  does.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from pathlib import Path

from kcompact.errors import CorruptDataError
from kcompact.segment.files import read_file

PARTITION_METADATA_FILE = "partition.metadata"
PARTITION_METADATA_VERSION = 0
_METADATA_SEPARATOR = re.compile(r":[ \t\n\x0b\f\r]+")
_NATURAL_LINE = re.compile(r"\r\n|\r|\n")
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_URL_SAFE_BASE64 = re.compile(r"[A-Za-z0-9_-]+={0,2}")


def read_partition_metadata(path: str | os.PathLike[str]) -> str:
    """Read the topic id from a ``partition.metadata`` file.

    Args:
        path: the file.

    Returns:
        The topic id as written (Kafka's base64 form, e.g. ``"dqK7-AskTSux4so_l6jJXg"``).

    Raises:
        FileNotFoundError: the file does not exist.
        FileAccessError: the file cannot be read (permissions, an I/O error).
        CorruptDataError: a malformed line, an unknown version, or a topic id that is not 16 bytes
            of URL-safe base64 or is the zero id; the error names the file.
    """
    data = read_file(path)
    try:
        lines = _NATURAL_LINE.split(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise CorruptDataError("not UTF-8 text", path=path, position=err.start) from err
    version = _metadata_value(lines, 0, path)
    if not _JAVA_INT.fullmatch(version) or int(version) != PARTITION_METADATA_VERSION:
        raise CorruptDataError(
            f"unknown partition metadata version; expected {PARTITION_METADATA_VERSION}, "
            f"found {version!r}",
            path=path,
        )
    topic_id = _metadata_value(lines, 1, path)
    if _decode_uuid(topic_id) in (None, bytes(16)):
        raise CorruptDataError(
            f"invalid topic id; expected 22 characters of URL-safe base64 for a non-zero id, "
            f"found {topic_id!r}",
            path=path,
        )
    return topic_id


def read_partition_topic_id(partition_dir: str | os.PathLike[str]) -> str | None:
    """The topic id a partition directory is bound to, as Kafka prints it; None without the file.

    The one reader of ``partition.metadata`` in use: the file is read as
    :func:`read_partition_metadata` reads it (Kafka's ``PartitionMetadataFile.read``), and the id is
    given as ``Uuid.toString`` prints it (no ``=`` padding), so it compares with the metadata log's.

    Args:
        partition_dir: a partition directory.

    Returns:
        The topic id (e.g. ``"dqK7-AskTSux4so_l6jJXg"``), or None when the directory has no
        ``partition.metadata``.

    Raises:
        FileAccessError: the file cannot be read (permissions, an I/O error).
        CorruptDataError: the file is one Kafka refuses to load (see :func:`read_partition_metadata`).
    """
    try:
        written = read_partition_metadata(Path(partition_dir) / PARTITION_METADATA_FILE)
    except FileNotFoundError:
        return None
    raw = _decode_uuid(written)
    assert raw is not None  # read_partition_metadata refused anything else
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _metadata_value(lines: list[str], index: int, path: str | os.PathLike[str]) -> str:
    line = lines[index] if index < len(lines) else ""
    parts = _METADATA_SEPARATOR.split(line)
    if len(parts) != 2:
        raise CorruptDataError(
            f'line {index + 1}: malformed; expected "<key>: <value>", found {line!r}', path=path
        )
    return parts[1]


def _decode_uuid(text: str) -> bytes | None:
    """Kafka's ``Uuid.fromString``: URL-safe base64, padding optional, exactly 16 bytes."""
    if len(text) > 24 or not _URL_SAFE_BASE64.fullmatch(text):
        return None
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 16 else None
