"""``recover_interrupted_swaps`` against Kafka's loader, and the ``.cleaned`` segment writer.

The reference is a small model of passes 1–3 of Kafka 4.1's ``LogLoader.load``, and of the
orphaned-index deletion of its fourth (``loadSegmentFiles``), written here
from Kafka's source, independent of ``swap.py``: it works on file-name suffixes as Kafka does and reads the
next offset of a ``.log.swap`` with kafka-python's ``MemoryRecords``. Every directory state of ``LogLoader.load``'s
table is built by hand and must end, byte for byte, where the model ends and where the table says; then every
state a real clean passes through (a crash before each single rename of the protocol, in every group) is
compared with the model too. A recovery interrupted itself must be finished by the next one.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from kcompact.cleaner.disk import swap
from kcompact.cleaner.disk.swap import CleanedSegmentWriter, recover_interrupted_swaps
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.errors import CleanerStateError, KcompactError
from kcompact.records.batch import iter_batches
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Record as KRecord
from kcompact.segment.files import fsync_dir
from kcompact.segment.names import segment_file_name
from tests.builders import BASE_TS, read_all_records
from tests.cleaner.disk.test_crash_recovery import (
    NOW,
    Layout,
    assert_recovered,
    build_partition,
    make_layout,
    topic_config,
)
from tests.encoders import encode_producer_snapshot
from tests.segment_writer import write_segment

SWAP, CLEANED, DELETED = ".swap", ".cleaned", ".deleted"


# --- the reference: Kafka 4.1 LogLoader passes 1-3 -------------------------------------------------------


def kafka_offset_from_file(name: str) -> int:
    """``LogFileUtils.offsetFromFileName``: the digits before the first '.'; ValueError otherwise."""
    return int(name[: name.index(".")])


def kafka_read_next_offset(path: Path, base_offset: int) -> int:
    """``LogSegment.readNextOffset`` of a swap segment: after its last whole batch (kafka-python reads it)."""
    records = MemoryRecords(path.read_bytes())
    next_offset = base_offset
    while (batch := records.next_batch()) is not None:
        next_offset = batch.next_offset
    return next_offset


def kafka_loader_passes(directory: Path) -> None:
    """Passes 1-3 of ``LogLoader.load``: temp files, interrupted swaps, renames; then, from
    ``loadSegmentFiles``, index files (``LogFileUtils.isIndexFile``) whose ``.log`` is missing go."""
    swaps, cleaned, min_cleaned = [], [], math.inf
    for f in [p for p in directory.iterdir() if p.is_file()]:
        if f.name.endswith(DELETED) and not f.name.endswith(".checkpoint.deleted"):
            f.unlink()
        elif f.name.endswith(CLEANED):
            min_cleaned = min(min_cleaned, kafka_offset_from_file(f.name))
            cleaned.append(f)
        elif f.name.endswith(SWAP):
            swaps.append(f)
    valid = [f for f in swaps if kafka_offset_from_file(f.name) < min_cleaned]
    for f in set(swaps) - set(valid):
        f.unlink()
    for f in cleaned:
        f.unlink()
    low, high = math.inf, -math.inf
    for f in valid:
        if f.name[: -len(SWAP)].endswith(".log"):
            base = kafka_offset_from_file(f.name)
            low, high = min(low, base), max(high, kafka_read_next_offset(f, base))
    for f in [p for p in directory.iterdir() if p.is_file() and not p.name.endswith(SWAP)]:
        try:
            offset = kafka_offset_from_file(f.name)
        except ValueError:  # StringIndexOutOfBounds / NumberFormat: not a segment file
            continue
        if low <= offset < high:
            f.unlink()
    for f in [p for p in directory.iterdir() if p.is_file() and p.name.endswith(SWAP)]:
        f.rename(f.with_name(f.name[: -len(SWAP)]))
    for f in sorted(p for p in directory.iterdir() if p.is_file()):
        is_index = f.name.endswith((".index", ".timeindex", ".txnindex"))
        if is_index and not (directory / f"{kafka_offset_from_file(f.name):020d}.log").exists():
            f.unlink()


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def recover_both_ways(part: Path, tmp_path: Path) -> Path:
    """Recover copies of the partition dir ``part`` with kcompact and with the Kafka model; they must agree.

    The whole log dir around ``part`` is copied, so the copy keeps its checkpoint files.

    Returns:
        kcompact's recovered copy of ``part``.
    """
    ours = shutil.copytree(part.parent, tmp_path / "ours") / part.name
    kafka = shutil.copytree(part.parent, tmp_path / "kafka") / part.name
    recover_interrupted_swaps(ours)
    kafka_loader_passes(kafka)
    assert digest(ours) == digest(kafka)
    return ours


# --- hand-made states (LogLoader.load) ------------------------------------------------------------------------


def batch(offset: int, key: bytes, value: bytes | None = b"v") -> bytes:
    return encode_batch([KRecord(offset, BASE_TS + offset, key, value)], base_offset=offset)


def old_segments(part: Path) -> None:
    """Old segments 0 (offsets 0-4), 5 (5-9) and the active 10 (10-11), with producer snapshots."""
    for base, end in ((0, 5), (5, 10), (10, 12)):
        write_segment(part, base, [batch(o, b"k%d" % (o % 3)) for o in range(base, end)], index_interval_bytes=1)
        (part / segment_file_name(base, "snapshot")).write_bytes(encode_producer_snapshot([]))
    (part / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ")
    (part / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")


def new_segment(part: Path, base: int, offsets: list[int], suffix: str, kinds: tuple[str, ...] = ()) -> None:
    """A cleaned segment at ``base`` holding ``offsets``; ``kinds`` get ``suffix`` (all when empty)."""
    scratch = part.parent / "scratch"
    write_segment(scratch, base, [batch(o, b"k%d" % (o % 3), b"new") for o in offsets], index_interval_bytes=1)
    for f in sorted(scratch.iterdir()):
        kind = f.name.split(".")[1]
        name = f.name + suffix if not kinds or kind in kinds else f.name
        f.rename(part / name)
    scratch.rmdir()


def mark_deleted(part: Path, base: int, *, snapshot: bool = True) -> None:
    for kind in ("log", "index", "timeindex", "txnindex") + (("snapshot",) if snapshot else ()):
        f = part / segment_file_name(base, kind)
        if f.exists():
            f.rename(f.with_name(f.name + DELETED))


@pytest.fixture
def part(tmp_path: Path) -> Path:
    directory = tmp_path / "state" / "orders-0"
    directory.mkdir(parents=True)
    old_segments(directory)
    return directory


def offsets(directory: Path) -> list[int]:
    return [o for o, _k, _v in read_all_records(directory)]


def test_only_cleaned_files_are_deleted_and_old_segments_untouched(part: Path, tmp_path: Path) -> None:
    before = digest(part)
    new_segment(part, 0, [2, 4, 9], CLEANED)
    (part / segment_file_name(5, "log", "cleaned")).write_bytes(batch(5, b"x")[:30])  # a torn one too

    ours = recover_both_ways(part, tmp_path)

    assert digest(ours) == before
    assert offsets(ours) == list(range(12))


def test_swap_at_or_above_the_lowest_cleaned_is_an_unfinished_split_and_is_deleted(
    part: Path, tmp_path: Path
) -> None:
    before = digest(part)
    # a split of segment 0 into 0 and 3: renamed to .swap in descending order, interrupted after 3
    new_segment(part, 3, [3, 4], SWAP)
    new_segment(part, 0, [0, 1, 2], CLEANED)

    ours = recover_both_ways(part, tmp_path)

    assert digest(ours) == before


def test_swap_below_the_lowest_cleaned_is_complete_and_wins(part: Path, tmp_path: Path) -> None:
    # kcompact writes every group's .cleaned first: group [0, 5] is swapping, group [10] still .cleaned
    new_segment(part, 0, [2, 4, 9], SWAP)
    new_segment(part, 10, [11], CLEANED)

    ours = recover_both_ways(part, tmp_path)

    assert offsets(ours) == [2, 4, 9, 10, 11]
    assert not (ours / segment_file_name(5, "log")).exists()


def test_all_swap_with_old_files_present_completes_and_deletes_old_files_in_range(
    part: Path, tmp_path: Path
) -> None:
    new_segment(part, 0, [2, 4, 9], SWAP)

    ours = recover_both_ways(part, tmp_path)

    names = sorted(p.name for p in ours.iterdir())
    assert names == sorted([
        *(segment_file_name(0, k) for k in ("index", "log", "timeindex")),
        *(segment_file_name(10, k) for k in ("index", "log", "snapshot", "timeindex")),
        "leader-epoch-checkpoint", "partition.metadata",
    ])  # old 0 and 5 and their snapshots are gone: [0, next offset 10) was replaced
    assert offsets(ours) == [2, 4, 9, 10, 11]


def test_swap_with_old_files_already_deleted_completes(part: Path, tmp_path: Path) -> None:
    new_segment(part, 0, [2, 4, 9], SWAP)
    mark_deleted(part, 0, snapshot=False)
    mark_deleted(part, 5)

    ours = recover_both_ways(part, tmp_path)

    assert offsets(ours) == [2, 4, 9, 10, 11]
    assert not any(p.name.endswith((DELETED, SWAP)) for p in ours.iterdir())


def test_partially_renamed_swap_is_finished(part: Path, tmp_path: Path) -> None:
    mark_deleted(part, 0, snapshot=False)
    mark_deleted(part, 5)
    new_segment(part, 0, [2, 4, 9], SWAP, kinds=("index", "timeindex"))  # .log already final

    ours = recover_both_ways(part, tmp_path)

    assert offsets(ours) == [2, 4, 9, 10, 11]
    assert (ours / segment_file_name(0, "timeindex")).exists()
    assert (ours / segment_file_name(0, "index")).stat().st_size > 0


def test_only_deleted_files_are_removed(part: Path, tmp_path: Path) -> None:
    expected = digest(part)
    shutil.copy(part / segment_file_name(0, "log"), part / (segment_file_name(0, "log") + DELETED))
    (part / "leader-epoch-checkpoint.deleted").write_text("stray")  # Kafka goes by the suffix alone

    ours = recover_both_ways(part, tmp_path)

    assert digest(ours) == expected


def test_an_interrupted_roll_leaves_an_orphaned_index_that_recovery_deletes_as_kafka_does(
    part: Path, tmp_path: Path
) -> None:
    """A roll killed after creating ``<log-end>.index`` (and before its ``.log``), its originals still linked."""
    expected = digest(part)
    (part / segment_file_name(12, "index")).write_bytes(b"")
    for kind in ("index", "timeindex"):
        os.link(part / segment_file_name(10, kind), part / (segment_file_name(10, kind) + DELETED))
    (part / segment_file_name(7, "txnindex")).write_bytes(b"")  # inside a segment's range: still an orphan
    planned = recover_interrupted_swaps(part, dry_run=True).actions
    assert digest(part) != expected  # the dry run changed nothing

    ours = recover_both_ways(part, tmp_path)

    assert digest(ours) == expected
    assert recover_interrupted_swaps(ours).actions == []
    assert [a for a in planned if "orphaned" in a] == [
        f"delete orphaned {segment_file_name(7, 'txnindex')} (no {7:020d}.log)",
        f"delete orphaned {segment_file_name(12, 'index')} (no {12:020d}.log)",
    ]


def test_kraft_snapshot_files_are_left_alone_even_inside_the_swap_range(tmp_path: Path) -> None:
    meta = tmp_path / "state" / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    old_segments(meta)
    kraft = ["00000000000000000003-0000000001.checkpoint.deleted", "00000000000000000004-0000000001.checkpoint",
             "00000000000000000004-0000000001.checkpoint.part", "leader-epoch-checkpoint.tmp"]
    for name in kraft:
        (meta / name).write_bytes(b"raft")
    new_segment(meta, 0, [2, 4, 9], SWAP)

    ours = recover_both_ways(meta, tmp_path)

    assert set(kraft) <= {p.name for p in ours.iterdir()}
    assert swap.leftover_files(ours) == []


def test_swap_range_ends_at_the_new_segment_next_offset(part: Path, tmp_path: Path) -> None:
    # The new segment ends before old segment 5 starts: Kafka deletes [0, 4) only and 5 survives.
    new_segment(part, 0, [1, 3], SWAP)

    ours = recover_both_ways(part, tmp_path)

    assert offsets(ours) == [1, 3, *range(5, 12)]
    assert (ours / segment_file_name(5, "snapshot")).exists()


def test_empty_new_segment_replaces_only_the_files_of_its_own_base(part: Path, tmp_path: Path) -> None:
    # Every record of the group was superseded: the new .log is empty, its next offset is its base, the
    # range [0, 0) is empty, so Kafka only renames the swap files over segment 0's and segment 5 survives.
    new_segment(part, 0, [], SWAP)

    ours = recover_both_ways(part, tmp_path)

    assert (ours / segment_file_name(0, "log")).stat().st_size == 0
    assert offsets(ours) == list(range(5, 12))


def test_truncated_tail_of_a_swap_log_is_ignored_when_reading_its_next_offset(
    part: Path, tmp_path: Path
) -> None:
    new_segment(part, 0, [2, 4], SWAP)
    swap_log = part / (segment_file_name(0, "log") + SWAP)
    swap_log.write_bytes(swap_log.read_bytes() + batch(9, b"k0")[:40])  # torn last batch: next offset 5

    ours = recover_both_ways(part, tmp_path)

    assert (ours / segment_file_name(5, "log")).exists()  # outside [0, 5)
    assert not (ours / segment_file_name(0, "snapshot")).exists()


def test_dry_run_reports_the_same_actions_and_changes_nothing(part: Path) -> None:
    new_segment(part, 0, [2, 4, 9], SWAP)
    mark_deleted(part, 5)
    new_segment(part, 10, [11], CLEANED)
    before = digest(part)

    planned = recover_interrupted_swaps(part, dry_run=True)
    assert digest(part) == before
    done = recover_interrupted_swaps(part)

    assert planned.actions == done.actions
    assert done.actions[0].startswith("delete leftover") and done.actions[-1].startswith("rename")
    assert recover_interrupted_swaps(part).changed is False


class SimulatedCrash(BaseException):
    """A crash in the middle of a step; BaseException so nothing tidies up after it."""


def crash_after(count: int) -> Callable[..., None]:
    """A replacement for ``swap._act`` that dies before the ``count``-th action."""
    done = [0]
    real = swap._act

    def act(report: swap.RecoveryReport, dry_run: bool, what: str, action: Callable[[], object]) -> None:
        if done[0] == count:
            raise SimulatedCrash(what)
        done[0] += 1
        real(report, dry_run, what, action)

    return act


@pytest.mark.parametrize("state", ["swap-partial", "swap-complete", "deleted-partial"])
def test_recovery_interrupted_itself_is_finished_the_same_way_by_the_next(
    part: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    if state == "swap-partial":  # .log.swap with its indexes still .cleaned: must roll back
        new_segment(part, 0, [2, 4, 9], CLEANED)
        os.rename(part / (segment_file_name(0, "log") + CLEANED), part / (segment_file_name(0, "log") + SWAP))
    else:
        new_segment(part, 0, [2, 4, 9], SWAP)
        if state == "deleted-partial":
            mark_deleted(part, 0, snapshot=False)
    new_segment(part, 10, [11], CLEANED)
    clean_copy = shutil.copytree(part, tmp_path / "uninterrupted")
    steps = len(recover_interrupted_swaps(clean_copy).actions)
    expected = digest(clean_copy)

    for k in range(steps):
        attempt = shutil.copytree(part, tmp_path / f"attempt-{k}")
        monkeypatch.setattr(swap, "_act", crash_after(k))
        with pytest.raises(SimulatedCrash):
            recover_interrupted_swaps(attempt)
        monkeypatch.undo()
        recover_interrupted_swaps(attempt)
        assert digest(attempt) == expected, f"interrupted before action {k}"


# --- every state a real clean passes through ------------------------------------------------------------


@pytest.fixture(scope="module")
def swap_layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return make_layout(tmp_path_factory.mktemp("swap-layout"))


def rename_crashing_at(k: int) -> Callable[[Path, Path], None]:
    """A replacement for ``swap._rename`` that dies instead of performing the ``k``-th rename."""
    done = [0]
    real = swap._rename

    def rename(src: Path, dst: Path) -> None:
        if done[0] == k:
            raise SimulatedCrash(src.name)
        done[0] += 1
        real(src, dst)

    return rename


def group_is_new(part: Path, layout: Layout, i: int) -> bool:
    log = part / segment_file_name(layout.new_bases[i], "log")
    return log.read_bytes() == layout.reference[log.name]


def test_crash_before_every_rename_of_a_clean_recovers_as_kafka_does(
    tmp_path: Path, swap_layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = build_partition(tmp_path / "template" / "logdir")
    outcomes = []
    k = 0
    while True:
        log_dir = shutil.copytree(template.parent, tmp_path / f"k{k}" / "logdir")
        monkeypatch.setattr(swap, "_rename", rename_crashing_at(k))
        try:
            clean_partition(log_dir / template.name, topic_config(), CleanOptions(now_ms=NOW))
        except SimulatedCrash:
            pass
        else:
            break  # k is past the last rename: the clean completed
        finally:
            monkeypatch.undo()
        ours = recover_both_ways(log_dir / template.name, tmp_path / f"k{k}")
        new_groups = {i for i in range(len(swap_layout.groups)) if group_is_new(ours, swap_layout, i)}
        assert new_groups == set(range(len(new_groups))), (k, new_groups)  # groups swap in order
        assert_recovered(ours, swap_layout, new_groups)
        outcomes.append(len(new_groups))
        k += 1
    # each group rolls back until its last file went .swap, and completes from then on
    assert outcomes == sorted(outcomes) and outcomes[0] == 0 and outcomes[-1] == len(swap_layout.groups)
    assert k > 3 * len(swap_layout.groups)


def test_a_swap_flushes_its_directory_once_after_its_last_rename(
    tmp_path: Path, swap_layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's ``LocalLog.replaceSegments`` renames ``.cleaned`` -> ``.swap``, the old files -> ``.deleted``, ``.swap``
    -> final, then flushes the directory once: a journaling file system commits the renames in order, so a power
    loss before that flush leaves a prefix of them, which the test above recovers from for every prefix."""
    part = build_partition(tmp_path / "logdir")
    events: list[str] = []
    rename = swap._rename

    def recorded_rename(src: Path, dst: Path) -> None:
        events.append(f"rename {src.name} {dst.name}")
        rename(src, dst)

    def recorded_flush(directory: str | os.PathLike[str]) -> None:
        events.append(f"flush {Path(directory).name}")
        fsync_dir(directory)

    monkeypatch.setattr(swap, "_rename", recorded_rename)
    monkeypatch.setattr(swap, "fsync_dir", recorded_flush)
    clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))
    flushes = [i for i, event in enumerate(events) if event == f"flush {part.name}"]
    assert len(flushes) == len(swap_layout.groups) > 1
    start = 0
    for flush_at in flushes:
        renames = [event.split()[1:] for event in events[start:flush_at]]
        stages = [CLEANED if src.endswith(CLEANED) else SWAP if src.endswith(SWAP) else DELETED
                  for src, _dst in renames]
        assert stages == sorted(stages, key=[CLEANED, DELETED, SWAP].index)  # the protocol's order
        assert stages[0] == CLEANED and stages[-1] == SWAP  # the flush comes after the group's last rename
        marked = [dst for (_src, dst), stage in zip(renames, stages, strict=True) if stage == DELETED]
        assert marked and all(dst.endswith(DELETED) for dst in marked)
        start = flush_at + 1


def test_deferred_removals_leave_the_deleted_files_for_the_caller_to_remove(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    with swap.deferring_removals() as leftovers:
        clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))
    left = sorted(path.name for path in part.iterdir() if path.name.endswith(DELETED))
    assert left and sorted(Path(path).name for path in leftovers) == left
    assert {Path(path).parent for path in leftovers} == {part}
    records = read_all_records(part)
    assert swap.remove_leftovers(leftovers) == []
    assert swap.unsettled_files(part) == [] and read_all_records(part) == records
    assert swap.remove_leftovers(leftovers) == []  # already gone: nothing to say


def test_a_scratch_dirs_groups_remove_their_deleted_files_at_once_even_where_removals_are_deferred(
    tmp_path: Path
) -> None:
    """Each group brought in from a scratch dir is measured against the space the group before it freed
    (``disk.scratch.bring_in``): its swap's ``.deleted`` files go at once, not to the caller."""
    part = build_partition(tmp_path / "logdir")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with swap.deferring_removals() as leftovers:
        clean_partition(part, topic_config(), CleanOptions(now_ms=NOW, scratch_dir=str(scratch)))
    assert leftovers == []
    assert not [path.name for path in part.iterdir() if path.name.endswith(DELETED)]
    assert [path.name for path in part.iterdir() if path.name.endswith(".log")]  # it was cleaned, not emptied


def test_a_leftover_that_cannot_be_removed_is_said_not_raised(tmp_path: Path) -> None:
    stuck = tmp_path / "00000000000000000000.log.deleted"
    stuck.mkdir()  # unlink refuses a directory
    said = swap.remove_leftovers([str(stuck)])
    assert len(said) == 1 and said[0].startswith(f"{stuck}: ") and stuck.exists()


# --- the .cleaned segment writer ---------------------------------------------------------------------


def three_batches() -> list[tuple[bytes, int, int]]:
    out = []
    for o in (100, 101, 105):
        data = batch(o, b"k")
        out.append((data, o, BASE_TS + o))
    return out


def test_writer_output_matches_a_segment_written_by_the_fixture_writer(tmp_path: Path) -> None:
    writer = CleanedSegmentWriter(tmp_path, 100, index_interval_bytes=1)
    for data, last, ts in three_batches():
        writer.append(data, last, ts)
    mtime_ns = 1_700_000_000_123_000_000
    cleaned = writer.finish(mtime_ns, template=None)

    write_segment(tmp_path / "expected", 100, [d for d, _l, _t in three_batches()], index_interval_bytes=1)
    assert sorted(cleaned.files) == ["index", "log", "timeindex"]
    for kind, path in cleaned.files.items():
        assert path.name == segment_file_name(100, kind, "cleaned")
        assert path.read_bytes() == (tmp_path / "expected" / segment_file_name(100, kind)).read_bytes()
        assert path.stat().st_mtime_ns == mtime_ns
    assert cleaned.size_in_bytes == sum(len(d) for d, _l, _t in three_batches())
    assert [b.base_offset for b in iter_batches(cleaned.files["log"].read_bytes())] == [100, 101, 105]


@pytest.mark.parametrize("split", [0, 1, 2, 3])
def test_writer_append_run_writes_what_appending_each_batch_writes(tmp_path: Path, split: int) -> None:
    batches = three_batches()
    outputs = []
    for name, by_run in (("each", False), ("run", True)):
        (tmp_path / name).mkdir()
        writer = CleanedSegmentWriter(tmp_path / name, 100, index_interval_bytes=1)
        if by_run:  # the first `split` batches one by one, the rest as one run
            for data, last, ts in batches[:split]:
                writer.append(data, last, ts)
            rest = batches[split:]
            writer.append_run(b"".join(d for d, _l, _t in rest), [len(d) for d, _l, _t in rest],
                              [last for _d, last, _t in rest], [ts for _d, _l, ts in rest])
        else:
            for data, last, ts in batches:
                writer.append(data, last, ts)
        cleaned = writer.finish(0, template=None)
        outputs.append({kind: path.read_bytes() for kind, path in cleaned.files.items()})
    assert outputs[0] == outputs[1] and len(outputs[0]["index"]) > 0


def test_writer_append_run_refuses_an_offset_beyond_the_32_bit_window(tmp_path: Path) -> None:
    writer = CleanedSegmentWriter(tmp_path, 0, index_interval_bytes=1)
    data = batch(5, b"k") + batch(2**31, b"k")
    with pytest.raises(CleanerStateError, match="offset 2147483648 does not fit a segment based at 0"):
        writer.append_run(data, [len(data) // 2] * 2, [5, 2**31], [BASE_TS] * 2)
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_writer_dry_run_counts_and_writes_nothing(tmp_path: Path) -> None:
    writer = CleanedSegmentWriter(tmp_path, 100, index_interval_bytes=1, dry_run=True)
    for data, last, ts in three_batches():
        writer.append(data, last, ts)
    cleaned = writer.finish(0, template=None)
    assert cleaned.files == {} and cleaned.size_in_bytes > 0
    assert list(tmp_path.iterdir()) == []


def test_writer_abort_removes_its_files(tmp_path: Path) -> None:
    writer = CleanedSegmentWriter(tmp_path, 100, index_interval_bytes=1)
    writer.append(*three_batches()[0])
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_writer_refuses_an_offset_beyond_the_32_bit_window(tmp_path: Path) -> None:
    writer = CleanedSegmentWriter(tmp_path, 0, index_interval_bytes=1)
    with pytest.raises(CleanerStateError, match="does not fit a segment based at 0"):
        writer.append(batch(2**31, b"k"), 2**31, BASE_TS)
    writer.abort()


def test_writer_turns_a_refused_create_into_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path, *args: object, **kwargs: object) -> object:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(swap, "open", refuse, raising=False)
    with pytest.raises(KcompactError, match=r"00000000000000000100\.log\.cleaned: cannot write the cleaned "
                                            r"segment \(Permission denied\)") as info:
        CleanedSegmentWriter(tmp_path, 100, index_interval_bytes=1)
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_writer_full_disk_at_fsync_is_one_line_and_abort_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = CleanedSegmentWriter(tmp_path, 100, index_interval_bytes=1)
    for data, last, ts in three_batches():
        writer.append(data, last, ts)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(KcompactError, match=r"No space left on device\); the partition was left as it was"):
        writer.finish(0, template=None)
    monkeypatch.undo()
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_writer_has_the_disk_start_writeback_on_each_8_mib_before_its_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So that the fsync at ``finish`` waits for the last few MiB only: contiguous ranges from 0, each of at least
    8 MiB, asked for as the output grows (``segment.files.start_writeback``)."""
    asked: list[tuple[int, int]] = []
    monkeypatch.setattr(swap, "start_writeback", lambda fd, offset, length: asked.append((offset, length)))
    writer = CleanedSegmentWriter(tmp_path, 0, index_interval_bytes=4096)
    for first in range(0, 20_000, 100):  # 100 batches of about 1 KiB a run: about 20 MiB
        run = [encode_batch([KRecord(o, BASE_TS, b"k", b"v" * 1000)], base_offset=o) for o in range(first, first + 100)]
        writer.append_run(b"".join(run), [len(b) for b in run], list(range(first, first + 100)), [BASE_TS] * 100)
    cleaned = writer.finish(0, template=None)
    assert len(asked) == cleaned.size_in_bytes // (8 << 20) >= 2
    assert [offset for offset, _ in asked] == [sum(length for _, length in asked[:k]) for k in range(len(asked))]
    assert all(length >= 8 << 20 for _, length in asked)
    assert cleaned.files["log"].stat().st_size == cleaned.size_in_bytes
