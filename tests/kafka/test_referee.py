"""kcompact's clean against Kafka 4.1's own cleaner, byte for byte.

Each test makes a partition (the project's builders, or a broker-written fixture), copies it twice, runs one
round of ``kcompact``'s clean on one copy and one round of Kafka's ``Cleaner`` on the other
(``tests/kafka/referee``), both at the same now with the same topic config, and requires the same segment
files with the same bytes (``.log``, ``.index``, ``.timeindex``, ``.txnindex``) and the same
``cleaner-offset-checkpoint`` entry. One JVM serves the whole module.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from kcompact.cleaner.partition import clean_partition
from kcompact.cleaner.round.options import CleanOptions
from kcompact.config.topic_config import TopicConfig
from tests.kafka.referee.harness import (
    Referee,
    RefereeJob,
    RefereeResult,
    cleaner_checkpoint,
    compared_files,
)
from tests.partition_builder import BASE_TS, PartitionBuilder

pytestmark = pytest.mark.broker

COMPACT = {"cleanup.policy": "compact"}
LATER = BASE_TS + 3_600_000  # an hour after the builders' first record


@pytest.fixture(scope="module")
def referee(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Referee]:
    """One JVM running Kafka's cleaner for every test of the module."""
    log = tmp_path_factory.mktemp("referee") / "kafka.log"
    judge = Referee(log)
    yield judge
    judge.close()


def clean_both(
    referee: Referee,
    log_dir: Path,
    work: Path,
    *,
    now_ms: int,
    config: Mapping[str, str] = COMPACT,
    dedupe_buffer_size: int | None = None,
) -> tuple[Path, Path, RefereeResult]:
    """Copy ``log_dir`` to ``work/kcompact`` and ``work/kafka``, clean each partition of each; the two copies.

    Raises AssertionError when the two disagree on any compared file or checkpoint entry.
    """
    ours, theirs = work / "kcompact", work / "kafka"
    shutil.copytree(log_dir, ours, copy_function=shutil.copy2)
    shutil.copytree(log_dir, theirs, copy_function=shutil.copy2)
    result = RefereeResult("nothing")
    for part in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        options = CleanOptions(now_ms=now_ms, dedupe_buffer_size=dedupe_buffer_size)
        mine = clean_partition(ours / part.name, TopicConfig.defaults().with_overrides(config), options)
        result = referee.clean(RefereeJob(theirs / part.name, now_ms, dedupe_buffer_size, config))
        assert result.status != "error", f"Kafka's cleaner failed: {result.error} (log: {referee.log_path})"
        if result.status == "cleaned":
            assert mine.end_offset == result.end_offset, part.name
        else:
            assert mine.end_offset is None, f"{part.name}: kcompact cleaned, Kafka found nothing cleanable"
        assert_same_partition(ours / part.name, theirs / part.name)
    return ours, theirs, result


def assert_same_partition(ours: Path, theirs: Path) -> None:
    """The same segment files, byte for byte, and the same cleaner checkpoint entry."""
    mine, kafka = compared_files(ours), compared_files(theirs)
    assert sorted(mine) == sorted(kafka), f"{ours.name}: different segment files"
    for name in mine:
        assert mine[name] == kafka[name], f"{ours.name}/{name}: {first_difference(mine[name], kafka[name])}"
    assert cleaner_checkpoint(ours) == cleaner_checkpoint(theirs), f"{ours.name}: cleaner-offset-checkpoint"


def first_difference(a: bytes, b: bytes) -> str:
    """Where two files first differ (for the failure message)."""
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"first difference at byte {at} (kcompact {len(a)} bytes, Kafka {len(b)} bytes)"


def test_updates_and_a_tombstone_clean_alike(referee: Referee, tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"b", b"2")]).batch([(b"a", b"3"), (b"b", None)]).roll()
    b.batch([(b"c", b"1"), (b"a", b"4")]).roll().batch([(b"z", b"z")])
    b.write(tmp_path / "in")

    _, theirs, result = clean_both(referee, tmp_path / "in", tmp_path, now_ms=LATER)

    assert result.status == "cleaned" and result.end_offset == 6
    assert cleaner_checkpoint(theirs / "orders-0") == 6
