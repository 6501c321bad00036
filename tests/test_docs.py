"""The documentation stays true to the code, as sqlite-utils' ``tests/test_docs.py`` keeps its CLI reference.

* ``docs/reference/`` and ``docs/man/`` are what ``scripts/make_docs.py`` writes from today's ``--help``:
  a page that is stale, missing, or left by a command that is gone fails, naming the command and the fix;
* every command's help has examples (they are what the reference shows first to a reader who copies);
* ``docs/json.md``'s key lists are what the commands print, on ``fixtures/sample-logdir``; links between the
  pages resolve;
* README.md stays a five-minute read (at most ``README_MAX_LINES`` lines, none over ``README_MAX_WIDTH``
  characters); every ``kcompact …`` it shows names a real command with real options, and it names every
  command; its demo runs; its test command is ``.ci/run``'s; it links every page of ``docs/``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.cli.test_help import option_names, resolve
from tests.conftest import PROJECT_FIXTURES, REPO_ROOT

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


# -- docs/json.md: each documented top-level key is what the command prints --

JSON_DOC = REPO_ROOT / "docs" / "json.md"
NOW_MS = "1763700000000"


def documented_keys() -> dict[str, list[tuple[str, set[str]]]]:
    """Per ``## `kcompact … --json``` section: its ``Keys:`` / ``Row keys:`` paragraphs, in order."""
    found: dict[str, list[tuple[str, set[str]]]] = {}
    sections = re.split(r"^## `kcompact ([a-z -]+) --json`$", JSON_DOC.read_text(encoding="utf-8"), flags=re.M)
    for command, body in zip(sections[1::2], sections[2::2], strict=True):
        for paragraph in re.split(r"\n\s*\n", body):
            kind = "object" if paragraph.startswith("Keys:") else "rows" if paragraph.startswith("Row keys:") else None
            if kind is not None:
                names = set(re.findall(r"`([a-z_]+)`", paragraph))
                found.setdefault(command, []).append((kind, names))
    return found


def printed_json(args: list[str]) -> Any:
    result = CliRunner(catch_exceptions=False).invoke(cli, args, prog_name="kcompact")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def log_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("json-doc")
    first, second = base / "b1", base / "b2"
    shutil.copytree(PROJECT_FIXTURES / "sample-logdir", first)
    shutil.copytree(PROJECT_FIXTURES / "sample-logdir", second)
    return first, second


JSON_RUNS = {  # command -> argv per documented Keys paragraph, in the section's order ({a}, {b}: the two log dirs)
    "clean": [["clean", "{a}", "--dry-run", "--now-ms", NOW_MS, "--json"]],
    "inspect dirty-ratio": [["inspect", "dirty-ratio", "{a}", "--now-ms", NOW_MS, "--json"]],
    "inspect keys": [["inspect", "keys", "{a}/orders-0", "--now-ms", NOW_MS, "--json"]],
    "inspect last-clean": [["inspect", "last-clean", "{a}/orders-0", "--now-ms", NOW_MS, "--json"]],
    "inspect replicas": [["inspect", "replicas", "{a}/orders-0", "{b}/orders-0", "--json"],
                         ["inspect", "replicas", "{a}", "{b}", "--json"]],
    "inspect transactions": [["inspect", "transactions", "{a}", "--now-ms", NOW_MS, "--json"]],
    "config show": [["config", "show", "{a}/orders-0", "--json"]],
    "repair": [["repair", "{a}/orders-0", "--dry-run", "--json"], ["repair", "{a}", "--dry-run", "--json"]],
    "export": [["export", "{a}", "--output", "{a}.parquet", "--json"]],
    "report": [["report", "{a}", "--now-ms", NOW_MS, "--json"]],
}


def test_json_doc_has_a_keys_line_for_every_command_run_here() -> None:
    documented = documented_keys()
    assert {command: len(runs) for command, runs in JSON_RUNS.items()} == {
        command: len(documented.get(command, [])) for command in JSON_RUNS}


@pytest.mark.parametrize("command", sorted(JSON_RUNS))
def test_json_doc_keys_are_what_the_command_prints(command: str, log_dirs: tuple[Path, Path]) -> None:
    if command == "export":
        pytest.importorskip("pyarrow", reason="kcompact export needs pyarrow (the export or spark extra)")
    a, b = log_dirs
    for template, (kind, names) in zip(JSON_RUNS[command], documented_keys()[command], strict=True):
        argv = [word.format(a=a, b=b) for word in template]
        printed = printed_json(argv)
        if kind == "rows":
            assert isinstance(printed, list) and printed, f"kcompact {command}: a list of rows"
            keys = set(printed[0])
        else:
            assert isinstance(printed, dict), f"kcompact {command}: one object"
            keys = set(printed)
        assert {"missing from docs/json.md": sorted(keys - names), "not printed": sorted(names - keys)} == {
            "missing from docs/json.md": [], "not printed": []}, f"kcompact {' '.join(argv)}"


def test_json_doc_names_every_dump_line_type_and_its_fields(log_dirs: tuple[Path, Path]) -> None:
    a, _b = log_dirs
    result = CliRunner(catch_exceptions=False).invoke(
        cli, ["inspect", "dump", str(a / "orders-0"), "--records", "--all-files", "--json"], prog_name="kcompact")
    section = JSON_DOC.read_text(encoding="utf-8").split("## `kcompact inspect dump --json`", 1)[1].split("\n## ", 1)[0]
    words = set(re.findall(r"[a-z_]+", section))
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert {line["type"] for line in lines} >= {"file", "batch", "record"}
    for line in lines:
        assert f"`{line['type']}`" in section, f"docs/json.md does not name the dump line type {line['type']}"
        assert sorted(set(line) - words) == [], f"docs/json.md: fields of {line['type']}"


# -- links between the pages --

def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {github_anchor(line.lstrip("#")) for line in page.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")}


LINKED_PAGES = sorted([*(REPO_ROOT / "docs").glob("*.md"), REPO_ROOT / "CONTRIBUTING.md", README],
                      key=lambda page: page.as_posix())


@pytest.mark.parametrize("page", LINKED_PAGES, ids=[page.relative_to(REPO_ROOT).as_posix() for page in LINKED_PAGES])
def test_every_link_between_pages_resolves(page: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _hash, anchor = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    assert broken == [], f"{page.relative_to(REPO_ROOT)}: links to nothing"


# -- README: a five-minute read, and every command it shows is real --

def readme_text() -> str:
    return README.read_text(encoding="utf-8")


def test_readme_is_a_five_minute_read() -> None:
    lines = readme_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move depth to docs/"
    wide = [(number, len(line)) for number, line in enumerate(lines, 1) if len(line) > README_MAX_WIDTH]
    assert wide == [], f"README.md lines over {README_MAX_WIDTH} characters (line, width): {wide}"


def command_lines(text: str) -> list[str]:
    """Each ``kcompact …`` command of a Markdown text: in its shell blocks (comments dropped, split at ``&&``,
    ``;`` and ``|``) and in its inline code."""
    found = []
    blocks = re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, flags=re.S)
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|\|\||;|\|", re.sub(r"\s#\s.*$", "", line)):
                if part.strip().startswith("kcompact "):
                    found.append(part.strip())
    found += [code.split("|")[0].strip() for code in re.findall(r"`(kcompact [^`]+)`", text)]
    return found


README_COMMANDS = command_lines(readme_text())


def test_readme_shows_every_command_and_some_workflows() -> None:
    leaves = {entry.name for entry in ENTRIES if not isinstance(entry.command, click.Group)}
    shown = set()
    for line in README_COMMANDS:
        words = shlex.split(line)[1:]
        _command, rest = resolve(words)
        shown.add(" ".join(["kcompact", *words[: len(words) - len(rest)]]))
    assert sorted(leaves - shown) == [], "README.md names no `kcompact …` line for these commands"


@pytest.mark.parametrize("line", README_COMMANDS)
def test_readme_command_names_a_real_command_and_its_options(line: str) -> None:
    words = shlex.split(line)
    command, rest = resolve(words[1:])
    assert not (isinstance(command, click.Group) and rest and not rest[0].startswith("-")), (
        f"README.md: `{line}`: {rest[0]!r} is no command of `{' '.join(words[: len(words) - len(rest)])}`")
    unknown = [word for word in rest if word.startswith("--") and word.split("=")[0] not in option_names(command)]
    assert unknown == [], f"README.md: `{line}`: no such option {unknown}"


def test_readme_runs_the_tests_as_ci_does() -> None:
    """README's test command ends with the last line of ``.ci/run`` (keep the two in step)."""
    ci_last = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1].strip()
    assert ci_last == "python -m pytest -q"
    assert any(line.endswith(f"&& {ci_last}") for line in readme_text().splitlines())


def readme_demo() -> list[str]:
    """The ``kcompact`` lines of README's first shell block (the newcomer's demo)."""
    first = re.search(r"```sh\n(.*?)```", readme_text(), flags=re.S)
    assert first is not None
    return command_lines(f"```sh\n{first.group(1)}```")


def test_readme_demo_runs_on_a_copy_of_the_sample(tmp_path: Path) -> None:
    """The demo, in this process on a copy of fixtures/sample-logdir: each step exits 0 and the clean compacts."""
    demo = readme_demo()
    assert [line.split()[1] for line in demo] == ["inspect", "clean", "inspect"]
    log_dir = tmp_path / "kcompact-demo"
    shutil.copytree(PROJECT_FIXTURES / "sample-logdir", log_dir)
    outputs = []
    for line in demo:
        argv = [word.replace("/tmp/kcompact-demo", str(log_dir)) for word in shlex.split(line)[1:]]
        result = CliRunner(catch_exceptions=False).invoke(cli, argv, prog_name="kcompact")
        assert result.exit_code == 0, f"README's demo: `{line}`: {result.output}"
        outputs.append(result.stdout)
    assert outputs[1].startswith("orders-0: cleaned dirty section [0, 142)")


def test_readme_links_every_page_of_docs() -> None:
    links = set(re.findall(r"\]\(([^)#\s]+)", readme_text()))
    pages = {path.relative_to(REPO_ROOT).as_posix() for path in (REPO_ROOT / "docs").glob("*.md")}
    assert sorted(pages - links) == [], "README.md does not link these pages of docs/"
    assert {"docs/reference/README.md", "CONTRIBUTING.md", "ARCHITECTURE.md"} <= links
