"""Output for pipes: when stdout is not a terminal (CliRunner, ``| grep``, a script), no identifier is
cut or folded, whatever COLUMNS says. Run at COLUMNS=80 on copies of broker-written partitions with
long names (Kafka Streams changelogs of Confluent Control Center, ``__consumer_offsets-31``)."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from tests.conftest import copy_tree_writable, real_fixture

SOURCE = "confluent512-lz4-logdir"
LONGEST = "_confluent-controlcenter-5-1-2-1-MonitoringMessageAggregatorWindows-THREE_HOURS-changelog-0"
CHANGELOG = "_confluent-controlcenter-5-1-2-1-KSTREAM-OUTEROTHER-0000000096-store-changelog-0"
NAMES = ["__consumer_offsets-31", "_confluent-command-0", CHANGELOG, LONGEST, "docker-connect-configs-0"]
COMPACT = ("--config", "cleanup.policy=compact")


def long_named_log_dir(where: Path) -> Path:
    """A log dir holding a copy of a few partitions of the broker-written fixture, and its checkpoints."""
    source = real_fixture(SOURCE)
    log_dir = where / "logdir"
    log_dir.mkdir(parents=True)
    for name in NAMES:
        copy_tree_writable(source / name, log_dir / name)
    for name in ("meta.properties", "replication-offset-checkpoint", "recovery-point-offset-checkpoint",
                 "log-start-offset-checkpoint", "cleaner-offset-checkpoint"):
        shutil.copy(source / name, log_dir / name)
        (log_dir / name).chmod(0o644)
    return log_dir


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return long_named_log_dir(tmp_path)


def run(*args: str | Path) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    return runner.invoke(cli, [str(arg) for arg in args], prog_name="kcompact")


def lines_naming(stdout: str, name: str) -> list[str]:
    """The lines where ``name`` appears whole (followed by neither a name character nor an ellipsis)."""
    return [line for line in stdout.splitlines()
            if any(not rest[:1] or rest[0] not in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                   "0123456789._-…" for rest in line.split(name)[1:])]


def assert_whole(stdout: str, names: list[str]) -> None:
    assert "…" not in stdout
    for name in names:
        assert lines_naming(stdout, name), f"{name} is not whole in:\n{stdout}"


EMPTY = ["__consumer_offsets-31", LONGEST]  # no records: counted in one line, not listed


def test_dirty_ratio_names_every_partition_whole(log_dir: Path) -> None:
    result = run("inspect", "dirty-ratio", log_dir, *COMPACT)
    assert result.exit_code == 0, result.output
    listed = [name for name in NAMES if name not in EMPTY]
    assert_whole(result.stdout, listed)
    assert "2 empty partitions (no records): nothing to clean" in result.stdout.splitlines()
    table_rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(table_rows) == len(listed)  # one line a partition: nothing wrapped


def test_clean_names_every_partition_whole(log_dir: Path) -> None:
    result = run("clean", log_dir, "--roll", *COMPACT)
    assert result.exit_code == 0, result.output
    empty = ["__consumer_offsets-31", LONGEST]  # no records: counted in one line, not listed
    assert_whole(result.stdout, [name for name in NAMES if name not in empty])
    assert "2 empty partitions (no records): nothing to clean" in result.stdout.splitlines()
    assert lines_naming(result.stdout, f"{CHANGELOG}: cleaned dirty section [0, 11)")
    assert any(line.startswith("  removed ") and line.rstrip().endswith(" keyless")
               for line in result.stdout.splitlines())  # a row is never wrapped


def test_keys_names_the_partition_whole(log_dir: Path) -> None:
    result = run("inspect", "keys", log_dir / CHANGELOG, *COMPACT)
    assert result.exit_code == 0, result.output
    assert_whole(result.stdout, [CHANGELOG])


def test_last_clean_names_the_partition_whole(log_dir: Path) -> None:
    result = run("inspect", "last-clean", log_dir / LONGEST, *COMPACT)
    assert result.exit_code == 0, result.output
    assert_whole(result.stdout, [LONGEST])


def test_config_show_names_the_partition_whole(log_dir: Path) -> None:
    result = run("config", "show", log_dir / LONGEST, *COMPACT)
    assert result.exit_code == 0, result.output
    assert_whole(result.stdout, [LONGEST])
    assert [line for line in result.stdout.splitlines() if line.split()[:1] == ["cleanup.policy"]]


def test_repair_names_the_partition_whole(log_dir: Path) -> None:
    result = run("repair", "--dry-run", log_dir / LONGEST)
    assert result.exit_code == 0, result.output
    assert_whole(result.stdout, [LONGEST])


def test_a_terminal_folds_a_long_name_instead_of_cutting_it(log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal the table keeps to its width: the name folds onto the next line, never ``…``."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: treat stdout as a terminal
    result = run("inspect", "dirty-ratio", log_dir, *COMPACT)
    assert result.exit_code == 0, result.output
    lines = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout).splitlines()  # without colours
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.stdout
    cells = "".join(line.split("│")[2].strip() for line in lines if line.startswith("│"))
    for name in NAMES:
        assert (name in cells) == (name not in EMPTY)


def test_the_spark_clean_table_folds_long_names_on_a_terminal() -> None:
    """The table of ``spark clean`` (rendered without Spark): at 80 columns nothing is cut short."""
    from rich.console import Console

    from kcompact.cli.spark_cmds import _clean_table
    from kcompact.spark.rows import CLEAN_COLUMNS, as_dicts, clean_row

    rows = as_dicts(CLEAN_COLUMNS, [clean_row(f"/logs/{name}", None, error="x") for name in NAMES])
    for row, name in zip(rows, NAMES, strict=True):
        row["topic"], row["partition"] = name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1])
        row["distributed_map"] = True
    terminal = Console(width=80, force_terminal=True, no_color=True, file=io.StringIO())
    terminal.print(_clean_table(rows))
    text = re.sub(r"\x1b\[[0-9;]*m", "", terminal.file.getvalue())  # type: ignore[attr-defined]
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in text
    cells = "".join(line.split()[0] for line in lines[4:] if line.strip())
    for name in NAMES:
        assert name in cells


@pytest.mark.parametrize("env", [{}, {"TTY_COMPATIBLE": "0"}, {"TTY_COMPATIBLE": "1"}, {"FORCE_COLOR": ""},
                                 {"FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"}],
                         ids=["none", "tty-compatible-0", "tty-compatible-1", "force-color-empty", "force-color",
                              "both"])
@pytest.mark.parametrize("isatty", [False, True], ids=["pipe", "tty"])
def test_a_terminal_is_told_without_rich_as_rich_tells_it(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], isatty: bool
) -> None:
    """``render.may_be_terminal`` decides whether a line goes through rich's console or straight out (and
    whether a progress bar is tried): it agrees with ``Console.is_terminal`` under rich's overrides."""
    from rich.console import Console

    from kcompact.cli import render

    for name in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    stream = io.StringIO()
    monkeypatch.setattr(stream, "isatty", lambda: isatty)

    assert render.may_be_terminal(stream) == Console(file=stream).is_terminal


def test_a_line_to_a_pipe_is_what_rich_prints_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """``render.print_line`` writes a line to a pipe without rich: byte for byte what the pipe's console prints
    (an offset range in brackets, an em dash, a name past any width, a name with an escape character)."""
    from kcompact.cli import render

    lines = [f"{LONGEST}: nothing to clean — the active segment (base offset 0, 13.4 KiB) is never cleaned",
             "orders-0: cleaned dirty section [0, 142) (dirty ratio 1.000)",
             "orders-0: scratch dir: 00000000000000000000.log: written in /tmp/x, brought in",
             "bad\x1b[31mname-0: nothing to clean — [2, 5] at 12:30:45"]
    for name in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    direct, through_rich = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stdout", direct)
    for line in lines:
        render.print_line(line)
    monkeypatch.setattr("sys.stdout", through_rich)
    for line in lines:
        render.console().print(line)

    assert direct.getvalue() == through_rich.getvalue()
    assert direct.getvalue().count("\n") == len(lines)
