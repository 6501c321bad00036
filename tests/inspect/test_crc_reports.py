"""The inspect reports flag a batch that fails its CRC: a non-zero ``corrupt_batches``, the first one's
error (file, byte position, both checksums, ``kcompact repair``), and exit code 2 after the report.

* ``dirty-ratio`` checks the batches of the dirty section (what the next clean's offset map reads);
  the row keeps its numbers and gets ``error``;
* ``keys`` checks every batch (it reads every record); the projection says the clean would refuse;
* ``last-clean`` checks every batch it walks (the evidence it reports comes from their headers).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.inspect.keys import keys_report
from kcompact.inspect.last_clean import last_clean_report
from kcompact.records.batch import iter_batches
from tests.inspect.keys.test_keys import COMPACT, mixed
from tests.inspect.test_dirty_ratio import NOW, only, segmented
from tests.inspect.test_last_clean import two_rounds

CRC_POSITION = 17


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
