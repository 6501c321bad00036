"""Every command and group of the CLI has help: walked from the root, so a new command is covered too.

Each help ends with examples that name real options of a real command, each group lists its commands
with their descriptions whole, and the command table of docs/commands.md has a row naming every command's options.
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.conftest import REPO_ROOT


def walk(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...],
                                                                      click.Command]]:
    """``(argv path, command)`` of ``command`` and everything below it."""
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            found += walk(command.commands[name], (*path, name))
    return found


COMMANDS = walk(cli)


def test_the_tree_has_the_known_commands() -> None:
    paths = {" ".join(path) for path, _command in COMMANDS}
    assert {"", "inspect", "inspect dump", "clean"} <= paths


@pytest.mark.parametrize("path, command", COMMANDS,
                         ids=[" ".join(path) or "kcompact" for path, _c in COMMANDS])
def test_help_exits_0_with_a_description(path: tuple[str, ...], command: click.Command) -> None:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80"})
    result = runner.invoke(cli, [*path, "--help"], prog_name="kcompact")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Usage: kcompact {' '.join(path)}".rstrip())
    description = (command.help or "").strip()
    assert description, f"{' '.join(path) or 'kcompact'} has no description"
    first_words = " ".join(description.split()[:4])
    assert first_words in " ".join(result.stdout.split())
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"option {param.opts} of {' '.join(path)} has no help"


def test_python_dash_m_kcompact_help() -> None:
    done = subprocess.run([sys.executable, "-m", "kcompact", "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("Usage: ")
    assert "Offline compactor, inspector and repair tool" in done.stdout
    assert "inspect" in done.stdout


# -- examples, whole command lists, docs/commands.md's command table (like sqlite-utils' tests/test_docs.py) --

GROUPS = [(path, command) for path, command in COMMANDS if isinstance(command, click.Group)]
LEAVES = [(path, command) for path, command in COMMANDS if not isinstance(command, click.Group)]


def help_text(path: tuple[str, ...]) -> str:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80"})
    result = runner.invoke(cli, [*path, "--help"], prog_name="kcompact")
    assert result.exit_code == 0, result.output
    return result.stdout


def examples_of(text: str) -> list[str]:
    """The command lines of the help's ``Examples:`` section (up to the next blank line)."""
    assert "\n  Examples:\n\n" in text, "no Examples: section"
    section = text.split("\n  Examples:\n\n", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in section.splitlines()]


def resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The command an argv names, and the words after its name."""
    command: click.Command = cli
    rest = words
    while isinstance(command, click.Group) and rest and rest[0] in command.commands:
        command, rest = command.commands[rest[0]], rest[1:]
    return command, rest


def option_names(command: click.Command) -> set[str]:
    return {name for p in command.params if isinstance(p, click.Option) for name in p.opts + p.secondary_opts}


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(path) or "kcompact" for path, _c in COMMANDS])
def test_help_ends_with_examples_that_run_this_command(path: tuple[str, ...], command: click.Command) -> None:
    examples = examples_of(help_text(path))
    assert 1 <= len(examples) <= 3
    for example in examples:
        assert len(example) + 2 <= 80, f"an example wider than 80 columns: {example}"
        words = shlex.split(re.split(r" [|>] ", example)[0])
        assert words[: 1 + len(path)] == ["kcompact", *path], example
        leaf, rest = resolve(words[1:])
        assert not isinstance(leaf, click.Group), f"{example}: names no command"
        for word in rest:
            if word.startswith("--"):
                assert word.split("=")[0] in option_names(leaf), f"{example}: no option {word}"


@pytest.mark.parametrize("path, group", GROUPS, ids=[" ".join(path) or "kcompact" for path, _g in GROUPS])
def test_command_lists_show_each_description_whole_on_one_line(path: tuple[str, ...], group: click.Group) -> None:
    section = help_text(path).split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    assert "..." not in section
    lines = section.splitlines()
    assert len(lines) == len(group.commands)  # one line a command: nothing wrapped
    for line, (name, command) in zip(lines, sorted(group.commands.items()), strict=True):
        assert line.split(None, 1) == [name, command.get_short_help_str()]
        assert command.short_help, f"{name}: a short_help, so click does not cut the docstring's"


COMMANDS_DOC = REPO_ROOT / "docs" / "commands.md"  # README.md links it; the options themselves: docs/reference/
SAFETY_DOC = REPO_ROOT / "docs" / "safety.md"  # the exit codes in full
TABLE_ROWS = {
    " ".join(itertools.takewhile(lambda word: re.fullmatch(r"[a-z-]+", word) is not None, row.split()[2:])): row
    for row in COMMANDS_DOC.read_text().splitlines()
    if row.startswith("| `kcompact ")
}


@pytest.mark.parametrize("path, command", LEAVES, ids=[" ".join(path) for path, _c in LEAVES])
def test_command_table_names_every_command_and_option(path: tuple[str, ...], command: click.Command) -> None:
    row = TABLE_ROWS.get(" ".join(path))
    assert row is not None, f"docs/commands.md's command table has no row for kcompact {' '.join(path)}"
    listed = set(re.findall(r"--[a-z][a-z-]*", row))
    missing = sorted(name for name in option_names(command) if name.startswith("--") and name not in listed)
    assert missing == [], f"docs/commands.md's row for kcompact {' '.join(path)} does not name {missing}"


# -- the exit codes: kcompact --help and docs/safety.md's list name every code a command exits with --

def exit_codes(text: str) -> dict[int, str]:
    """The codes of the first ``Exit codes: N what; N what.`` sentence (help's plain, docs/safety.md's bold)."""
    flat = " ".join(text.replace("**", "").replace("`", "").split())
    sentence = flat.split("Exit codes: ", 1)[1].split(". ", 1)[0].rstrip(".")
    return {int(code): what for code, what in re.findall(r"(?:^|; )(\d+) ([^;]*)", sentence)}


def cli_exit_constants() -> set[int]:
    """Every ``EXIT_*`` code the CLI's modules define (what the commands exit with)."""
    import importlib
    import pkgutil

    import kcompact.cli

    codes = set()
    for module in pkgutil.iter_modules(kcompact.cli.__path__):
        names = vars(importlib.import_module(f"kcompact.cli.{module.name}"))
        codes |= {value for name, value in names.items() if name.startswith("EXIT_") and isinstance(value, int)}
    return codes


def test_top_help_and_safety_doc_list_the_same_exit_codes_every_command_uses() -> None:
    top = exit_codes(help_text(()))
    documented = exit_codes(SAFETY_DOC.read_text())
    assert sorted(top) == sorted(documented) == sorted(cli_exit_constants() | {0})
    assert "inspect replicas" in top[3] and "inspect replicas" in documented[3]
    for path, _command in COMMANDS:
        assert set(exit_codes(help_text(path))) <= set(top), f"kcompact {' '.join(path)}"


@pytest.mark.parametrize("group", ["inspect", "spark"])
def test_top_help_names_every_command_of_a_group(group: str) -> None:
    section = help_text(()).split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    line = next(line for line in section.splitlines() if line.split()[0] == group)
    names = {path[-1] for path, _command in LEAVES if path[0] == group}
    assert sorted(name for name in names if name not in line) == []
