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

import errno
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kcompact.cleaner.disk.roll import roll_active_segment
from kcompact.cleaner.disk.swap import leftover_files, recover_interrupted_swaps
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.round.plan import CleanPlan
from kcompact.cleaner.round.steps import RoundOutput
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.cli.main import cli
from kcompact.errors import BatchCrcError, CorruptDataError, CorruptRecordError, KcompactError
from kcompact.records.batch import iter_batches
from kcompact.records.crc import crc32c
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.index_builder import IndexBuilder
from kcompact.segment.names import segment_file_name
from kcompact.segment.partition import open_partition
from tests.builders import read_all_records
from tests.cleaner.disk.test_crash_recovery import (
    NOW,
    OVERRIDES,
    REPO_ROOT,
    build_partition,
    topic_config,
)
from tests.cleaner.disk.test_roll_crash import OVERRIDES as SMALL_SEGMENTS
from tests.cleaner.disk.test_roll_crash import small_segments_partition
from tests.cleaner.round.test_clean_failures import (
    CRC_POSITION,
    error_lines,
    log_dir_digest,
    middle_segment,
)
from tests.conftest import PROJECT_FIXTURES

ACTIVE_BASE = 29  # build_partition's active segment: one batch at offset 29
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
    real = IndexBuilder.finish_encoded

    def off_by_one(builder: IndexBuilder) -> tuple[bytes, bytes]:  # a kcompact bug, caught before any swap
        index, timeindex = real(builder)
        data = bytearray(index)
        if data:
            data[-1] ^= 1
        return bytes(data), timeindex

    part = rollable_partition(tmp_path / "logdir")
    monkeypatch.setattr(IndexBuilder, "finish_encoded", off_by_one)
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
from kcompact.cleaner.round import partition_round
partition_round.run_passes = lambda *args: os._exit(137)  # a kill -9 while pass 1 reads
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


KILLED_AT_THE_THIRD_FSYNC = """
import os, sys
calls = []
real = os.fsync
def fsync(fd):
    calls.append(fd)
    if len(calls) == 3:
        os._exit(137)  # a kill -9 as the roll fsyncs the new segment's first file
    real(fd)
os.fsync = fsync
from kcompact.cli.main import main
sys.argv = ["kcompact", *sys.argv[1:]]
main()
"""


def test_a_roll_killed_before_its_log_exists_does_not_block_the_next_clean(tmp_path: Path) -> None:
    """Killed at its third fsync, a roll leaves ``<log-end>.index`` with no ``.log`` and the ``.deleted``
    links of the rebuilt indexes; the next ``clean --roll`` deletes them, as Kafka's loader would, and goes on."""
    part = small_segments_partition(tmp_path / "logdir")
    end = open_partition(part).log_end_offset()
    argv = ["clean", str(part), "--roll", "--now-ms", str(NOW), "--json"]
    for key, value in SMALL_SEGMENTS.items():
        argv += ["--config", f"{key}={value}"]
    proc = subprocess.run([sys.executable, "-c", KILLED_AT_THE_THIRD_FSYNC, *argv], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 137, proc.stderr
    orphan = part / segment_file_name(end, "index")
    assert orphan.stat().st_size == 0 and not (part / segment_file_name(end, "log")).exists()
    assert len([p for p in leftover_files(part) if p.name.endswith(".deleted")]) == 2

    proc = subprocess.run([sys.executable, "-m", "kcompact", *argv], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, check=False)

    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["results"]
    assert f"delete orphaned {orphan.name} (no {orphan.stem}.log)" in row["recovery_actions"]
    assert row["status"] == "cleaned" and row["rolled"] is True
    assert (part / segment_file_name(end, "log")).stat().st_size == 0 and leftover_files(part) == []


def flip_crc_of_last_batch(segment: Path) -> None:
    data = bytearray(segment.read_bytes())
    last = list(iter_batches(bytes(data)))[-1]
    data[last.position + CRC_POSITION] ^= 0xFF
    segment.write_bytes(data)


@pytest.mark.parametrize("roll", [False, True])
def test_a_failed_clean_keeps_the_segments_below_the_log_start(tmp_path: Path, roll: bool) -> None:
    """Segments wholly below ``log-start-offset-checkpoint`` are deleted with the round's first change, once
    every output passed its self-check: a CRC failure found by the round leaves them, and the roll, as they were."""
    part = rollable_partition(tmp_path / "logdir")
    bases = sorted(int(p.name.split(".")[0]) for p in part.glob("*.log"))
    write_offset_checkpoint(part.parent / "log-start-offset-checkpoint", {("orders", 0): bases[2]})
    ok = shutil.copytree(part.parent, tmp_path / "ok") / part.name
    flip_crc_of_last_batch(middle_segment(part))
    options = roll_options() if roll else CleanOptions(now_ms=NOW)
    before = log_dir_digest(part.parent)

    with pytest.raises(BatchCrcError):
        clean_partition(part, topic_config(), options)

    assert log_dir_digest(part.parent) == before
    result = clean_partition(ok, topic_config(), options)  # without the damage they go, with the round
    assert result.retention is not None and result.retention.deleted_segments == bases[:2]
    assert min(int(p.name.split(".")[0]) for p in ok.glob("*.log")) >= bases[2]
    assert result.rolled is roll


def cli_json(*argv: str) -> Any:
    """The command's --json output (a JSON document: what it holds is the test's to check)."""
    result = CliRunner().invoke(cli, [*argv, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


SAME_AS_THE_RUN = ("status", "end_offset", "first_dirty_offset", "first_uncleanable_offset", "rolled",
                   "records_read", "records_written", "bytes_written", "superseded_removed",
                   "retention_deleted_segments", "recovery_actions")


def test_a_roll_dry_run_previews_the_roll_and_changes_nothing(tmp_path: Path) -> None:
    """On the sample log dir the rolled segment's data is part of the round: the dry run must say so."""
    log_dir = shutil.copytree(PROJECT_FIXTURES / "sample-logdir", tmp_path / "logdir")
    before = log_dir_digest(log_dir)

    (dry,) = cli_json("clean", str(log_dir), "--roll", "--dry-run", "--now-ms", str(NOW))["results"]

    assert log_dir_digest(log_dir) == before
    assert not list(tmp_path.glob(".kcompact-rehearsal-*"))  # the staged copy is gone
    (real,) = cli_json("clean", str(log_dir), "--roll", "--now-ms", str(NOW))["results"]
    assert dry["status"] == "would clean" and real["status"] == "cleaned"
    assert dry["end_offset"] == real["end_offset"]
    assert {k: dry[k] for k in SAME_AS_THE_RUN[1:]} == {k: real[k] for k in SAME_AS_THE_RUN[1:]}
    assert dry["rolled"] is True and dry["partition_dir"] == real["partition_dir"]


def test_a_dry_run_after_an_interrupted_roll_reports_what_the_run_settles(tmp_path: Path) -> None:
    part = rollable_partition(tmp_path / "logdir")
    roll = roll_active_segment(open_partition(part), topic_config())  # pending: its .deleted links stay
    assert roll is not None
    (part / segment_file_name(ACTIVE_BASE + 1, "log")).unlink()  # killed before its .log: orphaned indexes
    before = log_dir_digest(part.parent)
    argv = ["clean", str(part), "--roll", "--now-ms", str(NOW)]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]

    (dry,) = cli_json(*argv, "--dry-run")["results"]

    assert log_dir_digest(part.parent) == before
    (real,) = cli_json(*argv)["results"]
    assert len(real["recovery_actions"]) == 4  # two .deleted links, two orphaned indexes
    assert {k: dry[k] for k in SAME_AS_THE_RUN[1:]} == {k: real[k] for k in SAME_AS_THE_RUN[1:]}


def test_a_roll_that_cleans_nothing_is_undone(tmp_path: Path) -> None:
    """Held back by its high watermark, the partition has nothing to clean: the roll goes again, nothing
    changed, and the report says it did not roll."""
    part = rollable_partition(tmp_path / "logdir")
    write_offset_checkpoint(part.parent / "replication-offset-checkpoint", {("orders", 0): 3})
    before, stats = log_dir_digest(part.parent), active_index_stats(part)
    argv = ["clean", str(part), "--roll", "--now-ms", str(NOW)]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]

    (dry,) = cli_json(*argv, "--dry-run")["results"]
    (row,) = cli_json(*argv)["results"]

    assert log_dir_digest(part.parent) == before and active_index_stats(part) == stats
    assert leftover_files(part) == []
    assert row["status"] == dry["status"] == "nothing to clean"
    assert "high watermark" in row["skipped_reason"]
    assert row["rolled"] is dry["rolled"] is False and row["checkpoint_written"] is False


def test_a_roll_dry_run_stages_with_symbolic_links_where_hard_links_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another file system (or one without hard links): the staged copy is symbolic links, never a copy
    of a segment, and the preview is the same."""
    log_dir = shutil.copytree(PROJECT_FIXTURES / "sample-logdir", tmp_path / "logdir")
    (linked,) = cli_json("clean", str(log_dir), "--roll", "--dry-run", "--now-ms", str(NOW))["results"]
    before = log_dir_digest(log_dir)
    copied: list[str] = []
    real_copy = shutil.copyfile

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    def copyfile(src: str, dst: str, **kwargs: object) -> object:
        copied.append(Path(src).name)
        return real_copy(src, dst, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", refuse)
    monkeypatch.setattr(shutil, "copyfile", copyfile)
    (symlinked,) = cli_json("clean", str(log_dir), "--roll", "--dry-run", "--now-ms", str(NOW))["results"]

    assert symlinked == {**linked, "elapsed_s": symlinked["elapsed_s"]}
    assert log_dir_digest(log_dir) == before
    assert copied and not [name for name in copied if name.endswith(".log")], copied  # checkpoints, the roll's index
    assert any(name.endswith(".index") for name in copied)  # the roll kept its original through a symbolic link
