"""The promise of ``kcompact repair``, for generated and broker-written partitions damaged in each way:
afterwards a broker's full recovery finds nothing to change, every record of every batch that passed its
CRC before is still there, and ``--undo`` puts every byte back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kcompact.cleaner.disk.swap import CRASH_POINTS
from kcompact.errors import RefusedError
from kcompact.records.batch import iter_batches
from kcompact.repair.repair import RepairOptions, RepairResult, repair_partition
from kcompact.repair.undo import undo_repair
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from kcompact.segment.names import segment_file_name
from kcompact.segment.partition import open_partition
from tests.repair.support import (
    all_records,
    batch_positions,
    broker_would_change,
    build_partition,
    build_transactional,
    crc_valid_records,
    flip_byte,
    partition_digest,
    patch,
    real_partition,
    tree_digest,
)

assert CRASH_POINTS  # the crash points themselves are exercised in test_crash.py


def first_log(part: Path) -> Path:
    return open_partition(part).segments[0].log_path


def middle_batch(log: Path) -> tuple[int, int]:
    positions = batch_positions(log)
    return positions[len(positions) // 2]


def flip_mid_segment(part: Path) -> None:
    log = first_log(part)
    position, size = middle_batch(log)
    flip_byte(log, position + size // 2)


def corrupt_length(part: Path) -> None:
    log = first_log(part)
    position, _size = middle_batch(log)
    patch(log, position + 8, ">i", 0x7FFF0000)


def flip_base_offset(part: Path) -> None:
    log = first_log(part)
    position, _size = middle_batch(log)
    patch(log, position, ">q", 2**50)


def torn_tail(part: Path) -> None:
    log = open_partition(part).segments[-1].log_path
    log.write_bytes(log.read_bytes()[:-9])


def zero_padding(part: Path) -> None:
    log = first_log(part)
    log.write_bytes(log.read_bytes() + bytes(10_000))


def insert_garbage(part: Path) -> None:
    log = first_log(part)
    position, _size = middle_batch(log)
    data = log.read_bytes()
    log.write_bytes(data[:position] + bytes(range(256)) * 7 + data[position:])


def duplicate_batch(part: Path) -> None:
    log = first_log(part)
    position, size = middle_batch(log)
    data = log.read_bytes()
    log.write_bytes(data[: position + size] + data[position : position + size] + data[position + size:])


def garbage_indexes(part: Path) -> None:
    seg = open_partition(part).segments[0]
    (part / segment_file_name(seg.base_offset, "index")).write_bytes(b"\x7f\x01\x02\x03" * 5)
    (part / segment_file_name(seg.base_offset, "timeindex")).write_bytes(b"\x00" * 36)


def missing_indexes(part: Path) -> None:
    for seg in open_partition(part).segments:
        for path in (seg.index_path, seg.time_index_path):
            if path is not None:
                path.unlink()


def bad_checkpoint_entry(part: Path) -> None:
    partition = open_partition(part)
    write_offset_checkpoint(part.parent / "cleaner-offset-checkpoint",
                            {("other", 3): 17, partition.topic_partition: 10**9})


def unparseable_checkpoint(part: Path) -> None:
    (part.parent / "cleaner-offset-checkpoint").write_bytes(b"0\n2\nother 3 17\n\xff\xfe garbage\n")


DAMAGES: dict[str, Callable[[Path], None]] = {
    "flip-mid-segment": flip_mid_segment,
    "corrupt-length": corrupt_length,
    "flip-base-offset": flip_base_offset,
    "torn-tail": torn_tail,
    "zero-padding": zero_padding,
    "insert-garbage": insert_garbage,
    "duplicate-batch": duplicate_batch,
    "garbage-indexes": garbage_indexes,
    "missing-indexes": missing_indexes,
    "bad-checkpoint-entry": bad_checkpoint_entry,
    "unparseable-checkpoint": unparseable_checkpoint,
}
PARTITIONS: dict[str, Callable[[Path], Path]] = {
    "generated": lambda tmp: build_partition(tmp / "logdir"),
    "transactional": lambda tmp: build_transactional(tmp / "logdir"),
    "confluent-lz4": lambda tmp: real_partition(tmp, "confluent512-lz4-logdir", "__consumer_offsets-37"),
    "kraft-indexed": lambda tmp: real_partition(tmp, "kraft37-consumer-offsets", "__consumer_offsets-6"),
    "kraft-cleaned": lambda tmp: real_partition(tmp, "kraft37-cleaned-logdir", "__consumer_offsets-31"),
}


def repair_keeping_the_promise(part: Path, **options: object) -> RepairResult:
    """Repair and check both halves of the promise; returns the result (undo not yet done)."""
    valid_before = crc_valid_records(part)
    result = repair_partition(part, RepairOptions(**options))  # type: ignore[arg-type]
    assert broker_would_change(part) == []
    after = set(all_records(part))
    missing = valid_before - after
    if missing:  # only a batch whose base offset (outside the CRC) was damaged may move or go
        quarantined = quarantined_records(result, kind="offset-order")
        after_content = {(k, v) for _o, k, v in after}
        assert {r for r in missing if (r[1], r[2]) not in after_content} <= quarantined
        assert any("offset" in f.message for f in result.findings if f.kind == "offset-order")
    assert [f.located() for f in result.remaining if f.action or f.blocks_cleaning] == []
    assert result.ok
    return result


def quarantined_records(result: RepairResult, *, kind: str) -> set[tuple[int, bytes | None, bytes | None]]:
    """Records of the whole batches held in the quarantine regions of ``kind``."""
    out: set[tuple[int, bytes | None, bytes | None]] = set()
    for entry in result.quarantined:
        if entry.kind == kind:
            data = (Path(result.backup_dir or "") / entry.file).read_bytes()
            for batch in iter_batches(data):
                out.update(_decode_at(data, batch.position, batch.size_in_bytes))
    return out


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("source", list(PARTITIONS))
def test_repair_keeps_the_promise_and_undo_restores_every_byte(
    tmp_path: Path, source: str, damage: str
) -> None:
    part = PARTITIONS[source](tmp_path)
    DAMAGES[damage](part)
    before = partition_digest(part)
    result = repair_keeping_the_promise(part)
    assert result.findings and result.backup_dir is not None
    assert not Path(result.backup_dir).resolve().is_relative_to(part.parent.resolve())
    undo_repair(result.backup_dir)
    assert partition_digest(part) == before


def test_flipped_byte_goes_to_the_quarantine_with_its_file_and_position(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    log = first_log(part)
    position, size = middle_batch(log)
    flip_byte(log, position + 70)
    damaged = log.read_bytes()[position : position + size]
    records = all_records_of_intact(part, skip=position)
    result = repair_keeping_the_promise(part)
    (entry,) = result.quarantined
    assert (entry.source, entry.position, entry.size_in_bytes) == (f"orders-0/{log.name}", position, size)
    assert (Path(result.backup_dir or "") / entry.file).read_bytes() == damaged
    manifest = json.loads((Path(result.backup_dir or "") / "manifest.json").read_bytes())
    assert manifest["quarantine"][0]["position"] == position
    assert all_records(part) == records  # everything but the damaged batch, offsets unchanged


def all_records_of_intact(part: Path, *, skip: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """Records of the partition as it was, without the batch at ``skip`` of the first segment."""
    out = []
    first = first_log(part)
    for seg in open_partition(part).segments:
        data = seg.log_path.read_bytes()
        for position, size in _positions_ignoring_damage(data):
            if seg.log_path == first and position == skip:
                continue
            out.extend(_decode_at(data, position, size))
    return out


def _positions_ignoring_damage(data: bytes) -> list[tuple[int, int]]:
    import struct

    out, position = [], 0
    while position < len(data):
        size = struct.unpack_from(">i", data, position + 8)[0] + 12
        out.append((position, size))
        position += size
    return out


def _decode_at(data: bytes, position: int, size: int) -> list[tuple[int, bytes | None, bytes | None]]:
    from kcompact.records.record import decode_records

    (batch,) = iter_batches(data[position : position + size])
    return [(r.offset, r.key, r.value) for r in decode_records(batch)]  # type: ignore[arg-type]


@pytest.mark.parametrize("damage", [corrupt_length, flip_base_offset])
def test_header_fields_outside_the_crc_are_restored_losing_no_record(tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    part = build_partition(tmp_path / "logdir")
    original = all_records(part)
    damage(part)
    result = repair_keeping_the_promise(part)
    assert result.quarantined == []
    assert all_records(part) == original


def test_torn_tail_and_padding_are_dropped_into_the_quarantine(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    zero_padding(part)
    torn_tail(part)
    result = repair_keeping_the_promise(part)
    assert sorted(q.kind for q in result.quarantined) == ["torn-tail", "zero-padding"]
    assert [f.kind for f in result.findings if f.kind in ("torn-tail", "zero-padding")]


def test_checkpoint_entry_is_reset_to_the_log_start_and_other_lines_kept(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    bad_checkpoint_entry(part)
    repair_keeping_the_promise(part)
    assert read_offset_checkpoint(part.parent / "cleaner-offset-checkpoint") == {
        ("other", 3): 17, ("orders", 0): 0}


def test_unparseable_checkpoint_keeps_the_lines_that_parse(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    unparseable_checkpoint(part)
    repair_keeping_the_promise(part)
    assert read_offset_checkpoint(part.parent / "cleaner-offset-checkpoint") == {("other", 3): 17}


def test_txn_index_is_rebuilt_from_the_data(tmp_path: Path) -> None:
    part = build_transactional(tmp_path / "logdir")
    txn = part / segment_file_name(0, "txnindex")
    expected = txn.read_bytes()
    txn.write_bytes(b"\x00\x01" + b"\x00" * 32)  # version 1: Kafka's reader refuses it
    repair_keeping_the_promise(part)
    assert txn.read_bytes() == expected


def test_an_entry_at_its_abort_marker_that_starts_after_it_is_replaced_by_the_derived_one(
    tmp_path: Path,
) -> None:
    """An entry of the right producer at the right ABORT marker but with a first offset past it is
    dropped: the aborted transaction the data shows takes its place (it used to count as already
    indexed, and the repaired index lost the transaction)."""
    from kcompact.segment.txn_index import decode_txn_index, encode_txn_index

    part = build_transactional(tmp_path / "logdir")
    txn = part / segment_file_name(0, "txnindex")
    expected = txn.read_bytes()
    [real] = decode_txn_index(expected)
    txn.write_bytes(encode_txn_index([type(real)(real.producer_id, real.last_offset + 5,
                                                 real.last_offset, real.last_stable_offset)]))
    repair_keeping_the_promise(part)
    assert txn.read_bytes() == expected


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    flip_mid_segment(part)
    before = tree_digest(tmp_path)
    result = repair_partition(part, RepairOptions(dry_run=True))
    assert tree_digest(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logdir"]
    assert result.plan and result.actions == [] and not result.ok


def test_nothing_to_do_leaves_no_backup(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    before = tree_digest(part)
    result = repair_partition(part)
    assert result.findings == [] and result.backup_dir is None and result.ok
    assert tree_digest(part) == before
    assert not (tmp_path / "logdir.kcompact-backup").exists()


def test_backup_dir_inside_the_log_dir_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    flip_mid_segment(part)
    before = tree_digest(part)
    with pytest.raises(RefusedError, match="must not be inside the log dir"):
        repair_partition(part, RepairOptions(backup_dir=part.parent / "backup"))
    assert tree_digest(part) == before and not (part.parent / "backup").exists()


def test_refuses_while_a_broker_holds_the_log_dir(tmp_path: Path) -> None:
    from tests.segment.test_lock import held_by_child

    part = build_partition(tmp_path / "logdir")
    flip_mid_segment(part)
    before = tree_digest(part)
    with held_by_child(part.parent / ".lock"):
        for dry_run in (True, False):
            with pytest.raises(RefusedError, match="broker"):
                repair_partition(part, RepairOptions(dry_run=dry_run))
    assert tree_digest(part) == before


def test_refuses_while_another_kcompact_holds_the_partition(tmp_path: Path) -> None:
    from tests.segment.test_lock import held_by_child

    part = build_partition(tmp_path / "logdir")
    flip_mid_segment(part)
    with held_by_child(part.parent / ".kcompact-orders-0.lock"), \
            pytest.raises(RefusedError, match="another kcompact"):
        repair_partition(part)


def test_metadata_log_is_reported_not_repaired(tmp_path: Path) -> None:
    part = real_partition(tmp_path, "kraft37-consumer-offsets", "__cluster_metadata-0")
    assert repair_partition(part, RepairOptions(dry_run=True)).plan
    with pytest.raises(RefusedError, match="__cluster_metadata"):
        repair_partition(part)


def test_repair_then_clean_and_undo_both(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    flip_mid_segment(part)
    before = partition_digest(part)
    result = repair_partition(part, RepairOptions(clean=True, now_ms=1_800_000_000_000, assume_compact=True))
    assert broker_would_change(part) == [] and result.ok
    assert result.clean is not None and result.clean.results[0].end_offset == 360
    keys = [k for _o, k, _v in all_records(part) if k is not None]
    assert len(keys) == len(set(keys))  # compacted: one record per key
    undo_repair(result.backup_dir or "")
    assert partition_digest(part) == before


def test_undo_refuses_when_the_partition_changed_since(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    flip_mid_segment(part)
    result = repair_partition(part)
    active = open_partition(part).segments[-1].log_path
    active.write_bytes(active.read_bytes() + next(iter(iter_batches(active.read_bytes()))).buffer)
    with pytest.raises(RefusedError, match="changed since the repair"):
        undo_repair(result.backup_dir or "")


def test_undo_refuses_a_damaged_backup(tmp_path: Path) -> None:
    from kcompact.errors import KcompactError

    part = build_partition(tmp_path / "logdir")
    flip_mid_segment(part)
    result = repair_partition(part)
    copy = next((Path(result.backup_dir or "") / "files" / "orders-0").iterdir())
    copy.write_bytes(copy.read_bytes() + b"x")
    before = tree_digest(part)
    with pytest.raises(KcompactError, match="backup copy damaged"):
        undo_repair(result.backup_dir or "")
    assert tree_digest(part) == before


def test_a_swap_that_cannot_be_settled_is_refused_before_any_change(tmp_path: Path) -> None:
    from kcompact.errors import CleanerStateError

    part = build_partition(tmp_path / "logdir")
    flip_mid_segment(part)
    (part / segment_file_name(0, "log", "swap")).write_bytes(b"\x00" * 8 + b"\x00\x00\x00\x05" + b"x" * 20)
    before = tree_digest(tmp_path)
    (leftover,) = [f for f in repair_partition(part, RepairOptions(dry_run=True)).findings
                   if f.kind == "leftover"]
    assert "the swap cannot be settled" in leftover.message and leftover.action is None
    with pytest.raises(CleanerStateError, match="cannot be settled.*Nothing was changed"):
        repair_partition(part)
    assert tree_digest(part) == tree_digest_of(before, "logdir/orders-0/")


def tree_digest_of(digest: dict[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix):]: v for k, v in digest.items() if k.startswith(prefix)}


def test_undo_puts_back_an_orphaned_index_that_settling_an_interrupted_clean_deleted(tmp_path: Path) -> None:
    """Settling leftovers deletes orphaned indexes as Kafka's loader does, below the leftovers too: the
    backup must hold them."""
    part = build_partition(tmp_path / "logdir")
    last = open_partition(part).segments[-1]
    index = part / segment_file_name(last.base_offset, "index")
    (part / (index.name + ".deleted")).write_bytes(index.read_bytes())  # an interrupted roll's original
    (part / segment_file_name(1, "txnindex")).write_bytes(b"")  # an orphan below it
    before = partition_digest(part)

    result = repair_partition(part, RepairOptions())

    assert not (part / segment_file_name(1, "txnindex")).exists()
    undo_repair(result.backup_dir or "")
    assert partition_digest(part) == before
