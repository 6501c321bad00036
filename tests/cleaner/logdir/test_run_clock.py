"""A log dir's run reads the clock once: its ranking, what it frees first and every partition's round are
judged at the same now (as Kafka's ``Cleaner.doClean`` judges a round at the one ``now`` it took), however
long the run takes; ``--now-ms`` fixes it instead."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.inspect.transactions import transactions_report
from kcompact.repair.log_dir import repair_log_dir
from kcompact.repair.repair import RepairOptions
from tests.builders import PartitionBuilder

COMPACT = {"cleanup.policy": "compact"}
HOUR_S = 3600.0


@pytest.fixture
def ticking_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The wall clock one hour later at each read, every read's ms recorded: a run that reads it per
    partition sees partitions an hour apart."""
    start = time.time()
    reads: list[int] = []

    def ticking() -> float:
        now = start + HOUR_S * len(reads)
        reads.append(int(now * 1000))
        return now

    monkeypatch.setattr(time, "time", ticking)
    yield reads


def three_partitions(log_dir: Path) -> Path:
    for number in range(3):
        b = PartitionBuilder("orders", number)
        for round_ in range(3):
            b.batch([(f"k{j % 4}".encode(), f"v{round_}{j}".encode()) for j in range(10)])
        b.roll().batch([(b"x", b"1")])
        b.write(log_dir, cleaner_checkpoint=0)
    return log_dir


@pytest.mark.parametrize("dry_run", [True, False])
def test_log_dir_clean_judges_every_partition_at_one_now(
    tmp_path: Path, ticking_clock: list[int], dry_run: bool
) -> None:
    log_dir = three_partitions(tmp_path)
    run = clean_path(log_dir, cli_overrides=COMPACT, options=CleanOptions(dry_run=dry_run), jobs=1)
    assert not run.failures
    assert [r.now_ms for r in run.results] == [ticking_clock[0]] * 3


def test_now_ms_given_is_every_partitions_clock(tmp_path: Path, ticking_clock: list[int]) -> None:
    log_dir = three_partitions(tmp_path)
    run = clean_path(log_dir, cli_overrides=COMPACT, options=CleanOptions(now_ms=1_234, dry_run=True), jobs=1)
    assert [r.now_ms for r in run.results] == [1_234] * 3


def test_log_dir_repair_cleans_every_partition_at_one_now(tmp_path: Path, ticking_clock: list[int]) -> None:
    log_dir = three_partitions(tmp_path / "logs")
    outcome = repair_log_dir(log_dir, RepairOptions(clean=True, config_overrides=tuple(COMPACT.items()),
                                                     backup_dir=tmp_path / "backups"), jobs=1)
    assert not outcome.failures
    cleans = [result.clean for result in outcome.results]
    assert [c.results[0].now_ms for c in cleans if c is not None] == [ticking_clock[0]] * 3


def test_log_dir_transactions_share_one_now(tmp_path: Path, ticking_clock: list[int]) -> None:
    rows = transactions_report([three_partitions(tmp_path)], cli_overrides={})
    assert [row.now_ms for row in rows] == [ticking_clock[0]] * 3
