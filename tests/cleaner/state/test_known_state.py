"""A log-dir clean walks each partition's batch headers once: the ranking's load is the round's, unless the
partition changed in between."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kcompact.cleaner.state.log_state as log_state_module
from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.state.known_state import known_state, state_for_round
from kcompact.config.topic_config import defaults_with_overrides
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.partition import open_partition
from tests.builders import BASE_TS, PartitionBuilder

NOW = BASE_TS + 1_000_000
COMPACT = {"cleanup.policy": "compact"}
CONFIG = defaults_with_overrides(COMPACT)


def make_log_dir(log_dir: Path, partitions: int = 3) -> Path:
    watermarks = {}
    for number in range(partitions):
        b = PartitionBuilder("orders", number)
        for round_ in range(3):
            b.batch([(f"k{j % 5}".encode(), f"v{round_}-{j}".encode()) for j in range(12)]).roll()
        b.batch([(b"x", b"1")])
        b.write(log_dir, high_watermark=None)
        watermarks[("orders", number)] = b.next_offset
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", watermarks)
    return log_dir


def count_segment_walks(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every header walk of a segment (``load_log_state``'s per-segment step), by ``<partition>/<file>``."""
    walks: Counter[str] = Counter()
    original: Callable[..., Any] = log_state_module._load_segment

    def counted(seg: Any, *args: Any) -> Any:
        walks[f"{seg.log_path.parent.name}/{seg.log_path.name}"] += 1
        return original(seg, *args)

    monkeypatch.setattr(log_state_module, "_load_segment", counted)
    return walks


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_log_dir_clean_walks_each_segment_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 jobs: int) -> None:
    log_dir = make_log_dir(tmp_path / "logs")
    walks = count_segment_walks(monkeypatch)
    run = clean_path(log_dir, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW), jobs=jobs)
    assert [r.end_offset for r in run.results] == [36, 36, 36] and not run.failures
    if jobs == 1:  # worker processes count in their own memory
        assert set(walks.values()) == {1}
        assert len(walks) == 3 * 4  # three partitions of four segments


def test_the_round_reloads_what_changed_after_the_ranking(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "logs", partitions=1)
    partition = open_partition(log_dir / "orders-0")
    known = known_state(partition, CONFIG)
    assert state_for_round(known, open_partition(partition.path), CONFIG) is known.state

    # another process advanced the cleaner checkpoint: the known state's first dirty offset is stale
    write_offset_checkpoint(log_dir / "cleaner-offset-checkpoint", {("orders", 0): 24})
    reloaded = state_for_round(known, open_partition(partition.path), CONFIG)
    assert reloaded is not known.state and reloaded.checkpoint_offset == 24

    # a file rewritten in place, same size and name: its modification time tells
    known = known_state(open_partition(partition.path), CONFIG)
    index = partition.segments[0].index_path
    assert index is not None
    os.utime(index, ns=(0, 1))
    assert state_for_round(known, open_partition(partition.path), CONFIG) is not known.state

    # other settings: loaded again for them
    known = known_state(open_partition(partition.path), CONFIG)
    other = defaults_with_overrides({**COMPACT, "index.interval.bytes": 1})
    assert state_for_round(known, open_partition(partition.path), other) is not known.state
