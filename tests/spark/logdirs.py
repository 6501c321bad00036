"""Log dirs for the Spark tests: several compacted partitions written with kcompact's own builder.

Each partition mixes what the cleaner and the export must get right: overwritten keys over several
segments, a codec per partition (none, gzip, snappy, lz4, zstd), a committed and an aborted
transaction, a transaction still open at the log end (on request), tombstones, a keyless record,
record headers, and an empty active segment so that everything else is cleanable.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

from kcompact.records.batch import iter_batches
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.crc import crc32c
from kcompact.records.record import Header, Record
from kcompact.segment.checkpoint import update_offset_checkpoint
from tests.builders import BASE_TS, PartitionBuilder
from tests.encoders import encode_legacy_message, encode_legacy_wrapper
from tests.segment_writer import write_segment

NOW = BASE_TS + 10_000_000  # every record is older than any lag and horizon rule with defaults
COMPACT = {"cleanup.policy": "compact"}  # these log dirs have no metadata log to say so
CRC_POSITION = 17  # baseOffset(8) batchLength(4) partitionLeaderEpoch(4) magic(1), then crc(4)
RECORDS_COUNT_POSITION = 57  # ... baseSequence(4) at 53, then recordsCount(4)
CODECS = (0, 1, 2, 3, 4)


def build_partition(
    log_dir: Path, topic: str, partition: int, *, codec: int = 0, open_txn: bool = False
) -> Path:
    """One partition of four closed segments and an empty active one (see the module docstring)."""
    b = PartitionBuilder(topic, partition)
    pid = 1000 + partition
    for s in range(4):
        b.batch([(f"k{(s + j) % 5}".encode(), f"{topic}-{partition}-v{s}-{j}".encode() * 3)
                 for j in range(4)], compression=codec)
        if s == 0:
            b.batch([(b"doomed", b"soon"), (None, b"keyless")], compression=codec,
                    headers=(Header(b"trace", b"\x01\x02"), Header(b"empty", None)))
        if s == 1:
            b.batch([(b"k0", b"aborted")], producer_id=pid, transactional=True,
                    compression=codec).marker(pid, commit=False)
        if s == 2:
            b.batch([(b"tx", b"committed")], producer_id=pid, transactional=True,
                    compression=codec).marker(pid, commit=True)
            b.batch([(b"doomed", None)], compression=codec)
        b.roll()
    if open_txn:
        b.batch([(b"k1", b"pending")], producer_id=pid + 500, transactional=True)
    part = b.write(log_dir, high_watermark=None, index_interval_bytes=200)
    update_offset_checkpoint(log_dir / "replication-offset-checkpoint", {(topic, partition): b.next_offset})
    return part


def build_log_dir(log_dir: Path, count: int = 4, topics: tuple[str, ...] = ("orders", "users")) -> Path:
    """``count`` partitions spread over ``topics``, a codec each; returns the log dir."""
    for i in range(count):
        build_partition(log_dir, topics[i % len(topics)], i // len(topics), codec=CODECS[i % len(CODECS)])
    return log_dir


def build_legacy_partition(log_dir: Path, topic: str = "legacy", partition: int = 0) -> Path:
    """A log written before and after a message-format upgrade: v0 and v1 messages, v0/v1 wrappers
    (gzip, snappy, lz4) with a tombstone and a keyless message, then a v2 segment, then an empty one."""
    part = log_dir / f"{topic}-{partition}"
    legacy = [
        encode_legacy_message(offset=0, magic=0, key=b"a", value=b"v0-plain"),
        encode_legacy_message(offset=1, magic=1, key=b"b", value=b"v1-plain", timestamp=BASE_TS + 1),
        encode_legacy_wrapper([Record(2, BASE_TS + 2, b"a", b"v1-gzip"), Record(3, BASE_TS + 3, b"c", None)],
                              magic=1, compression=1),
        encode_legacy_wrapper([Record(4, -1, b"b", b"v0-snappy"), Record(5, -1, None, b"keyless")],
                              magic=0, compression=2),
        encode_legacy_wrapper([Record(6, BASE_TS + 6, b"d", b"v1-lz4")], magic=1, compression=3),
    ]
    write_segment(part, 0, legacy)
    write_segment(part, 7, [encode_batch([Record(7, BASE_TS + 7, b"a", b"v2")], base_offset=7)])
    write_segment(part, 8, [])
    update_offset_checkpoint(log_dir / "replication-offset-checkpoint", {(topic, partition): 8})
    return part


def flip_crc_of_a_kept_batch(part: Path) -> None:
    """Break the CRC of the second segment's last batch (a key that survives: copied verbatim), which
    only the cleaner's self-check notices; the clean of this partition then fails, untouched."""
    segment = sorted(part.glob("*.log"))[1]
    data = bytearray(segment.read_bytes())
    last = list(iter_batches(bytes(data)))[-1]
    data[last.position + CRC_POSITION] ^= 0xFF
    segment.write_bytes(bytes(data))


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` but kcompact's own (empty) lock files."""
    out = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        if path.name == ".lock" or (path.name.startswith(".kcompact-") and path.name.endswith(".lock")):
            continue
        out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def flip_a_value_byte(part: Path) -> tuple[Path, int]:
    """Flip one byte of a record's value in the second segment's first batch (uncompressed: the value's
    bytes are stored as they are), which every reader that skips the CRC would return as data.

    Returns:
        The segment and the batch's byte position.
    """
    segment = sorted(part.glob("*.log"))[1]
    data = bytearray(segment.read_bytes())
    first = next(iter_batches(bytes(data)))
    value = f"{part.name}-v1-0".encode()
    at = data.find(value, first.position, first.position + first.size_in_bytes)
    assert at > 0, f"{value!r} is not stored plainly in {segment}"
    data[at + len(value) - 1] ^= 0x01  # "...-v1-0" -> "...-v1-1": still a plausible value
    segment.write_bytes(bytes(data))
    return segment, first.position


def undecodable_batch(part: Path) -> tuple[Path, int]:
    """Make the second segment's first batch declare one record more than it holds, with a CRC that
    matches (bytes a faulty writer produced): it passes its CRC, its records do not parse.

    Returns:
        The segment and the batch's byte position.
    """
    segment = sorted(part.glob("*.log"))[1]
    data = bytearray(segment.read_bytes())
    first = next(iter_batches(bytes(data)))
    struct.pack_into(">i", data, first.position + RECORDS_COUNT_POSITION, first.records_count + 1)
    end = first.position + first.size_in_bytes
    crc = crc32c(bytes(data[first.position + CRC_POSITION + 4:end]))
    struct.pack_into(">I", data, first.position + CRC_POSITION, crc)
    segment.write_bytes(bytes(data))
    return segment, first.position


def build_hanging_txn_partition(log_dir: Path, *, high_watermark: int | None = 20,
                                topic: str = "ledger") -> Path:
    """A partition whose last stable offset is not its log end: a transaction is never ended.

    Offsets 0-4 plain ``k0..k4``; 5-6 producer 11's transaction (``k0``, ``k1``); 7 producer 12's
    (``k2``); 8 COMMIT of 11, 9 ABORT of 12; 10 plain ``k3``; 11-12 producer 13's transaction
    (``k4``, ``k2``), never ended; 13 plain ``k1``; 14 producer 14's transaction (``k2``), 15 its
    COMMIT; 16 a tombstone of ``k0``; 17 producer 15's transaction (``k3``), 18 its ABORT; 19 plain
    ``k5``. A broker's last stable offset is 11 with the high watermark at the log end (20).
    """
    b = PartitionBuilder(topic, 0)
    b.batch([(f"k{i}".encode(), f"v{i}".encode()) for i in range(5)])
    b.batch([(b"k0", b"committed-5"), (b"k1", b"committed-6")], producer_id=11, transactional=True)
    b.batch([(b"k2", b"aborted-7")], producer_id=12, transactional=True)
    b.marker(11, commit=True).marker(12, commit=False)
    b.batch([(b"k3", b"plain-10")])
    b.batch([(b"k4", b"open-11"), (b"k2", b"open-12")], producer_id=13, transactional=True)
    b.batch([(b"k1", b"plain-13")])
    b.batch([(b"k2", b"committed-14")], producer_id=14, transactional=True).marker(14, commit=True)
    b.batch([(b"k0", None)])
    b.batch([(b"k3", b"aborted-17")], producer_id=15, transactional=True).marker(15, commit=False)
    b.batch([(b"k5", b"plain-19")])
    assert b.next_offset == 20
    return b.write(log_dir, high_watermark=high_watermark)
