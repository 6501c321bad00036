"""The documentation stays true to the code, as sqlite-utils' ``tests/test_docs.py`` keeps its CLI reference.

* ``docs/reference/`` and ``docs/man/`` are what ``scripts/make_docs.py`` writes from today's ``--help``:
  a page that is stale, missing, or left by a command that is gone fails, naming the command and the fix;
* every command's help has examples (they are what the reference shows first to a reader who copies);
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest

from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
README_MAX_LINES = 150
README_MAX_WIDTH = 200


def load_make_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_docs", REPO_ROOT / "scripts" / "make_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


make_docs = load_make_docs()
ENTRIES = make_docs.walk()
IDS = [entry.name for entry in ENTRIES]
EXPECTED = make_docs.expected_files()  # once: each rendering walks the whole tree


def test_the_walk_reaches_nested_commands() -> None:
    names = {entry.name for entry in ENTRIES}
    assert {"kcompact", "kcompact clean", "kcompact inspect dirty-ratio", "kcompact spark inspect replicas"} <= names


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_reference_page_and_man_page_are_current(entry: Any) -> None:
    for path in (make_docs.REFERENCE_DIR / entry.markdown_name, make_docs.MAN_DIR / entry.man_name):
        why = "missing" if not path.exists() else "stale"
        assert path.exists() and path.read_text(encoding="utf-8") == EXPECTED[path], (
            f"{path.relative_to(REPO_ROOT)} is {why} for `{entry.name}`: run `python scripts/make_docs.py`")


def test_reference_index_is_current_and_no_page_is_left_by_a_command_that_is_gone() -> None:
    problems = {path.relative_to(REPO_ROOT).as_posix(): why for path, why in make_docs.stale_files().items()}
    assert problems == {}, f"{problems}: run `python scripts/make_docs.py`"


def test_a_stale_page_is_named_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself can fail: an edited page, a deleted one and a stray one are each named."""
    monkeypatch.setattr(make_docs, "REFERENCE_DIR", tmp_path / "reference")
    monkeypatch.setattr(make_docs, "MAN_DIR", tmp_path / "man")
    monkeypatch.setattr(make_docs, "ROOT", tmp_path)
    make_docs.write()
    assert make_docs.stale_files() == {}
    (tmp_path / "reference" / "clean.md").write_text("old help\n", encoding="utf-8")
    (tmp_path / "man" / "kcompact-repair.1").unlink()
    (tmp_path / "man" / "kcompact-compact.1").write_text(".TH X 1\n", encoding="utf-8")
    assert make_docs.stale_files() == {
        tmp_path / "man" / "kcompact-compact.1": "no such command",
        tmp_path / "man" / "kcompact-repair.1": "missing",
        tmp_path / "reference" / "clean.md": "stale",
    }
    make_docs.write()
    assert make_docs.stale_files() == {}
    assert not (tmp_path / "man" / "kcompact-compact.1").exists()


def test_pages_do_not_depend_on_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    wide = make_docs.expected_files()
    monkeypatch.setenv("COLUMNS", "40")
    assert make_docs.expected_files() == wide


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_every_command_has_examples_in_its_help(entry: Any) -> None:
    assert make_docs.examples(entry), f"`{entry.name} --help` has no Examples: (kcompact.cli.help_text.with_examples)"
    assert "\n  Examples:\n" in make_docs.help_text(entry)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_man_page_has_each_option_and_example(entry: Any) -> None:
    page = (make_docs.MAN_DIR / entry.man_name).read_text(encoding="utf-8")
    for param in entry.command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert make_docs.roff_escape(param.opts[0]) in page, f"{entry.man_name} lacks {param.opts[0]}"
    for example in make_docs.examples(entry):
        assert make_docs.roff_escape(example) in page
    assert '.SH "EXAMPLES"' in page and '.SH "EXIT STATUS"' in page
