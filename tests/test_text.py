"""Counted nouns (``kcompact.text``): a message built below the CLI says ``1 later segment`` and
``2 later segments``, never ``segment(s)``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli import render
from kcompact.cli.main import cli
from kcompact.text import plural, plural_noun, visible
from tests.repair.support import batch_positions, build_partition, flip_byte

LOG0 = "00000000000000000000.log"


@pytest.mark.parametrize("n, word, plural_word, expected", [
    (0, "region", None, "0 regions"),
    (1, "region", None, "1 region"),
    (2, "region", None, "2 regions"),
    (1, "batch", "batches", "1 batch"),
    (3, "batch", "batches", "3 batches"),
])
def test_plural(n: int, word: str, plural_word: str | None, expected: str) -> None:
    assert plural(n, word, plural_word) == expected
    assert plural_noun(n, word, plural_word) == expected.split(" ", 1)[1]
    assert render.plural(n, word, plural_word) == expected  # the CLI counts the same way


def run(*args: str) -> tuple[int, str]:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout


@pytest.mark.parametrize("closed_segments, later", [(1, "the 1 later segment"), (2, "the 2 later segments")])
def test_repair_counts_the_later_segments_and_the_quarantined_regions(
    tmp_path: Path, closed_segments: int, later: str
) -> None:
    """A CRC failure in the first segment: recovery would delete every later segment (the active one
    too); the repair quarantines one region and keeps the four other batches."""
    part = build_partition(tmp_path / "logdir", segments=closed_segments, batches=5)
    position, _size = batch_positions(part / LOG0)[2]
    flip_byte(part / LOG0, position + 61)

    code, out = run("repair", "--dry-run", str(part))
    assert code == 2
    assert (f"      broker: log recovery stops at the first bad entry: it truncates this segment at or before "
            f"position {position} and deletes {later}") in out.splitlines()
    code, out = run("repair", "--json", str(part))
    assert code == 0
    assert json.loads(out)["actions"] == [
        f"rewrote segment {LOG0} (kept 4 batches, quarantined 1 damaged region; indexes rebuilt)"]


@pytest.mark.parametrize("raw, shown", [
    ("orders-0", "orders-0"),
    ("données-0 ü 東京", "données-0 ü 東京"),  # printable: as is
    ("two\nlines\tand a tab", "two\nlines\tand a tab"),  # a message's own line breaks and tabs
    ("txt.\u202eexe-0", "txt.\\u202eexe-0"),  # RIGHT-TO-LEFT OVERRIDE: shown, not obeyed
    ("\u202a\u202b\u202c\u202d", "\\u202a\\u202b\\u202c\\u202d"),  # embeddings, pop, LTR override
    ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),  # the isolates
    ("\u200e\u200f\u061c\u200b\ufeff", "\\u200e\\u200f\\u061c\\u200b\\ufeff"),  # marks, zero width, BOM
    ("a\x1b[2Jb\rc\x07", "a\\x1b[2Jb\\rc\\x07"),  # a terminal's escape sequence, carriage return, bell
    ("\u2028\u2029", "\\u2028\\u2029"),  # line and paragraph separators
    ("bad-\udcff-0", "bad-\\udcff-0"),  # a file name that is not UTF-8 (surrogateescape)
])
def test_visible_escapes_what_would_drive_or_reorder_a_terminal(raw: str, shown: str) -> None:
    assert visible(raw) == shown
