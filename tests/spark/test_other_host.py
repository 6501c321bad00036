"""A ``host:/path`` whose host runs no executor: Spark gives its tasks' preference up and runs them elsewhere,
so each task checks its own host first and refuses before it touches the disk (``locality.refuse_other_host``).

``spark clean`` fails that path's rows (exit 2, as any failed row) and leaves the files byte for byte as they
were, while the other paths of the run are cleaned; ``spark inspect dirty-ratio`` and ``spark export`` refuse in
one line. And what ``host:/path`` is at all: not a URL scheme without ``//``, not a drive letter.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner, Result

from kcompact.cleaner.logdir.report_row import STATUS_CLEANED, STATUS_FAILED
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cli.main import cli
from kcompact.config.sources import ConfigSources
from kcompact.spark.clean_job import run_clean_task
from kcompact.spark.locality import Located, is_this_host, locate, parse_host_path
from kcompact.spark.plan import plan_spark_clean
from kcompact.spark.rows import CLEAN_COLUMNS
from tests.spark.logdirs import COMPACT, NOW, build_log_dir, build_partition, tree_digest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ELSEWHERE = "nosuchhost"  # resolves nowhere: no executor ever registers with it
TEST_NET = "192.0.2.7"  # RFC 5737's documentation block: never an address of this machine


@pytest.mark.parametrize("given, parsed", [
    ("broker-1:/var/lib/kafka", ("broker-1", "/var/lib/kafka")),
    ("broker-1.example.com:/data/logs", ("broker-1.example.com", "/data/logs")),
    ("10.0.0.7:/data/kafka-logs", ("10.0.0.7", "/data/kafka-logs")),
    ("nosuchhost:/path", ("nosuchhost", "/path")),
    ("file:/tmp/x", None),  # Hadoop's local-file URL, not host "file"
    ("FILE:/tmp/x", None),
    ("s3:/bucket/x", None),
    ("s3a:/bucket/x", None),
    ("hdfs:/x", None),
    ("gs:/bucket/x", None),
    ("C:/x", None),  # a drive letter
    ("c:/x", None),
    ("file:///tmp/x", None),  # a URL
    ("broker-1://x", None),
    ("broker-1:relative/dir", None),
    ("/var/lib/kafka", None),
    ("-bad:/x", None),
])
def test_what_is_a_host_path(given: str, parsed: tuple[str, str] | None) -> None:
    assert parse_host_path(given) == parsed
    expected = Located(None, str(Path("/cwd", given))) if parsed is None else Located(*parsed)
    assert locate(given, lambda path: Path("/cwd", path)) == expected


def test_this_host_is_its_names_and_the_addresses_it_binds(spark: SparkSession) -> None:
    executor = spark.sparkContext.getConf().get("spark.driver.host") or socket.gethostname()
    for name in (socket.gethostname(), socket.getfqdn(), executor, "127.0.0.1", "localhost"):
        assert is_this_host(name), name
    assert not is_this_host(ELSEWHERE)
    assert not is_this_host(TEST_NET)


def spark_clean(*args: str) -> Result:
    return CliRunner().invoke(cli, ["spark", "clean", *args, "--master", "local[2]", "--config",
                                    "cleanup.policy=compact", "--now-ms", str(NOW), "--json"],
                              env={"COLUMNS": "80"}, catch_exceptions=False, prog_name="kcompact")


@pytest.mark.parametrize("named", ["log dir", "partition directory"])
def test_a_host_path_whose_host_runs_no_executor_fails_its_rows_and_changes_nothing(
    spark: SparkSession, tmp_path: Path, named: str
) -> None:
    away = build_log_dir(tmp_path / "away", 2)
    here = build_log_dir(tmp_path / "here", 2)
    target = away if named == "log dir" else away / "orders-0"
    before = tree_digest(away)

    result = spark_clean(f"{ELSEWHERE}:{target}", str(here))

    assert result.exit_code == 2, result.output
    rows = {row["partition_dir"]: row for row in json.loads(result.stdout)["partitions"]}
    refused = rows.pop(str(target))
    assert refused["status"] == STATUS_FAILED
    assert refused["error"].startswith(f"{ELSEWHERE}:{target}: this task runs on {socket.gethostname()}, "
                                       f"not on {ELSEWHERE}, so it left the directory alone")
    assert sorted(rows) == [str(here / "orders-0"), str(here / "users-0")]
    assert {row["status"] for row in rows.values()} == {STATUS_CLEANED}
    assert tree_digest(away) == before


def test_a_clean_task_on_another_host_refuses_before_it_touches_the_partition(tmp_path: Path) -> None:
    """The last line of defence: the planning tasks ran on the host, the clean's task did not."""
    part = build_partition(tmp_path / "logs", "orders", 0)
    before = tree_digest(tmp_path / "logs")
    task = plan_spark_clean([part], ConfigSources(COMPACT), options=CleanOptions(now_ms=NOW)).tasks[0]

    row = dict(zip([name for name, _ in CLEAN_COLUMNS],
                   run_clean_task(dataclasses.replace(task, host=TEST_NET)), strict=True))

    assert row["status"] == STATUS_FAILED and row["topic"] == "orders"
    assert row["error"].startswith(f"{TEST_NET}:{part}: this task runs on {socket.gethostname()}")
    assert tree_digest(tmp_path / "logs") == before


@pytest.mark.parametrize("command", [["inspect", "dirty-ratio"], ["export", "--output", "{out}"]])
def test_a_read_of_a_host_path_whose_host_runs_no_executor_is_one_line(
    spark: SparkSession, tmp_path: Path, command: list[str]
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    args = [arg.format(out=tmp_path / "out") for arg in command]

    result = CliRunner().invoke(cli, ["spark", *args, f"{ELSEWHERE}:{log_dir}", "--master", "local[2]"],
                                env={"COLUMNS": "80"}, catch_exceptions=False, prog_name="kcompact")

    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"kcompact: error: {ELSEWHERE}:{log_dir}: this task runs on {socket.gethostname()}")
    assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()
