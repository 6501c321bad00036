"""The replica fence after an unclean leader election, and over a copy with an interrupted swap: the fence
is what Kafka leaves of each copy once it follows the cleaned one (``rules.fence``), and the cleaned copy is
cleaned only below where a copy's lineage parts from it (the clean limit).

The election, in small: both brokers hold offsets 0-3 (epoch 0). The new leader (epoch 1 from offset 4)
deletes a and b (tombstones at 4 and 5); the old leader had written c=2, d=2, g, h, i at 4-8 under epoch 0,
which no one replicated. Kafka truncates the old leader to 4 when it follows the new one, and the new
leader to 4 if it ever followed the old one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cleaner.round.options import CleanOptions, CleanResult
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.cli.main import cli
from kcompact.log.rules.fence import CleanLimit, CopyFence, ReplicaFence
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.cleaner.round.test_clean_partition import compact_config
from tests.segment.test_swap_completion import swapped_copy

NOW = BASE_TS + 10_000_000
DAY = 86_400_000


def write_epochs(part: Path, entries: list[tuple[int, int]]) -> None:
    """A ``leader-epoch-checkpoint``: version 0, the count, then ``epoch start_offset`` lines."""
    lines = ["0", str(len(entries)), *(f"{e} {s}" for e, s in entries)]
    (part / "leader-epoch-checkpoint").write_text("\n".join(lines) + "\n")


def _common() -> PartitionBuilder:
    b = PartitionBuilder()
    for key in (b"a", b"b", b"c", b"d"):
        b.batch([(key, b"1")])
    return b.roll()


def new_leader(log_dir: Path) -> Path:
    """0-3 common; epoch 1 from 4: tombstones of a and b at 4 and 5, e at 6; f at 7 in the active segment."""
    b = _common().batch([(b"a", None)]).batch([(b"b", None)]).batch([(b"e", b"1")]).roll().batch([(b"f", b"1")])
    part = b.write(log_dir)
    write_epochs(part, [(0, 0), (1, 4)])
    return part


def old_leader(log_dir: Path, *, with_lineage: bool = True) -> Path:
    """0-3 common; epoch 0 goes on: c=2 and d=2 at 4 and 5, g at 6; h and i at 7 and 8 (active)."""
    b = _common().batch([(b"c", b"2")]).batch([(b"d", b"2")]).batch([(b"g", b"1")]).roll()
    part = b.batch([(b"h", b"1")]).batch([(b"i", b"1")]).write(log_dir)
    if with_lineage:
        write_epochs(part, [(0, 0)])
    return part


def clean_twice(part: Path, **options: object) -> CleanResult:
    """Stamp the horizons, then clean again from the start with a roll once they have passed."""
    config = compact_config()
    clean_partition(part, config, CleanOptions(now_ms=NOW, **options))  # type: ignore[arg-type]
    return clean_partition(part, config, CleanOptions(now_ms=NOW + 2 * DAY, from_start=True, roll=True,
                                                      **options))  # type: ignore[arg-type]


def test_the_new_leader_keeps_the_deletes_the_old_leader_will_fetch(tmp_path: Path) -> None:
    new, old = new_leader(tmp_path / "b1"), old_leader(tmp_path / "b2")

    result = clean_twice(new, replica_dirs=(str(old),))

    assert result.fence == ReplicaFence(4, str(old), "lineage", (CopyFence(str(old), 9, 4),))
    assert result.clean_limit == CleanLimit(4, str(old))
    assert [r for r in read_all_records(new) if r[0] in (4, 5)] == [(4, b"a", None), (5, b"b", None)]


def test_fenced_at_the_old_leader_s_log_end_the_deletes_would_go(tmp_path: Path) -> None:
    """What the fence did before it followed the lineage: the old leader's log end, 9, lets them go."""
    new, old = new_leader(tmp_path / "b1"), old_leader(tmp_path / "b2", with_lineage=False)

    result = clean_twice(new, replica_dirs=(str(old),))

    assert result.fence == ReplicaFence(9, str(old), "log end", (CopyFence(str(old), 9, None),))
    assert [r for r in read_all_records(new) if r[0] in (4, 5)] == []


def test_the_old_leader_keeps_the_values_only_its_truncated_tail_supersedes(tmp_path: Path) -> None:
    """c=1 and d=1 (2, 3) are superseded only by c=2 and d=2 at 4 and 5, which Kafka truncates when the old
    leader follows the new one: cleaned below 4 only, they stay; --safe-offset alone does not keep them."""
    new, old = new_leader(tmp_path / "b1"), old_leader(tmp_path / "b2")
    unfenced = old_leader(tmp_path / "b3")

    result = clean_twice(old, replica_dirs=(str(new),))
    clean_twice(unfenced, safe_offset=4)

    assert result.clean_limit == CleanLimit(4, str(new))
    assert result.fence is not None and (result.fence.offset, result.fence.why) == (4, "lineage")
    assert read_all_records(old)[:4] == [(0, b"a", b"1"), (1, b"b", b"1"), (2, b"c", b"1"), (3, b"d", b"1")]
    assert [r[0] for r in read_all_records(unfenced)][:2] == [0, 1]  # c=1, d=1 gone
    assert (2, b"c", b"1") not in read_all_records(unfenced)


def test_a_lagging_copy_fences_at_its_log_end_and_limits_nothing(tmp_path: Path) -> None:
    new = new_leader(tmp_path / "b1")
    lagging = _common().batch([(b"a", None)]).write(tmp_path / "b2")  # fetched 0-4 of the new leader
    write_epochs(lagging, [(0, 0), (1, 4)])

    result = clean_twice(new, replica_dirs=(str(lagging),))

    assert result.fence == ReplicaFence(5, str(lagging), "log end", (CopyFence(str(lagging), 5, None),))
    assert result.clean_limit is None
    assert [r for r in read_all_records(new) if r[0] in (4, 5)] == [(5, b"b", None)]  # below 5: a's goes


def test_a_copy_with_an_interrupted_swap_fences_at_the_swapped_log_end(tmp_path: Path) -> None:
    """The follower's 10.log.swap (10-14) replaces its 10.log (10-19) when Kafka loads it: its log end is 15,
    so the tombstone at 17 it still needs stays."""
    follower = swapped_copy(tmp_path)
    b = PartitionBuilder()
    for offset in range(20):
        if offset == 10:
            b.roll()
        b.batch([(f"k{offset % 7}".encode(), None if offset == 17 else b"v")])
    leader = b.roll().batch([(b"x", b"1")]).write(tmp_path / "leader")

    result = clean_twice(leader, replica_dirs=(str(follower),))

    assert result.fence == ReplicaFence(15, str(follower), "completed swap", (CopyFence(str(follower), 15, None,
                                                                                       "completed swap"),))
    assert (17, b"k3", None) in read_all_records(leader)
    assert any("an interrupted swap (00000000000000000010.log.swap); a broker loading this copy completes it "
               "first (LogLoader), so its log end is taken as 15" in w for w in result.warnings)


def test_the_fence_and_the_limit_in_the_report(tmp_path: Path) -> None:
    new, old = new_leader(tmp_path / "b1"), old_leader(tmp_path / "b2")
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    args = ["clean", str(new), "--replica-dirs", str(old), "--now-ms", str(NOW), "--dry-run",
            "--config", "cleanup.policy=compact"]

    as_json = json.loads(runner.invoke(cli, [*args, "--json"]).stdout)
    text = runner.invoke(cli, args).stdout

    (row,) = as_json["results"]
    assert row["fence"] == {"offset": 4, "set_by": str(old), "why": "lineage",
                            "copies": [{"path": str(old), "log_end": 9, "lineage_parts_at": 4, "fence": 4}]}
    assert row["clean_limit"] == {"offset": 4, "copy": str(old), "why": "lineage"}
    assert row["first_uncleanable_offset"] == 4 and row["blocking_rule"] == "clean-limit"
    assert f"orders-0: replica fence at offset 4: set by {old} (its leader-epoch lineage parts from this copy " \
           "at 4)\n" in text
    assert f"orders-0: cleaned only below offset 4: {old}'s lineage parts from this copy at 4, so Kafka may " \
           "truncate this copy from there when it follows that replica\n" in text


def test_the_safe_offset_in_the_report(tmp_path: Path) -> None:
    new = new_leader(tmp_path / "b1")
    copy = tmp_path / "b2" / new.name
    shutil.copytree(new, copy)
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    args = ["clean", str(new), "--replica-dirs", str(copy), "--safe-offset", "3", "--now-ms", str(NOW),
            "--dry-run", "--config", "cleanup.policy=compact"]

    (row,) = json.loads(runner.invoke(cli, [*args, "--json"]).stdout)["results"]

    assert row["fence"] == {"offset": 3, "set_by": "--safe-offset", "why": "safe offset",
                            "copies": [{"path": str(copy), "log_end": 8, "lineage_parts_at": None, "fence": 8}]}
    assert row["clean_limit"] is None
    assert "orders-0: replica fence at offset 3: set by --safe-offset\n" in runner.invoke(cli, args).stdout


def test_spark_clean_says_the_fence_and_the_limit_as_clean_does(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``spark clean``'s rendering, fed the serial result as its tasks return it (no Spark needed)."""
    from kcompact.cli.spark_cmds import render_spark_clean
    from kcompact.spark.clean_job import SparkCleanRun
    from kcompact.spark.rows import clean_row

    new, old = new_leader(tmp_path / "b1"), old_leader(tmp_path / "b2")
    result = clean_partition(new, compact_config(), CleanOptions(now_ms=NOW, dry_run=True, replica_dirs=(str(old),)))

    render_spark_clean(SparkCleanRun([clean_row(str(new), result)], None), 0.0,  # type: ignore[arg-type]
                       as_json=False)

    out = capsys.readouterr().out
    assert f"orders-0: replica fence at offset 4: set by {old} (its leader-epoch lineage parts from this copy " \
           "at 4)\n" in out
    assert f"orders-0: cleaned only below offset 4: {old}'s lineage parts" in out


def test_a_log_dir_clean_fences_each_partition_by_its_own_copy(tmp_path: Path) -> None:
    """Each row of a log dir's clean has its own fence: orders-0 by the other log dir's copy, users-0 (no copy
    there) none."""
    new_leader(tmp_path / "b1")
    old = old_leader(tmp_path / "b2")
    PartitionBuilder("users").batch([(b"u", b"1")]).write(tmp_path / "b1")
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    args = ["clean", str(tmp_path / "b1"), "--replica-dirs", str(tmp_path / "b2"), "--now-ms", str(NOW),
            "--dry-run", "--config", "cleanup.policy=compact"]

    rows = {row["topic"]: row for row in json.loads(runner.invoke(cli, [*args, "--json"]).stdout)["results"]}
    text = runner.invoke(cli, args).stdout

    assert rows["orders"]["fence"]["offset"] == 4 and rows["orders"]["fence"]["set_by"] == str(old)
    assert rows["orders"]["clean_limit"] == {"offset": 4, "copy": str(old), "why": "lineage"}
    assert (rows["users"]["fence"], rows["users"]["clean_limit"]) == (None, None)
    assert f"orders-0: replica fence at offset 4: set by {old}" in text and "users-0: replica fence" not in text


def test_partitions_with_a_fence_are_not_folded_into_the_active_only_line(tmp_path: Path) -> None:
    """A log dir's partitions whose records all sit in their active segment are said in one line, unless a fence
    has something to say of each."""
    for topic in ("orders", "users"):
        for broker in ("b1", "b2"):
            PartitionBuilder(topic).batch([(b"k", b"1")]).write(tmp_path / broker)
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})

    text = runner.invoke(cli, ["clean", str(tmp_path / "b1"), "--replica-dirs", str(tmp_path / "b2"), "--now-ms",
                               str(NOW), "--dry-run", "--config", "cleanup.policy=compact"]).stdout

    for topic in ("orders", "users"):
        assert f"{topic}-0: replica fence at offset 1: set by {tmp_path / 'b2' / f'{topic}-0'} (its log end)\n" in text


def test_repair_clean_says_the_fence_and_the_limit(tmp_path: Path) -> None:
    new, old = new_leader(tmp_path / "b1"), old_leader(tmp_path / "b2")
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})

    done = runner.invoke(cli, ["repair", str(new), "--clean", "--replica-dirs", str(old), "--now-ms", str(NOW),
                               "--config", "cleanup.policy=compact"])

    assert done.exit_code == 0, done.output
    assert f"clean: replica fence at offset 4: set by {old} (its leader-epoch lineage parts from this copy at " \
           "4)\n" in done.stdout
    assert f"clean: cleaned only below offset 4: {old}'s lineage parts" in done.stdout
