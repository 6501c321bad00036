"""``clean`` checks the CRC of every batch its round reads, and refuses a partition where one fails.

Kafka's cleaner does not check CRCs: a corrupt batch whose records are all superseded is dropped
without a trace, one partly kept is rebuilt with a fresh CRC (the damage then looks valid), one kept
whole is copied with its bad CRC. kcompact refuses all three before anything is written: exit 2, one
line naming the segment and the batch's byte position and pointing to ``kcompact repair``, every byte
of the log dir as it was. Both record paths (the C kernels and the pure-Python reference) and the
worker-process path (``jobs``) do it; so does a dry run, which reads the same batches.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cleaner.disk.swap import leftover_files
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers import parallel
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.cli.main import cli
from kcompact.errors import BatchCrcError
from kcompact.records.batch import iter_batches
from tests.cleaner.disk.test_crash_recovery import NOW, OVERRIDES, build_partition, topic_config
from tests.cleaner.round.test_clean_failures import error_lines, log_dir_digest, middle_segment
from tests.records.scan.accel_compare import accel_switched

CRC_POSITION = 17  # baseOffset(8) batchLength(4) partitionLeaderEpoch(4) magic(1), then crc(4)
LEGACY_CRC_POSITION = 12  # offset(8) size(4), then the message's crc(4)


def damage(part: Path, case: str) -> tuple[Path, int]:
    """Damage one batch of ``build_partition``'s partition; return its segment and byte position.

    * ``superseded-crc`` / ``superseded-value``: the first batch (k0, k1, k2; all superseded later):
      a clean would drop it whole;
    * ``rewritten``: the first batch of the fifth segment (k0 is kept, k1 and k2 go): a clean would
      rebuild it with a new CRC;
    * ``verbatim``: the last batch of the third segment (its own key, kept): copied byte for byte.
    """
    logs = sorted(part.glob("*.log"))
    seg, index, at = {
        "superseded-crc": (logs[0], 0, CRC_POSITION),
        "superseded-value": (logs[0], 0, -1),
        "rewritten": (logs[4], 0, -1),
        "verbatim": (middle_segment(part), -1, CRC_POSITION),
    }[case]
    data = bytearray(seg.read_bytes())
    batch = list(iter_batches(bytes(data)))[index]
    data[batch.position + (at if at >= 0 else batch.size_in_bytes + at)] ^= 0x5A
    seg.write_bytes(data)
    return seg, batch.position


def expected_error(seg: Path, position: int) -> str:
    return (rf"^{re.escape(str(seg))} at position {position}: batch \(last offset \d+\) fails its CRC; "
            r"expected 0x[0-9a-f]{8}, found 0x[0-9a-f]{8}; ")


@pytest.mark.parametrize("accel_on", [True, False], ids=["C", "Python"])
@pytest.mark.parametrize("case", ["superseded-crc", "superseded-value", "rewritten", "verbatim"])
def test_clean_refuses_a_batch_that_fails_its_crc(tmp_path: Path, case: str, accel_on: bool) -> None:
    part = build_partition(tmp_path / "logdir")
    seg, position = damage(part, case)
    before = log_dir_digest(part.parent)

    for options in (CleanOptions(now_ms=NOW, dry_run=True), CleanOptions(now_ms=NOW)):
        with accel_switched(accel_on), pytest.raises(BatchCrcError, match=expected_error(seg, position)) as info:
            clean_partition(part, topic_config(), options)
        assert "\n" not in str(info.value) and f"`kcompact repair {part}`" in str(info.value)
        assert info.value.position == position
    assert log_dir_digest(part.parent) == before
    assert leftover_files(part) == []


@pytest.mark.parametrize("case", ["superseded-crc", "verbatim"])
@pytest.mark.parametrize("jobs", [2, 3])
def test_worker_processes_check_the_crc_of_their_ranges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int, case: str
) -> None:
    """Chunks of 100 bytes: workers start inside segments, each checks the batches of its own range."""
    monkeypatch.setattr(parallel, "CHUNK_MIN_BYTES", 100)
    part = build_partition(tmp_path / "logdir")
    seg, position = damage(part, case)
    before = log_dir_digest(part.parent)
    with pytest.raises(BatchCrcError, match=expected_error(seg, position)):
        clean_partition(part, topic_config(), CleanOptions(now_ms=NOW, jobs=jobs))
    assert log_dir_digest(part.parent) == before


def test_cli_clean_exits_2_with_one_line_pointing_to_repair(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    seg, position = damage(part, "superseded-crc")
    before = log_dir_digest(part.parent)
    argv = ["clean", str(part), "--roll", "--now-ms", str(NOW)]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]

    result = CliRunner().invoke(cli, argv, catch_exceptions=False)

    assert result.exit_code == 2 and result.stdout == ""
    (line,) = error_lines(result.stderr)
    assert re.match(expected_error(seg, position), line.removeprefix("kcompact: error: "))
    assert line.endswith(f"the data is corrupt (`kcompact repair {part}` sets such batches aside and keeps "
                         "every batch that passes)")
    assert log_dir_digest(part.parent) == before


def test_a_legacy_message_that_fails_its_crc_is_refused(tmp_path: Path) -> None:
    from tests.repair.test_fuzz import legacy_template

    part = legacy_template(tmp_path / "logdir")
    seg = part / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[LEGACY_CRC_POSITION] ^= 0x5A  # the first v1 message: key k0, superseded by offset 7
    seg.write_bytes(data)
    before = log_dir_digest(part.parent)
    config = topic_config()
    with pytest.raises(BatchCrcError, match=expected_error(seg, 0)):
        clean_partition(part, config, CleanOptions(now_ms=NOW))
    assert log_dir_digest(part.parent) == before
