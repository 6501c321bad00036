"""Every command and group of the CLI has help: walked from the root, so a new command is covered too."""

from __future__ import annotations

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
