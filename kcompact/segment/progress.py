"""Progress of a long read, handed to a callback the caller gives; the library never draws it.

A command that reads a whole partition (``inspect keys``, ``inspect last-clean``, ``repair``) or a whole log
dir (``inspect dirty-ratio``) takes seconds to minutes on gigabytes. It reports how far it is through a
:data:`ProgressCallback`, ``(what, bytes done, bytes total)``, as ``clean`` does; only ``kcompact.cli``
turns that into a bar on a terminal. :class:`ReadProgress` calls back at most once per
:data:`REPORT_EVERY_BYTES` read (a call per batch would cost more than the bar is worth) and once at the end.
"""

from __future__ import annotations

from collections.abc import Callable

ProgressCallback = Callable[[str, int, int], None]
"""Called as ``(what is being read, done, total)``, in bytes unless the caller documents another unit
(``inspect dirty-ratio`` counts partitions); ``done`` never decreases."""

REPORT_EVERY_BYTES = 1 << 20


class ReadProgress:
    """Bytes read of one named read, reported to a :data:`ProgressCallback` now and then.

    Args:
        callback: where to report (None: report nothing).
        what: the name of the read, e.g. ``"orders-0 (key map)"``.
        total: the bytes the read covers (``done`` is clamped to it).
    """

    __slots__ = ("_callback", "_done", "_reported", "_total", "_what")

    def __init__(self, callback: ProgressCallback | None, what: str, total: int) -> None:
        self._callback = callback
        self._what = what
        self._total = max(total, 0)
        self._done = 0
        self._reported = -1

    def advance(self, nbytes: int) -> None:
        """Count ``nbytes`` more read; report when a step's worth has been read since the last report."""
        self._done = min(self._done + nbytes, self._total)
        if self._callback is not None and self._done - self._reported >= REPORT_EVERY_BYTES:
            self._report(self._callback)

    def finish(self) -> None:
        """Report the read complete (``done == total``)."""
        self._done = self._total
        if self._callback is not None and self._reported != self._done:
            self._report(self._callback)

    def _report(self, callback: ProgressCallback) -> None:
        self._reported = self._done
        callback(self._what, self._done, self._total)


def read_progress(callback: ProgressCallback | None, what: str, total: int) -> ReadProgress | None:
    """A :class:`ReadProgress`, or None when there is no callback (so a read pays nothing per batch)."""
    return None if callback is None else ReadProgress(callback, what, total)
