"""The inspect reports flag a batch that fails its CRC: a non-zero ``corrupt_batches``, the first one's
error (file, byte position, both checksums, ``kcompact repair``), and exit code 2 after the report.

* ``dirty-ratio`` checks the batches of the dirty section (what the next clean's offset map reads);
  the row keeps its numbers and gets ``error``;
* ``keys`` checks every batch (it reads every record); the projection says the clean would refuse;
* ``last-clean`` checks every batch it walks (the evidence it reports comes from their headers).
* ``replicas`` checks every batch it compares: a flipped byte is corruption (exit 2), not divergence (3);
* ``transactions`` checks every batch the producer state replays; the row is an error without producers.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.inspect.keys import keys_report
from kcompact.inspect.last_clean import last_clean_report
from kcompact.inspect.replicas import ReplicaSet, replicas_row
from kcompact.inspect.transactions import transactions_report
from kcompact.records.batch import iter_batches
from tests.builders import PartitionBuilder
from tests.encoders import encode_producer_snapshot
from tests.inspect.keys.test_keys import COMPACT, mixed
from tests.inspect.test_dirty_ratio import NOW, only, segmented
from tests.inspect.test_last_clean import two_rounds
from tests.inspect.test_transactions import committed_aborted_open

CRC_POSITION = 17
PRODUCER_ID_POSITION = struct.calcsize(">qiibIhiqq")  # 43: the v2 header's producerId (int64)


def flip_crc(log: Path, index: int) -> tuple[int, int]:
    """Flip a CRC byte of the ``index``-th batch of ``log``; return its position and last offset."""
    data = bytearray(log.read_bytes())
    batch = list(iter_batches(bytes(data)))[index]
    data[batch.position + CRC_POSITION] ^= 0x5A
    log.write_bytes(bytes(data))
    return batch.position, batch.last_offset


def crc_message(log: Path, position: int, last_offset: int) -> str:
    return (rf"^{re.escape(str(log))} at position {position}: batch \(last offset {last_offset}\) fails "
            r"its CRC; expected 0x[0-9a-f]{8}, found 0x[0-9a-f]{8}; the data is corrupt "
            rf"\(`kcompact repair {re.escape(str(log.parent))}` sets such batches aside")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "80"}, catch_exceptions=False)


def error_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("kcompact: error: ")]


def test_dirty_ratio_flags_a_dirty_batch_and_keeps_the_numbers(tmp_path: Path) -> None:
    part = segmented().write(tmp_path / "logdir")
    healthy = only(part)
    log = part / "00000000000000000010.log"
    position, last = flip_crc(log, 1)

    row = only(part)

    assert row.corrupt_batches == 1 and re.match(crc_message(log, position, last), row.error or "")
    assert (row.dirty_bytes, row.dirty_ratio, row.cleaner_rank) == (
        healthy.dirty_bytes, healthy.dirty_ratio, healthy.cleaner_rank)
    result = run("inspect", "dirty-ratio", str(part), "--json")
    assert result.exit_code == 2
    (got,) = json.loads(result.stdout)
    assert got["corrupt_batches"] == 1 and got["error"] == row.error
    text = run("inspect", "dirty-ratio", str(part))
    assert text.exit_code == 2 and error_lines(text) == [f"kcompact: error: {row.error}"]


def test_dirty_ratio_does_not_read_the_clean_section(tmp_path: Path) -> None:
    """Documented in its help: only the dirty section's batches are checked (the clean section's are
    read by ``clean``, ``inspect keys`` and ``repair``)."""
    part = segmented().write(tmp_path / "logdir", cleaner_checkpoint=10)
    flip_crc(part / "00000000000000000000.log", 0)
    row = only(part)
    assert (row.first_dirty_offset, row.corrupt_batches, row.error) == (10, 0, None)


def test_keys_counts_the_batch_and_projects_a_refused_clean(tmp_path: Path) -> None:
    part = mixed().write(tmp_path / "logdir")
    healthy = keys_report(part, cli_overrides=COMPACT, now_ms=NOW)
    log = part / "00000000000000000000.log"
    position, last = flip_crc(log, 1)

    got = keys_report(part, cli_overrides=COMPACT, now_ms=NOW)

    assert got.corrupt_batches == 1 and re.match(crc_message(log, position, last), got.crc_error or "")
    assert got.records == healthy.records and got.keys.distinct_keys == healthy.keys.distinct_keys
    assert not got.projection.cleanable
    assert (got.projection.skipped_reason or "").startswith(f"clean refuses: {got.crc_error}")
    result = run("inspect", "keys", str(part), "--json", "--now-ms", str(NOW),
                 "--config", "cleanup.policy=compact")
    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert (report["corrupt_batches"], report["crc_error"]) == (1, got.crc_error)
    assert error_lines(result) == [f"kcompact: error: {got.crc_error}"]
    text = run("inspect", "keys", str(part), "--now-ms", str(NOW), "--config", "cleanup.policy=compact")
    assert text.exit_code == 2 and "corrupt       1 batch fails its CRC" in text.stdout


def test_keys_counts_a_bad_batch_of_the_active_segment_too(tmp_path: Path) -> None:
    part = mixed().write(tmp_path / "logdir")
    active = max(part.glob("*.log"))
    flip_crc(active, 0)
    got = keys_report(part, cli_overrides=COMPACT, now_ms=NOW)
    assert got.corrupt_batches == 1 and got.projection.cleanable  # the clean does not read it


def test_last_clean_counts_the_batch(tmp_path: Path) -> None:
    part = two_rounds().write(tmp_path / "logdir")
    log = part / "00000000000000000004.log"
    position, last = flip_crc(log, 0)

    got = last_clean_report(part, cli_overrides=COMPACT, now_ms=NOW)

    assert got.corrupt_batches == 1 and re.match(crc_message(log, position, last), got.crc_error or "")
    assert got.records_since == 9  # the walk went on
    result = run("inspect", "last-clean", str(part), "--json", "--now-ms", str(NOW))
    assert result.exit_code == 2 and json.loads(result.stdout)["corrupt_batches"] == 1
    text = run("inspect", "last-clean", str(part), "--now-ms", str(NOW))
    assert text.exit_code == 2 and error_lines(text) == [f"kcompact: error: {got.crc_error}"]
    assert "corrupt       1 batch fails its CRC" in text.stdout


def flip_value(log: Path, value: bytes) -> tuple[int, int]:
    """Flip a byte inside the first stored copy of ``value`` in ``log`` (a record's value, uncompressed);
    return the position and last offset of the batch holding it."""
    data = bytearray(log.read_bytes())
    at = data.find(value)
    assert at >= 0, f"{value!r} is not stored in {log}"
    batch = next(b for b in iter_batches(bytes(data)) if b.position <= at < b.position + b.size_in_bytes)
    data[at] ^= 0x01
    log.write_bytes(bytes(data))
    return batch.position, batch.last_offset


def copies(tmp_path: Path) -> tuple[Path, Path]:
    """Two copies of one partition, byte for byte (replicas that agree)."""
    one = PartitionBuilder("orders", 0)
    one.batch([(b"a", b"first-value"), (b"b", b"second-value")]).roll()
    one.batch([(b"a", b"third-value")])
    leader = one.write(tmp_path / "b1")
    follower = shutil.copytree(leader, tmp_path / "b2" / leader.name)
    shutil.copy(leader.parent / "replication-offset-checkpoint", tmp_path / "b2")
    return leader, follower


def test_replicas_report_a_flipped_value_byte_as_corruption_not_divergence(tmp_path: Path) -> None:
    leader, follower = copies(tmp_path)
    assert run("inspect", "replicas", str(leader), str(follower)).exit_code == 0
    log = follower / "00000000000000000000.log"
    position, last = flip_value(log, b"second-value")

    result = run("inspect", "replicas", str(leader), str(follower), "--json")

    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert re.match(crc_message(log, position, last), error["message"])
    assert (error["path"], error["position"], error["kind"]) == (str(log), position, "BatchCrcError")
    text = run("inspect", "replicas", str(leader), str(follower))
    assert text.exit_code == 2 and error_lines(text) == [f"kcompact: error: {error['message']}"]


def test_spark_replicas_row_of_a_corrupt_copy_is_an_error(tmp_path: Path) -> None:
    """``spark inspect replicas`` runs ``replicas_row`` in its tasks: a corrupt copy is the row's error."""
    leader, follower = copies(tmp_path)
    log = follower / "00000000000000000000.log"
    position, last = flip_value(log, b"first-value")

    row = replicas_row(ReplicaSet("orders", 0, (str(leader), str(follower))))

    assert (row.agree, row.report) == (None, None)
    assert re.match(crc_message(log, position, last), row.error or "")


def test_transactions_report_a_flipped_header_byte_as_corruption(tmp_path: Path) -> None:
    part = committed_aborted_open(tmp_path / "logdir")
    healthy = run("inspect", "transactions", str(part), "--json", "--now-ms", str(NOW))
    assert healthy.exit_code == 0 and json.loads(healthy.stdout)[0]["producers"]
    log = part / "00000000000000000003.log"
    data = bytearray(log.read_bytes())
    batch = next(iter_batches(bytes(data)))  # producer 7's transactional batch
    data[batch.position + PRODUCER_ID_POSITION + 7] ^= 0x04  # producer id 7 -> 3
    log.write_bytes(bytes(data))

    result = run("inspect", "transactions", str(part), "--json", "--now-ms", str(NOW))

    assert result.exit_code == 2, result.output
    (row,) = json.loads(result.stdout)
    assert re.match(crc_message(log, batch.position, batch.last_offset), row["error"])
    assert row["producers"] == [] and row["hanging"] == []
    text = run("inspect", "transactions", str(part), "--now-ms", str(NOW))
    assert text.exit_code == 2 and error_lines(text) == [f"kcompact: error: {row['error']}"]


def test_transactions_check_only_what_the_snapshot_does_not_cover(tmp_path: Path) -> None:
    """A batch below the producer snapshot's offset is not replayed (``ProducerStateManager`` starts
    from the snapshot): the report does not read it, so it does not judge it."""
    part = committed_aborted_open(tmp_path / "logdir")
    (part / "00000000000000000003.snapshot").write_bytes(encode_producer_snapshot([]))  # no producer before 3
    flip_crc(part / "00000000000000000000.log", 0)

    (row,) = transactions_report([part], cli_overrides={}, now_ms=NOW)

    assert (row.error, row.snapshot_offset) == (None, 3)
    assert [p.producer_id for p in row.producers] == [5, 7, 8, 9]
    flip_crc(part / "00000000000000000003.log", 1)
    (row,) = transactions_report([part], cli_overrides={}, now_ms=NOW)
    assert (row.error or "").startswith(f"{part / '00000000000000000003.log'} at position ")
