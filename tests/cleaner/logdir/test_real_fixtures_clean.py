"""Cleaning the broker-written log dirs of ../shared/fixtures/real, checked against a plain model of
the rules.

Every log dir is copied into ``tmp_path`` and cleaned as a whole (``clean_path``) with ``--roll``:
the brokers left nearly all data in the active segment, which no cleaner touches. Every partition
with data is then read back with kafka-python — every batch CRC-valid — and compared, batch by batch
and record by record, with what :func:`model_clean` derives from the same partition read before the
clean. The model is written here from Kafka's rules alone (``LogCleanerManager.cleanableOffsets`` to
``MemoryRecords.filterTo``) and shares no code with the
cleaner:

* the cleaned range is ``[first dirty, end)``: the first dirty offset is the checkpoint (or the log
  start when it is missing or out of range), ``end`` the high watermark (the log end without one)
  rounded down to a segment base — after the roll, the log end;
* in a batch below ``end`` a record survives when it has a key, no later record of the range has
  that key, and it is not a tombstone whose batch's delete horizon has passed;
* a batch whose records all survive and that needs no horizon is unchanged; one that loses records
  keeps its offsets, producer fields and codec, and a surviving tombstone stamps ``now +
  delete.retention.ms`` as its horizon; an emptied batch stays as an empty batch when it is an
  active producer's last batch or the last batch before ``end`` (KAFKA-17076), and goes otherwise.

The fixtures hold no transactions (asserted), so the model has no transaction rules. A second clean
with the same clock must change no byte, and a clean after ``delete.retention.ms`` removes the
tombstones the model says.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import defaults_with_overrides
from kcompact.log.rules.ranges import RULE_ACTIVE_SEGMENT
from kcompact.segment.partition import open_partition
from tests.cleaner.round.test_kafka_cases import check_segments
from tests.conftest import copy_tree_writable, real_fixture

LOG_DIRS = [
    "bitnami2024-rolled-logdir",
    "confluent512-lz4-logdir",
    "kraft37-cleaned-logdir",
    "kraft37-consumer-offsets",
]
HOUR = 3_600_000
DAY = 24 * HOUR  # delete.retention.ms and producer.id.expiration.ms defaults
METADATA = "__cluster_metadata-0"
HORIZON_FLAG = 0x40


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class Bat:
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    codec: int
    timestamp_type: int
    max_timestamp: int
    horizon: int | None
    records: tuple[Rec, ...]


def read_partition(part: Path) -> tuple[list[int], list[Bat]]:
    """(segment base offsets, every batch) as kafka-python reads them; every batch must pass its
    CRC."""
    bases, batches = [], []
    for seg in open_partition(part).segments:
        bases.append(seg.base_offset)
        records = MemoryRecords(seg.log_path.read_bytes())
        while (b := records.next_batch()) is not None:
            assert b.magic == 2 and b.validate_crc(), f"{seg.log_path}: batch {b.base_offset}"
            batches.append(
                Bat(
                    b.base_offset,
                    b.last_offset,
                    b.producer_id,
                    b.producer_epoch,
                    b.base_sequence,
                    b.is_transactional,
                    b.is_control_batch,
                    b.compression_type,
                    b.timestamp_type,
                    b.max_timestamp,
                    b.first_timestamp if b.attributes & HORIZON_FLAG else None,
                    tuple(Rec(r.offset, r.key, r.value, r.timestamp, tuple(r.headers)) for r in b),
                )
            )
    return bases, batches


def read_checkpoint(path: Path, name: str) -> int | None:
    """The entry for partition dir ``name`` in a Kafka offset checkpoint file (version, count,
    entries)."""
    if not path.exists():
        return None
    lines = path.read_text().split("\n")
    for line in lines[2 : 2 + int(lines[1])]:
        topic, partition, offset = line.split(" ")
        if f"{topic}-{partition}" == name:
            return int(offset)
    return None


def cleaned_range(
    part: Path, bases: list[int], batches: list[Bat], *, from_start: bool
) -> tuple[int, int]:
    """(first dirty offset, end) of ``LogCleanerManager.cleanableOffsets`` for a log whose active segment is empty after
    the roll."""
    log_dir, name = part.parent, part.name
    log_end = batches[-1].last_offset + 1
    start_entry = read_checkpoint(log_dir / "log-start-offset-checkpoint", name)
    log_start = max(bases[0], start_entry) if start_entry is not None else bases[0]
    checkpoint = read_checkpoint(log_dir / "cleaner-offset-checkpoint", name)
    first_dirty = (
        checkpoint if checkpoint is not None and log_start <= checkpoint <= log_end else log_start
    )
    hw = read_checkpoint(log_dir / "replication-offset-checkpoint", name)
    cap = log_end if hw is None else min(hw, log_end)
    end = max(
        b for b in bases + [log_end] if b <= cap
    )  # the roll puts a segment base at the log end
    return (log_start if from_start else first_dirty), max(end, first_dirty)


def model_clean(batches: list[Bat], *, first_dirty: int, end: int, now: int) -> list[Bat]:
    """One cleaning round over ``[first_dirty, end)`` by the rules of the module docstring."""
    assert not any(b.is_transactional or b.is_control for b in batches), (
        "the model has no txn rules"
    )
    latest: dict[bytes, int] = {}
    last_batch_of: dict[int, Bat] = {}
    for b in batches:
        latest.update(
            (r.key, r.offset)
            for r in b.records
            if r.key is not None and first_dirty <= r.offset < end
        )
        if b.producer_id >= 0:
            last_batch_of[b.producer_id] = b
    out = []
    for b in batches:
        if b.base_offset >= end:
            out.append(b)
            continue
        expired = b.horizon is not None and now >= b.horizon
        keep = tuple(
            r
            for r in b.records
            if r.key is not None
            and r.offset >= latest.get(r.key, -1)
            and not (r.value is None and expired)
        )
        needs_horizon = b.horizon is None and any(r.value is None for r in keep)
        if keep and keep == b.records and not needs_horizon:
            out.append(b)
        elif keep:
            max_ts = (
                b.max_timestamp if b.timestamp_type == 1 else max(-1, *(r.timestamp for r in keep))
            )
            out.append(
                replace(
                    b,
                    records=keep,
                    max_timestamp=max_ts,
                    horizon=now + DAY if needs_horizon else b.horizon,
                )
            )
        elif (
            last_batch_of.get(b.producer_id) is b and now - b.max_timestamp < DAY
        ) or b.last_offset + 1 == end:
            out.append(replace(b, records=(), codec=0, horizon=None))
    return out


COMPACT = {"cleanup.policy": "compact"}  # every data partition, as --config gives it: the model's rules


def data_partitions(log_dir: Path) -> list[Path]:
    return sorted(
        p
        for p in log_dir.iterdir()
        if p.is_dir() and p.name != METADATA and any(f.stat().st_size for f in p.glob("*.log"))
    )


def tree_digest(directory: Path) -> dict[str, str]:
    """Every file's digest, but the lock files kcompact creates and leaves (segment/lock.py: Kafka
    ignores regular files at the top of a log dir, and creates ``.lock`` itself)."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def clean_and_check(log_dir: Path, now: int, *, from_start: bool) -> None:
    """Clean the whole log dir with --roll and compare every data partition with the model."""
    expected = {}
    for part in data_partitions(log_dir):
        bases, batches = read_partition(part)
        first_dirty, end = cleaned_range(part, bases, batches, from_start=from_start)
        expected[part.name] = model_clean(batches, first_dirty=first_dirty, end=end, now=now)
    metadata_before = tree_digest(log_dir / METADATA) if (log_dir / METADATA).exists() else None

    options = CleanOptions(now_ms=now, roll=True, from_start=from_start)
    run = clean_path(log_dir, cli_overrides=COMPACT, options=options)
    for skip in run.skipped:  # a known delete policy or mostly keyless data: a log dir's --config does not
        # cover it; naming it alone does (with the acknowledgement that its keyless records go)
        assert "does not change a known policy" in skip.reason or "have no key" in skip.reason
        run.failures += clean_path(skip.partition_dir, cli_overrides=COMPACT, options=options,
                                   allow_keyless_loss=True).failures

    assert run.failures == []
    config = defaults_with_overrides(COMPACT)
    for part in data_partitions(log_dir):
        bases, batches = read_partition(part)
        assert batches == expected[part.name], part.name
        assert bases[-1] == batches[-1].last_offset + 1  # the rolled, empty active segment
        check_segments(part, config)
    if metadata_before is not None:
        assert tree_digest(log_dir / METADATA) == metadata_before


@pytest.mark.parametrize("name", LOG_DIRS)
def test_clean_log_dir_matches_the_model_and_is_idempotent(tmp_path: Path, name: str) -> None:
    log_dir = copy_tree_writable(real_fixture(name), tmp_path / name)
    parts = data_partitions(log_dir)
    assert parts
    now = max(b.max_timestamp for p in parts for b in read_partition(p)[1]) + HOUR

    clean_and_check(log_dir, now, from_start=False)

    after_first = tree_digest(log_dir)
    for from_start in (False, True):
        clean_path(
            log_dir,
            cli_overrides=COMPACT,
            options=CleanOptions(now_ms=now, roll=True, from_start=from_start),
        )
        assert tree_digest(log_dir) == after_first, (
            f"a second clean (from_start={from_start}) changed bytes"
        )

    clean_and_check(log_dir, now + DAY, from_start=True)  # every stamped horizon has passed


def test_cleaned_log_dir_without_roll_has_nothing_cleanable(tmp_path: Path) -> None:
    """kraft37-cleaned-logdir: the broker's cleaner stopped at the active segments' bases
    (checkpoints 3 and 9); without --roll a clean finds nothing cleanable and changes nothing."""
    log_dir = copy_tree_writable(real_fixture("kraft37-cleaned-logdir"), tmp_path / "logdir")
    before = tree_digest(log_dir)
    for name, active_base in (("__consumer_offsets-31", 3), ("__consumer_offsets-44", 9)):
        config = defaults_with_overrides(COMPACT)
        result = clean_partition(log_dir / name, config, CleanOptions(now_ms=1_800_000_000_000))
        rng = result.range
        assert rng is not None and result.end_offset is None and result.skipped_reason
        assert (rng.checkpoint_offset, rng.first_dirty_offset) == (active_base, active_base)
        assert (rng.active_segment_base_offset, rng.first_uncleanable_offset) == (
            active_base,
            active_base,
        )
        assert rng.blocking_rule == RULE_ACTIVE_SEGMENT
        assert not result.checkpoint_written
    assert tree_digest(log_dir) == before


def test_model_sees_keyless_and_producer_batches(tmp_path: Path) -> None:
    """The bitnami log dir's idempotent topics are keyless (delete topics: a plain ``clean`` skips them):
    cleaned as compact with --config cleanup.policy=compact and --allow-keyless-loss, every record goes,
    and only the producers' last batches and each round's last batch stay, empty (checked by the
    model above)."""
    log_dir = copy_tree_writable(real_fixture("bitnami2024-rolled-logdir"), tmp_path / "logdir")
    part = log_dir / "sensor-data-topic-0"
    _bases, batches = read_partition(part)
    now = max(b.max_timestamp for b in batches) + HOUR
    producers = {b.producer_id for b in batches}
    clean_and_check(log_dir, now, from_start=False)
    _bases, after = read_partition(part)
    assert all(not b.records for b in after)
    assert {b.producer_id for b in after} == producers  # each active producer keeps its last batch
