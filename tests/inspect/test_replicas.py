"""``inspect replicas``: copies compacted at different points agree; the tombstone and marker race, a
changed record and parted leader-epoch lineages are found."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.errors import KcompactError
from kcompact.inspect.replicas import replicas_report
from kcompact.segment.lineage import epoch_at, lineage_divergence
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.cleaner.round.test_clean_partition import compact_config
from tests.conftest import copy_tree_writable, real_fixture

NOW = BASE_TS + 10_000_000
DAY = 86_400_000
CLOCKS = (NOW, NOW + 2 * DAY, NOW + 4 * DAY)  # stamp horizons, then remove what has passed them


def clean_at(part: Path, *clocks: int) -> None:
    for now in clocks:
        clean_partition(part, compact_config(), CleanOptions(now_ms=now, from_start=True))


def busy_log() -> PartitionBuilder:
    """Updates, tombstones, a committed and an aborted transaction, an active segment."""
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")]).batch([(b"a", b"2"), (b"b", None)])
    b.batch([(b"t", b"committed")], producer_id=7, transactional=True).marker(7, commit=True)
    b.batch([(b"u", b"aborted")], producer_id=8, transactional=True).marker(8, commit=False)
    b.batch([(b"c", None), (b"d", b"1")]).roll()
    b.batch([(b"a", b"3"), (b"e", b"1")]).roll()
    b.batch([(b"f", b"1")])
    return b


def test_copies_cleaned_at_different_points_agree(tmp_path: Path) -> None:
    raw = busy_log().write(tmp_path / "b1")
    once = shutil.copytree(raw, tmp_path / "b2" / raw.name)
    shutil.copy(raw.parent / "replication-offset-checkpoint", tmp_path / "b2")
    twice = shutil.copytree(raw, tmp_path / "b3" / raw.name)
    shutil.copy(raw.parent / "replication-offset-checkpoint", tmp_path / "b3")
    clean_at(once, NOW)
    clean_at(twice, *CLOCKS)
    assert (6, b"b", None) not in read_all_records(twice)  # b's tombstone is gone on b3 only
    assert (4, b"b", None) in read_all_records(once)

    report = replicas_report([raw, once, twice])

    assert (report.agree, report.divergent_keys, report.transactions, report.records) == (True, 0, [], [])
    assert report.keys_compared == 7  # a b c d e t f (f is in the active segment, below the limit)


def race(tmp_path: Path) -> tuple[Path, Path]:
    """The leader removed k's tombstone (offset 1) after delete.retention.ms; the follower, which had
    fetched offset 0 only, then fetched from offset 2 on and kept k=v1 for good."""
    leader = PartitionBuilder()
    leader.batch([(b"k", b"v1")]).batch([(b"k", None)]).batch([(b"x", b"1")]).roll()
    leader.batch([(b"y", b"1")])
    leader_dir = leader.write(tmp_path / "leader")
    clean_at(leader_dir, *CLOCKS)
    assert [k for _o, k, _v in read_all_records(leader_dir)] == [b"x", b"y"]

    follower = PartitionBuilder()
    follower.batch([(b"k", b"v1")])
    follower.next_offset += 1  # offset 1 was gone from the leader by the time it was fetched
    follower.ts += 1
    follower.batch([(b"x", b"1")]).roll().batch([(b"y", b"1")])
    return leader_dir, follower.write(tmp_path / "follower")


def test_a_removed_tombstone_the_follower_never_saw_is_a_divergent_key(tmp_path: Path) -> None:
    leader_dir, follower_dir = race(tmp_path)

    report = replicas_report([leader_dir, follower_dir])

    assert not report.agree and report.state_diverged and not report.log_diverged
    assert report.divergent_keys == 1
    [key] = report.keys
    assert key.key == "k"
    assert [s["state"] for s in key.sides] == ["absent", "value"]
    assert key.sides[1]["offset"] == 0


def test_a_removed_marker_leaves_the_follower_an_open_transaction(tmp_path: Path) -> None:
    leader = PartitionBuilder()
    leader.batch([(b"a", b"txn")], producer_id=7, transactional=True).marker(7, commit=True)
    leader.batch([(b"a", b"2")]).batch([(b"b", b"1")]).roll().batch([(b"c", b"1")])
    leader_dir = leader.write(tmp_path / "leader")
    clean_at(leader_dir, *CLOCKS)
    assert [o for o, _k, _v in read_all_records(leader_dir)] == [2, 3, 4]  # data and marker gone

    follower = PartitionBuilder()
    follower.batch([(b"a", b"txn")], producer_id=7, transactional=True)
    follower.next_offset += 1  # the COMMIT marker at 1 was gone when the follower fetched
    follower.ts += 1
    follower.batch([(b"a", b"2")]).batch([(b"b", b"1")]).roll().batch([(b"c", b"1")])
    follower_dir = follower.write(tmp_path / "follower")

    report = replicas_report([leader_dir, follower_dir])

    assert not report.agree and report.divergent_keys == 0
    assert [(t.producer_id, t.first_offset, t.reference, t.other) for t in report.transactions] == [
        (7, 0, "absent", "open")]
    assert [r.last_stable_offset for r in report.replicas] == [5, 0]


def test_a_record_changed_at_the_same_offset_is_log_divergence(tmp_path: Path) -> None:
    one = PartitionBuilder().batch([(b"a", b"1")]).batch([(b"b", b"1")]).write(tmp_path / "b1")
    two = PartitionBuilder().batch([(b"a", b"1")]).batch([(b"b", b"other")]).write(tmp_path / "b2")

    report = replicas_report([one, two])

    assert report.log_diverged
    assert [(r.replica, r.count, r.first_offset) for r in report.records] == [(1, 1, 1)]


def test_the_lowest_high_watermark_bounds_the_comparison(tmp_path: Path) -> None:
    ahead = PartitionBuilder().batch([(b"a", b"1")]).batch([(b"a", b"2")]).write(tmp_path / "b1")
    lagging = PartitionBuilder().batch([(b"a", b"1")]).batch([(b"a", b"2")]).write(
        tmp_path / "b2", high_watermark=1)
    clean_partition(ahead, compact_config(), CleanOptions(now_ms=NOW, roll=True))
    assert [o for o, _k, _v in read_all_records(ahead)] == [1]  # a=1 superseded above b2's HW

    report = replicas_report([ahead, lagging])

    assert report.limit == 1 and report.agree
    assert report.keys_not_comparable == 1


def write_epochs(part: Path, entries: list[tuple[int, int]]) -> None:
    lines = ["0", str(len(entries)), *(f"{e} {s}" for e, s in entries)]
    (part / "leader-epoch-checkpoint").write_text("\n".join(lines) + "\n")


def test_leader_epoch_lineages_part_where_a_follower_would_truncate(tmp_path: Path) -> None:
    build = PartitionBuilder().batch([(b"a", b"1")] * 4)
    one, two = build.write(tmp_path / "b1"), build.write(tmp_path / "b2")
    write_epochs(one, [(0, 0), (1, 2)])
    write_epochs(two, [(0, 0), (2, 2)])

    report = replicas_report([one, two])

    assert report.epoch_divergence == [{"replica": 1, "offset": 2}]
    assert [r.leader_epochs for r in report.replicas] == [((0, 0), (1, 2)), ((0, 0), (2, 2))]


@pytest.mark.parametrize("a, a_end, b, b_end, parted", [
    ([(0, 0), (1, 100)], 150, [(0, 0)], 120, 100),  # the follower stayed on epoch 0 past 100
    ([(0, 0), (1, 100)], 150, [(0, 0), (1, 100), (2, 120)], 130, 120),  # old leader's unreplicated tail
    ([(0, 0), (1, 100)], 150, [(0, 0)], 90, None),  # behind, not divergent
    ([(3, 50), (4, 80)], 100, [(1, 0), (3, 40), (4, 80)], 100, None),  # truncated from the start
    ([], 10, [(0, 0)], 10, None),  # no lineage: nothing to compare
])
def test_lineage_divergence(a, a_end, b, b_end, parted) -> None:  # type: ignore[no-untyped-def]
    assert lineage_divergence(a, a_end, b, b_end) == parted
    assert lineage_divergence(b, b_end, a, a_end) == parted


def test_epoch_at() -> None:
    assert [epoch_at([(0, 0), (2, 5)], o) for o in (0, 4, 5, 9)] == [0, 0, 2, 2]
    assert epoch_at([(2, 5)], 4) is None


def test_one_copy_or_another_partition_is_bad_input(tmp_path: Path) -> None:
    one = PartitionBuilder().batch([(b"a", b"1")]).write(tmp_path / "b1")
    other = PartitionBuilder(partition=1).batch([(b"a", b"1")]).write(tmp_path / "b2")
    with pytest.raises(KcompactError, match="expected two or more replicas"):
        replicas_report([one])
    with pytest.raises(KcompactError, match="a copy of partition orders-0; found orders-1"):
        replicas_report([one, other])
    with pytest.raises(KcompactError, match="expected a partition directory, or --topic"):
        replicas_report([tmp_path / "b1", tmp_path / "b2"])
    assert replicas_report([tmp_path / "b1", one], topic="orders", partition=0).agree


def _real_copy(tmp_path: Path, name: str) -> Path:
    src = real_fixture("kraft37-cleaned-logdir")
    log_dir = tmp_path / name
    copy_tree_writable(src / "__consumer_offsets-31", log_dir / "__consumer_offsets-31")
    for checkpoint in src.glob("*-checkpoint"):
        shutil.copy(checkpoint, log_dir)
    return log_dir / "__consumer_offsets-31"


def test_a_broker_written_partition_and_its_cleaned_copy_agree(tmp_path: Path) -> None:
    original, cleaned = _real_copy(tmp_path, "b1"), _real_copy(tmp_path, "b2")
    far = 99_999_999_999_999  # every horizon passed
    clean_partition(cleaned, compact_config(), CleanOptions(now_ms=far, roll=True, from_start=True))
    clean_partition(cleaned, compact_config(), CleanOptions(now_ms=far, from_start=True))
    assert read_all_records(cleaned) != read_all_records(original)

    report = replicas_report([original, cleaned])

    assert report.agree and report.keys_compared >= 1
    assert report.replicas[0].leader_epochs == ((0, 0), (2, 3), (10, 4))


def test_a_broker_written_lineage_that_parts(tmp_path: Path) -> None:
    original, other = _real_copy(tmp_path, "b1"), _real_copy(tmp_path, "b2")
    write_epochs(other, [(0, 0), (2, 3), (11, 4)])  # another leader wrote offset 4

    assert replicas_report([original, other]).epoch_divergence == [{"replica": 1, "offset": 4}]


def test_records_one_copy_deleted_by_retention_are_not_divergence(tmp_path: Path) -> None:
    build = PartitionBuilder().batch([(b"a", b"1"), (b"b", b"1")]).roll().batch([(b"b", b"2"), (b"c", b"1")])
    whole, retained = build.write(tmp_path / "b1"), build.write(tmp_path / "b2")
    (retained / "00000000000000000000.log").unlink()  # retention deleted the first segment on b2
    for index in retained.glob("00000000000000000000.*"):
        index.unlink()

    report = replicas_report([whole, retained])

    assert (report.start, report.limit, report.agree) == (2, 4, True)
