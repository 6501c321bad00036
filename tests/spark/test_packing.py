"""How ``spark clean`` packs partitions into Spark tasks (pure driver-side arithmetic, no Spark)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kcompact.spark.packing import (
    MAX_AUTO_TASK_BYTES,
    OPEN_COST_BYTES,
    TASKS_PER_CORE,
    pack_partitions,
    segment_bytes,
)

MIB = 1024 * 1024


def loads(packs: list[list[int]], sizes: list[int]) -> list[int]:
    return [sum(sizes[i] + OPEN_COST_BYTES for i in pack) for pack in packs]


def test_sixteen_equal_partitions_make_two_equal_tasks_a_core() -> None:
    sizes = [30 * MIB] * 16

    on_two = pack_partitions(sizes, cores=2)
    on_one = pack_partitions(sizes, cores=1)

    assert [len(pack) for pack in on_two] == [4, 4, 4, 4]
    assert len(set(loads(on_two, sizes))) == 1
    assert len(on_one) == 3  # 16 × 34 MiB over the 256 MiB cap: three tasks, not two
    assert sorted(len(pack) for pack in on_one) == [5, 5, 6]


def test_task_bytes_one_gives_each_partition_its_own_task_and_a_huge_one_a_task_a_core() -> None:
    sizes = [5, 0, 7 * MIB, 3]

    assert sorted(pack_partitions(sizes, cores=8, task_bytes=1)) == [[0], [1], [2], [3]]
    assert pack_partitions(sizes, cores=1, task_bytes=10**12) == [[0, 1, 2, 3]]
    assert sorted(pack_partitions(sizes, cores=2, task_bytes=10**12)) == [[0, 1, 3], [2]]  # still every core


def test_thousands_of_small_partitions_share_tasks_and_the_cap_holds() -> None:
    sizes = [MIB] * 5000

    packs = pack_partitions(sizes, cores=4)

    assert len(packs) == -(-5000 * (MIB + OPEN_COST_BYTES) // MAX_AUTO_TASK_BYTES)  # 98 tasks
    assert max(loads(packs, sizes)) <= MAX_AUTO_TASK_BYTES + MIB + OPEN_COST_BYTES


def test_a_few_tiny_partitions_on_a_big_cluster_get_a_task_each() -> None:
    assert sorted(pack_partitions([100, 200, 300], cores=64)) == [[0], [1], [2]]


def test_a_skewed_partition_gets_a_task_of_its_own_and_tasks_come_largest_first() -> None:
    sizes = [2 * MIB, 900 * MIB, 3 * MIB, 1 * MIB, 4 * MIB]

    packs = pack_partitions(sizes, cores=2)

    assert packs[0] == [1]
    assert loads(packs, sizes) == sorted(loads(packs, sizes), reverse=True)


def test_no_partitions_no_tasks() -> None:
    assert pack_partitions([], cores=2) == []


@given(sizes=st.lists(st.integers(min_value=0, max_value=400 * MIB), min_size=1, max_size=200),
       cores=st.integers(min_value=1, max_value=64),
       task_bytes=st.one_of(st.none(), st.integers(min_value=1, max_value=2**34)))
def test_every_partition_is_in_exactly_one_task_in_cleaning_order_and_loads_balance(
    sizes: list[int], cores: int, task_bytes: int | None
) -> None:
    packs = pack_partitions(sizes, cores, task_bytes)

    assert sorted(i for pack in packs for i in pack) == list(range(len(sizes)))
    assert all(pack == sorted(pack) and pack for pack in packs)
    assert min(len(sizes), cores) <= len(packs) <= len(sizes)
    if task_bytes is None and len(sizes) >= cores * TASKS_PER_CORE:
        assert len(packs) >= cores * TASKS_PER_CORE  # every core has work, twice over
    spread = max(loads(packs, sizes)) - min(loads(packs, sizes))
    assert spread <= max(size + OPEN_COST_BYTES for size in sizes)  # largest-first dealing: within one partition


def test_segment_bytes_counts_only_log_files_and_an_unreadable_dir_counts_as_empty(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(b"x" * 100)
    (part / "00000000000000000100.log").write_bytes(b"x" * 23)
    (part / "00000000000000000000.index").write_bytes(b"x" * 4096)
    (part / "leader-epoch-checkpoint").write_text("0\n0\n")

    assert segment_bytes(part) == 123
    assert segment_bytes(tmp_path / "missing-0") == 0
