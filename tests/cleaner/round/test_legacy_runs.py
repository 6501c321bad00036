"""Legacy (magic 0/1) data cleaned through the C walks (``legacy_rows``, ``legacy_runs``) gives exactly
what the per-entry walk gives, and reads each entry in Python only where a run cannot take it.

The per-entry walk (``KCOMPACT_NO_ACCEL``, ``accel.enabled`` off) is the reference: every file of the
log dir and every counter must match, in one process and in worker processes starting mid-segment, round
after round; a corrupt entry inside a run fails with the reference's own error.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from kcompact.cleaner.logdir.keyless import count_keyless, sample_keyless
from kcompact.cleaner.round.key_counts import iter_key_counts
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers import parallel
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.errors import KcompactError
from kcompact.records import legacy
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Record
from kcompact.records.scan import accel
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.log_file import LogFile
from kcompact.segment.partition import open_partition
from tests.builders import BASE_TS
from tests.cleaner.workers.test_parallel import DAY, NOW, config, counters, tree
from tests.encoders import encode_legacy_message, encode_legacy_wrapper
from tests.records.scan.accel_compare import accel_switched, needs_c
from tests.segment_writer import write_segment


def _message(rng: random.Random, offset: int, magic: int) -> bytes:
    key = None if rng.random() < 0.05 else b"k%d" % rng.randrange(300)
    value = None if rng.random() < 0.15 else rng.randbytes(rng.randrange(30))
    return encode_legacy_message(offset=offset, magic=magic, key=key, value=value,
                                 timestamp=BASE_TS + offset, timestamp_type=rng.randrange(2))


def _wrapper(rng: random.Random, first: int, magic: int, codec: int, log_append: bool) -> bytes:
    records = [Record(first + i, BASE_TS + first + i, b"k%d" % rng.randrange(300),
                      None if rng.random() < 0.2 else b"w%d" % i) for i in range(5)]
    return encode_legacy_wrapper(records, magic=magic, compression=codec, timestamp_type=int(log_append),
                                 log_append_time=NOW - DAY if log_append else None)


def legacy_partition(log_dir: Path, seed: int = 7) -> Path:
    """Three segments of v0 and v1 messages (keyless ones, tombstones, LogAppendTime) with compressed
    wrappers of each codec among them and v2 batches after them; the oldest older than the legacy
    delete horizon, so that its tombstones go; the last cleanable entry at the round's upper bound."""
    rng = random.Random(seed)
    part = log_dir / "legacy-0"
    offset, base = 0, 0
    for number, mtime in enumerate((NOW - 10 * DAY, NOW - 2 * DAY, NOW - DAY)):
        entries = []
        for n in range(300):
            if n % 60 == 59:
                codec = 1 + (n // 60) % 3
                entries.append(_wrapper(rng, offset, n % 2, codec, log_append=n % 120 == 59))
                offset += 5
            else:
                entries.append(_message(rng, offset, magic=(n // 7) % 2))
                offset += 1
        if number == 1:  # v2 after legacy in one segment (an upgraded broker), legacy again after
            entries.append(encode_batch([Record(offset + i, BASE_TS + offset + i, b"k%d" % i, b"v2")
                                         for i in range(4)], base_offset=offset))
            offset += 4
        if number == 2:  # the entry ending at the upper bound: kept (a key of its own)
            entries.append(encode_legacy_message(offset=offset, magic=1, key=b"last", value=b"x",
                                                 timestamp=BASE_TS + offset))
            offset += 1
        write_segment(part, base, entries, mtime_ms=mtime)
        base = offset
    write_segment(part, offset, [])
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("legacy", 0): offset})
    return part


@needs_c
@pytest.mark.parametrize("jobs", [1, 2])
def test_the_runs_clean_legacy_data_as_the_per_entry_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    monkeypatch.setattr(parallel, "CHUNK_MIN_BYTES", 500)  # workers start inside segments
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 4)
    parts = {on: legacy_partition(tmp_path / f"accel-{on}" / "logdir") for on in (False, True)}
    rounds = [CleanOptions(now_ms=NOW), CleanOptions(now_ms=NOW + 2 * DAY, from_start=True)]
    for number, options in enumerate(rounds):
        results = {}
        for on, part in parts.items():
            with accel_switched(on):
                results[on] = clean_partition(part, config(), replace(options, jobs=jobs))
        assert counters(results[True]) == counters(results[False])
        assert number or results[True].stats.records_written > 250
        reference, fast = tree(parts[False].parent), tree(parts[True].parent)
        assert reference.keys() == fast.keys()
        assert [name for name in reference if reference[name] != fast[name]] == []


@needs_c
@pytest.mark.skipif(not accel.enabled, reason="KCOMPACT_NO_ACCEL is set: the C runs this test counts are off")
def test_a_roll_and_a_clean_of_plain_legacy_messages_decode_few_of_them_in_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3,000 messages in the active segment: each walk (log state, roll, pass 1, pass 2) decoded each
    one in Python, about 15,000 decodes; the runs read them in C."""
    part = tmp_path / "logdir" / "legacy-0"
    rng = random.Random(1)
    write_segment(part, 0, [_message(rng, offset, magic=1) for offset in range(3000)])
    write_offset_checkpoint(tmp_path / "logdir" / "replication-offset-checkpoint", {("legacy", 0): 3000})
    decoded: list[int] = []
    decode = legacy.decode_legacy_entry

    def counting(buf: object, position: int = 0) -> legacy.LegacyEntry:
        decoded.append(position)
        return decode(buf, position)  # type: ignore[arg-type]

    monkeypatch.setattr(legacy, "decode_legacy_entry", counting)
    result = clean_partition(part, config(), CleanOptions(now_ms=NOW, roll=True))
    assert result.rolled and result.stats.records_read == 3000
    assert len(decoded) < 100


@needs_c
@pytest.mark.parametrize("damage", ["crc", "size", "key length", "magic"])
def test_a_damaged_message_inside_a_run_fails_as_in_the_per_entry_walk(
    tmp_path: Path, damage: str
) -> None:
    errors = {}
    for on in (False, True):
        part = legacy_partition(tmp_path / f"accel-{on}" / "logdir")
        log = part / "00000000000000000000.log"
        data = bytearray(log.read_bytes())
        at = _entry_start_after(bytes(data), 1200)  # a plain message inside the segment's first run
        if damage == "crc":
            data[at + 12] ^= 0xFF
        elif damage == "size":
            data[at + 8 : at + 12] = (5).to_bytes(4, "big")
        elif damage == "key length":
            data[at + 18 + 8 * data[at + 16] : at + 22 + 8 * data[at + 16]] = (1 << 20).to_bytes(4, "big")
        else:
            data[at + 16] = 7
        log.write_bytes(bytes(data))
        with accel_switched(on), pytest.raises(KcompactError) as caught:
            clean_partition(part, config(), CleanOptions(now_ms=NOW))
        errors[on] = (type(caught.value), str(caught.value).replace(f"accel-{on}", "X"))
    assert errors[True] == errors[False]


def _entry_start_after(data: bytes, position: int) -> int:
    """The first entry boundary at or after ``position`` (following the size fields from 0)."""
    at = 0
    while at < position:
        at += 12 + int.from_bytes(data[at + 8 : at + 12], "big")
    return at


@needs_c
def test_keyless_counts_of_legacy_data_are_the_per_entry_walks(tmp_path: Path) -> None:
    part = open_partition(legacy_partition(tmp_path / "logdir"))
    counts = {}
    for on in (False, True):
        with accel_switched(on):
            counts[on] = (sample_keyless(part), count_keyless(part),
                          [_key_counts(seg.log_path) for seg in part.segments])
    assert counts[True] == counts[False]
    assert counts[True][1].exhaustive and counts[True][1].keyless > 10


def _key_counts(path: Path) -> list[tuple[int, int, int]]:
    with LogFile(path) as log:
        return list(iter_key_counts(log, 100, 700))
