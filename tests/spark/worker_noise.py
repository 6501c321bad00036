"""What Spark's own Python worker processes may print on a command's stderr, and the tests set aside.

PySpark's worker daemon (``pyspark/daemon.py``) and its workers are children of Spark's JVM and share the
command's stderr. When the JVM closes a worker's socket early — a failed job's other tasks cancelled, or the JVM
itself gone — the daemon may print a traceback of its own before it exits (``BrokenPipeError``, an ``EOFError``
reading from the socket): seen only under heavy load, never with a frame of kcompact's. Those are not kcompact's
answer; a traceback with any frame outside pyspark is.
"""

from __future__ import annotations

import re

_TRACEBACK = re.compile(
    r"(?:PySpark daemon failed to flush the output to the worker process:\n)?"
    r"Traceback \(most recent call last\):\n(?:[ \t].*\n)*\w+(?:\.\w+)*(?:Error|Exception)\b.*(?:\n|$)")
_FRAME = re.compile(r'^[ \t]+File "([^"]+)"', re.MULTILINE)


def without_worker_tracebacks(stderr: str) -> str:
    """``stderr`` without the tracebacks whose every frame is in pyspark's own code (its daemon and workers)."""

    def keep_ours(found: re.Match[str]) -> str:
        frames = _FRAME.findall(found.group(0))
        return "" if frames and all("/pyspark/" in frame for frame in frames) else found.group(0)

    return _TRACEBACK.sub(keep_ours, stderr)
