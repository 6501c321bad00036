"""The wall clock, read in one place: a run's "now" for the time rules, and the moments a repair records.

Kafka's cleaner thread reads its ``Time`` when it picks a log (``LogCleanerManager.grabFilthiestCompactedLog``)
and again for the round (``Cleaner.clean`` calls ``doClean(cleanable, time.milliseconds())``), and judges every
segment, horizon and producer of that round by the second. A kcompact run is one offline pass over a stopped
broker's files: it reads the clock once at its entry (a command's library function: ``clean_path``,
``repair_log_dir``, ``transactions_report``, ``dirty_ratio_report`` …) with :func:`run_clock_ms` and passes that
value down, so a log dir's ranking, the space it frees first and each partition's round share one now.
``--now-ms`` (the callers' ``now_ms``) fixes it instead.

Below every layer (like ``errors`` and ``text``).
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    """The wall clock now, in ms since the epoch (Kafka's ``Time.SYSTEM.milliseconds()``)."""
    return int(time.time() * 1000)


def run_clock_ms(now_ms: int | None) -> int:
    """A run's clock: the caller's ``now_ms`` (``--now-ms``), else the wall clock read now.

    Args:
        now_ms: the clock the caller fixed, or None.

    Returns:
        ``now_ms``, or :func:`wall_clock_ms`.
    """
    return now_ms if now_ms is not None else wall_clock_ms()
