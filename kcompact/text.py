"""Counted nouns in messages: ``1 segment``, ``3 segments``, never ``3 segment(s)``; sizes for people:
``512 B``, ``1.5 KiB``.

Below every layer (like ``errors``), so a message built anywhere — a finding of ``repair``, a reason of
the cleaner, a note of ``config`` — and the CLI's own text (``cli.render``) count the same way.
"""

from __future__ import annotations


def plural_noun(n: int, word: str, plural_word: str | None = None) -> str:
    """The noun alone, as ``n`` of it reads: ``broker`` for 1, ``brokers`` otherwise.

    Args:
        n: how many.
        word: the singular.
        plural_word: the plural where it is not ``word + "s"`` (``batches``, ``entries``).

    Returns:
        ``word`` when ``n`` is 1, else the plural.
    """
    return word if n == 1 else plural_word or f"{word}s"


def plural(n: int, word: str, plural_word: str | None = None) -> str:
    """``1 batch``, ``2 batches``: a count and its noun (see :func:`plural_noun`)."""
    return f"{n} {plural_noun(n, word, plural_word)}"


SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")  # binary units; PiB is the last (a cluster's disks)


def size_text(size_in_bytes: int) -> str:
    """A size for people, in binary units: ``512 B``, ``1.5 KiB``, ``20.0 MiB``, ``3.1 GiB``, ``48.8 TiB``,
    ``1.0 PiB`` (and ``2048.0 PiB`` past that, the last unit)."""
    size = float(size_in_bytes)
    for unit in SIZE_UNITS[:-1]:
        if abs(size) < 1024 and (unit == "B" or abs(round(size, 1)) < 1024):  # never "1024.0 MiB"
            return f"{size_in_bytes} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} {SIZE_UNITS[-1]}"
