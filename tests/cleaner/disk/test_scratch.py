"""``clean --scratch-dir``: the cleaned segments are written in a scratch dir on another volume and brought in
group by group (``disk.scratch``), also where the partition's volume has not one byte free.

The partition is ``test_crash_recovery``'s (three groups of two segments). Each crash point of
``scratch.SCRATCH_CRASH_POINTS`` and of ``swap.CRASH_POINTS`` on the way in is killed — a real ``kcompact clean``
dying there with ``KCOMPACT_CRASH_AT`` (``os._exit(137)``), or, for every group, a hook that copies the log dir and
the scratch dir at the point and settles the copy — and the next ``clean --scratch-dir`` settles it: each group
wholly old or wholly new, then the records by key those of a clean that never crashed, the scratch dir empty.
The full volume is a real tmpfs filled to its last byte (``tests/full_volume.py``; root only).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kcompact.cleaner.disk.scratch import PENDING_MARKER, SCRATCH_CRASH_POINTS, NextGroup, next_group, settle_scratch
from kcompact.cleaner.disk.swap import CRASH_POINTS, CleanedSegment, leftover_files
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.errors import KcompactError
from kcompact.segment.checkpoint import read_offset_checkpoint
from kcompact.segment.partition import SegmentFiles
from kcompact.text import size_text
from tests.builders import read_all_records
from tests.cleaner.disk.test_crash_recovery import (
    NOW,
    OTHER_PARTITION,
    OVERRIDES,
    REPO_ROOT,
    Layout,
    assert_recovered,
    build_partition,
    file_bytes,
    make_layout,
    topic_config,
)
from tests.full_volume import fill, fill_as_broker, free_bytes, mounted_ext4_volumes, mounted_volumes

VOLUME_BYTES = 512 * 1024
# On the way in where the volume has room: the scratch points, then swap.py's own (Kafka's replaceSegments).
FITTING_POINTS = ("scratch-written", "scratch-copied-partial", "scratch-copied", *CRASH_POINTS, "scratch-swapped")
# Where it has none: the old group goes first; with nothing left to replace, no old file is renamed .deleted.
EVACUATING_POINTS = ("scratch-written", "scratch-old-deleted", "scratch-copied-partial", "scratch-copied",
                     *(p for p in CRASH_POINTS if p != "deleted-partial"), "scratch-swapped")
# Points at which a group is settled as new: from Kafka's swap-complete on where it fits; once its old files
# began to go where it does not.
NEW_WHEN_FITTING = set(FITTING_POINTS[FITTING_POINTS.index("swap-complete"):])
NEW_WHEN_EVACUATING = set(EVACUATING_POINTS[1:])


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return make_layout(tmp_path_factory.mktemp("reference"))


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    yield from mounted_volumes(tmp_path)


def full_partition(small_volume: Callable[[int], Path]) -> Path:
    """The partition in a log dir on a tmpfs with not one byte free."""
    part = build_partition(small_volume(VOLUME_BYTES) / "logdir")
    fill(part.parent.parent)
    return part


def scratch_dir(tmp_path: Path) -> Path:
    """The scratch dir, on another volume than the log dir's (``tmp_path``'s, where the log dir is a tmpfs)."""
    path = tmp_path / "scratch"
    path.mkdir()
    return path


def kcompact_clean(part: Path, *extra: str | Path, env: dict[str, str] | None = None, text: bool = False
                   ) -> subprocess.CompletedProcess[str]:
    """``kcompact clean PART --json EXTRA...`` in a subprocess (the text report with ``text``)."""
    report = [] if text else ["--json"]
    argv = [sys.executable, "-m", "kcompact", "clean", str(part), "--now-ms", str(NOW), *report, *map(str, extra)]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]
    return subprocess.run(argv, env={**os.environ, **(env or {})}, cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


def assert_cleaned(part: Path, scratch: Path, layout: Layout) -> None:
    """Every group new, the records those of a clean that never crashed, nothing left anywhere."""
    assert read_all_records(part) == layout.reference_records
    assert leftover_files(part) == []
    assert not (part / PENDING_MARKER).exists()
    assert list(scratch.rglob("*")) == []
    checkpoint = read_offset_checkpoint(part.parent / "cleaner-offset-checkpoint")
    assert checkpoint == {("orders", 0): layout.end_offset, OTHER_PARTITION: 42}


def scratch_actions(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["results"]
    actions: list[str] = row["scratch_actions"]
    return actions


def test_every_named_crash_point_is_killed_on_one_of_the_two_ways_in() -> None:
    assert set(SCRATCH_CRASH_POINTS) | set(CRASH_POINTS) == set(FITTING_POINTS) | set(EVACUATING_POINTS)


# --- a volume with room ----------------------------------------------------------------------------------


def test_with_room_each_group_is_copied_in_beside_its_old_segments(tmp_path: Path, layout: Layout) -> None:
    part, scratch = build_partition(tmp_path / "logdir"), scratch_dir(tmp_path)

    actions = scratch_actions(kcompact_clean(part, "--scratch-dir", scratch))

    assert [a.split(": ", 1)[1] for a in actions] == [
        f"written in {scratch / part.name}, copied in beside its old segments, then swapped"] * 3
    assert file_bytes(part) == layout.reference  # the same files as a clean in place
    assert_cleaned(part, scratch, layout)


def test_the_text_report_says_where_each_group_went(tmp_path: Path) -> None:
    part, scratch = build_partition(tmp_path / "logdir"), scratch_dir(tmp_path)

    proc = kcompact_clean(part, "--scratch-dir", scratch, text=True)

    lines = [line for line in proc.stdout.splitlines() if "scratch dir:" in line]
    assert lines == [f"orders-0: scratch dir: {base:020d}.log: written in {scratch / part.name}, copied in beside its "
                     "old segments, then swapped" for base in (0, 11, 20)], proc.stdout


@pytest.mark.parametrize("point", FITTING_POINTS)
def test_kill_on_the_way_in_with_room_then_the_next_clean_settles(
    tmp_path: Path, layout: Layout, point: str
) -> None:
    part, scratch = build_partition(tmp_path / "logdir"), scratch_dir(tmp_path)

    proc = kcompact_clean(part, "--scratch-dir", scratch, env={"KCOMPACT_CRASH_AT": point})

    assert proc.returncode == 137, proc.stderr
    refused = kcompact_clean(part)  # without the scratch dir: the partition is not touched
    assert refused.returncode == 2 and PENDING_MARKER in refused.stderr, refused.stderr
    settled = kcompact_clean(part, "--scratch-dir", scratch)
    actions = scratch_actions(settled)  # Kafka's loader rules first (recover_interrupted_swaps), then the manifest's
    assert any(a.startswith("00000000000000000000.log: the scratch clean had ") for a in actions), actions
    assert_cleaned(part, scratch, layout)


# --- a volume with not one byte free (root: a tmpfs) -----------------------------------------------------


def test_a_full_volume_is_cleaned_through_the_scratch_dir(
    small_volume: Callable[[int], Path], tmp_path: Path, layout: Layout
) -> None:
    part, scratch = full_partition(small_volume), scratch_dir(tmp_path)
    assert free_bytes(part) == 0
    in_place = kcompact_clean(part)
    assert in_place.returncode == 2 and "not cleaned: needs" in in_place.stderr  # nothing changed
    assert file_bytes(part) == layout.original

    actions = scratch_actions(kcompact_clean(part, "--scratch-dir", scratch))

    # the three groups give back as much each: the first (lowest offset) goes, and the others fit beside theirs
    assert actions[0] == (f"00000000000000000000.log: written in {scratch / part.name}, evacuated (no group fitted "
                          "beside its old segments with 0 B free; of the 3 left it gives back the most, 12.0 KiB), "
                          "then brought in")
    assert len(actions) == 3 and not any("evacuated" in a for a in actions[1:])
    assert file_bytes(part) == layout.reference
    assert_cleaned(part, scratch, layout)
    assert free_bytes(part) > 0  # what the clean gave back


def test_a_full_log_dir_is_cleaned_through_the_scratch_dir(
    small_volume: Callable[[int], Path], tmp_path: Path, layout: Layout
) -> None:
    part, scratch = full_partition(small_volume), scratch_dir(tmp_path)

    proc = kcompact_clean(part.parent, "--scratch-dir", scratch)

    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["results"]
    assert "evacuated (no group fitted beside" in row["scratch_actions"][0] and len(row["scratch_actions"]) == 3
    assert file_bytes(part) == layout.reference
    assert_cleaned(part, scratch, layout)


@pytest.mark.parametrize("point", EVACUATING_POINTS)
def test_kill_while_evacuating_then_the_next_clean_settles(
    small_volume: Callable[[int], Path], tmp_path: Path, layout: Layout, point: str
) -> None:
    part, scratch = full_partition(small_volume), scratch_dir(tmp_path)

    proc = kcompact_clean(part, "--scratch-dir", scratch, env={"KCOMPACT_CRASH_AT": point})

    assert proc.returncode == 137, proc.stderr
    assert (part / PENDING_MARKER).exists()
    before = file_bytes(part)
    refused = kcompact_clean(part)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and PENDING_MARKER in refused.stderr
    dry_run = kcompact_clean(part, "--dry-run", "--scratch-dir", scratch)
    assert dry_run.returncode == 2 and "a dry run cannot preview the settlement" in dry_run.stderr, dry_run.stderr
    assert file_bytes(part) == before
    repair = subprocess.run([sys.executable, "-m", "kcompact", "repair", str(part)], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert repair.returncode == 2 and PENDING_MARKER in repair.stderr, repair.stderr
    assert file_bytes(part) == before
    settled = scratch_actions(kcompact_clean(part, "--scratch-dir", scratch))
    expected = ("evacuated group brought in from" if point in NEW_WHEN_EVACUATING - {"scratch-swapped"}
                and point not in ("swap-complete", "deleted-complete", "final-partial", "final-complete")
                else "the scratch clean had")
    assert any(a.startswith(f"00000000000000000000.log: {expected}") for a in settled), settled
    assert_cleaned(part, scratch, layout)


class SimulatedCrash(BaseException):
    """Raised by a crash hook; a BaseException so that no ``except Exception`` can tidy up after it."""


@pytest.mark.parametrize("full", [False, True], ids=["room", "full"])
def test_every_point_of_every_group_settles_each_group_wholly_old_or_new(
    request: pytest.FixtureRequest, tmp_path: Path, layout: Layout, full: bool
) -> None:
    if full:
        part = full_partition(request.getfixturevalue("small_volume"))
    else:
        part = build_partition(tmp_path / "logdir")
    scratch = scratch_dir(tmp_path)
    seen: list[tuple[int, str]] = []
    evacuated: set[int] = set()

    def observe(point: str) -> None:
        group = sum(1 for _g, p in seen if p == "scratch-written") - (point != "scratch-written")
        seen.append((group, point))
        if point == "scratch-old-deleted":
            evacuated.add(group)
        new_at = NEW_WHEN_EVACUATING if group in evacuated else NEW_WHEN_FITTING
        at = tmp_path / f"at-{group}-{point}"
        copy = shutil.copytree(part.parent, at / "logdir") / part.name
        scratch_copy = shutil.copytree(scratch, at / "scratch")
        settle_scratch(copy, scratch_copy)
        assert_recovered(copy, layout, set(range(group)) | ({group} if point in new_at else set()))
        assert list(scratch_copy.rglob("*")) == [] and not (copy / PENDING_MARKER).exists()

    clean_partition(part, topic_config(), CleanOptions(now_ms=NOW, crash_hook=observe, scratch_dir=str(scratch)))

    # The first group has no room; what each evacuated group gives back may let later ones in beside their old
    # segments.
    assert evacuated == ({0} if full else set())
    assert seen == [(g, p) for g in range(len(layout.groups))
                    for p in (EVACUATING_POINTS if g in evacuated else FITTING_POINTS)]
    assert file_bytes(part) == layout.reference
    assert_cleaned(part, scratch, layout)


def test_an_io_error_on_the_way_in_is_one_line_and_the_next_clean_settles(tmp_path: Path, layout: Layout) -> None:
    part, scratch = build_partition(tmp_path / "logdir"), scratch_dir(tmp_path)

    def disk_full(point: str) -> None:
        if point == "scratch-copied-partial":
            raise OSError(28, "No space left on device")

    with pytest.raises(KcompactError) as raised:
        clean_partition(part, topic_config(), CleanOptions(now_ms=NOW, crash_hook=disk_full, scratch_dir=str(scratch)))

    assert str(raised.value) == (
        f"{part}: bringing in the cleaned 00000000000000000000.log from {scratch / part.name} failed (No space left "
        f"on device); its manifest stays there: run `kcompact clean --scratch-dir {scratch}` again before a broker "
        "starts on the partition")
    assert (part / PENDING_MARKER).exists()
    actions = scratch_actions(kcompact_clean(part, "--scratch-dir", scratch))
    assert "00000000000000000000.log: the scratch clean had not changed its group; scratch files removed" in actions
    assert_cleaned(part, scratch, layout)


def test_a_manifest_that_does_not_parse_is_one_line(tmp_path: Path, layout: Layout) -> None:
    part, scratch = build_partition(tmp_path / "logdir"), scratch_dir(tmp_path)
    (scratch / part.name).mkdir(parents=True)
    (scratch / part.name / "00000000000000000000.scratch.json").write_text("{")

    proc = kcompact_clean(part, "--scratch-dir", scratch)

    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "00000000000000000000.scratch.json: not a kcompact scratch manifest" in proc.stderr
    assert file_bytes(part) == layout.original


def test_a_scratch_dir_inside_the_log_dir_is_refused(tmp_path: Path, layout: Layout) -> None:
    part = build_partition(tmp_path / "logdir")
    inside = part.parent / "scratch"
    inside.mkdir()

    proc = kcompact_clean(part, "--scratch-dir", inside)

    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the scratch dir is inside the log dir" in proc.stderr
    assert file_bytes(part) == layout.original


def test_a_scratch_dir_inside_the_log_dir_is_refused_in_a_dry_run_too(tmp_path: Path, layout: Layout) -> None:
    part = build_partition(tmp_path / "logdir")
    inside = part.parent / "scratch"
    inside.mkdir()

    proc = kcompact_clean(part, "--dry-run", "--scratch-dir", inside)

    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the scratch dir is inside the log dir" in proc.stderr


# --- another log dir of the broker (JBOD: its volume's free space) ----------------------------------------


def other_log_dir(tmp_path: Path) -> Path:
    """Another Kafka log dir (its meta.properties and a partition of its own), on another volume than ``tmp_path``'s
    tmpfs in the full-volume tests."""
    other = tmp_path / "other-logs"
    (other / "events-3").mkdir(parents=True)
    (other / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=x\ndirectory.id=y\n")
    return other


def other_log_dir_entries(other: Path) -> list[str]:
    return sorted(p.name for p in other.iterdir())


def test_in_another_log_dir_the_scratch_files_are_files_of_its_top_with_no_directory(
    tmp_path: Path, layout: Layout
) -> None:
    part, other = build_partition(tmp_path / "logdir"), other_log_dir(tmp_path)

    proc = kcompact_clean(part, "--scratch-dir", other, env={"KCOMPACT_CRASH_AT": "scratch-written"})

    assert proc.returncode == 137, proc.stderr
    # Kafka's LogManager.loadLogs loads the log dir's directories only: no new one; the group's files and manifest
    left = [p for p in other.iterdir() if p.name not in ("meta.properties", "events-3")]
    assert all(p.is_file() and p.name.startswith("kcompact-scratch.orders-0.") for p in left), left
    assert "kcompact-scratch.orders-0.00000000000000000000.scratch.json" in {p.name for p in left}
    assert "kcompact-scratch.orders-0.00000000000000000000.log.cleaned" in {p.name for p in left}
    settled = scratch_actions(kcompact_clean(part, "--scratch-dir", other))
    assert settled[0] == "00000000000000000000.log: the scratch clean had not changed its group; scratch files removed"
    assert [a for a in settled if a.startswith("delete unfinished")] == [  # the groups not begun
        f"delete unfinished {other}/kcompact-scratch.orders-0.{base:020d}.{kind}.cleaned (no manifest: its group "
        "was never brought in)" for base in (11, 20) for kind in ("index", "log", "timeindex")]
    assert [a for a in settled if "written in" in a] == [
        f"{base:020d}.log: written in {other}/kcompact-scratch.orders-0.*, copied in beside its old segments, then "
        "swapped" for base in (0, 11, 20)]
    assert other_log_dir_entries(other) == ["events-3", "meta.properties"]
    assert read_all_records(part) == layout.reference_records


def test_a_full_volume_is_cleaned_through_another_log_dir(
    small_volume: Callable[[int], Path], tmp_path: Path, layout: Layout
) -> None:
    part, other = full_partition(small_volume), other_log_dir(tmp_path)

    actions = scratch_actions(kcompact_clean(part, "--scratch-dir", other))

    assert actions[0].startswith(f"00000000000000000000.log: written in {other}/kcompact-scratch.orders-0.*, "
                                 "evacuated (no group fitted beside its old segments with 0 B free;")
    assert other_log_dir_entries(other) == ["events-3", "meta.properties"]
    assert read_all_records(part) == layout.reference_records


def test_a_directory_inside_another_log_dir_is_refused_naming_the_log_dir(tmp_path: Path, layout: Layout) -> None:
    part, other = build_partition(tmp_path / "logdir"), other_log_dir(tmp_path)
    inside = other / "scratch"
    inside.mkdir()

    for args in ((part,), (part.parent,), (part, "--dry-run")):
        proc = kcompact_clean(*args, "--scratch-dir", inside)

        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert (f"the scratch dir is a directory inside the Kafka log dir {other}, where a directory not named "
                "topic-partition stops the broker's start (LogManager.loadLogs); give the log dir itself, "
                f"--scratch-dir {other}:") in proc.stderr, proc.stderr
        assert file_bytes(part) == layout.original
        assert list(inside.iterdir()) == []


# --- a volume keeping blocks for root (ext4's reserve), full to the broker -------------------------------


@pytest.fixture
def ext4_volume(tmp_path: Path) -> Iterator[Callable[[int, int], Path]]:
    yield from mounted_ext4_volumes(tmp_path / "ext4")


def broker_full_partition(ext4_volume: Callable[[int, int], Path]) -> Path:
    """The partition on an ext4 volume keeping 10 % for root, filled to the last byte a broker (not root) may use."""
    volume = ext4_volume(4 << 20, 10)
    part = build_partition(volume / "logdir")
    fill_as_broker(volume)
    assert os.statvfs(volume).f_bfree > 0  # root's reserve is left
    return part


def test_the_free_space_is_the_brokers_and_the_report_names_roots_reserve(
    ext4_volume: Callable[[int, int], Path],
) -> None:
    part = broker_full_partition(ext4_volume)
    st = os.statvfs(part)
    reserve = (st.f_bfree - st.f_bavail) * st.f_frsize

    proc = kcompact_clean(part, "--dry-run", text=True)

    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if "free at peak" in line]
    assert line.rstrip().endswith(f"0 B free to the broker (f_bavail; {size_text(reserve)} more is root's reserve, "
                                  "which a broker not run as root cannot use: not counted)"), proc.stdout


def test_as_root_a_group_is_copied_in_through_roots_reserve_rather_than_evacuated(
    ext4_volume: Callable[[int, int], Path], tmp_path: Path, layout: Layout
) -> None:
    part, scratch = broker_full_partition(ext4_volume), scratch_dir(tmp_path)

    actions = scratch_actions(kcompact_clean(part, "--scratch-dir", scratch))

    assert actions[0] == (f"00000000000000000000.log: written in {scratch / part.name}, copied in beside its old "
                          "segments through root's reserve, then swapped")
    assert not any("evacuated" in a for a in actions)
    assert_cleaned(part, scratch, layout)


# --- a dry run with a scratch dir ------------------------------------------------------------------------


def test_a_dry_run_reports_the_scratch_dirs_peak_the_run_then_reaches(
    small_volume: Callable[[int], Path], tmp_path: Path
) -> None:
    part, scratch = build_partition(tmp_path / "logdir"), small_volume(VOLUME_BYTES)  # no other writer

    dry = kcompact_clean(part, "--dry-run", "--scratch-dir", scratch)
    text = kcompact_clean(part, "--dry-run", "--scratch-dir", scratch, text=True)

    assert dry.returncode == 0, dry.stderr
    (row,) = json.loads(dry.stdout)["results"]
    assert row["scratch_free_bytes"] == free_bytes(scratch)
    (line,) = [line.strip() for line in text.stdout.splitlines() if line.strip().startswith("scratch dir")]
    assert line == (f"scratch dir       needs {size_text(row['scratch_peak_bytes'])} free at peak; "
                    f"{size_text(row['scratch_free_bytes'])} free")
    # the real run at its first bring-in: every group's output in the scratch dir at once
    crashed = kcompact_clean(part, "--scratch-dir", scratch, env={"KCOMPACT_CRASH_AT": "scratch-written"})
    assert crashed.returncode == 137, crashed.stderr
    cleaned = list((scratch / part.name).glob("*.cleaned"))
    assert {p.name.split(".")[0] for p in cleaned} == {f"{base:020d}" for base in (0, 11, 20)}  # the 3 groups'
    assert row["scratch_peak_bytes"] == sum(p.stat().st_blocks * 512 for p in cleaned)


def test_a_dry_run_whose_output_the_scratch_dir_cannot_hold_is_refused(
    small_volume: Callable[[int], Path], tmp_path: Path, layout: Layout
) -> None:
    part = build_partition(tmp_path / "logdir")
    scratch = small_volume(VOLUME_BYTES)
    fill(scratch)

    proc = kcompact_clean(part, "--dry-run", "--scratch-dir", scratch)

    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{part}: not cleaned: the scratch dir {scratch} needs " in proc.stderr
    assert proc.stderr.rstrip().endswith("; 0 B free; give one on a volume with room; nothing was changed")
    assert file_bytes(part) == layout.original and [p.name for p in scratch.iterdir()] == ["filler"]


# --- which group is evacuated -----------------------------------------------------------------------------


def group(part: Path, scratch: Path, base: int, old_bytes: int, new_bytes: int) -> tuple[CleanedSegment,
                                                                                      list[SegmentFiles]]:
    """A group of one old segment of ``old_bytes`` in ``part`` and its cleaned ``.log`` of ``new_bytes`` in
    ``scratch``."""
    old = part / f"{base:020d}.log"
    old.write_bytes(b"o" * old_bytes)
    new = scratch / f"{base:020d}.log.cleaned"
    new.write_bytes(b"n" * new_bytes)
    return (CleanedSegment(scratch, base, new_bytes, {"log": new}),
            [SegmentFiles(base, old, old_bytes, old.stat().st_mtime_ns, None, None, None)])


@pytest.mark.parametrize(("old_sizes", "spare", "chosen", "why"), [
    ((8 << 10, 40 << 10, 40 << 10), 0, 1, "no group fitted beside its old segments with 0 B free; of the 3 left it "
                                         "gives back the most, 36.0 KiB"),
    ((40 << 10, 8 << 10, 40 << 10), 0, 0, "no group fitted beside its old segments with 0 B free; of the 3 left it "
                                         "gives back the most, 36.0 KiB"),  # a tie: the lowest offset
    ((8 << 10, 40 << 10, 40 << 10), 8 << 10, 0, ""),  # the first fits beside its old segments: no window at all
], ids=["most", "tie", "fits"])
def test_the_group_evacuated_is_the_one_that_gives_back_the_most(
    small_volume: Callable[[int], Path], tmp_path: Path, old_sizes: tuple[int, ...], spare: int, chosen: int,
    why: str,
) -> None:
    volume = small_volume(VOLUME_BYTES)
    part, scratch = volume / "logdir" / "orders-0", scratch_dir(tmp_path)
    part.mkdir(parents=True)
    pending = [group(part, scratch, base, size, 4 << 10) for base, size in zip((0, 10, 20), old_sizes, strict=True)]
    (volume / "spare").write_bytes(b"s" * spare)
    fill(volume)
    (volume / "spare").unlink()

    assert next_group(pending, part) == NextGroup(chosen, why)


def test_a_group_rewritten_since_the_kill_is_not_settled_over(tmp_path: Path) -> None:
    part, scratch = build_partition(tmp_path / "logdir"), scratch_dir(tmp_path)
    crashed = kcompact_clean(part, "--scratch-dir", scratch, env={"KCOMPACT_CRASH_AT": "scratch-written"})
    assert crashed.returncode == 137, crashed.stderr
    # what a broker's cleaner does to the group if one is started meanwhile: its two segments merged into one
    first, second = part / "00000000000000000000.log", part / "00000000000000000005.log"
    first.write_bytes(first.read_bytes() + second.read_bytes())
    for gone in part.glob("00000000000000000005.*"):
        gone.unlink()
    before = file_bytes(part)

    proc = kcompact_clean(part, "--scratch-dir", scratch)

    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{first}: the scratch clean's group is neither as it found it" in proc.stderr
    assert "something rewrote it since (a broker's cleaner?); nothing of the group was changed" in proc.stderr
    assert file_bytes(part) == before
    assert (scratch / part.name / "00000000000000000000.scratch.json").exists()
