"""Kafka's ``LeaderEpochFileCache`` as the referee of ``segment.lineage``: crafted ``leader-epoch-checkpoint``
files loaded by Kafka's own cache (``LeaderEpochCheckpointFile``), cut to the log as ``LogLoader.load`` cuts
them, and a follower's truncation walked with ``endOffsetFor`` answers (``referee/LineageWalk.java``, one JVM
for every case); kcompact's walk must give the same offset and the same loaded lineages, each way."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kcompact.segment.lineage import lineage_divergence, loaded_lineage, truncation_offset
from tests.kafka.jars import kafka_classpath
from tests.kafka.referee.harness import JVM_OPTIONS, compiled_classes
from tests.segment.test_lineage import WALKS

pytestmark = pytest.mark.broker

SOURCE = Path(__file__).parent / "referee" / "LineageWalk.java"
Entries = list[tuple[int, int]]
Side = tuple[Entries, int, int]  # checkpoint entries, log start, log end

# (follower, leader): the walks of tests/segment/test_lineage.py from log start 0, then checkpoints the
# loader must first put in order (an entry that breaks the order, entries past the log end, a moved start)
CASES: list[tuple[Side, Side]] = [((f, 0, f_end), (lead, 0, l_end)) for f, f_end, lead, l_end, _cut in WALKS] + [
    (([(0, 0), (2, 5), (1, 7), (4, 12)], 3, 20), ([(0, 0), (1, 7), (3, 15)], 0, 25)),
    (([(0, 0), (1, 40), (2, 70)], 0, 60), ([(0, 0), (1, 40)], 45, 80)),
    (([(0, 0), (1, 40)], 0, 50), ([(0, 0), (2, 30), (3, 42)], 0, 63)),
    (([(5, 100), (7, 150)], 120, 200), ([(5, 100), (6, 140), (7, 150)], 100, 210)),
    (([(0, 0), (3, 10), (9, 20)], 0, 30), ([(0, 0), (3, 10), (4, 20), (9, 25)], 0, 35)),
]


def _checkpoint(path: Path, entries: Entries) -> Path:
    path.write_text("\n".join(["0", str(len(entries)), *(f"{e} {s}" for e, s in entries)]) + "\n")
    return path


def _kafka_walks(tmp_path: Path, jobs: list[tuple[Side, Side]]) -> list[list[str]]:
    lines = []
    for i, ((f, f_start, f_end), (lead, l_start, l_end)) in enumerate(jobs):
        follower = _checkpoint(tmp_path / f"follower-{i}", f)
        leader = _checkpoint(tmp_path / f"leader-{i}", lead)
        lines.append("\t".join(map(str, (follower, f_start, f_end, leader, l_start, l_end))))
    command = ["java", *JVM_OPTIONS, "-cp", os.pathsep.join([str(compiled_classes(SOURCE)), kafka_classpath()]),
               "LineageWalk"]
    done = subprocess.run(command, input="\n".join(lines) + "\n", capture_output=True, text=True, check=True,
                          timeout=300)
    return [line.split("\t") for line in done.stdout.splitlines()]


def _entries(text: str) -> tuple[tuple[int, int], ...]:
    return tuple((int(e), int(s)) for e, s in (pair.split("@") for pair in text.split(",") if pair))


def test_kafka_walks_every_truncation_as_kcompact_does(tmp_path: Path) -> None:
    both_ways = [*CASES, *((leader, follower) for follower, leader in CASES)]
    replies = _kafka_walks(tmp_path, both_ways)

    assert len(replies) == len(both_ways)
    for ((f, f_start, f_end), (lead, l_start, l_end)), reply in zip(both_ways, replies, strict=True):
        assert reply[0] != "ERROR", reply
        ours_f, ours_l = loaded_lineage(f, f_start, f_end), loaded_lineage(lead, l_start, l_end)
        case = (f, f_start, f_end, lead, l_start, l_end)
        assert (_entries(reply[1]), _entries(reply[2])) == (ours_f, ours_l), case
        assert int(reply[0]) == truncation_offset(ours_f, f_end, ours_l, l_end), case


def test_where_kafka_truncates_a_diverged_pair_is_where_kcompact_says_their_lineages_part(tmp_path: Path) -> None:
    """The unclean election of tests/log/rules/test_fence_lineage.py, and the same pair at scale (the
    old leader's epoch 0 up to 63, the new leader's epoch 1 from 40): each truncated to the parting offset."""
    pairs = [(([(0, 0)], 0, 9), ([(0, 0), (1, 4)], 0, 8)), (([(0, 0)], 0, 63), ([(0, 0), (1, 40)], 0, 50))]
    replies = _kafka_walks(tmp_path, [*pairs, *((b, a) for a, b in pairs)])

    assert [int(r[0]) for r in replies] == [4, 40, 4, 40]
    assert [lineage_divergence(a[0], a[2], b[0], b[2]) for a, b in pairs] == [4, 40]
