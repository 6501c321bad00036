"""``segment.replica_copies``: each copy as Kafka would load it, against the copy being cleaned."""

from __future__ import annotations

from pathlib import Path

from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.partition import open_partition
from kcompact.segment.replica_copies import loaded_log_start, partition_lineage, replica_copies
from tests.builders import PartitionBuilder
from tests.log.rules.test_fence_lineage import new_leader, old_leader, write_epochs


def test_each_copy_with_its_loaded_end_and_where_its_lineage_parts(tmp_path: Path) -> None:
    new, old = new_leader(tmp_path / "b1"), old_leader(tmp_path / "b2")
    lagging = PartitionBuilder().batch([(b"a", b"1")]).write(tmp_path / "b3")
    write_epochs(lagging, [(0, 0)])

    copies = replica_copies((str(tmp_path / "b2"), str(lagging)), open_partition(new), 8)

    assert [(c.path, c.end.log_end_offset, c.lineage_parts_at) for c in copies] == [(old, 9, 4), (lagging, 1, None)]
    assert replica_copies((), open_partition(new), 8) == []


def test_the_lineage_is_cut_at_the_log_start_checkpoint_not_the_first_segment(tmp_path: Path) -> None:
    """``LogLoader.load``: ``truncateFromStart(logStartOffsetCheckpoint)``, 0 without an entry."""
    part = PartitionBuilder().batch([(b"a", b"1")] * 6).write(tmp_path / "b1")
    write_epochs(part, [(0, 0), (1, 2), (2, 4)])
    partition = open_partition(part)
    assert loaded_log_start(partition) == 0
    write_offset_checkpoint(tmp_path / "b1" / "log-start-offset-checkpoint", {("orders", 0): 3})
    assert loaded_log_start(partition) == 3
    assert partition_lineage(partition, loaded_log_start(partition), 6) == ((1, 3), (2, 4))
