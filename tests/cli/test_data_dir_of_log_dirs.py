"""A broker's data directory holding its log dirs, given where a log dir is expected: every command says which log
dirs it saw there, instead of only that it found no partition directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.builders import PartitionBuilder


@pytest.mark.parametrize("command", [["clean"], ["clean", "--dry-run"], ["inspect", "dirty-ratio"], ["repair"],
                                     ["inspect", "transactions"]])
def test_a_data_dir_of_log_dirs_names_them(tmp_path: Path, command: list[str]) -> None:
    data = tmp_path / "data"
    for log_dir in ("logs-a", "logs-b"):
        PartitionBuilder("orders", 0).batch([(b"k", b"v")]).write(data / log_dir)
    (data / "lost+found").mkdir()
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "300"})
    result = runner.invoke(cli, [*command, str(data)])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"kcompact: error: no partition directories found under {data}: it holds 2 log dirs "
                             f"({data / 'logs-a'}, {data / 'logs-b'}); give those\n")
    as_json = runner.invoke(cli, [*command, str(data), "--json"])
    assert json.loads(as_json.stdout)["error"]["path"] == str(data)


def two_log_dirs(data: Path) -> list[Path]:
    """A broker with two log.dirs: orders-0 in one, payments-0 in the other, each with superseded records."""
    dirs = []
    for log_dir, topic in (("logs-a", "orders"), ("logs-b", "payments")):
        b = PartitionBuilder(topic, 0)
        for i in range(4):
            b.batch([(f"k{i % 2}".encode(), b"v")])
        b.roll().batch([(b"k", b"v")]).write(data / log_dir, high_watermark="log-end")
        dirs.append(data / log_dir)
    return dirs


def test_clean_takes_the_log_dirs_it_named_in_one_command(tmp_path: Path) -> None:
    log_dirs = two_log_dirs(tmp_path / "data")
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "300"})
    compact = ["--config", "cleanup.policy=compact", "--now-ms", "1700000001000"]
    dry = runner.invoke(cli, ["clean", *map(str, log_dirs), *compact, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    runs = json.loads(dry.stdout)["runs"]
    assert [(run["path"], [Path(r["partition_dir"]).name for r in run["results"]]) for run in runs] == [
        (str(log_dirs[0]), ["orders-0"]), (str(log_dirs[1]), ["payments-0"])]
    done = runner.invoke(cli, ["clean", *map(str, log_dirs), *compact])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0] == f"{log_dirs[0]}:" and f"{log_dirs[1]}:" in lines
    assert [line for line in lines if line.endswith(": cleaned dirty section [0, 4) (dirty ratio 1.000)")] == [
        "orders-0: cleaned dirty section [0, 4) (dirty ratio 1.000)",
        "payments-0: cleaned dirty section [0, 4) (dirty ratio 1.000)"]
    for log_dir in log_dirs:
        assert (log_dir / "cleaner-offset-checkpoint").read_text().endswith(" 0 4\n")
    only = runner.invoke(cli, ["clean", *map(str, log_dirs), *compact, "--topic", "payments", "--dry-run"])
    assert only.exit_code == 0, only.output
    assert only.stdout.splitlines()[0] == f"{log_dirs[1]}:"  # the other log dir holds no partition it keeps


def test_repair_takes_the_log_dirs_it_named_in_one_command(tmp_path: Path) -> None:
    """Two log dirs, one with a torn tail in its partition's closed segment: one command verifies both, repairs
    the damaged one (its backup next to its own log dir), and says each log dir's report under its name."""
    log_dirs = two_log_dirs(tmp_path / "data")
    log = log_dirs[1] / "payments-0" / "00000000000000000000.log"
    log.write_bytes(log.read_bytes() + bytes(100))  # zero padding after the last batch
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "300"})
    dry = runner.invoke(cli, ["repair", *map(str, log_dirs), "--dry-run", "--json"])
    runs = json.loads(dry.stdout)["runs"]
    assert [(run["path"], [row["status"] for row in run["rows"]]) for run in runs] == [
        (str(log_dirs[0]), ["sound"]), (str(log_dirs[1]), ["would repair"])]
    assert dry.exit_code == 2  # a problem Kafka does not settle itself, in one of them
    done = runner.invoke(cli, ["repair", *map(str, log_dirs)])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0] == f"{log_dirs[0]}:" and f"{log_dirs[1]}:" in lines
    assert lines[-1] == "1 partition: 1 repaired"
    assert (tmp_path / "data" / "logs-b.kcompact-backup").is_dir()
    assert not (tmp_path / "data" / "logs-a.kcompact-backup").exists()
    both = runner.invoke(cli, ["repair", *map(str, log_dirs), "--backup-dir", str(tmp_path / "b")])
    assert both.exit_code == 2 and "--backup-dir takes one PARTITION_DIR or LOG_DIR" in both.stderr
