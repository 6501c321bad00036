"""Which directory is a log dir and which a partition: one rule for every command
(``segment.partition.is_partition_dir``, ``iter_partition_dirs``).

A log dir is known by what it holds (``meta.properties``, its offset checkpoints, partition directories),
whatever its name: Kafka's own multi-broker quickstart names them ``/tmp/kafka-logs-1``, ``-2``, which read
as partition 1 of a topic ``kafka-logs``. And a partition directory Kafka set aside (``-delete``,
``-future``, ``-stray``, ``UnifiedLog``'s suffixes) is none of a log dir's partitions for any command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.segment.partition import is_partition_dir
from tests.builders import PartitionBuilder
from tests.conftest import copy_tree_writable, real_fixture


def run(*args: str) -> Result:
    return CliRunner(catch_exceptions=False, env={"COLUMNS": "80"}).invoke(cli, list(args), prog_name="kcompact")


@pytest.fixture
def quickstart_log_dir(tmp_path: Path) -> Path:
    """A broker-written log dir under the name Kafka's quickstart gives the first broker's."""
    return copy_tree_writable(real_fixture("kraft37-cleaned-logdir"), tmp_path / "kafka-logs-1")


def _partitions(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir() if p.is_dir())


def test_a_log_dir_named_like_a_partition_is_read_as_a_log_dir_by_inspect(quickstart_log_dir: Path) -> None:
    result = run("inspect", "dirty-ratio", str(quickstart_log_dir), "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert sorted(Path(row["partition_dir"]).name for row in rows) == _partitions(quickstart_log_dir)
    assert "kafka-logs" not in {row["topic"] for row in rows}


def test_a_log_dir_named_like_a_partition_is_cleaned_as_a_log_dir(quickstart_log_dir: Path) -> None:
    result = run("clean", str(quickstart_log_dir), "--roll", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    cleaned = {Path(row["partition_dir"]).name for row in report["results"]}
    assert {"__consumer_offsets-31", "__consumer_offsets-44"} <= cleaned
    # every partition but KRaft's metadata log, which no cleaner touches
    assert len(cleaned) + len(report["skipped"]) == len(_partitions(quickstart_log_dir)) - 1


def test_a_log_dir_named_like_a_partition_is_repaired_as_a_log_dir(quickstart_log_dir: Path) -> None:
    result = run("repair", "--dry-run", str(quickstart_log_dir), "--json")
    report = json.loads(result.stdout)
    assert [row["partition"] for row in report["rows"]] == _partitions(quickstart_log_dir)
    assert report["failures"] == []


@pytest.mark.parametrize("holds", ["meta.properties", "cleaner-offset-checkpoint",
                                   "recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                                   "log-start-offset-checkpoint", "orders-0"])
def test_what_a_directory_holds_makes_it_a_log_dir(tmp_path: Path, holds: str) -> None:
    directory = tmp_path / "kafka-logs-2"
    directory.mkdir()
    assert is_partition_dir(directory)  # empty: nothing says otherwise
    if holds == "orders-0":
        (directory / holds).mkdir()
    else:
        (directory / holds).write_text("0\n0\n")
    assert not is_partition_dir(directory)


SET_ASIDE = ("orders-1.0123456789abcdef0123456789abcdef-delete",
             "orders-2.0123456789abcdef0123456789abcdef-future",
             "orders-3.0123456789abcdef0123456789abcdef-stray")


@pytest.fixture
def log_dir_with_set_aside(tmp_path: Path) -> Path:
    """orders-0 live; orders-1..3 renamed the way Kafka sets partition directories aside."""
    log_dir = tmp_path / "logdir"
    for partition in range(4):
        part = PartitionBuilder("orders", partition).batch([(b"k", b"1")]).roll().batch([(b"k", b"2")])
        written = part.write(log_dir)
        if partition:
            written.rename(log_dir / SET_ASIDE[partition - 1])
    return log_dir


def test_inspect_lists_no_partition_kafka_set_aside(log_dir_with_set_aside: Path) -> None:
    result = run("inspect", "dirty-ratio", str(log_dir_with_set_aside), "--json",
                 "--config", "cleanup.policy=compact")
    assert result.exit_code == 0, result.output
    assert [Path(row["partition_dir"]).name for row in json.loads(result.stdout)] == ["orders-0"]


def test_clean_and_repair_work_on_the_same_partitions(log_dir_with_set_aside: Path) -> None:
    clean = json.loads(run("clean", str(log_dir_with_set_aside), "--json",
                           "--config", "cleanup.policy=compact").stdout)
    assert [Path(row["partition_dir"]).name for row in clean["results"] + clean["skipped"]] == ["orders-0"]
    repair = json.loads(run("repair", "--dry-run", str(log_dir_with_set_aside), "--json").stdout)
    assert [row["partition"] for row in repair["rows"]] == ["orders-0"]
    assert repair["notes"] == [f"{name}: a partition being deleted or moved; left alone" for name in SET_ASIDE]


def test_a_log_dir_of_set_aside_partitions_only_is_refused_in_one_line(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    PartitionBuilder("orders", 1).batch([(b"k", b"1")]).write(log_dir).rename(log_dir / SET_ASIDE[0])
    result = run("inspect", "dirty-ratio", str(log_dir))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        (f"kcompact: error: no partition directories found under {log_dir}: only 1 partition Kafka set "
         "aside (being deleted or moved: -delete, -future, -stray); name one alone to read it")]


@pytest.mark.parametrize("command", [("inspect", "last-clean"), ("inspect", "keys"), ("config", "show")],
                         ids=lambda c: " ".join(c))
def test_a_command_of_one_partition_refuses_a_log_dir_named_like_one(quickstart_log_dir: Path,
                                                                     command: tuple[str, ...]) -> None:
    result = run(*command, str(quickstart_log_dir))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        (f"kcompact: error: {quickstart_log_dir}: a log dir (it holds cleaner-offset-checkpoint), not a "
         "partition directory; expected one of its <topic>-<partition> directories")]
