"""``clean --roll`` is all-or-nothing: a clean that fails leaves no rolled segment and no rebuilt index behind.

The roll (``cleaner/roll.py``) happens before the round reads anything: the active segment's data is only
cleanable once it is inactive. A round that then fails — corrupt data in a closed segment or in the rolled
segment itself, a self-check that refuses an output, the distributed runner failing — must leave every
file of the log dir as it was: the new empty segment's three files are gone again, and the old active
segment's ``.index``/``.timeindex`` (which the roll rebuilt) are the original files, mode and mtime
included. In these tests the active segment's ``.timeindex`` starts empty (a broker writes the first
time-index entry only after ``index.interval.bytes``), so a roll that stays would change it.

A kill between the roll and the first swap leaves the roll in place (a valid state for Kafka's loader):
the new empty active segment, the rebuilt indexes, and the original indexes as ``….deleted`` files, which
Kafka's loader and kcompact's recovery both delete.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cleaner.cleaner import CleanOptions, RoundOutput, clean_partition
from kcompact.cleaner.plan import CleanPlan
from kcompact.cleaner.roll import roll_active_segment
from kcompact.cleaner.swap import leftover_files, recover_interrupted_swaps
from kcompact.cli.main import cli
from kcompact.errors import CorruptDataError, CorruptRecordError, KcompactError
from kcompact.records.batch import iter_batches
from kcompact.records.crc import crc32c
from kcompact.segment.names import segment_file_name
from kcompact.segment.partition import open_partition
from tests.builders import read_all_records
from tests.cleaner.test_clean_failures import error_lines, log_dir_digest, middle_segment
from tests.cleaner.test_crash_recovery import (
    NOW,
    OVERRIDES,
    REPO_ROOT,
    build_partition,
    topic_config,
)

ACTIVE_BASE = 29  # build_partition's active segment: one batch at offset 29
CRC_POSITION = 17
CRC_COVERS_FROM = 21
RECORDS_COUNT_POSITION = 57


def rollable_partition(log_dir: Path) -> Path:
    """``build_partition`` with an empty active ``.timeindex`` (the roll adds its entry) and a 0640 index."""
    part = build_partition(log_dir)
    (part / segment_file_name(ACTIVE_BASE, "timeindex")).write_bytes(b"")
    (part / segment_file_name(ACTIVE_BASE, "index")).chmod(0o640)
    return part


def overstate_record_count(segment: Path) -> None:
    """The segment's first batch claims one record more than it holds (its CRC made valid again)."""
    data = bytearray(segment.read_bytes())
    first = next(iter_batches(bytes(data)))
    struct.pack_into(">i", data, first.position + RECORDS_COUNT_POSITION, first.records_count + 1)
    crc = crc32c(bytes(data[first.position + CRC_COVERS_FROM : first.position + first.size_in_bytes]))
    struct.pack_into(">I", data, first.position + CRC_POSITION, crc)
    segment.write_bytes(data)


def active_index_stats(part: Path) -> list[tuple[int, int]]:
    """(mode, mtime_ns) of the active segment's ``.index`` and ``.timeindex``: what the roll rewrites."""
    out = []
    for kind in ("index", "timeindex"):
        st = (part / segment_file_name(ACTIVE_BASE, kind)).stat()
        out.append((st.st_mode, st.st_mtime_ns))
    return out


def roll_options(**kwargs: object) -> CleanOptions:
    return CleanOptions(now_ms=NOW, roll=True, **kwargs)  # type: ignore[arg-type]


def assert_roll_fails_unchanged(part: Path, match: str, **kwargs: object) -> None:
    before, stats = log_dir_digest(part.parent), active_index_stats(part)
    with pytest.raises(KcompactError, match=match) as info:
        clean_partition(part, topic_config(), roll_options(**kwargs))
    assert "\n" not in str(info.value)
    assert log_dir_digest(part.parent) == before
    assert active_index_stats(part) == stats
    assert leftover_files(part) == []


def test_a_kept_roll_rebuilds_the_active_time_index_and_an_undone_one_restores_the_original(
    tmp_path: Path,
) -> None:
    part = rollable_partition(tmp_path / "logdir")
    before, stats = log_dir_digest(part.parent), active_index_stats(part)
    timeindex = part / segment_file_name(ACTIVE_BASE, "timeindex")

    roll = roll_active_segment(open_partition(part), topic_config())

    assert roll is not None and timeindex.stat().st_size == 12  # the entry onBecomeInactiveSegment adds
    assert [p.name for p in leftover_files(part)] == [
        segment_file_name(ACTIVE_BASE, "index", "deleted"), segment_file_name(ACTIVE_BASE, "timeindex", "deleted")]
    roll.undo()
    assert log_dir_digest(part.parent) == before and active_index_stats(part) == stats
    assert leftover_files(part) == []

    kept = roll_active_segment(open_partition(part), topic_config())
    assert kept is not None
    kept.keep()
    kept.undo()  # a kept roll stays
    assert timeindex.stat().st_size == 12 and leftover_files(part) == []
    assert (part / segment_file_name(ACTIVE_BASE + 1, "log")).stat().st_size == 0


def test_a_successful_clean_keeps_the_roll(tmp_path: Path) -> None:
    part = rollable_partition(tmp_path / "logdir")
    result = clean_partition(part, topic_config(), roll_options())
    assert result.end_offset == ACTIVE_BASE + 1  # the rolled segment's data was cleaned too
    assert (part / segment_file_name(ACTIVE_BASE + 1, "log")).stat().st_size == 0
    assert leftover_files(part) == []


@pytest.mark.parametrize("jobs", [1, 2])
def test_corrupt_closed_segment_leaves_no_rolled_segment(tmp_path: Path, jobs: int) -> None:
    part = rollable_partition(tmp_path / "logdir")
    overstate_record_count(middle_segment(part))
    assert_roll_fails_unchanged(part, r"expected 4 records, found 3", jobs=jobs)


def test_corrupt_batch_in_the_rolled_segment_itself(tmp_path: Path) -> None:
    part = rollable_partition(tmp_path / "logdir")
    overstate_record_count(part / segment_file_name(ACTIVE_BASE, "log"))
    assert_roll_fails_unchanged(part, r"expected 2 records, found 1")


def test_self_check_refusal_undoes_the_roll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kcompact.cleaner import swap

    real = swap.encode_offset_index  # type: ignore[attr-defined]

    def off_by_one(entries: object, base_offset: int) -> bytes:  # a kcompact bug, caught before any swap
        data = bytearray(real(entries, base_offset))  # type: ignore[arg-type]
        if data:
            data[-1] ^= 1
        return bytes(data)

    part = rollable_partition(tmp_path / "logdir")
    monkeypatch.setattr(swap, "encode_offset_index", off_by_one)
    assert_roll_fails_unchanged(part, r"fails kcompact's self-check, nothing was changed")


def test_a_failing_round_runner_undoes_the_roll(tmp_path: Path) -> None:
    """The distributed clean (``spark clean --map-budget``) runs passes 1 and 2 through a round runner."""

    def failing(plan: CleanPlan, options: CleanOptions, progress: object) -> RoundOutput:
        assert plan.first_uncleanable_offset == ACTIVE_BASE + 1  # it ran after the roll
        raise CorruptRecordError("a task failed", path=Path(plan.segments[0].log_path), position=0)

    part = rollable_partition(tmp_path / "logdir")
    before = log_dir_digest(part.parent)
    with pytest.raises(CorruptDataError, match="a task failed"):
        clean_partition(part, topic_config(), roll_options(), round_runner=failing)
    assert log_dir_digest(part.parent) == before


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_cli_clean_roll_fails_with_one_line_and_changes_nothing(tmp_path: Path, jobs: str) -> None:
    part = rollable_partition(tmp_path / "logdir")
    overstate_record_count(middle_segment(part))
    before = log_dir_digest(part.parent)
    argv = ["clean", str(part), "--roll", "--jobs", jobs, "--now-ms", str(NOW)]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]

    result = CliRunner().invoke(cli, argv, catch_exceptions=False)

    assert result.exit_code == 2
    assert len(error_lines(result.stderr)) == 1
    assert log_dir_digest(part.parent) == before
    assert not (part / segment_file_name(ACTIVE_BASE + 1, "log")).exists()


def test_kill_between_the_roll_and_the_swap_leaves_a_rolled_partition(tmp_path: Path) -> None:
    part = rollable_partition(tmp_path / "logdir")
    records = read_all_records(part)
    argv = [sys.executable, "-m", "kcompact", "clean", str(part), "--roll", "--now-ms", str(NOW)]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]
    env = {**os.environ, "KCOMPACT_CRASH_AT": "cleaned-written"}
    proc = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          check=False)

    assert proc.returncode == 137, proc.stderr
    rolled = part / segment_file_name(ACTIVE_BASE + 1, "log")
    assert rolled.exists() and rolled.stat().st_size == 0
    assert all(p.name.endswith(".cleaned") for p in leftover_files(part))  # the roll's backups are gone
    recover_interrupted_swaps(part)
    assert leftover_files(part) == []
    assert read_all_records(part) == records  # no record lost: every group is wholly old
    result = clean_partition(part, topic_config(), roll_options())
    assert result.end_offset == ACTIVE_BASE + 1 and leftover_files(part) == []


KILLED_IN_THE_ROUND = """
import os, sys
from kcompact.cleaner import cleaner
cleaner._run_round_here = lambda *args: os._exit(137)  # a kill -9 while pass 1 reads
from kcompact.cli.main import main
sys.argv = ["kcompact", *sys.argv[1:]]
main()
"""


def test_kill_during_the_round_leaves_the_roll_and_its_backups_for_recovery(tmp_path: Path) -> None:
    part = rollable_partition(tmp_path / "logdir")
    records = read_all_records(part)
    argv = [sys.executable, "-c", KILLED_IN_THE_ROUND, "clean", str(part), "--roll", "--now-ms", str(NOW)]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)

    assert proc.returncode == 137, proc.stderr
    assert [p.name for p in leftover_files(part)] == [
        segment_file_name(ACTIVE_BASE, "index", "deleted"), segment_file_name(ACTIVE_BASE, "timeindex", "deleted")]
    assert (part / segment_file_name(ACTIVE_BASE + 1, "log")).stat().st_size == 0
    recover_interrupted_swaps(part)  # as Kafka's loader: every *.deleted goes
    assert leftover_files(part) == []
    assert read_all_records(part) == records
    result = clean_partition(part, topic_config(), roll_options())
    assert result.end_offset == ACTIVE_BASE + 1 and leftover_files(part) == []
