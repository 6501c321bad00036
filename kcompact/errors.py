"""Every exception kcompact raises on purpose, in one place.

The CLI maps any :class:`KcompactError` to exit code 2 and prints ``str(err)`` as one line; anything
else escaping a command is a bug (exit 1 with a traceback). So every message here must stand alone:
it names the file, the byte position when there is one, and what was expected versus found.

Hierarchy::

    KcompactError
      CorruptDataError(path, position, offset)
        CorruptBatchError        framing or header of a batch / legacy entry is wrong
          BatchCrcError          a batch / legacy entry whose stored CRC does not match its bytes
        CorruptRecordError       a record inside a batch does not parse
        CorruptIndexError        .index / .timeindex / .txnindex fails Kafka's checks
        CorruptCheckpointError   an offset checkpoint file does not parse
        TruncatedDataError       the data ends before a declared length
      UnsupportedFormatError     unknown magic, codec, attribute bits, or a missing codec library
      CleanerStateError          leftover .swap files, a checkpoint past the log end, ...
      RefusedError               the operation is not allowed here (live broker, other kcompact, ...)
      ConfigError                a bad --config key or value, an unreadable properties file
      FileAccessError(path)      the OS refused to read or write a file (permissions, read-only, I/O)
"""

from __future__ import annotations

import os
import re


class KcompactError(Exception):
    """Base of every error kcompact raises deliberately (exit code 2 in the CLI).

    ``path``, ``position`` and ``offset`` say where, for the subclasses that know (the CLI's
    ``--json`` error object carries them); they are None otherwise.
    """

    path: str | None = None  # the file concerned
    position: int | None = None  # byte position inside it
    offset: int | None = None  # the Kafka offset concerned
    backup_dir: str | None = None  # a repair that failed after changing the partition: its backup

    def __init__(self, *args: object, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(*args)
        if path is not None:
            self.path = os.fspath(path)
        elif self.path is None and args and isinstance(args[0], str):
            self.path = _leading_path(args[0])


def _leading_path(message: str) -> str | None:
    """The file a message names first (house style: ``"<path>: what is wrong"``), None when it names none.

    The text before the first ``": "`` counts as a path when it is an absolute or ``./``-relative path,
    a storage URL (``s3://bucket/logs``) or names something on disk, so an error raised with the path
    only in its words still carries it (``--json``'s ``"path"``).
    """
    head, sep, _ = message.partition(": ")
    if not sep or not head or "\n" in head:
        return None
    if head.startswith(("/", "./", "../")) or _URL.match(head) or os.path.lexists(head):
        return head
    return None


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S")  # a scheme, then anything: what fsspec is given


class CorruptDataError(KcompactError):
    """Bytes on disk that do not follow Kafka's format.

    Args:
        message: what is wrong, ideally "…; expected X, found Y".
        path: the file the bytes came from, when known.
        position: byte position inside that file, when known.
        offset: the Kafka offset concerned, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        position: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.message = message
        self.path = os.fspath(path) if path is not None else None
        self.position = position
        self.offset = offset
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.path if self.path is not None else "<buffer>"
        if self.position is not None:
            where = f"{where} at position {self.position}"
        return f"{where}: {self.message}"

    def located(
        self, path: str | os.PathLike[str] | None, base_position: int = 0
    ) -> CorruptDataError:
        """Return a copy of this error with the file and absolute position filled in.

        Lower layers work on buffers and only know positions relative to the buffer they were given;
        the layer that opened the file calls this to make the message name the file.
        """
        position = None if self.position is None else self.position + base_position
        clone = type(self)(
            self.message,
            path=path if path is not None else self.path,
            position=position,
            offset=self.offset,
        )
        return clone

    def __reduce__(self) -> tuple[object, ...]:  # picklable for Spark executors
        return (
            _rebuild_corrupt,
            (type(self), self.message, self.path, self.position, self.offset),
        )


def _rebuild_corrupt(
    cls: type[CorruptDataError],
    message: str,
    path: str | None,
    position: int | None,
    offset: int | None,
) -> CorruptDataError:
    return cls(message, path=path, position=position, offset=offset)


class CorruptBatchError(CorruptDataError):
    """A batch (or legacy entry) whose framing, header or CRC is wrong."""


class BatchCrcError(CorruptBatchError):
    """A batch (or legacy entry) that parses but whose stored CRC does not match its bytes.

    Its own class so that a report can count such batches and go on (``inspect``), where any other
    corruption stops it.
    """


class CorruptRecordError(CorruptDataError):
    """A record inside a batch that does not parse (bad varint, sizes, counts)."""


class CorruptIndexError(CorruptDataError):
    """An offset, time or transaction index that fails Kafka's sanity checks."""


class CorruptCheckpointError(CorruptDataError):
    """An offset checkpoint file (cleaner-offset-checkpoint, …) that does not parse."""


class TruncatedDataError(CorruptDataError):
    """Data that ends before a length it declared."""


class UnsupportedFormatError(KcompactError):
    """Valid-looking data kcompact will not guess about: unknown magic, codec or attribute bits."""


class CleanerStateError(KcompactError):
    """Partition state a clean cannot start from as is (leftover swap files, bad checkpoint…)."""


class RefusedError(KcompactError):
    """The operation is refused: a live broker holds the log dir, another kcompact works on it…"""


class NoSpaceError(RefusedError):
    """A clean that cannot fit in the free space of its volume (``cleaner.disk.space``); nothing was changed."""


class ConfigError(KcompactError):
    """An unknown configuration key, a value of the wrong type or range, an unreadable file."""


class FileAccessError(KcompactError):
    """The operating system refused to read, list or write one of the user's files or directories.

    An unreadable segment, a read-only partition directory, an I/O error: bad input like a corrupt
    file, not a kcompact bug. The message names the file, what kcompact was doing and the OS's reason:
    ``"<path>: cannot read (Permission denied)"``.

    Args:
        path: the file or directory concerned.
        action: what could not be done, as a verb: ``"read"``, ``"list"``, ``"write"``, ...
        reason: the OS's words for why (``strerror``), e.g. ``"Permission denied"``.
    """

    path: str  # always known here

    def __init__(self, path: str | os.PathLike[str], action: str, reason: str) -> None:
        self.path = os.fspath(path)
        self.action = action
        self.reason = reason
        super().__init__(f"{self.path}: cannot {action} ({reason})")

    @classmethod
    def from_os_error(
        cls, err: OSError, path: str | os.PathLike[str] | None = None, action: str = "access"
    ) -> FileAccessError:
        """The error for an ``OSError``: its own file name when it has one, else ``path``.

        Args:
            err: what the OS raised.
            path: the file the caller was working on (used when ``err`` names none).
            action: what the caller was doing (``"read"``, ``"write"``, ...).

        Returns:
            The :class:`FileAccessError` (raise it ``from err``).
        """
        where = err.filename if isinstance(err.filename, (str, os.PathLike)) else path
        reason = err.strerror or str(err) or type(err).__name__
        return cls("<unknown file>" if where is None else where, action, reason)

    def __reduce__(self) -> tuple[object, ...]:  # picklable for worker processes and Spark executors
        return (type(self), (self.path, self.action, self.reason))
