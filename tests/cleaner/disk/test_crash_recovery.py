"""A clean killed at every step of the swap protocol is finished or rolled back as Kafka's loader would.

Like Kafka's ``LogCleanerTest.testRecoveryAfterCrash``, one test per crash point of
``swap.CRASH_POINTS``: a real ``kcompact clean`` of a partition whose six closed segments form three groups
runs in a subprocess with ``KCOMPACT_CRASH_AT=<point>`` and dies there with ``os._exit(137)`` (a kill -9:
no cleanup, no buffered write flushed). Then:

* the files left are exactly those of that step (which ``.cleaned``/``.swap``/``.deleted`` exist);
* ``recover_interrupted_swaps`` rolls the interrupted group back (points before ``swap-complete``) or
  completes it (from ``swap-complete`` on), as ``LogLoader.load`` does; every group is then byte-for-byte its old
  segments or its new ones — never both, never neither — and the records are those of the old or the new
  content per group, covering every offset;
* the cleaner checkpoint is untouched until every group is swapped;
* a second clean finishes, and the records equal those of a clean that never crashed.

The same checks run in-process at every crash point of *every* group (a hook that copies the directory at
each step, and one that raises a ``BaseException`` at a later group), and for a kill in the middle of
writing a ``.cleaned`` log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from kcompact.cleaner.disk.swap import (
    CRASH_POINTS,
    INDEX_KINDS,
    leftover_files,
    recover_interrupted_swaps,
)
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import TopicConfig, defaults_with_overrides
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from kcompact.segment.names import parse_segment_file_name, segment_file_name
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.encoders import encode_producer_snapshot

REPO_ROOT = Path(__file__).resolve().parents[3]
NOW = BASE_TS + 10_000_000
OVERRIDES = {
    "cleanup.policy": "compact",
    "internal.segment.bytes": "700",  # Kafka's test knob under segment.bytes' 1 MiB floor: 3 groups of 2
    "index.interval.bytes": "100",
}
OTHER_PARTITION = ("other", 3)  # a line of the checkpoint file that no clean of orders-0 may touch
COMPLETING = CRASH_POINTS[CRASH_POINTS.index("swap-complete"):]
Record = tuple[int, bytes | None, bytes | None]


def topic_config() -> TopicConfig:
    config = defaults_with_overrides(OVERRIDES)
    return config


def build_partition(log_dir: Path) -> Path:
    """Six closed segments (3 groups of 2 at ``internal.segment.bytes=700``) and an active one.

    Keys k0..k3 are overwritten in every segment; each segment also holds a key of its own that survives,
    so every output segment reaches into the last segment of its group. Segment 1 holds an aborted
    transaction (a ``.txnindex``, kept by the first clean with its ABORT marker), segment 2 a keyless
    record, segment 4 a tombstone (its batch is rebuilt with a delete horizon). Every segment base has an
    empty producer snapshot, as a broker leaves them.
    """
    b = PartitionBuilder()
    for s in range(6):
        b.batch([(f"k{(s + j) % 4}".encode(), f"v{s}-{j}".encode()) for j in range(3)])
        if s == 0:
            b.batch([(b"gone", b"soon")])
        if s == 1:
            b.batch([(b"k0", b"aborted")], producer_id=7, transactional=True).marker(7, commit=False)
        if s == 2:
            b.batch([(None, b"keyless")])
        if s == 4:
            b.batch([(b"gone", None)])
        b.batch([(f"u{s}".encode(), b"x" * 40)])
        b.roll()
    b.batch([(b"k1", b"active")])
    part = b.write(log_dir, index_interval_bytes=100)
    for seg in b.segments:
        (part / segment_file_name(seg.base_offset, "snapshot")).write_bytes(encode_producer_snapshot([]))
    (part / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    write_offset_checkpoint(log_dir / "cleaner-offset-checkpoint", {("orders", 0): 0, OTHER_PARTITION: 42})
    return part


def file_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def segment_files(files: dict[str, bytes], bases: set[int]) -> dict[str, bytes]:
    """The final-named .log/.index/.timeindex/.txnindex files of the segments at ``bases``."""
    out = {}
    for name, data in files.items():
        parsed = parse_segment_file_name(name)
        if parsed and parsed.temp_suffix is None and parsed.kind in INDEX_KINDS and parsed.base_offset in bases:
            out[name] = data
    return out


@dataclass(frozen=True)
class Layout:
    """The partition before the clean and after a clean that never crashed, and how it is grouped."""

    original: dict[str, bytes]
    reference: dict[str, bytes]
    original_records: list[Record]
    reference_records: list[Record]
    groups: list[list[int]]  # the old segment bases of each group
    new_bases: list[int]  # the output segment's base of each group
    active_base: int
    end_offset: int
    checkpoint: bytes  # cleaner-offset-checkpoint before any clean

    def group_range(self, i: int) -> tuple[int, int]:
        upper = self.new_bases[i + 1] if i + 1 < len(self.new_bases) else self.active_base
        return self.new_bases[i], upper

    def new_kinds(self, i: int) -> list[str]:
        files = segment_files(self.reference, {self.new_bases[i]})
        return [k for k in INDEX_KINDS if segment_file_name(self.new_bases[i], k) in files]

    def expected_segment_files(self, new_groups: set[int]) -> dict[str, bytes]:
        out = segment_files(self.original, {self.active_base})
        for i, bases in enumerate(self.groups):
            if i in new_groups:
                out.update(segment_files(self.reference, {self.new_bases[i]}))
            else:
                out.update(segment_files(self.original, set(bases)))
        return dict(sorted(out.items()))

    def expected_records(self, new_groups: set[int]) -> list[Record]:
        out: list[Record] = []
        for i in range(len(self.groups)):
            low, high = self.group_range(i)
            source = self.reference_records if i in new_groups else self.original_records
            out += [r for r in source if low <= r[0] < high]
        return out + [r for r in self.original_records if r[0] >= self.active_base]


def make_layout(root: Path) -> Layout:
    """Build the partition under ``root``, clean it without a crash, and record both sides."""
    part = build_partition(root / "logdir")
    original, original_records = file_bytes(part), read_all_records(part)
    checkpoint = (part.parent / "cleaner-offset-checkpoint").read_bytes()
    result = clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))
    reference = file_bytes(part)
    old_bases = sorted(p.base_offset for p in map(parse_segment_file_name, original) if p and p.kind == "log")
    all_new = sorted(p.base_offset for p in map(parse_segment_file_name, reference) if p and p.kind == "log")
    active, new_bases = all_new[-1], all_new[:-1]
    groups = [
        [b for b in old_bases if low <= b < high]
        for low, high in zip(new_bases, new_bases[1:] + [active], strict=True)
    ]
    assert result.stats.groups == 3 and all(len(g) == 2 for g in groups), groups
    assert result.end_offset == active
    return Layout(original, reference, original_records, read_all_records(part), groups, new_bases,
                  active, active, checkpoint)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return make_layout(tmp_path_factory.mktemp("reference"))


def assert_recovered(part: Path, layout: Layout, new_groups: set[int]) -> None:
    """Each group wholly old or wholly new (bytes and records), nothing left over, checkpoint untouched."""
    files = file_bytes(part)
    assert leftover_files(part) == []
    actual = segment_files(files, {p.base_offset for p in map(parse_segment_file_name, files) if p})
    assert actual == layout.expected_segment_files(new_groups)
    assert read_all_records(part) == layout.expected_records(new_groups)
    for i, bases in enumerate(layout.groups):
        snapshots = {b for b in bases if segment_file_name(b, "snapshot") in files}
        if i in new_groups:  # the snapshots of bases that disappeared went with their segments
            assert snapshots <= {layout.new_bases[i]}
        else:
            assert snapshots == set(bases)
    assert segment_file_name(layout.active_base, "snapshot") in files
    assert files["leader-epoch-checkpoint"] == layout.original["leader-epoch-checkpoint"]
    assert (part.parent / "cleaner-offset-checkpoint").read_bytes() == layout.checkpoint


def expected_leftovers(layout: Layout, point: str, group: int) -> set[str]:
    """The temporary files a clean killed at ``point`` of ``group`` leaves (the steps of
    ``LocalLog.replaceSegments``)."""
    base, kinds = layout.new_bases[group], layout.new_kinds(group)

    def named(b: int, ks: list[str], suffix: str) -> set[str]:
        return {segment_file_name(b, k, suffix) for k in ks}

    def old_deleted(bases: list[int]) -> set[str]:
        out = set()
        for b in bases:
            out |= {n + ".deleted" for n in segment_files(layout.original, {b})}
            if b != base:
                out.add(segment_file_name(b, "snapshot", "deleted"))
        return out

    later = set().union(*(named(layout.new_bases[j], layout.new_kinds(j), "cleaned")
                          for j in range(group + 1, len(layout.groups))))
    olds = layout.groups[group]
    this = {
        "cleaned-written": named(base, kinds, "cleaned"),
        "swap-partial": named(base, kinds[:1], "swap") | named(base, kinds[1:], "cleaned"),
        "swap-complete": named(base, kinds, "swap"),
        "deleted-partial": named(base, kinds, "swap") | old_deleted(olds[:1]),
        "deleted-complete": named(base, kinds, "swap") | old_deleted(olds),
        "final-partial": named(base, kinds[1:], "swap") | old_deleted(olds),
        "final-complete": old_deleted(olds),
    }[point]
    return this | later


def kcompact_clean(part: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "kcompact", "clean", str(part), "--now-ms", str(NOW), "--json"]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]
    return subprocess.run(argv, env={**os.environ, **(env or {})}, cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, check=False)


def assert_second_clean_finishes(part: Path, layout: Layout) -> None:
    result = clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))
    assert result.checkpoint_written and result.end_offset == layout.end_offset
    assert read_all_records(part) == layout.reference_records
    assert leftover_files(part) == []
    checkpoint = read_offset_checkpoint(part.parent / "cleaner-offset-checkpoint")
    assert checkpoint == {("orders", 0): layout.end_offset, OTHER_PARTITION: 42}


# --- a real process killed at each crash point of the first group ------------------------------------


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_kill_at_crash_point_then_recover_and_clean_again(tmp_path: Path, layout: Layout, point: str) -> None:
    part = build_partition(tmp_path / "logdir")
    assert file_bytes(part) == layout.original

    proc = kcompact_clean(part, {"KCOMPACT_CRASH_AT": point})

    assert proc.returncode == 137, proc.stderr  # died at the crash point, as with kill -9
    assert {p.name for p in leftover_files(part)} == expected_leftovers(layout, point, 0)
    assert (part.parent / "cleaner-offset-checkpoint").read_bytes() == layout.checkpoint
    untouched = [b for g in layout.groups[1:] for b in g] + [layout.active_base]
    assert segment_files(file_bytes(part), set(untouched)) == segment_files(layout.original, set(untouched))
    crashed = shutil.copytree(part.parent, tmp_path / "crashed")

    report = recover_interrupted_swaps(part)

    assert report.changed
    completed = point in COMPLETING
    assert_recovered(part, layout, {0} if completed else set())
    assert recover_interrupted_swaps(part).actions == []  # nothing left to do
    assert_second_clean_finishes(part, layout)
    # the next `kcompact clean` recovers by itself, and reports what it did
    planned = recover_interrupted_swaps(crashed / part.name, dry_run=True).actions
    assert planned == report.actions
    proc = kcompact_clean(crashed / part.name)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"][0]["recovery_actions"] == planned
    assert read_all_records(crashed / part.name) == layout.reference_records
    assert leftover_files(crashed / part.name) == []


def test_kill_while_writing_the_cleaned_log_leaves_a_partial_file_that_recovery_deletes(
    tmp_path: Path, layout: Layout
) -> None:
    part = build_partition(tmp_path / "logdir")
    # Die after half of the third output batch reached the file: a torn .log.cleaned, no index yet.
    script = textwrap.dedent("""
        import os, sys
        from kcompact.cleaner.disk import swap
        calls = []
        def append(self, data, last_offset, max_timestamp):
            calls.append(1)
            if len(calls) == 3:
                self._file.write(bytes(data)[: len(data) // 2])
                self._file.flush()
                os._exit(137)
            return original(self, data, last_offset, max_timestamp)
        def append_run(self, data, sizes, last_offsets, max_timestamps):  # batch by batch
            at = 0
            for size, last_offset, max_timestamp in zip(sizes, last_offsets, max_timestamps):
                append(self, memoryview(data)[at : at + size], last_offset, max_timestamp)
                at += size
        original = swap.CleanedSegmentWriter.append
        swap.CleanedSegmentWriter.append = append
        swap.CleanedSegmentWriter.append_run = append_run
        from kcompact.cli.main import main
        sys.argv = ["kcompact", *sys.argv[1:]]
        main()
    """)
    argv = [sys.executable, "-c", script, "clean", str(part), "--now-ms", str(NOW)]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)

    assert proc.returncode == 137, proc.stderr
    torn = part / segment_file_name(0, "log", "cleaned")
    assert [p.name for p in leftover_files(part)] == [torn.name]
    assert 0 < torn.stat().st_size
    report = recover_interrupted_swaps(part)
    assert report.actions == [f"delete unfinished {torn.name}"]
    assert file_bytes(part) == layout.original
    assert_second_clean_finishes(part, layout)


# --- in-process: every crash point of every group ------------------------------------------------------


class SimulatedCrash(BaseException):
    """Raised by a crash hook; a BaseException so that no ``except Exception`` can tidy up after it."""


def test_every_intermediate_state_recovers_to_old_or_new_per_group(tmp_path: Path, layout: Layout) -> None:
    part = build_partition(tmp_path / "logdir")
    seen: list[tuple[int, str]] = []

    def observe(point: str) -> None:
        group = sum(1 for _g, p in seen if p == point)
        seen.append((group, point))
        assert (part.parent / "cleaner-offset-checkpoint").read_bytes() == layout.checkpoint
        snapshot = shutil.copytree(part.parent, tmp_path / f"at-{group}-{point}")
        copy = snapshot / part.name
        assert {p.name for p in leftover_files(copy)} == expected_leftovers(layout, point, group)
        recover_interrupted_swaps(copy)
        done = set(range(group)) | ({group} if point in COMPLETING else set())
        assert_recovered(copy, layout, done)

    clean_partition(part, topic_config(), CleanOptions(now_ms=NOW, crash_hook=observe))

    assert seen == [(g, p) for g in range(len(layout.groups)) for p in CRASH_POINTS]
    assert file_bytes(part) == layout.reference  # observing changed nothing


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_at_last_group_keeps_earlier_groups_swapped(tmp_path: Path, layout: Layout, point: str) -> None:
    part = build_partition(tmp_path / "logdir")
    last = len(layout.groups) - 1
    calls: list[str] = []

    def crash(name: str) -> None:
        calls.append(name)
        if name == point and calls.count(name) == last + 1:
            raise SimulatedCrash(name)

    with pytest.raises(SimulatedCrash):
        clean_partition(part, topic_config(), CleanOptions(now_ms=NOW, crash_hook=crash))

    assert {p.name for p in leftover_files(part)} == expected_leftovers(layout, point, last)
    assert (part.parent / "cleaner-offset-checkpoint").read_bytes() == layout.checkpoint
    recover_interrupted_swaps(part)
    assert_recovered(part, layout, set(range(last)) | ({last} if point in COMPLETING else set()))
    assert_second_clean_finishes(part, layout)
