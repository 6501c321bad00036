"""``segment.swap_completion``: an interrupted swap's leftovers as Kafka's log loader settles them
(``LogLoader.load``), read in place, and the log end recovery then keeps (``segment.recovery``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from kcompact.segment.partition import open_partition
from kcompact.segment.recovery import recovered_log_end
from kcompact.segment.swap_completion import loaded_segments, plan_swap_completion
from tests.builders import PartitionBuilder


def name(base: int, kind: str, suffix: str = "") -> str:
    return f"{base:020d}.{kind}{suffix}"


def _ten_each(last: int) -> PartitionBuilder:
    """Offsets 0-9 in one segment, 10..``last`` in the next, one record a batch."""
    b = PartitionBuilder()
    for offset in range(last + 1):
        if offset == 10:
            b.roll()
        b.batch([(f"k{offset % 7}".encode(), b"v")])
    return b


def swapped_copy(tmp_path: Path) -> Path:
    """A copy whose segment 10 (offsets 10-19) is being replaced by a ``.swap`` holding 10-14, with a
    ``.cleaned`` file and a ``.deleted`` one of an earlier clean beside it."""
    part = _ten_each(19).write(tmp_path / "copy")
    shorter = _ten_each(14).write(tmp_path / "shorter")
    shutil.copy(shorter / name(10, "log"), part / name(10, "log", ".swap"))
    shutil.copy(shorter / name(10, "index"), part / name(10, "index", ".swap"))
    (part / name(30, "log", ".cleaned")).write_bytes(b"")
    (part / name(0, "timeindex", ".deleted")).write_bytes(b"")
    return part


def test_a_swap_replaces_the_segments_it_covers_and_ends_the_log_lower(tmp_path: Path) -> None:
    part = swapped_copy(tmp_path)
    before = sorted(p.name for p in part.iterdir())

    segments, plan = loaded_segments(open_partition(part))
    end = recovered_log_end(open_partition(part))

    assert [(s.base_offset, s.log_path.name) for s in segments] == [(0, name(0, "log")),
                                                                     (10, name(10, "log", ".swap"))]
    assert [what for _p, what in plan.deleted] == [
        f"delete leftover {name(0, 'timeindex', '.deleted')}", f"delete unfinished {name(30, 'log', '.cleaned')}",
        f"delete {name(10, 'log')} (replaced by the interrupted swap)"]
    assert (end.log_end_offset, end.stopped_at, end.swapped_end) == (15, None, True)
    assert end.completed_swaps == (part / name(10, "log", ".swap"),)
    assert open_partition(part).log_end_offset() == 20  # the .log alone says 20
    assert sorted(p.name for p in part.iterdir()) == before  # read in place: nothing renamed or deleted


def test_a_swap_at_or_above_a_cleaned_file_never_completed(tmp_path: Path) -> None:
    """A split that never finished (``removeTempFilesAndCollectSwapFiles``): the swap goes, the segment stays."""
    part = swapped_copy(tmp_path)
    (part / name(5, "log", ".cleaned")).write_bytes(b"")

    end = recovered_log_end(open_partition(part))

    assert (end.log_end_offset, end.completed_swaps, end.swapped_end) == (20, (), False)


def test_the_plan_renames_logs_first(tmp_path: Path) -> None:
    part = swapped_copy(tmp_path)
    plan = plan_swap_completion(list(part.iterdir()))
    assert [(s.name, f.name) for s, f in plan.renamed] == [(name(10, "log", ".swap"), name(10, "log")),
                                                           (name(10, "index", ".swap"), name(10, "index"))]
