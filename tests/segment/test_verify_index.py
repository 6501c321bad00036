"""The index check over whole arrays (``verify_index._agrees``, taken when the log's facts came as
columns from the self-check's C walk) says exactly what the entry-by-entry check says: nothing for the
indexes Kafka 4.1 builds, the same sentences for every broken one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kcompact.segment.index_builder import IndexBuilder
from kcompact.segment.offset_index import encode_offset_index
from kcompact.segment.time_index import encode_time_index
from kcompact.segment.verify_index import LogFacts, verify_index_with_facts

BASE = 1000


@st.composite
def logs(draw: st.DrawFn) -> list[tuple[int, int, int, int]]:
    """``(position, size, last offset, max timestamp)`` of each batch of a log, in file order."""
    batches, position, offset = [], 0, BASE - 1
    for _ in range(draw(st.integers(0, 40))):
        size = draw(st.integers(61, 3000))
        offset += draw(st.integers(1, 3))
        stamp = draw(st.integers(-1, 3) | st.sampled_from([0, 10**12]))  # ties and drops often
        batches.append((position, size, offset, stamp))
        position += size
    return batches


def _indexes(batches: list[tuple[int, int, int, int]], interval: int) -> tuple[bytes, bytes]:
    builder = IndexBuilder(BASE, interval)
    for position, size, last, stamp in batches:
        builder.append(position, size, last, stamp)
    offsets, times = builder.finish()
    return encode_offset_index(offsets, BASE), encode_time_index(times, BASE)


def _mutated(data: bytes, slot: int, batches: list[tuple[int, int, int, int]], drawn: st.DataObject) -> bytes:
    """``data`` with one damage: a byte changed, a slot dropped, repeated, swapped, zeroed at the end
    or pointed at another batch (a plausible entry in the wrong place), or the file cut."""
    draw = drawn.draw
    damage = draw(st.sampled_from(["none", "byte", "drop", "repeat", "zero-tail", "cut", "swap",
                                   "other-batch"]))
    slots = [data[i : i + slot] for i in range(0, len(data), slot)]
    if damage == "other-batch" and slots and batches:
        at = draw(st.integers(0, len(slots) - 1))
        position, _, last, stamp = batches[draw(st.integers(0, len(batches) - 1))]
        relative = (last - BASE + draw(st.sampled_from([0, 0, -1, 1]))).to_bytes(4, "big", signed=True)
        if slot == 8:
            slots[at] = relative + position.to_bytes(4, "big", signed=True)
        else:
            slots[at] = max(stamp, draw(st.integers(-1, 3))).to_bytes(8, "big", signed=True) + relative
        return b"".join(slots)
    if damage == "byte" and data:
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    if damage == "drop" and slots:
        del slots[draw(st.integers(0, len(slots) - 1))]
    elif damage == "repeat" and slots:
        at = draw(st.integers(0, len(slots) - 1))
        slots.insert(at, slots[at])
    elif damage == "zero-tail":
        slots += [bytes(slot)] * draw(st.integers(1, 2))
    elif damage == "cut" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    elif damage == "swap" and len(slots) > 1:
        at = draw(st.integers(0, len(slots) - 2))
        slots[at], slots[at + 1] = slots[at + 1], slots[at]
    return b"".join(slots)


@settings(max_examples=400, deadline=None)
@given(batches=logs(), interval=st.sampled_from([1, 500, 4096]), data=st.data())
def test_the_array_check_says_what_the_entry_by_entry_check_says(
    tmp_path_factory: object, batches: list[tuple[int, int, int, int]], interval: int,
    data: st.DataObject,
) -> None:
    folder = Path(tmp_path_factory.mktemp("index"))  # type: ignore[attr-defined]
    log_path = folder / f"{BASE:020d}.log"
    offset_bytes, time_bytes = _indexes(batches, interval)
    positions, lasts, stamps = (np.array([b[k] for b in batches], dtype=np.int64) for k in (0, 2, 3))
    listed = LogFacts([(b[0], b[2]) for b in batches], [(b[2], b[3]) for b in batches])
    for kind, raw, slot in (("index", offset_bytes, 8), ("timeindex", time_bytes, 12)):
        path = folder / f"{BASE:020d}.{kind}"
        damaged = _mutated(raw, slot, batches, data)
        path.write_bytes(damaged)
        by_entry = verify_index_with_facts(path, BASE, log_path, listed)
        by_arrays = verify_index_with_facts(path, BASE, log_path,
                                            LogFacts.of_columns(positions, lasts, stamps))
        assert by_arrays == by_entry
        if damaged == raw:
            assert by_arrays == []  # what Kafka 4.1 builds passes


def _checked_both_ways(folder: Path, batches: list[tuple[int, int, int, int]], kind: str,
                       raw: bytes) -> list[str]:
    path = folder / f"{BASE:020d}.{kind}"
    path.write_bytes(raw)
    log_path = folder / f"{BASE:020d}.log"
    listed = LogFacts([(b[0], b[2]) for b in batches], [(b[2], b[3]) for b in batches])
    columns = (np.array([b[k] for b in batches], dtype=np.int64) for k in (0, 2, 3))
    by_entry = verify_index_with_facts(path, BASE, log_path, listed)
    assert verify_index_with_facts(path, BASE, log_path, LogFacts.of_columns(*columns)) == by_entry
    return by_entry


def _slot(kind: str, offset: int, position_or_stamp: int) -> bytes:
    relative = (offset - BASE).to_bytes(4, "big", signed=True)
    if kind == "index":
        return relative + position_or_stamp.to_bytes(4, "big", signed=True)
    return position_or_stamp.to_bytes(8, "big", signed=True) + relative


def test_entries_that_look_right_but_are_not_are_reported_both_ways(tmp_path: Path) -> None:
    """The cases the rules exist for, each found by both paths: a zero-filled slot that happens to
    name the first batch, and a time entry at a batch that did not first reach its timestamp."""
    batches = [(0, 100, BASE, 0), (100, 100, BASE + 1, 5), (200, 100, BASE + 2, 5)]
    zero_offset = _checked_both_ways(tmp_path, batches, "index", _slot("index", BASE, 0))
    assert zero_offset and "zero-filled" in zero_offset[0]
    zero_time = _checked_both_ways(tmp_path, batches, "timeindex",
                                   _slot("timeindex", BASE, 0) + _slot("timeindex", BASE, 0))
    assert zero_time and "zero-filled" in zero_time[0]
    late = _checked_both_ways(tmp_path, batches, "timeindex", _slot("timeindex", BASE + 2, 5))
    assert late and "first reached" in late[0]
    assert _checked_both_ways(tmp_path, batches, "timeindex", _slot("timeindex", BASE + 1, 5)) == []
    assert _checked_both_ways(tmp_path, batches, "timeindex", _slot("timeindex", BASE, 0)) == []
