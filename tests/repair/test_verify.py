"""verify_partition: each kind of damage is found with its file and byte position, and judged the way
the broker's cleaner and loader would judge it (LogCleaner.CleanerThread, LogLoader.load)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcompact.records.batch import iter_batches
from kcompact.records.batch_encoding import encode_records_batch
from kcompact.records.batch_header import RecordBatch
from kcompact.repair.verify import PartitionCheck, verify_partition
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.names import segment_file_name
from tests.repair.support import (
    batch_positions,
    build_partition,
    build_transactional,
    flip_byte,
    patch,
    real_partition,
)

LOG0 = segment_file_name(0, "log")


def kinds(check: PartitionCheck) -> list[tuple[str, str, int | None]]:
    return [(f.kind, Path(f.path).name, f.position) for f in check.findings]


@pytest.fixture
def part(tmp_path: Path) -> Path:
    return build_partition(tmp_path / "logdir")


def test_sound_partitions_have_no_findings(part: Path, tmp_path: Path) -> None:
    assert verify_partition(part).findings == []
    real = real_partition(tmp_path, "kraft37-consumer-offsets", "__consumer_offsets-6")
    assert verify_partition(real).findings == []


def test_flipped_byte_in_a_record_is_found_at_its_batch_and_blocks_cleaning(part: Path) -> None:
    log = part / LOG0
    position, size = batch_positions(log)[12]
    flip_byte(log, position + 61)  # the first record's length varint
    check = verify_partition(part)
    (finding,) = check.findings
    assert (finding.kind, Path(finding.path).name, finding.position) == ("corrupt-batch", LOG0, position)
    assert finding.size_in_bytes == size and "fails its CRC" in finding.message
    assert finding.blocks_cleaning and "uncleanable" in finding.cleaner_effect
    assert "deletes the 3 later segments" in finding.broker_effect
    assert check.blocks_cleaning and check.needs_repair


def test_flipped_value_byte_is_laundered_by_the_cleaner_not_blocking(part: Path) -> None:
    log = part / LOG0
    position, size = batch_positions(log)[3]
    flip_byte(log, position + size - 3)  # inside the last value
    (finding,) = verify_partition(part).findings
    assert finding.kind == "corrupt-batch" and not finding.blocks_cleaning
    assert "does not check CRCs" in finding.cleaner_effect


def test_corrupted_length_field_is_reported_with_the_value_found(part: Path) -> None:
    log = part / LOG0
    position, size = batch_positions(log)[5]
    patch(log, position + 8, ">i", 123456)
    (finding,) = verify_partition(part).findings
    assert (finding.kind, finding.position) == ("corrupt-batch", position)
    assert f"expected {size - 12}, found 123456" in finding.message
    assert finding.blocks_cleaning


def test_torn_tail_blocks_cleaning_only_outside_the_active_segment(part: Path) -> None:
    closed = part / LOG0
    data = closed.read_bytes()
    closed.write_bytes(data[:-20])
    active = part / segment_file_name(360, "log")
    active.write_bytes(active.read_bytes()[:-5])
    findings = verify_partition(part).findings
    torn = [(Path(f.path).name, f.blocks_cleaning) for f in findings if f.kind == "torn-tail"]
    assert torn == [(LOG0, True), (active.name, False)]
    assert "active segment" in next(f for f in findings if Path(f.path) == active).cleaner_effect


def test_zero_padding_after_the_last_batch(part: Path) -> None:
    log = part / LOG0
    size = log.stat().st_size
    log.write_bytes(log.read_bytes() + bytes(4096))
    (finding,) = verify_partition(part).findings
    assert (finding.kind, finding.position, finding.size_in_bytes) == ("zero-padding", size, 4096)
    assert finding.blocks_cleaning


def test_crc_valid_batch_with_a_wrong_record_count(part: Path) -> None:
    log = part / LOG0
    batches = list(iter_batches(log.read_bytes()))
    victim = batches[7]
    assert isinstance(victim, RecordBatch)
    bad = encode_records_batch(bytes(victim.payload), count=victim.records_count + 1,
                               base_offset=victim.base_offset,
                               last_offset_delta=victim.last_offset_delta,
                               base_timestamp=victim.base_timestamp,
                               max_timestamp=victim.max_timestamp)
    data = log.read_bytes()
    log.write_bytes(data[: victim.position] + bad + data[victim.position + len(bad):])
    (finding,) = verify_partition(part).findings
    assert (finding.kind, finding.position) == ("corrupt-records", victim.position)
    assert "Incorrect declared batch size" in finding.message and finding.blocks_cleaning
    assert "keeps it" in finding.broker_effect


def test_offsets_going_backwards_across_segments(part: Path) -> None:
    seg0, seg1 = part / LOG0, part / segment_file_name(120, "log")
    last = list(iter_batches(seg0.read_bytes()))[-1]
    seg1.write_bytes(bytes(last.buffer) + seg1.read_bytes())
    findings = verify_partition(part).findings
    order = [f for f in findings if f.kind == "offset-order"]
    assert [(Path(f.path).name, f.position) for f in order] == [(seg1.name, 0)]
    assert "offsets go backwards; expected a first offset >= 120, found 116" in order[0].message
    assert order[0].blocks_cleaning


def test_index_damage_missing_and_garbage(part: Path) -> None:
    (part / segment_file_name(0, "index")).write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x07" * 3)
    (part / segment_file_name(120, "timeindex")).write_bytes(b"junk")
    (part / segment_file_name(240, "index")).unlink()
    found = {(f.kind, Path(f.path).name) for f in verify_partition(part).findings}
    assert found == {
        ("index-corrupt", segment_file_name(0, "index")),
        ("index-corrupt", segment_file_name(120, "timeindex")),
        ("index-missing", segment_file_name(240, "index")),
    }
    assert not verify_partition(part).blocks_cleaning


def test_leftovers_of_an_interrupted_clean_and_the_loader_plan(part: Path) -> None:
    (part / segment_file_name(0, "log", "cleaned")).write_bytes(b"partial")
    (part / segment_file_name(120, "index", "deleted")).write_bytes(b"")
    check = verify_partition(part)
    assert sorted(k for k in kinds(check) if k[0] == "leftover") == [
        ("leftover", segment_file_name(0, "log", "cleaned"), None),
        ("leftover", segment_file_name(120, "index", "deleted"), None)]
    assert any("delete unfinished" in step for step in check.recovery_plan)


def test_checkpoint_entry_kafka_would_reset(part: Path) -> None:
    write_offset_checkpoint(part.parent / "cleaner-offset-checkpoint", {("orders", 0): 9999})
    check = verify_partition(part)
    (finding,) = check.findings
    assert finding.kind == "checkpoint" and "expected 0..361, found 9999" in finding.message
    assert check.checkpoint_reset == 0 and not finding.blocks_cleaning


def test_unparseable_checkpoint_takes_the_log_dir_offline(part: Path) -> None:
    (part.parent / "cleaner-offset-checkpoint").write_bytes(b"0\n3\nother 0 5\norders 0 x\nz 1 2\n")
    check = verify_partition(part)
    (finding,) = check.findings
    assert finding.kind == "checkpoint" and finding.blocks_cleaning
    assert "log dir goes offline" in finding.cleaner_effect
    assert check.checkpoint_rewrite == {("other", 0): 5, ("z", 1): 2}


def test_strays_and_orphans(part: Path) -> None:
    (part / "notes.txt").write_text("hello")
    (part / segment_file_name(999, "timeindex")).write_bytes(b"")
    (part.parent / "scratch").mkdir()
    found = {(f.kind, Path(f.path).name, f.action is not None) for f in verify_partition(part).findings}
    assert found == {("stray", "notes.txt", False), ("stray", "scratch", False),
                     ("orphan-index", segment_file_name(999, "timeindex"), True)}


def test_missing_txn_index_entries_are_found(tmp_path: Path) -> None:
    part = build_transactional(tmp_path / "logdir")
    assert verify_partition(part).findings == []
    txn = part / segment_file_name(0, "txnindex")
    txn.unlink()
    (finding,) = verify_partition(part).findings
    assert finding.kind == "txn-index" and Path(finding.path).name == txn.name
    assert "lacks 1 aborted transaction the data shows" in finding.message
    assert "keep aborted data" in finding.cleaner_effect


def test_a_txn_index_entry_at_no_abort_marker_is_counted_in_words(tmp_path: Path) -> None:
    from kcompact.segment.txn_index import AbortedTxn, decode_txn_index, encode_txn_index

    part = build_transactional(tmp_path / "logdir")
    txn = part / segment_file_name(0, "txnindex")
    [real] = decode_txn_index(txn.read_bytes())
    def stray(n: int) -> AbortedTxn:  # after the real one, of a producer with no marker there
        return AbortedTxn(real.producer_id + 1, real.last_offset + n, real.last_offset + n, real.last_stable_offset)

    for extra, counted in ((1, "1 entry does not end"), (2, "2 entries do not end")):
        txn.write_bytes(encode_txn_index([real, *(stray(n) for n in range(1, extra + 1))]))
        messages = [f.message for f in verify_partition(part).findings if f.kind == "txn-index"]
        assert any(counted + " at an ABORT marker of the producer" in m for m in messages), messages
