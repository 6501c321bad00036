"""Helpers of the repair tests: partitions to damage, ways to damage them, and the two halves of the promise.

The promise of ``kcompact repair``: (1) a broker opening the repaired partition after an unclean shutdown —
full recovery: every batch's framing and CRC, offsets increasing, the indexes Kafka 4.1 rebuilds, no
leftovers — finds nothing to change (:func:`broker_would_change`); (2) every record of every batch that
passed its CRC before the repair is still there (:func:`crc_valid_records`, a brute-force oracle that
tries every byte position, independent of the salvage code under test).
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

from kcompact.errors import CorruptDataError, UnsupportedFormatError
from kcompact.records.batch import decode_batch, iter_batches
from kcompact.records.batch_header import RecordBatch
from kcompact.records.legacy import LegacyEntry, decode_legacy_entry, legacy_records
from kcompact.records.record import decode_records
from kcompact.segment.checkpoint import read_offset_checkpoint
from kcompact.segment.names import segment_file_name
from kcompact.segment.offset_index import (
    check_offset_index,
    check_offset_lookups,
    decode_offset_index,
)
from kcompact.segment.partition import open_partition
from kcompact.segment.time_index import check_time_index, check_time_lookups, decode_time_index
from kcompact.segment.txn_index import check_txn_index, read_txn_index
from tests.builders import PartitionBuilder
from tests.conftest import copy_tree_writable, real_fixture

Rec = tuple[int, bytes | None, bytes | None]
MAX_RELATIVE = 2**31 - 1


def build_partition(log_dir: Path, *, segments: int = 3, batches: int = 30) -> Path:
    """A partition of ``segments`` closed segments plus a small active one, keys repeating."""
    b = PartitionBuilder()
    for s in range(segments):
        for i in range(batches):
            b.batch([(f"k{(s * 7 + i * 3 + j) % 40}".encode(), f"v{s}-{i}-{j}".encode() * 4)
                     for j in range(4)])
        b.roll()
    b.batch([(b"active", b"1")])
    return b.write(log_dir)


def build_transactional(log_dir: Path) -> Path:
    """Committed and aborted transactions over two closed segments and an active one."""
    b = PartitionBuilder()
    b.batch([(b"a", b"1")], producer_id=7, transactional=True).marker(7, commit=True)
    b.batch([(b"a", b"aborted")], producer_id=7, transactional=True)
    b.batch([(b"b", b"2")]).marker(7, commit=False).roll()
    b.batch([(b"c", b"aborted")], producer_id=9, transactional=True).marker(9, commit=False)
    b.batch([(b"d", b"3")]).roll()
    b.batch([(b"e", b"4")])
    return b.write(log_dir)


def real_partition(tmp_path: Path, log_dir_name: str, partition: str) -> Path:
    """A writable copy of one broker-written partition (skips when the fixtures are absent)."""
    source = real_fixture(log_dir_name, partition)
    target = tmp_path / "logdir" / partition
    copy_tree_writable(source, target)
    for name in ("cleaner-offset-checkpoint", "replication-offset-checkpoint"):
        checkpoint = source.parent / name
        if checkpoint.exists():
            (target.parent / name).write_bytes(checkpoint.read_bytes())
    return target


def batch_positions(log: Path) -> list[tuple[int, int]]:
    """(position, size_in_bytes) of every batch of an intact ``.log``."""
    return [(b.position, b.size_in_bytes) for b in iter_batches(log.read_bytes())]


def flip_byte(path: Path, position: int, mask: int = 0x5A) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def patch(path: Path, position: int, fmt: str, value: int) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, position, value)
    path.write_bytes(bytes(data))


def tree_digest(directory: Path) -> dict[str, str]:
    """sha256 of every regular file under ``directory`` (relative names)."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def partition_digest(part: Path) -> dict[str, str]:
    """sha256 of the partition's files and of the log dir's checkpoint files (lock files aside)."""
    out = tree_digest(part)
    for p in sorted(part.parent.iterdir()):
        if p.is_file() and p.name.endswith("checkpoint"):
            out["../" + p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def all_records(part: Path) -> list[Rec]:
    """(offset, key, value) of every record of the partition, walking it strictly."""
    out: list[Rec] = []
    for seg in open_partition(part).segments:
        for batch in iter_batches(seg.log_path.read_bytes()):
            out.extend(_records(batch))
    return out


def _records(batch: object) -> list[Rec]:
    if isinstance(batch, RecordBatch):
        return [(r.offset, r.key, r.value) for r in decode_records(batch)]
    return [(r.offset, r.key, r.value) for r in legacy_records(batch)]  # type: ignore[arg-type]


def crc_valid_records(part: Path) -> set[Rec]:
    """Records of every batch anywhere in the partition's logs that passes its CRC and decodes.

    Tries every byte position of every ``.log``, so it finds batches Kafka's own walk would never reach
    (those after a damaged region). Batches whose records do not parse have no records to keep.
    """
    found: set[Rec] = set()
    for seg in open_partition(part).segments:
        data = seg.log_path.read_bytes()
        for position in range(max(len(data) - 16, 0)):
            found.update(_valid_batch_records(data, position))
    return found


def _valid_batch_records(data: bytes, position: int) -> list[Rec]:
    magic = data[position + 16]
    try:
        if magic == 2:
            batch = decode_batch(data, position)
            return _records(batch) if batch.crc_valid() else []
        if magic in (0, 1):
            entry = decode_legacy_entry(data, position)
            return _records(entry) if entry.crc_valid() else []
    except (CorruptDataError, UnsupportedFormatError):
        return []
    return []


def broker_would_change(part: Path) -> list[str]:
    """What a broker's full recovery of ``part`` would change or refuse (empty: nothing).

    Every segment is walked with ``iter_batches`` to its last byte; every batch must pass its CRC,
    offsets must increase across batches and segments and fit each segment; ``.index`` and
    ``.timeindex`` must exist and every entry be one a broker's reads accept (an index another broker
    version or ``index.interval.bytes`` wrote differs from Kafka 4.1's rebuild, and is left alone); a ``.txnindex`` must
    pass Kafka's sanity check; no ``.cleaned``/``.swap``/``.deleted`` file or orphaned index may be left; the
    cleaner checkpoint must parse and its entry lie within the log.
    """
    partition = open_partition(part)
    problems = [f"leftover {p.name}" for p in partition.leftovers]
    problems += [f"orphaned index {p.name}" for p in partition.orphan_indexes]
    previous_last = -1
    log_end = partition.log_start_offset()
    for i, seg in enumerate(partition.segments):
        log_end = seg.base_offset  # an empty last segment: the log ends at its base (Kafka's LEO)
        upper = partition.segments[i + 1].base_offset if i + 1 < len(partition.segments) else None
        data = seg.log_path.read_bytes()
        try:
            batches = list(iter_batches(data))
        except (CorruptDataError, UnsupportedFormatError) as err:
            problems.append(f"{seg.log_path.name}: {err}")
            continue
        if sum(b.size_in_bytes for b in batches) != len(data):
            problems.append(f"{seg.log_path.name}: trailing bytes after the last batch")
        for b in batches:
            first = b.base_offset
            if not b.crc_valid():
                problems.append(f"{seg.log_path.name}@{b.position}: CRC")
            if first <= previous_last or first < seg.base_offset:
                problems.append(f"{seg.log_path.name}@{b.position}: offsets go backwards")
            if (upper is not None and b.last_offset >= upper) or \
                    b.last_offset - seg.base_offset > MAX_RELATIVE:
                problems.append(f"{seg.log_path.name}@{b.position}: offsets leave the segment")
            previous_last = b.last_offset
            log_end = b.last_offset + 1
        problems += _index_problems(part, seg.base_offset, batches)
        if seg.txn_index_path is not None:
            problems += check_txn_index(read_txn_index(seg.txn_index_path), seg.base_offset)
    checkpoint = read_offset_checkpoint(partition.log_dir.cleaner_checkpoint)
    entry = checkpoint.get(partition.topic_partition)
    if entry is not None and not partition.log_start_offset() <= entry <= log_end:
        problems.append(f"cleaner checkpoint {entry} outside the log")
    return problems


def _index_problems(part: Path, base_offset: int, batches: list[RecordBatch | LegacyEntry]) -> list[str]:
    """Problems of a segment's ``.index`` and ``.timeindex`` for a broker's reads (empty: none)."""
    problems: list[str] = []
    index, timeindex = (part / segment_file_name(base_offset, k) for k in ("index", "timeindex"))
    for path in (index, timeindex):
        if not path.exists():
            problems.append(f"{path.name}: missing")
    if problems:
        return problems
    offsets = decode_offset_index(index.read_bytes(), base_offset)
    times = decode_time_index(timeindex.read_bytes(), base_offset)
    found = (check_offset_index(offsets, base_offset)
             or check_offset_lookups(offsets, [(b.position, b.last_offset) for b in batches]))
    found += (check_time_index(times, base_offset)
              or check_time_lookups(times, [(b.last_offset, b.max_timestamp) for b in batches]))
    return [f"{base_offset}: {problem}" for problem in found]
