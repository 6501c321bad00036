"""``clean --scratch-dir`` on a log dir filled to the last byte (a small tmpfs), through a real broker.

A clean that writes its output in a scratch dir on another volume and brings each group in (``disk.scratch``)
leaves files a broker serves every key's latest value from. Killed in the window of an evacuation (the first
group's old files deleted, its cleaned files still only in the scratch dir), it leaves a partition that Kafka
4.1 loads and serves *with a hole* — the one guarantee ARCHITECTURE.md says the design cannot keep, shown here
by Kafka — and the next ``clean --scratch-dir`` settles it into one a broker serves whole.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.full_volume import fill, mounted_volumes
from tests.kafka.clients import Record
from tests.kafka.conftest import Kafka
from tests.kafka.scenario import copy_log_dir, latest_by_key
from tests.kafka.test_compaction_promise import READS, TOPIC, TOPIC_CONFIGS, produce_log, read_all
from tests.kafka.test_full_volume_e2e import du, kcompact

pytestmark = pytest.mark.broker
# The topic's segments hold one 4 KiB page each; cleaned one by one (internal.segment.bytes=2048 groups none
# together) they would give back no page, and advancing the cleaner checkpoint needs one: it then stays behind,
# reported. Grouping them all, as a broker with a larger segment.bytes would, gives pages back.
ONE_GROUP = ("--config", "internal.segment.bytes=1048576")


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    yield from mounted_volumes(tmp_path / "volumes")


def full_log_dir(kafka: Kafka, tmp_path: Path, small_volume: Callable[[int], Path]
                 ) -> tuple[dict[str, list[Record]], Path, Path]:
    """A stopped broker's log dir on a tmpfs with not one byte free; the records it served; the filler."""
    original = produce_log(kafka, tmp_path / "produced", TOPIC_CONFIGS)
    volume = small_volume(du(tmp_path / "produced") + 256 * 1024)
    log_dir = copy_log_dir(tmp_path / "produced", volume / "kafka-logs")
    return original, log_dir, fill(volume)


def first_log(log_dir: Path) -> str:
    return min(p.name for p in (log_dir / f"{TOPIC}-0").glob("*.log"))


def serve(kafka: Kafka, log_dir: Path) -> dict[str, list[Record]]:
    broker = kafka.on(log_dir)
    served = read_all(kafka.clients, broker.bootstrap)
    broker.stop()
    return served


def test_a_full_log_dir_cleaned_through_a_scratch_dir_is_served_whole(
    kafka: Kafka, tmp_path: Path, small_volume: Callable[[int], Path],
) -> None:
    original, log_dir, filler = full_log_dir(kafka, tmp_path, small_volume)
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    done = kcompact("clean", log_dir, "--scratch-dir", scratch, "--json", *ONE_GROUP)

    assert done.returncode == 0, done.stdout
    rows = {row["topic"]: row for row in json.loads(done.stdout)["results"]}
    (action,) = rows[TOPIC]["scratch_actions"]
    assert action.startswith(f"{first_log(log_dir)}: written in {scratch / f'{TOPIC}-0'}, evacuated (no group fitted "
                             "beside its old segments with 0 B free; the last left, it gives back "), action
    assert action.endswith("), then brought in")
    assert list(scratch.rglob("*")) == []
    os.unlink(filler)  # the broker needs room to start (the operator's file, not Kafka's)
    served = serve(kafka, log_dir)
    for isolation in READS:
        assert len(served[isolation]) < len(original[isolation])  # it was cleaned
    assert latest_by_key(served["read_committed"]) == latest_by_key(original["read_committed"])


def test_a_kill_in_the_evacuation_window_is_served_with_a_hole_until_the_next_clean_settles_it(
    kafka: Kafka, tmp_path: Path, small_volume: Callable[[int], Path],
) -> None:
    original, log_dir, filler = full_log_dir(kafka, tmp_path, small_volume)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    partition = log_dir / f"{TOPIC}-0"
    first = first_log(log_dir)

    crashed = kcompact("clean", log_dir, "--scratch-dir", scratch, *ONE_GROUP,
                       KCOMPACT_CRASH_AT="scratch-old-deleted")

    assert crashed.returncode == 137, crashed.stderr
    assert not (partition / first).exists()  # the first group is only in the scratch dir
    window = copy_log_dir(log_dir, tmp_path / "window")
    in_window = serve(kafka, window)  # Kafka loads it: no refusal, no recovery brings the group back
    offsets = {r.offset for r in in_window["read_committed"]}
    left = min(int(p.stem) for p in partition.glob("*.log"))  # the first segment after the deleted group
    assert left > int(first.removesuffix(".log")) and all(o >= left for o in offsets)  # the group's: absent
    assert latest_by_key(in_window["read_committed"]) != latest_by_key(original["read_committed"])

    settled = kcompact("clean", log_dir, "--scratch-dir", scratch, *ONE_GROUP)

    assert settled.returncode == 0, settled.stderr
    assert "evacuated group brought in from" in settled.stdout, settled.stdout
    assert list(scratch.rglob("*")) == []
    os.unlink(filler)
    served = serve(kafka, log_dir)
    assert latest_by_key(served["read_committed"]) == latest_by_key(original["read_committed"])
