"""``spark inspect replicas``: a cluster's copies compared partition by partition, each row equal to the
serial comparison; exit 3 when one diverges. ``spark clean`` keeps the replica fence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cli.main import cli
from kcompact.inspect.replicas import replica_sets, replicas_report, replicas_row
from kcompact.spark.clean_job import spark_clean
from kcompact.spark.replicas_job import REPLICAS_COLUMNS, spark_replicas
from tests.builders import PartitionBuilder, read_all_records
from tests.inspect.test_replicas import CLOCKS, NOW, busy_log, clean_at, race

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def cluster(tmp_path: Path) -> list[Path]:
    """Two brokers: orders-0 hit by the tombstone race, orders-1 cleaned on one broker only (equivalent),
    users-0 on the first broker alone (nothing to compare it with)."""
    leader, follower = race(tmp_path)
    b1, b2 = leader.parent, follower.parent
    part = busy_log()
    part.partition = 1
    raw = part.write(b1)
    shutil.copytree(raw, b2 / raw.name)
    clean_at(b2 / raw.name, NOW)
    PartitionBuilder("users").batch([(b"u", b"1")]).write(tmp_path / "users")
    shutil.copytree(tmp_path / "users" / "users-0", b1 / "users-0")
    return [b1, b2]


def test_rows_equal_the_serial_comparison(spark: SparkSession, tmp_path: Path) -> None:
    log_dirs = cluster(tmp_path)
    sets = replica_sets(log_dirs)
    assert [(s.topic, s.partition) for s in sets] == [("orders", 0), ("orders", 1)]

    run = spark_replicas(spark, sets, max_keys=5)

    assert run.rows == [replicas_row(s, 5) for s in sets]
    assert [(r.partition, r.agree) for r in run.rows] == [(0, False), (1, True)]
    first = json.loads(run.rows[0].report or "null")
    assert first == json.loads(json.dumps(replicas_report(sets[0].partition_dirs, max_keys=5).as_dict()))
    assert run.frame.columns == [name for name, _kind in REPLICAS_COLUMNS]
    assert run.frame.count() == 2


def test_the_command_exits_3_when_a_partition_diverges(spark: SparkSession, tmp_path: Path) -> None:
    log_dirs = cluster(tmp_path)
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80"})
    result = runner.invoke(cli, ["spark", "inspect", "replicas", *map(str, log_dirs), "--master", "local[2]",
                                 "--json"], prog_name="kcompact")
    assert result.exit_code == 3, result.output
    rows = json.loads(result.stdout)
    assert [(r["topic"], r["partition"], r["agree"]) for r in rows] == [("orders", 0, False), ("orders", 1, True)]
    assert rows[0]["report"]["keys"][0]["key"] == "k"


@pytest.mark.parametrize("map_budget", [None, 1])  # in one task; with the distributed offset map
def test_spark_clean_keeps_tombstones_at_the_fence(spark: SparkSession, tmp_path: Path,
                                                   map_budget: int | None) -> None:
    b = PartitionBuilder()
    b.batch([(b"k", b"v1")]).batch([(b"k", None)]).batch([(b"x", b"1")]).roll().batch([(b"y", b"1")])
    fenced, unfenced = b.write(tmp_path / "fenced"), b.write(tmp_path / "unfenced")
    for now in CLOCKS:
        for part, safe_offset in ((fenced, 1), (unfenced, None)):
            spark_clean(spark, [part], cli_overrides={"cleanup.policy": "compact"}, map_budget_bytes=map_budget,
                        options=CleanOptions(now_ms=now, from_start=True, safe_offset=safe_offset))
    assert (1, b"k", None) in read_all_records(fenced)
    assert (1, b"k", None) not in read_all_records(unfenced)


def test_the_command_takes_the_shared_topic_filters(spark: SparkSession, tmp_path: Path) -> None:
    log_dirs = cluster(tmp_path)
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80"})
    result = runner.invoke(cli, ["spark", "inspect", "replicas", *map(str, log_dirs), "--master", "local[2]",
                                 "--topic", "ord.*", "--partition", "1", "--json"], prog_name="kcompact")
    assert result.exit_code == 0, result.output  # orders-0, the one that diverges, is left out
    assert [(r["topic"], r["partition"], r["agree"]) for r in json.loads(result.stdout)] == [("orders", 1, True)]
    assert "--topic 'ord.*' --partition 1 matched 2 of 5 partitions" in result.stderr  # copies counted
