"""The round's steps (plan, key entries, oracle, write_group, commit) run by hand, as a distributed
driver would, give exactly the bytes of ``clean_partition``.

The transaction seeds of the plan are checked against a plain walk of every batch; the map entries
against the builder's own list of records; ``SortedOffsetsOracle`` — built from the serial map's values
plus the clean-section offsets whose digest the map lacks — against the serial oracle, byte for byte.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from kcompact.cleaner.round import steps
from kcompact.cleaner.round.options import CleanOptions, Progress
from kcompact.cleaner.round.plan import CleanPlan, build_plan
from kcompact.cleaner.round.steps import (
    GroupOutput,
    RoundOutput,
    commit_clean,
    plan_clean,
    segment_key_entries,
    write_group,
)
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.cleaner.workers.parallel import run_round
from kcompact.errors import CleanerStateError
from kcompact.log.offset_map import OffsetMap, key_digests
from kcompact.log.offset_map.oracle import KeysAt, OffsetMapOracle, RetentionOracle, SortedOffsetsOracle
from kcompact.log.rules.transactions import CleanedTransactionMetadata, TxnSeed
from kcompact.log.state.log_state import read_control
from kcompact.segment.log_file import LogFile
from kcompact.segment.txn_index import AbortedTxn
from tests.builders import PartitionBuilder
from tests.cleaner.workers.test_parallel import (
    NOW,
    config,
    key,
    transactions,
    transactions_builder,
    tree,
)

OPTIONS = CleanOptions(now_ms=NOW)


def checkpointed(log_dir: Path) -> Path:
    """A partition whose first two segments form the clean section (checkpoint at the third base)."""
    b = PartitionBuilder("ck")
    b.batch([(key(i), b"old") for i in range(10)])
    b.batch([(key(i), None) for i in range(10, 12)])
    b.roll()
    b.batch([(key(i), b"old2") for i in range(12, 20)], producer_id=5, transactional=True)
    b.marker(5, commit=False)
    b.batch([(key(i), b"mid") for i in range(20, 25)])
    b.roll()
    checkpoint = b.next_offset
    b.batch([(key(i), b"new") for i in range(0, 30, 3)], producer_id=6, transactional=True)
    b.batch([(key(i), b"new2") for i in range(12, 16)])
    b.marker(6, commit=True)
    b.roll()
    b.batch([(key(i), None) for i in range(20, 22)])
    b.roll()
    return b.write(log_dir, cleaner_checkpoint=checkpoint)


def serial_map(plan: CleanPlan) -> OffsetMap:
    """The unbounded map of the round, from the stage's dirty entries."""
    offset_map = OffsetMap()
    for base in plan.dirty_segments:
        hi, lo, offsets = segment_key_entries(plan, base, section="dirty")
        offset_map.put_batch(hi, lo, offsets)
    offset_map.latest_offset = plan.map_latest_offset
    offset_map.freeze()
    return offset_map


def by_stages(part: Path, oracle_of: str) -> None:
    plan = plan_clean(part, config(), OPTIONS)
    assert plan is not None
    plan = pickle.loads(pickle.dumps(plan))  # what an executor receives
    offset_map = serial_map(plan)
    oracle: RetentionOracle = OffsetMapOracle(offset_map, plan.first_dirty_offset)
    if oracle_of == "sorted offsets":
        oracle = sorted_offsets_oracle(plan, offset_map)
    outputs = [pickle.loads(pickle.dumps(write_group(plan, i, oracle)))
               for i in range(len(plan.groups))]
    result = commit_clean(plan, outputs, OPTIONS)
    assert result.checkpoint_written and result.end_offset == plan.end_offset


def sorted_offsets_oracle(plan: CleanPlan, offset_map: OffsetMap) -> SortedOffsetsOracle:
    surviving = [offset_map.latest_offsets_sorted()]
    for seg in plan.segments:
        if seg.base_offset < plan.first_dirty_offset:
            hi, lo, offsets = segment_key_entries(plan, seg.base_offset, section="clean")
            surviving.append(offsets[offset_map.get_batch(hi, lo) < 0])
    return SortedOffsetsOracle(np.sort(np.concatenate(surviving)), plan.map_latest_offset)


@pytest.mark.parametrize("oracle_of", ["offset map", "sorted offsets"])
@pytest.mark.parametrize("build", [transactions, checkpointed])
def test_stages_by_hand_give_the_bytes_of_clean_partition(
    tmp_path: Path, build: object, oracle_of: str
) -> None:
    serial = build(tmp_path / "serial" / "logdir")  # type: ignore[operator]
    staged = build(tmp_path / "staged" / "logdir")  # type: ignore[operator]
    clean_partition(serial, config(), OPTIONS)
    by_stages(staged, oracle_of)
    expected, found = tree(serial.parent), tree(staged.parent)
    assert expected.keys() == found.keys()
    assert [name for name in expected if expected[name] != found[name]] == []


def test_the_sorted_offsets_oracle_answers_as_the_map(tmp_path: Path) -> None:
    plan = plan_clean(checkpointed(tmp_path / "logdir"), config(), OPTIONS)
    assert plan is not None and plan.first_dirty_offset > 0
    offset_map = serial_map(plan)
    by_map = OffsetMapOracle(offset_map, plan.first_dirty_offset)
    by_offsets = sorted_offsets_oracle(plan, offset_map)
    for seg in plan.segments:
        section: Literal["dirty", "clean"] = "clean" if seg.base_offset < plan.first_dirty_offset else "dirty"
        _hi, _lo, offsets = segment_key_entries(plan, seg.base_offset, section=section)
        keys = [key_at(plan, o) for o in offsets.tolist()]
        answers = by_map.is_latest(offsets, keys_in(keys))
        assert by_offsets.is_latest(offsets, lambda at: []).tolist() == answers.tolist()
        if section == "dirty":
            assert answers.any()


def keys_in(keys: list[bytes]) -> KeysAt:
    """The oracle's ``keys_at`` over ``keys``."""
    return lambda at: [keys[i] for i in at.tolist()]


def key_at(plan: CleanPlan, offset: int) -> bytes:
    from tests.builders import read_all_records

    return next(k for o, k, _v in read_all_records(Path(plan.partition_dir)) if o == offset and k)


def walk_seeds(plan: CleanPlan) -> tuple[list[TxnSeed[AbortedTxn]], list[TxnSeed[AbortedTxn]]]:
    """Pass 2's and pass 1's transaction state at each segment start, by reading every batch."""
    clean: CleanedTransactionMetadata[AbortedTxn] = CleanedTransactionMetadata()
    dirty: CleanedTransactionMetadata[AbortedTxn] = CleanedTransactionMetadata()
    dirty.add_aborted(plan.map_feed())
    clean_seeds, map_seeds = [], []
    for seg in plan.segments:
        clean_seeds.append(clean.seed())
        if seg.base_offset in plan.dirty_segments:
            map_seeds.append(dirty.seed(with_pending=False))
        clean.add_aborted(plan.aborted_in(seg.base_offset, seg.upper_offset))
        with LogFile(seg.log_path) as log:
            for batch in log.iter_batches():
                for txn in (clean, dirty) if seg.base_offset in plan.dirty_segments else (clean,):
                    if batch.is_control:
                        txn.on_control_batch_read(batch, read_control(batch, log.path)[0])
                    else:
                        txn.on_batch_read(batch)
    return clean_seeds, map_seeds


@pytest.mark.parametrize("build", [transactions, checkpointed])
def test_the_plans_transaction_seeds_are_the_serial_walks_state(
    tmp_path: Path, build: Callable[[Path], Path]
) -> None:
    plan = plan_clean(build(tmp_path / "logdir"), config(), OPTIONS)
    assert plan is not None
    clean_seeds, map_seeds = walk_seeds(plan)
    assert [s.clean_seed for s in plan.segments] == clean_seeds
    assert [s.map_seed for s in plan.segments if s.map_seed is not None] == map_seeds
    if build is transactions:  # transactions cross segment boundaries
        assert any(seed.ongoing_aborted for seed in clean_seeds)
        assert any(seed.ongoing_committed for seed in clean_seeds)


def test_dirty_entries_are_the_keyed_records_of_committed_data(tmp_path: Path) -> None:
    built = transactions_builder()
    plan = plan_clean(built.write(tmp_path / "logdir"), config(), OPTIONS)
    assert plan is not None
    found = np.concatenate([segment_key_entries(plan, b, section="dirty")[2]
                            for b in plan.dirty_segments]).tolist()
    expected = [o for o, k, _v, meta in built.all_records
                if k is not None and o < plan.first_uncleanable_offset
                and not (meta["transactional"] and meta["producer_id"] in (2, 3))]
    assert found == expected


@pytest.mark.parametrize("window", [1, 3, 1 << 16])
def test_clean_entries_are_the_keyed_data_records_below_the_first_dirty_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    from tests.builders import read_all_records

    monkeypatch.setattr(steps, "SLICE_RECORDS", window)  # keys are hashed a window at a time
    plan = plan_clean(checkpointed(tmp_path / "logdir"), config(), OPTIONS)
    assert plan is not None and plan.first_dirty_offset > 0
    records = read_all_records(Path(plan.partition_dir))
    bases = [seg.base_offset for seg in plan.segments]
    clean = [b for b in bases if b < plan.first_dirty_offset]
    for base, upper in zip(clean, bases[1:], strict=False):
        hi, lo, offsets = segment_key_entries(plan, base, section="clean")
        wanted = [(o, k) for o, k, _v in records
                  if k is not None and base <= o < min(upper, plan.first_dirty_offset)]
        assert len(wanted) > 3
        assert offsets.dtype == np.int64 and offsets.tolist() == [o for o, _k in wanted]
        expected_hi, expected_lo = key_digests([k for _o, k in wanted])
        assert hi.tolist() == expected_hi.tolist() and lo.tolist() == expected_lo.tolist()


def test_entries_of_a_section_the_segment_is_not_in_are_refused(tmp_path: Path) -> None:
    plan = plan_clean(checkpointed(tmp_path / "logdir"), config(), OPTIONS)
    assert plan is not None and plan.dirty_segments[0] > 0
    with pytest.raises(CleanerStateError, match="a segment of the clean section; expected a base"):
        segment_key_entries(plan, plan.dirty_segments[-1], section="clean")
    with pytest.raises(CleanerStateError, match="a dirty segment of the round; expected one of"):
        segment_key_entries(plan, 0, section="dirty")
    with pytest.raises(CleanerStateError, match="segment of this cleaning round; expected one of"):
        segment_key_entries(plan, 12345, section="dirty")


def test_a_bounded_round_ends_where_the_map_stopped(tmp_path: Path) -> None:
    plan = plan_clean(transactions(tmp_path / "logdir"), config(), OPTIONS)
    assert plan is not None and len(plan.groups) == 1
    short = plan.bounded(plan.segments[1].base_offset + 2)
    assert short.end_offset == plan.segments[1].base_offset + 3
    assert short.groups == ((plan.segments[0].base_offset, plan.segments[1].base_offset),)


def test_an_oracle_for_another_range_is_refused(tmp_path: Path) -> None:
    plan = plan_clean(transactions(tmp_path / "logdir"), config(), OPTIONS)
    assert plan is not None
    wrong = SortedOffsetsOracle(np.empty(0, dtype=np.int64), plan.map_latest_offset - 1)
    with pytest.raises(CleanerStateError, match="map_latest_offset; expected"):
        write_group(plan, 0, wrong)
    assert not list(Path(plan.partition_dir).glob("*.cleaned"))


def written(tmp_path: Path) -> tuple[CleanPlan, list[GroupOutput], dict[str, bytes]]:
    part = transactions(tmp_path / "logdir")
    before = tree(part.parent)
    plan = plan_clean(part, config(), OPTIONS)
    assert plan is not None
    oracle = OffsetMapOracle(serial_map(plan), plan.first_dirty_offset)
    return plan, [write_group(plan, i, oracle) for i in range(len(plan.groups))], before


def test_commit_refuses_an_output_that_fails_the_self_check(tmp_path: Path) -> None:
    plan, outputs, before = written(tmp_path)
    log = Path(dict(outputs[0].files)["log"])
    log.write_bytes(log.read_bytes()[:-5])
    with pytest.raises(CleanerStateError, match="fails kcompact's self-check, nothing was changed"):
        commit_clean(plan, outputs, OPTIONS)
    assert tree(Path(plan.partition_dir).parent) == before


def test_commit_refuses_when_a_source_segment_changed(tmp_path: Path) -> None:
    plan, outputs, _before = written(tmp_path)
    source = Path(plan.segments[1].log_path)
    source.write_bytes(source.read_bytes() + b"\0")
    with pytest.raises(CleanerStateError, match="changed while it was cleaned; expected"):
        commit_clean(plan, outputs, OPTIONS)
    assert not list(Path(plan.partition_dir).glob("*.cleaned"))


def test_commit_refuses_outputs_of_other_groups(tmp_path: Path) -> None:
    plan, _outputs, _before = written(tmp_path)
    with pytest.raises(CleanerStateError, match="outputs of the round's groups; expected"):
        commit_clean(plan, [], OPTIONS)
    assert not list(Path(plan.partition_dir).glob("*.cleaned"))


def test_nothing_to_clean_is_no_plan(tmp_path: Path) -> None:
    part = transactions(tmp_path / "logdir")
    clean_partition(part, config(), OPTIONS)
    assert plan_clean(part, config(), OPTIONS) is None


def test_a_dry_run_commit_changes_nothing(tmp_path: Path) -> None:
    part = transactions(tmp_path / "logdir")
    before = tree(part.parent)
    plan = plan_clean(part, config(), OPTIONS)
    assert plan is not None
    oracle = OffsetMapOracle(serial_map(plan), plan.first_dirty_offset)
    outputs = [write_group(plan, i, oracle, dry_run=True) for i in range(len(plan.groups))]
    result = commit_clean(plan, outputs, CleanOptions(now_ms=NOW, dry_run=True))
    expected = clean_partition(part, config(), CleanOptions(now_ms=NOW, dry_run=True))
    assert tree(part.parent) == before and not result.checkpoint_written
    assert result.stats.bytes_written == expected.stats.bytes_written > 0
    assert result.stats.records_written == expected.stats.records_written


def test_the_round_runs_the_steps_planner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One planner: the plan ``clean_partition`` hands its passes is the one ``steps.plan_round`` makes
    (the stage a distributed driver and these tests use), not a second copy of its steps."""
    built: list[CleanPlan] = []
    planner = build_plan

    def spy(*args: object, **kwargs: object) -> CleanPlan:
        plan = planner(*args, **kwargs)  # type: ignore[arg-type]
        built.append(plan)
        return plan

    monkeypatch.setattr("kcompact.cleaner.round.steps.build_plan", spy)
    part = checkpointed(tmp_path / "logdir")
    expected = plan_clean(part, config(), OPTIONS)
    assert len(built) == 1
    given: list[CleanPlan] = []

    def runner(plan: CleanPlan, options: CleanOptions, progress: Progress | None) -> RoundOutput:
        given.append(plan)
        return run_round(plan, options, None)

    result = clean_partition(part, config(), OPTIONS, round_runner=runner)
    assert len(built) == 2 and given == [built[1]]
    assert given[0] == expected
    assert result.end_offset == expected.end_offset and result.checkpoint_written
