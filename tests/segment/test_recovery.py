"""``segment.recovery``: the log end a broker's recovery keeps (``LogLoader.recoverLog``,
``LogSegment.recover``): the end of the valid prefix from the recovery point on."""

from __future__ import annotations

from pathlib import Path

from kcompact.records.batch import iter_batches
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.partition import open_partition
from kcompact.segment.recovery import recovered_log_end
from tests.builders import PartitionBuilder

LOG0, LOG3 = f"{0:020d}.log", f"{3:020d}.log"


def _partition(tmp_path: Path) -> Path:
    """Offsets 0-2 in a closed segment, 3-5 in the active one, one batch each."""
    b = PartitionBuilder()
    for offset in range(6):
        if offset == 3:
            b.roll()
        b.batch([(f"k{offset}".encode(), b"v")])
    return b.write(tmp_path / "logdir")


def _positions(log: Path) -> list[int]:
    return [batch.position for batch in iter_batches(log.read_bytes())]


def test_a_sound_log_ends_at_its_last_batch(tmp_path: Path) -> None:
    end = recovered_log_end(open_partition(_partition(tmp_path)))
    assert (end.log_end_offset, end.stopped_at) == (6, None)


def test_a_torn_last_batch_is_cut_as_recovery_cuts_it(tmp_path: Path) -> None:
    part = _partition(tmp_path)
    data, last = (part / LOG3).read_bytes(), _positions(part / LOG3)[-1]
    (part / LOG3).write_bytes(data[:-5])  # the last batch, offset 5, is partial
    end = recovered_log_end(open_partition(part))
    assert (end.log_end_offset, end.stopped_at) == (5, (part / LOG3, last))


def test_a_bad_batch_below_the_recovery_point_is_not_walked(tmp_path: Path) -> None:
    """Kafka recovers only from the segment holding the recovery point: what was flushed before stays."""
    part = _partition(tmp_path)
    data = bytearray((part / LOG0).read_bytes())
    data[-2] ^= 0x01  # offset 2 fails its CRC
    (part / LOG0).write_bytes(bytes(data))
    assert recovered_log_end(open_partition(part)).log_end_offset == 2  # no recovery point: the whole log
    write_offset_checkpoint(part.parent / "recovery-point-offset-checkpoint", {("orders", 0): 4})
    assert recovered_log_end(open_partition(part)).log_end_offset == 6
