"""With ``--json``, a command that fails on bad input (exit 2) still prints JSON: one error object on
stdout, beside the one line on stderr, so a script never parses an empty stdout.

The object (docs/safety.md, "Exit codes"): ``{"error": {"message", "kind", "path", "position", "offset",
"exit_code"}}``, on one line, so it also ends the JSON lines of ``inspect dump --json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.records.batch import iter_batches
from tests.builders import PartitionBuilder

ERROR_FIELDS = ["message", "kind", "path", "position", "offset", "exit_code"]


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False,
                              env={"KCOMPACT_SERVER_PROPERTIES": None})


def truncated(root: Path) -> tuple[Path, Path, int]:
    """A partition whose first segment's last batch is cut short: (partition, segment, its position)."""
    b = PartitionBuilder()
    b.batch([(b"a", b"1")]).batch([(b"b", b"2")]).roll().batch([(b"c", b"3")])
    part = b.write(root / "logdir")
    log = min(part.glob("*.log"))
    data = log.read_bytes()
    last = list(iter_batches(data))[-1]
    log.write_bytes(data[:-5])
    return part, log, last.position


def empty_dir(root: Path) -> Path:
    path = root / "empty"
    path.mkdir()
    return path


def existing_output(root: Path) -> Path:
    path = root / "out.parquet"
    path.mkdir()
    return path


# Each case: the command line (for a tmp dir), and the error it must report (kind, path, position).
Case = Callable[[Path], tuple[list[str | Path], str, str | None, int | None]]


def _corrupt(*command: str) -> Case:
    def case(root: Path) -> tuple[list[str | Path], str, str | None, int | None]:
        part, log, position = truncated(root)
        return [*command, part, "--json", "--config", "cleanup.policy=compact"], "TruncatedDataError", \
            str(log), position

    return case


def _no_partitions(*command: str) -> Case:
    def case(root: Path) -> tuple[list[str | Path], str, str | None, int | None]:
        return [*command, empty_dir(root), "--json"], "KcompactError", None, None

    return case


def _spark(*command: str) -> Case:
    def case(root: Path) -> tuple[list[str | Path], str, str | None, int | None]:
        output = existing_output(root)
        return [*command, empty_dir(root), "--output", output, "--json"], "KcompactError", str(output), None

    return case


def _dump(root: Path) -> tuple[list[str | Path], str, str | None, int | None]:
    notes = root / "notes.txt"
    notes.write_text("x")
    return ["inspect", "dump", notes, "--json"], "KcompactError", str(notes), None


def _replicas(root: Path) -> tuple[list[str | Path], str, str | None, int | None]:
    part, log, position = truncated(root)
    other = PartitionBuilder().batch([(b"a", b"1")]).write(root / "b2")
    return ["inspect", "replicas", other, part, "--json"], "TruncatedDataError", str(log), position


def _spark_replicas(root: Path) -> tuple[list[str | Path], str, str | None, int | None]:
    part = PartitionBuilder().batch([(b"a", b"1")]).write(root / "logdir")  # a partition, not a log dir
    return ["spark", "inspect", "replicas", part, root, "--json"], "KcompactError", str(part), None


def _config_show(root: Path) -> tuple[list[str | Path], str, str | None, int | None]:
    part, _log, _position = truncated(root)
    return ["config", "show", part, "--json", "--config", "no.such.key=1"], "ConfigError", None, None


def _repair(root: Path) -> tuple[list[str | Path], str, str | None, int | None]:
    part = PartitionBuilder("__cluster_metadata").batch([(b"k", b"v")]).write(root / "logdir")
    return ["repair", part, "--json"], "RefusedError", str(part), None  # the path the refusal names


CASES: dict[str, Case] = {
    "clean": _corrupt("clean"),
    "clean LOGDIR": _no_partitions("clean"),
    "inspect keys": _corrupt("inspect", "keys"),
    "inspect last-clean": _corrupt("inspect", "last-clean"),
    "inspect dirty-ratio": _no_partitions("inspect", "dirty-ratio"),
    "inspect transactions": _no_partitions("inspect", "transactions"),
    "inspect dump": _dump,
    "inspect replicas": _replicas,
    "config show": _config_show,
    "repair": _repair,
    "spark clean": _spark("spark", "clean"),
    "spark inspect dirty-ratio": _spark("spark", "inspect", "dirty-ratio"),
    "spark export": _spark("spark", "export"),
    "spark inspect replicas": _spark_replicas,
    "export": _spark("export"),
    "report": _no_partitions("report"),
    "spark report": _no_partitions("spark", "report"),  # refused on the driver, before Spark starts
}


@pytest.mark.parametrize("name", CASES)
def test_a_failing_json_command_prints_an_error_object(tmp_path: Path, name: str) -> None:
    argv, kind, path, position = CASES[name](tmp_path)
    result = run(*argv)

    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("kcompact: error: ")
    assert result.stdout.count("\n") == 1  # one line: it also ends dump's JSON lines
    error = json.loads(result.stdout)["error"]
    assert list(error) == ERROR_FIELDS
    assert error == {"message": line.removeprefix("kcompact: error: "), "kind": kind, "path": path,
                     "position": position, "offset": error["offset"], "exit_code": 2}


@pytest.mark.parametrize("name", ["clean", "inspect dirty-ratio", "config show"])
def test_without_json_stdout_stays_empty(tmp_path: Path, name: str) -> None:
    argv, _kind, _path, _position = CASES[name](tmp_path)
    result = run(*[a for a in argv if a != "--json"])
    assert result.exit_code == 2 and result.stdout == ""


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_every_json_command_is_covered_here() -> None:
    with_json = {" ".join(path) for path, command in _commands(cli)
                 if any("--json" in param.opts for param in command.params)}
    assert with_json == {name.removesuffix(" LOGDIR") for name in CASES}


@pytest.mark.parametrize("args", [
    ("clean", "--jobs", "0", "--json", "{part}"),
    ("inspect", "dirty-ratio", "--json", "--now-ms", "-5", "{part}"),
    ("inspect", "dirty-ratio", "{missing}", "--json"),
    ("spark", "clean", "{missing}", "--json"),
], ids=["clean --jobs 0", "dirty-ratio --now-ms -5", "dirty-ratio missing path", "spark clean missing path"])
def test_a_usage_error_after_json_is_one_json_object_too(tmp_path: Path, args: tuple[str, ...]) -> None:
    """click's own refusals (a bad option value, a path that does not exist) exit 2 with its usage text on
    stderr; after --json, stdout holds the one error object as for every other exit 2."""
    part = PartitionBuilder().batch([(b"a", b"1")]).write(tmp_path / "logdir")
    argv = [a.format(part=part, missing=tmp_path / "missing") for a in args]
    result = run(*argv)
    assert result.exit_code == 2 and result.stderr.startswith("Usage: ")
    (line,) = result.stdout.splitlines()
    error = json.loads(line)["error"]
    assert list(error) == ERROR_FIELDS and (error["kind"], error["exit_code"]) == ("UsageError", 2)
    assert error["message"].startswith("Invalid value for ")


@pytest.mark.parametrize("command", [("clean",), ("repair",), ("repair", "--clean")])
def test_a_held_lock_names_its_path_in_the_json_error(tmp_path: Path, command: tuple[str, ...]) -> None:
    """A broker holding the log dir: the error object names the path the message names (not null)."""
    from tests.cli.test_dump_cli import broker_running

    log_dir = tmp_path / "logdir"
    PartitionBuilder("orders", 0).batch([(b"k", b"v")]).batch([(b"k", b"w")]).roll().write(log_dir)
    with broker_running(log_dir):
        result = run(*command, log_dir, "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["path"] is not None and error["path"] in error["message"]
    assert Path(error["path"]) in (log_dir, log_dir / ".lock")
