"""Counted nouns in messages: ``1 segment``, ``3 segments``, never ``3 segment(s)``; sizes for people:
``512 B``, ``1.5 KiB``; and text as a terminal may show it (:func:`visible`).

Below every layer (like ``errors``), so a message built anywhere — a finding of ``repair``, a reason of
the cleaner, a note of ``config`` — and the CLI's own text (``cli.render``) count the same way.
"""

from __future__ import annotations

import unicodedata


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


# Unicode categories a terminal must not get raw: controls (ESC starts a terminal's escape sequences), format
# characters (the bidi embeddings, overrides and isolates U+202A-U+202E and U+2066-U+2069, the marks U+200E,
# U+200F and U+061C, zero-width characters), the line and paragraph separators U+2028 and U+2029, and the lone
# surrogates of a file name that is not UTF-8 (os.fsdecode's surrogateescape)
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
KEPT_CONTROLS = frozenset("\n\t")  # a message's own line breaks and a table's tabs


def visible(text: str) -> str:
    """``text`` with every character that could drive a terminal or reorder what it shows escaped
    (``\\u202e``, ``\\x1b``): a partition directory's name is anything a file name may be, and a message
    that quotes it must show it as it is, not as a right-to-left override makes it look.

    Args:
        text: a message, a table cell, a line.

    Returns:
        ``text`` itself when every character is printable (the usual case), else a copy with each unsafe
        character (:data:`UNSAFE_CATEGORIES`, but newlines and tabs) as its Python escape.
    """
    if text.isprintable():
        return text
    return "".join(char.encode("unicode_escape").decode("ascii")
                   if char not in KEPT_CONTROLS and unicodedata.category(char) in UNSAFE_CATEGORIES else char
                   for char in text)
