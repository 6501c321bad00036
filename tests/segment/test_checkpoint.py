"""Offset and leader-epoch checkpoints: Kafka's framing, corruption, atomic, concurrent updates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptCheckpointError
from kcompact.segment.checkpoint import (
    checkpoint_entry,
    decode_leader_epoch_checkpoint,
    decode_offset_checkpoint,
    encode_offset_checkpoint,
    holding_updates,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    update_offset_checkpoint,
    write_checkpoint_updates,
    write_offset_checkpoint,
)
from tests.conftest import REPO_ROOT, real_fixture

_topics = st.text(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=40
)
_checkpoints = st.dictionaries(
    st.tuples(_topics, st.integers(0, 2**31 - 1)), st.integers(-(2**63), 2**63 - 1), max_size=40
)


@given(entries=_checkpoints)
def test_encode_decode_round_trip_keeps_order(entries: dict[tuple[str, int], int]) -> None:
    decoded = decode_offset_checkpoint(encode_offset_checkpoint(entries))
    assert list(decoded.items()) == list(entries.items())


def test_encoding_is_kafkas() -> None:
    data = encode_offset_checkpoint({("orders", 0): 12345, ("__consumer_offsets", 17): 0})
    assert data == b"0\n2\norders 0 12345\n__consumer_offsets 17 0\n"
    assert encode_offset_checkpoint({}) == b"0\n0\n"


@pytest.mark.parametrize(
    "data",
    [
        b"0\r\n1\r\norders 3 7\r\n",  # Java's readLine also ends lines at \r\n and \r
        b"0\r1\rorders 3 7",
        b"0\n1\norders \t 3   7  \n",  # fields split on runs of whitespace; trailing blanks dropped
        b"+0\n+1\norders +3 +7\n",  # Integer.parseInt accepts a leading +
    ],
)
def test_decoding_follows_javas_reader(data: bytes) -> None:
    assert decode_offset_checkpoint(data) == {("orders", 3): 7}


@pytest.mark.parametrize("data", [b"", b"0\n", b"0\n0\n", b"0"])
def test_empty_forms_read_as_no_entries(data: bytes) -> None:
    assert decode_offset_checkpoint(data) == {}


def test_repeated_partition_keeps_its_first_place_and_last_value() -> None:
    data = b"0\n3\na 0 1\nb 0 2\na 0 3\n"
    assert list(decode_offset_checkpoint(data).items()) == [(("a", 0), 3), (("b", 0), 2)]


@pytest.mark.parametrize(
    ("data", "fragment", "position"),
    [
        (b"1\n0\n", "line 1: unrecognised version; expected 0, found 1", 0),
        (b"\n0\n", "line 1: the version is not a number; expected an integer in", 0),
        (b"0\nlots\n", "line 2: the entry count is not a number", 2),
        (b"0\n-1\n", "line 2: the entry count is not a number; expected an integer in 0..", 2),
        (
            b"0\n2\na 0 1\nfoo 1\n",
            "line 4: malformed entry; expected \"<topic> <partition> <offset>\", found 'foo 1'",
            10,
        ),
        (
            b"0\n1\n a 0 1\n",
            "line 3: malformed entry",
            4,
        ),  # a leading blank makes an empty first field
        (
            b"0\n1\na x 1\n",
            (
                "line 3: the partition is not a number; "
                "expected an integer in -2147483648..2147483647, found 'x'"
            ),
            4,
        ),
        (b"0\n1\na 0 1_000\n", "line 3: the offset is not a number", 4),
        (b"0\n1\na 0 9223372036854775808\n", "line 3: the offset is not a number", 4),
        (
            b"0\n3\na 0 1\nb 0 2\n",
            "entry count does not match; expected 3 entries (line 2), found 2",
            2,
        ),
        (b"0\n1\n\xff 0 1\n", "line 3 is not UTF-8", 4),
    ],
)
def test_garbage_is_corrupt_with_line_and_position(
    data: bytes, fragment: str, position: int
) -> None:
    with pytest.raises(CorruptCheckpointError) as info:
        decode_offset_checkpoint(data)
    assert fragment in info.value.message
    assert info.value.position == position


def test_read_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_bytes(b"0\n1\norders 0\n")
    with pytest.raises(CorruptCheckpointError) as info:
        read_offset_checkpoint(path)
    assert str(info.value).startswith(f"{path} at position 4: line 3: malformed entry")


def test_missing_file_reads_as_empty(tmp_path: Path) -> None:
    assert read_offset_checkpoint(tmp_path / "cleaner-offset-checkpoint") == {}
    assert read_leader_epoch_checkpoint(tmp_path / "leader-epoch-checkpoint") == []


@pytest.mark.parametrize(
    "entries", [{("has space", 0): 1}, {("", 0): 1}, {("t", 2**31): 1}, {("t", 0): 2**63}]
)
def test_encode_refuses_what_kafka_could_not_read(entries: dict[tuple[str, int], int]) -> None:
    with pytest.raises(ValueError, match="found"):
        encode_offset_checkpoint(entries)


def test_write_is_atomic_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_bytes(b"0\n1\nold 0 1\n")
    write_offset_checkpoint(path, {("b", 1): 5, ("a", 0): 9})
    assert path.read_bytes() == b"0\n2\nb 1 5\na 0 9\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cleaner-offset-checkpoint"]
    with pytest.raises(ValueError):
        write_offset_checkpoint(path, {("bad topic", 0): 1})
    assert path.read_bytes() == b"0\n2\nb 1 5\na 0 9\n"  # a refused write changes nothing


def test_update_keeps_other_lines_in_place_and_appends_new_ones(tmp_path: Path) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_bytes(b"0\n3\nx 0 10\ny 1 20\nz 2 30\n")
    result = update_offset_checkpoint(path, {("y", 1): 25, ("new", 0): 1})
    assert path.read_bytes() == b"0\n4\nx 0 10\ny 1 25\nz 2 30\nnew 0 1\n"
    assert result == read_offset_checkpoint(path)
    assert not (tmp_path / ".kcompact-checkpoints.lock").exists()  # its lock went with it


def test_update_creates_a_missing_file_and_leaves_a_corrupt_one_alone(tmp_path: Path) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    update_offset_checkpoint(path, {("a", 0): 1})
    assert path.read_bytes() == b"0\n1\na 0 1\n"
    path.write_bytes(b"0\n2\na 0 1\n")
    with pytest.raises(CorruptCheckpointError, match="expected 2 entries"):
        update_offset_checkpoint(path, {("b", 0): 1})
    assert path.read_bytes() == b"0\n2\na 0 1\n"



def test_update_after_this_process_wrote_sees_another_writers_rewrite(tmp_path: Path) -> None:
    """This process's own write is remembered (no parse on its next update), but a file another writer put
    in its place meanwhile (Kafka's and kcompact's way: tmp + rename) is read again and its lines kept."""
    path = tmp_path / "cleaner-offset-checkpoint"
    update_offset_checkpoint(path, {("a", 0): 1})
    subprocess.run([sys.executable, "-c", _UPDATER, str(path), "x", "2"], cwd=REPO_ROOT, check=True)
    update_offset_checkpoint(path, {("b", 0): 2})
    assert path.read_bytes() == b"0\n4\na 0 1\nwx 0 0\nwx 1 10\nb 0 2\n"


def test_held_updates_are_seen_by_lookups_and_written_only_by_their_holder(tmp_path: Path) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_bytes(b"0\n1\na 0 1\n")
    with holding_updates(path) as held:
        update_offset_checkpoint(path, {("b", 0): 5, ("a", 0): 3})
        assert path.read_bytes() == b"0\n1\na 0 1\n"  # nothing written while held
        assert (checkpoint_entry(path, ("a", 0)), checkpoint_entry(path, ("b", 0))) == (3, 5)
        write_checkpoint_updates(path, held)
    assert path.read_bytes() == b"0\n2\na 0 3\nb 0 5\n"
    update_offset_checkpoint(path, {("c", 0): 1})  # held no more: written at once
    assert read_offset_checkpoint(path)[("c", 0)] == 1

_UPDATER = """
import sys
from kcompact.segment.checkpoint import update_offset_checkpoint
worker, count = sys.argv[2], int(sys.argv[3])
for partition in range(count):
    update_offset_checkpoint(sys.argv[1], {("w" + worker, partition): partition * 10})
"""


def test_concurrent_updates_from_several_processes_lose_no_entry(tmp_path: Path) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_bytes(b"0\n1\nkeep 7 70\n")
    workers, count = 6, 15
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _UPDATER, str(path), str(worker), str(count)], cwd=REPO_ROOT
        )
        for worker in range(workers)
    ]
    assert [process.wait(timeout=60) for process in processes] == [0] * workers
    entries = read_offset_checkpoint(path)
    assert len(entries) == 1 + workers * count
    assert next(iter(entries.items())) == (("keep", 7), 70)
    for worker in range(workers):
        for partition in range(count):
            assert entries[(f"w{worker}", partition)] == partition * 10


def test_real_cleaner_checkpoint_has_the_brokers_entries() -> None:
    path = real_fixture("kraft37-cleaned-logdir", "cleaner-offset-checkpoint")
    assert read_offset_checkpoint(path) == {
        ("__consumer_offsets", 31): 3,
        ("__consumer_offsets", 44): 9,
    }
    assert (
        read_offset_checkpoint(real_fixture("confluent512-lz4-logdir", "cleaner-offset-checkpoint"))
        == {}
    )


def test_every_real_offset_checkpoint_decodes_and_re_encodes_byte_for_byte() -> None:
    files = sorted(real_fixture().glob("*/*-checkpoint"))
    assert len(files) == 11
    for path in files:
        entries = read_offset_checkpoint(path)
        assert encode_offset_checkpoint(entries) == path.read_bytes(), path
    recovery = read_offset_checkpoint(
        real_fixture("bitnami2024-rolled-logdir", "recovery-point-offset-checkpoint")
    )
    assert len(recovery) == 54 and recovery[("__consumer_offsets", 22)] == 0
    assert ("__cluster_metadata", 0) not in recovery  # KRaft keeps the metadata log out of it


def test_every_real_leader_epoch_checkpoint_decodes() -> None:
    files = sorted(real_fixture().glob("*/*/leader-epoch-checkpoint"))
    assert len(files) == 211
    non_empty = 0
    for path in files:
        entries = read_leader_epoch_checkpoint(path)
        assert [e for e, _ in entries] == sorted({e for e, _ in entries}), path
        assert [o for _, o in entries] == sorted(o for _, o in entries), path
        non_empty += bool(entries)
    assert non_empty > 0


def test_leader_epoch_checkpoint_framing() -> None:
    assert decode_leader_epoch_checkpoint(b"0\n2\n0 0\n3 117\n") == [(0, 0), (3, 117)]
    with pytest.raises(
        CorruptCheckpointError, match='line 3: malformed entry; expected "<epoch> <start_offset>"'
    ):
        decode_leader_epoch_checkpoint(b"0\n1\n0 0 0\n")
