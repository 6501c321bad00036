"""Kafka's log loader as the referee of the log end ``clean --replica-dirs`` fences a copy at: a real broker-written
partition (``kraft37-cleaned-logdir/__consumer_offsets-31``: offset 2 in segment 0, offsets 3 and 4 in the active
segment 3) given an interrupted swap, leftovers of a clean, or a torn tail, then loaded by Kafka 4.1's
``UnifiedLog.create`` (``LogLoader.load``: the swap completed, the log recovered; ``referee/LoadedLogEnd.java``,
one JVM for every case). The log end Kafka serves must be the one kcompact reads from the untouched copy, and the
one its fence reports, and the leader-epoch lineage Kafka holds once loaded (a checkpoint that lost an entry gets
it back from the batches recovery walks) the one kcompact's lineage walk starts from."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.records.batch import iter_batches
from kcompact.segment.partition import open_partition
from kcompact.segment.recovery import recovered_log_end
from kcompact.segment.replica_copies import loaded_log_start, partition_lineage
from tests.conftest import copy_tree_writable, real_fixture
from tests.kafka.jars import kafka_classpath
from tests.kafka.referee.harness import JVM_OPTIONS, compiled_classes

pytestmark = pytest.mark.broker

SOURCE = Path(__file__).parent / "referee" / "LoadedLogEnd.java"
PARTITION = "__consumer_offsets-31"
LOG0, LOG3 = f"{0:020d}.log", f"{3:020d}.log"


def _batches(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return [data[b.position:b.position + b.size_in_bytes] for b in iter_batches(data)]


def swap_over_the_active_segment(part: Path) -> None:
    """A clean of segment 3 interrupted after its ``.swap`` (offset 3 only) was written; a ``.deleted`` file and
    a later ``.cleaned`` one beside it."""
    (part / f"{LOG3}.swap").write_bytes(_batches(part / LOG3)[0])
    (part / f"{0:020d}.timeindex.deleted").write_bytes(b"")
    (part / f"{40:020d}.log.cleaned").write_bytes(b"")


def swap_over_two_segments(part: Path) -> None:
    """A swap based at 0 holding offsets 2 and 3: it replaces segment 0 and segment 3 (named in [0, 4))."""
    (part / f"{LOG0}.swap").write_bytes(_batches(part / LOG0)[0] + _batches(part / LOG3)[0])


def swap_that_never_completed(part: Path) -> None:
    """A ``.cleaned`` file at or below the swap's base: a split that never finished, the swap is deleted."""
    swap_over_the_active_segment(part)
    (part / f"{LOG0}.cleaned").write_bytes(b"")


def checkpoint_without_its_latest_epoch(part: Path) -> None:
    """The checkpoint lost its last entry (10 from offset 4): recovery walks segment 3 (it holds the recovery
    point, 5) and assigns epoch 10 again from offset 4's batch."""
    (part / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n2 3\n")


def torn_tail(part: Path) -> None:
    data = (part / LOG3).read_bytes()
    (part / LOG3).write_bytes(data[:-7])  # offset 4's batch is partial


CASES: dict[str, tuple[Callable[[Path], None], int, str]] = {  # craft, log end, why
    "swap over the active segment": (swap_over_the_active_segment, 4, "completed swap"),
    "swap over two segments": (swap_over_two_segments, 4, "completed swap"),
    "swap that never completed": (swap_that_never_completed, 5, "log end"),
    "torn tail": (torn_tail, 4, "torn tail"),
    "checkpoint without its latest epoch": (checkpoint_without_its_latest_epoch, 5, "log end"),
}


def _copy(tmp_path: Path, name: str) -> Path:
    src = real_fixture("kraft37-cleaned-logdir")
    log_dir = tmp_path / name
    copy_tree_writable(src / PARTITION, log_dir / PARTITION)
    for checkpoint in src.glob("*-checkpoint"):
        shutil.copy(checkpoint, log_dir)
    return log_dir / PARTITION


def _kafka_loads(parts: list[Path]) -> list[list[str]]:
    command = ["java", *JVM_OPTIONS, "-cp", os.pathsep.join([str(compiled_classes(SOURCE)), kafka_classpath()]),
               "LoadedLogEnd"]
    done = subprocess.run(command, input="".join(f"{p}\n" for p in parts), capture_output=True, text=True,
                          check=True, timeout=300)
    return [line.split("\t") for line in done.stdout.splitlines()]


def test_kafka_loads_each_copy_to_the_log_end_kcompact_fences_it_at(tmp_path: Path) -> None:
    ours, lineages, kafkas, fenced = {}, {}, [], {}
    for i, (name, (craft, _end, _why)) in enumerate(CASES.items()):
        copy, loaded = _copy(tmp_path, f"copy-{i}"), _copy(tmp_path, f"kafka-{i}")
        craft(copy)
        craft(loaded)
        before = sorted(p.name for p in copy.iterdir())
        partition = open_partition(copy)
        end = recovered_log_end(partition)
        ours[name] = end.log_end_offset
        lineages[name] = ",".join(f"{e}@{s}" for e, s in partition_lineage(
            partition, loaded_log_start(partition), end.log_end_offset, end.recovered_epochs))
        row = _fence_row(tmp_path / f"cleaned-{i}", copy)
        fenced[name] = (row["offset"], row["why"], row["copies"][0]["log_end"])
        assert sorted(p.name for p in copy.iterdir()) == before  # read in place
        kafkas.append(loaded)

    replies = _kafka_loads(kafkas)

    kafka_ends = {name: int(reply[0]) for name, reply in zip(CASES, replies, strict=True)}
    assert kafka_ends == {name: end for name, (_craft, end, _why) in CASES.items()}, replies
    assert ours == kafka_ends
    assert lineages == {name: reply[2] for name, reply in zip(CASES, replies, strict=True)}
    assert lineages["checkpoint without its latest epoch"] == "0@0,2@3,10@4"
    assert fenced == {name: (end, why, end) for name, (_craft, end, why) in CASES.items()}
    assert replies[1][1] == "0"  # the swap over two segments left one


def _fence_row(log_dir: Path, copy: Path) -> dict[str, Any]:
    """``kcompact clean --replica-dirs COPY --dry-run --json`` of an untouched copy of the partition: its fence."""
    cleaned = _copy(log_dir.parent, log_dir.name)
    runner = CliRunner(catch_exceptions=False, env={"KCOMPACT_SERVER_PROPERTIES": None})
    done = runner.invoke(cli, ["clean", str(cleaned), "--replica-dirs", str(copy), "--roll", "--dry-run", "--json"])
    assert done.exit_code == 0, done.output
    (row,) = json.loads(done.stdout)["results"]
    fence = row["fence"]
    assert isinstance(fence, dict)
    return fence
