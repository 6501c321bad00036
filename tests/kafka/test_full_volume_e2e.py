"""The broker down at 100%, through a real broker: a stopped broker's log dir on a small tmpfs, a ``kcompact clean``
killed mid-swap (its ``.swap`` and ``.deleted`` files left, as a crashed cleaner leaves them), the volume filled to
the last byte. ``kcompact clean LOG_DIR`` settles the interrupted swap first (as Kafka's ``LogLoader.load`` does on
start), then cleans; a broker started on the result serves every key's latest value."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.full_volume import fill, free_bytes, mounted_volumes
from tests.kafka.conftest import Kafka
from tests.kafka.scenario import KCOMPACT, copy_log_dir, latest_by_key
from tests.kafka.test_compaction_promise import READS, TOPIC, TOPIC_CONFIGS, produce_log, read_all

pytestmark = pytest.mark.broker


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    yield from mounted_volumes(tmp_path / "volumes")


def kcompact(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The installed ``kcompact`` command (the tree under test where ``PYTHONPATH`` names one)."""
    tree = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    return subprocess.run([str(KCOMPACT), *map(str, args)], capture_output=True, text=True, check=False,
                          timeout=600, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", **tree, **env})


def du(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())


def test_a_full_log_dir_with_a_crashed_swap_is_settled_cleaned_and_served(
    kafka: Kafka, tmp_path: Path, small_volume: Callable[[int], Path],
) -> None:
    original = produce_log(kafka, tmp_path / "produced", TOPIC_CONFIGS)
    volume = small_volume(du(tmp_path / "produced") + 2 * 1024 * 1024)
    log_dir = copy_log_dir(tmp_path / "produced", volume / "kafka-logs")
    partition = log_dir / f"{TOPIC}-0"
    crashed = kcompact("clean", partition, KCOMPACT_CRASH_AT="deleted-complete")
    assert crashed.returncode == 137, crashed.stderr
    assert list(partition.glob("*.swap")) and list(partition.glob("*.deleted"))
    filler = fill(volume)

    done = kcompact("clean", log_dir)

    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(rf"^freed first, writing nothing Kafka keeps: .*\n(  {TOPIC}-0: .*\n)*"
                     rf"  {TOPIC}-0: rename \S+\.log\.swap to \S+\.log$", done.stdout, re.M), done.stdout
    assert re.search(rf"^{TOPIC}-0: cleaned dirty section", done.stdout, re.M), done.stdout
    assert not [p for p in log_dir.rglob("*") if p.suffix in (".swap", ".deleted", ".cleaned")]
    assert free_bytes(volume) > 0
    os.unlink(filler)  # the broker needs room to start (not Kafka's file: the operator's to delete)

    broker = kafka.on(log_dir)
    served = read_all(kafka.clients, broker.bootstrap)
    broker.stop()
    for isolation in READS:
        assert len(served[isolation]) < len(original[isolation])  # it was cleaned
    assert latest_by_key(served["read_committed"]) == latest_by_key(original["read_committed"])
