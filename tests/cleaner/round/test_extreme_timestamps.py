"""Record timestamps at the ends of Java's ``long`` range: the clean writes what Kafka's cleaner writes.

Kafka writes a record's timestamp delta as ``timestamp - baseTimestamp`` in ``long`` arithmetic, which wraps,
and reads it back as ``baseTimestamp + delta``, which wraps again; a batch rebuilt with a new delete horizon as
its base can therefore hold a delta that only wrapping makes fit (``DefaultRecord.writeTo``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.batch_header import RecordBatch
from kcompact.records.record import Record, decode_records
from kcompact.segment.log_file import LogFile
from tests.builders import PartitionBuilder
from tests.records.scan.accel_compare import accel_switched

NEAR_MIN = -(1 << 63) + 10
NOW_MS = 1_800_000_000_000


def _partition_with_an_ancient_tombstone(root: Path) -> Path:
    builder = PartitionBuilder("ovf")
    builder.batch([(b"k%d" % i, b"v") for i in range(4)])
    start = builder.next_offset
    records = [Record(start, NEAR_MIN, b"t1", None), Record(start + 1, NEAR_MIN, b"k9", b"x")]
    builder.segments[-1].batches.append(encode_batch(records, base_offset=start))
    builder.next_offset += len(records)
    builder.roll()
    builder.batch([(b"z", b"active")])
    return builder.write(root / "logs")


def _records(part: Path) -> list[tuple[int, int, bytes | None, bytes | None]]:
    with LogFile(part / "00000000000000000000.log") as log:
        found = []
        for batch in log.iter_batches():
            assert isinstance(batch, RecordBatch)  # the partition holds magic 2 batches only
            found += [(r.offset, r.timestamp, r.key, r.value) for r in decode_records(batch)]
        return found


def _cleaned_both_ways(source: Path, tmp_path: Path) -> list[tuple[Path, str]]:
    """Copies of ``source`` cleaned with the C kernels and with the pure-Python reference: (partition, stdout)."""
    cleaned = []
    for accelerated in (True, False):
        part = tmp_path / f"accel-{accelerated}" / source.name
        shutil.copytree(source, part)
        with accel_switched(accelerated):
            result = CliRunner().invoke(cli, ["clean", "--config", "cleanup.policy=compact", "--now-ms",
                                              str(NOW_MS), str(part)], prog_name="kcompact")
        assert result.exit_code == 0, result.output
        cleaned.append((part, result.stdout))
    return cleaned


def test_a_kept_tombstone_whose_delta_to_the_new_horizon_wraps_is_written_as_kafka_writes_it(tmp_path: Path) -> None:
    original = _partition_with_an_ancient_tombstone(tmp_path / "original")
    before = _records(original)
    outputs = []
    for part, stdout in _cleaned_both_ways(original, tmp_path):
        assert "rebuilt" in stdout  # the tombstone's batch took the new delete horizon
        assert _records(part) == before  # every timestamp reads back as it was, the wrapped delta included
        outputs.append((part / "00000000000000000000.log").read_bytes())
    assert outputs[0] == outputs[1]


def test_a_batch_kept_whole_with_a_negative_delete_horizon_is_copied_as_kafka_copies_it(tmp_path: Path) -> None:
    # filterTo writes the original batch when every record stays and no horizon must be set; a batch that
    # has the horizon bit has a horizon (DefaultRecordBatch.deleteHorizonMs), whatever its sign.
    builder = PartitionBuilder("negh")
    builder.batch([(b"a", b"1")])
    start = builder.next_offset
    records = [Record(start, 100, b"b", b"2"), Record(start + 1, 101, b"c", b"3")]
    original = encode_batch(records, base_offset=start, delete_horizon_ms=-5)
    builder.segments[-1].batches.append(original)
    builder.next_offset += len(records)
    builder.roll()
    builder.batch([(b"z", b"active")])
    source = builder.write(tmp_path / "original")
    for part, _stdout in _cleaned_both_ways(source, tmp_path):
        with LogFile(part / "00000000000000000000.log") as log:
            [kept] = [batch for batch in log.iter_batches() if batch.base_offset == start]
            assert bytes(kept.buffer) == original
