"""A log-dir clean walks each partition's batch headers once: the ranking's load is the round's, unless the
partition changed in between."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kcompact.cleaner.logdir.run as run_module
import kcompact.log.state.log_state as log_state_module
from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.config.topic_config import defaults_with_overrides
from kcompact.log.state.known_state import known_state, state_for_round
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.control import ControlRecordType
from kcompact.records.record import Record
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.partition import open_partition
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.encoders import encode_control_batch
from tests.segment_writer import write_segment

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


PRODUCER = 7


def aborted_transaction_log_dir(log_dir: Path) -> tuple[Path, bytes, bytes]:
    """A partition whose first segment holds a transaction of two records (t1, t2) and its ABORT marker, with
    no ``.txnindex`` (the data decides, as for a segment Kafka recovers); returns it, the marker's bytes and
    the bytes of the COMMIT marker of the same size that may replace it."""
    b = PartitionBuilder("orders", 0)
    b.batch([(b"k1", b"a"), (b"k2", b"b")])
    b.batch([(b"t1", b"committed?"), (b"t2", b"committed?")], producer_id=PRODUCER, transactional=True)
    marker_offset, marker_ts = b.next_offset, b.ts
    b.marker(PRODUCER, commit=False).roll().batch([(b"k1", b"c")]).roll().batch([(b"x", b"1")])
    part = b.write(log_dir)
    for txn_index in part.glob("*.txnindex"):
        txn_index.unlink()
    abort, commit = (encode_control_batch(offset=marker_offset, timestamp=marker_ts, producer_id=PRODUCER,
                                          producer_epoch=0, control_type=kind, coordinator_epoch=1)
                     for kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT))
    assert len(abort) == len(commit) and (part / f"{0:020d}.log").read_bytes().count(abort) == 1
    return part, abort, commit


def rewrite_keeping_mtime(path: Path, old: bytes, new: bytes) -> None:
    """Rewrite ``old`` as ``new`` in place (same size), then put the modification time back with utime."""
    before = path.stat()
    time.sleep(0.02)  # a later moment than the ranking's look (the kernel's ctime clock ticks every few ms)
    data = path.read_bytes()
    with path.open("r+b") as f:
        f.seek(data.index(old))
        f.write(new)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_a_same_size_rewrite_with_its_mtime_put_back_is_seen(tmp_path: Path) -> None:
    part, abort, commit = aborted_transaction_log_dir(tmp_path / "logs")
    known = known_state(open_partition(part), CONFIG)
    assert [t.aborted for t in known.state.transactions] == [True]

    rewrite_keeping_mtime(part / f"{0:020d}.log", abort, commit)

    reloaded = state_for_round(known, open_partition(part), CONFIG)
    assert reloaded is not known.state and [t.aborted for t in reloaded.transactions] == [False]


def test_a_log_dir_clean_keeps_records_committed_after_its_ranking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the ranking (which loaded the state: t1, t2 aborted) and the round, the ABORT marker becomes a
    COMMIT of the same size and the file's mtime is put back: the round plans on the data as it now is."""
    part, abort, commit = aborted_transaction_log_dir(tmp_path / "logs")
    round_of = run_module._round_of

    def rewritten_after_the_ranking(options: CleanOptions, task: run_module.PartitionTask,
                                    progress: Any) -> Any:
        assert task.known is not None  # the ranking's load, handed to the round
        rewrite_keeping_mtime(part / f"{0:020d}.log", abort, commit)
        return round_of(options, task, progress)

    monkeypatch.setattr(run_module, "_round_of", rewritten_after_the_ranking)
    run = clean_path(part.parent, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW), jobs=1)

    assert [r.end_offset for r in run.results] == [6] and not run.failures
    assert {key: value for _, key, value in read_all_records(part)} == {
        b"k1": b"c", b"k2": b"b", b"t1": b"committed?", b"t2": b"committed?", b"x": b"1"}


def test_a_log_dir_clean_lists_afresh_a_partition_that_rolled_after_its_ranking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The round starts from the ranking's listing of the partition directory; a segment rolled in between
    (a new ``.log`` and its indexes) makes it list again: the old active segment is cleaned, the new one kept."""
    log_dir = make_log_dir(tmp_path / "logs", partitions=1)
    part = log_dir / "orders-0"
    round_of = run_module._round_of

    def rolled_after_the_ranking(options: CleanOptions, task: run_module.PartitionTask, progress: Any) -> Any:
        assert task.known is not None and len(task.known.state.partition.segments) == 4
        record = Record(37, BASE_TS + 99, b"k0", b"after the ranking")
        write_segment(part, 37, [encode_batch([record], base_offset=37)])
        write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("orders", 0): 38})
        return round_of(options, task, progress)

    monkeypatch.setattr(run_module, "_round_of", rolled_after_the_ranking)
    run = clean_path(log_dir, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW), jobs=1)

    assert [r.end_offset for r in run.results] == [37] and not run.failures
    assert sorted(p.name for p in part.glob("*.log"))[-1] == f"{37:020d}.log"
    assert {key: value for _, key, value in read_all_records(part)}[b"k0"] == b"after the ranking"
