"""Sizes for people are in binary units, labelled as such (KiB, MiB, GiB, TiB, PiB): no "MB" that means MiB."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kcompact.cli import render
from tests.conftest import REPO_ROOT

CLI_SOURCES = sorted((REPO_ROOT / "kcompact" / "cli").glob("*.py"))


@pytest.mark.parametrize("path", CLI_SOURCES, ids=[p.name for p in CLI_SOURCES])
def test_no_decimal_unit_label_in_the_cli(path: Path) -> None:
    text = path.read_text()
    assert re.findall(r"\b[KMGT]B\b", text) == [], f"{path.name}: a decimal unit label"
    if path.name != "render.py":  # the one place that converts bytes for people
        assert re.findall(r"1024 \* 1024|1 << 20|2 ?\*\* ?20", text) == [], path.name


@pytest.mark.parametrize(("size", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (20 * 2**20, "20.0 MiB"),
    (7 * 2**29, "3.5 GiB"), (2**40 - 2**20, "1.0 TiB"),  # never "1024.0 GiB"
    (49996 * 2**30 + 2**29, "48.8 TiB"), (2**50, "1.0 PiB"), (3 * 2**49, "1.5 PiB"), (2**61, "2048.0 PiB"),
    (-5 * 2**40, "-5.0 TiB"),
])
def test_size_text(size: int, text: str) -> None:
    assert render.size_text(size) == text
