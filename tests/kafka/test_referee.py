"""kcompact's clean against Kafka 4.1's own cleaner, byte for byte.

Each test makes a partition (the project's builders, or a broker-written fixture), copies it twice, runs one
round of ``kcompact``'s clean on one copy and one round of Kafka's ``Cleaner`` on the other
(``tests/kafka/referee``), both at the same now with the same topic config, and requires the same segment
files with the same bytes (``.log``, ``.index``, ``.timeindex``, ``.txnindex``) and the same
``cleaner-offset-checkpoint`` entry. One JVM serves the whole module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, currently_in_test_context, given, seed, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import CleanerStateError
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Header, Record
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.names import segment_file_name
from kcompact.segment.partition import open_partition
from tests.conftest import copy_tree_writable, real_fixture
from tests.encoders import encode_legacy_message, encode_legacy_wrapper
from tests.kafka.jars import kafka_classpath
from tests.kafka.referee.harness import (
    JVM_OPTIONS,
    Referee,
    RefereeJob,
    RefereeResult,
    cleaner_checkpoint,
    compared_files,
    compiled_classes,
    differences,
)
from tests.partition_builder import BASE_TS, PartitionBuilder
from tests.segment_writer import write_segment

pytestmark = pytest.mark.broker

COMPACT = {"cleanup.policy": "compact"}
EMPTY_LEGACY_BATCH = "Empty batches are only supported for magic v2 and above"
LATER = BASE_TS + 3_600_000  # an hour after the builders' first record
FIXTURE_EARLY = 1_500_000_000_000  # 2017: before any fixture's records (every horizon ahead)
FIXTURE_LATE = 1_900_000_000_000  # 2030: long after them (every horizon passed)


@pytest.fixture(scope="module")
def referee(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Referee]:
    """One JVM running Kafka's cleaner for every test of the module."""
    log = tmp_path_factory.mktemp("referee") / "kafka.log"
    judge = Referee(log)
    yield judge
    judge.close()


def clean_both(
    referee: Referee,
    log_dir: Path,
    work: Path,
    *,
    now_ms: int,
    config: Mapping[str, str] = COMPACT,
    dedupe_buffer_size: int | None = None,
) -> tuple[Path, Path, RefereeResult]:
    """Copy ``log_dir`` to ``work/kcompact`` and ``work/kafka``, clean each partition of each; the two copies.

    Raises AssertionError when the two disagree on any compared file or checkpoint entry.
    """
    ours, theirs = work / "kcompact", work / "kafka"
    shutil.copytree(log_dir, ours, copy_function=shutil.copy2)
    shutil.copytree(log_dir, theirs, copy_function=shutil.copy2)
    result = RefereeResult("nothing")
    for part in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        options = CleanOptions(now_ms=now_ms, dedupe_buffer_size=dedupe_buffer_size)
        result = referee.clean(RefereeJob(theirs / part.name, now_ms, dedupe_buffer_size, config))
        try:
            mine = clean_partition(ours / part.name, TopicConfig.defaults().with_overrides(config), options)
        except CleanerStateError as err:
            # both refuse alike: a legacy entry the round would keep as an empty batch (MemoryRecords.filterTo)
            assert result.error is not None and EMPTY_LEGACY_BATCH in result.error, f"kcompact refused: {err}"
            assert "would have to stay as an empty batch" in str(err)
            event("both refuse: a legacy entry kept empty")
            continue
        assert result.status != "error", f"Kafka's cleaner failed: {result.error} (log: {referee.log_path})"
        if result.status == "cleaned":
            assert mine.end_offset == result.end_offset, part.name
        else:
            assert mine.end_offset is None, f"{part.name}: kcompact cleaned, Kafka found nothing cleanable"
        assert_same_partition(ours / part.name, theirs / part.name)
    return ours, theirs, result


def event(value: str) -> None:
    """Count an outcome in hypothesis' statistics (outside a property test: nothing)."""
    if currently_in_test_context():
        hypothesis_event(value)


def assert_same_partition(ours: Path, theirs: Path) -> None:
    """The same segment files, byte for byte (but snappy bytes: see the harness), and the same
    cleaner checkpoint entry."""
    wrong, allowed = differences(ours, theirs)
    assert not wrong, f"{ours.name}: kcompact and Kafka disagree: {wrong}"
    if allowed:
        event("snappy bytes differ (library-defined)")


def test_updates_and_a_tombstone_clean_alike(referee: Referee, tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"b", b"2")]).batch([(b"a", b"3"), (b"b", None)]).roll()
    b.batch([(b"c", b"1"), (b"a", b"4")]).roll().batch([(b"z", b"z")])
    b.write(tmp_path / "in")

    _, theirs, result = clean_both(referee, tmp_path / "in", tmp_path, now_ms=LATER)

    assert result.status == "cleaned" and result.end_offset == 6
    assert cleaner_checkpoint(theirs / "orders-0") == 6



def test_two_cleaner_threads_in_one_jvm_write_what_one_thread_does(referee: Referee, tmp_path: Path) -> None:
    """The referee's ``--threads 2`` (what ``bench.py tiny --kafka`` and ``codecs240`` time Kafka with): every
    partition of a log dir cleaned by two threads, each keeping its Cleaner from round to round, ends in the same
    segment files as the rounds one at a time."""
    high_watermarks = {}
    for number in range(6):
        b = PartitionBuilder("many", number)
        for round_ in range(3):
            b.batch([(f"k{j % 7}".encode(), f"{number}-{round_}-{j}".encode()) for j in range(20)],
                    compression=number % 5).roll()
        b.batch([(b"x", b"1")])
        b.write(tmp_path / "in", high_watermark=None)
        high_watermarks[("many", number)] = b.next_offset
    write_offset_checkpoint(tmp_path / "in" / "replication-offset-checkpoint", high_watermarks)
    one, two = tmp_path / "one", tmp_path / "two"
    shutil.copytree(tmp_path / "in", one)
    shutil.copytree(tmp_path / "in", two)
    parts = sorted(p.name for p in one.iterdir() if p.is_dir())
    for name in parts:
        assert referee.clean(RefereeJob(one / name, LATER, 1 << 20, COMPACT)).status == "cleaned"

    classpath = os.pathsep.join([str(compiled_classes()), kafka_classpath()])
    jobs = "".join(RefereeJob(two / name, LATER, 1 << 20, COMPACT).line() + "\n" for name in parts)
    done = subprocess.run(["java", *JVM_OPTIONS, "-cp", classpath, "Referee", "--threads", "2"], input=jobs,
                          capture_output=True, text=True, check=False, timeout=300)

    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(line.split("\t")[:2] for line in done.stdout.splitlines()) == [
        ["CLEANED", str((two / name).resolve())] for name in parts]
    for name in parts:
        assert compared_files(two / name) == compared_files(one / name), name


# --- shapes that matter, one each --------------------------------------------------------------------


def test_aborted_data_goes_and_markers_outlive_their_horizon_then_go(referee: Referee, tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1")], producer_id=10, transactional=True).marker(10, commit=False)
    b.batch([(b"a", b"2"), (b"b", b"1")], producer_id=11, transactional=True, compression=1).marker(11, commit=True)
    b.roll().batch([(b"b", None)], producer_id=7).roll().batch([(b"z", b"z")])
    b.write(tmp_path / "in")
    ours, _, first = clean_both(referee, tmp_path / "in", tmp_path / "one", now_ms=LATER,
                                config={**COMPACT, "delete.retention.ms": "1000"})
    assert first.status == "cleaned"
    (ours / "cleaner-offset-checkpoint").unlink()  # lost: the next round starts again at the log start
    _, _, second = clean_both(referee, ours, tmp_path / "two", now_ms=LATER + 2_000,
                              config={**COMPACT, "delete.retention.ms": "1000"})
    assert second.status == "cleaned"


def test_an_idempotent_producers_last_batch_is_kept_empty(referee: Referee, tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1")], producer_id=7).batch([(b"b", b"1")], producer_id=8).roll()
    b.batch([(b"a", b"2"), (b"b", b"2")]).roll().batch([(b"z", b"z")])
    b.write(tmp_path / "in")
    clean_both(referee, tmp_path / "in", tmp_path, now_ms=LATER)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_each_codec_is_rebuilt_alike(referee: Referee, tmp_path: Path, codec: int) -> None:
    b = PartitionBuilder()
    values = [(f"k{i % 7}".encode(), None if i % 5 == 0 else b"value-%d" % i * 3) for i in range(60)]
    b.batch(values[:30], compression=codec).batch(values[30:], compression=codec, producer_id=7).roll()
    b.batch([(b"z", b"z")])
    b.write(tmp_path / "in")
    clean_both(referee, tmp_path / "in", tmp_path, now_ms=LATER)


@pytest.mark.parametrize("codec", [0, 1], ids=["none", "gzip"])
def test_log_append_time_batches_are_rebuilt_alike(referee: Referee, tmp_path: Path, codec: int) -> None:
    b = PartitionBuilder()
    append_broker_stamped(b, [(b"a", b"1"), (b"b", None), (b"a", b"2")], codec)
    append_broker_stamped(b, [(b"b", b"1"), (None, b"keyless")], codec)
    b.roll().batch([(b"z", b"z")])
    b.write(tmp_path / "in")
    _, _, result = clean_both(referee, tmp_path / "in", tmp_path, now_ms=LATER)
    assert result.status == "cleaned"


def test_legacy_messages_are_converted_alike(referee: Referee, tmp_path: Path) -> None:
    b = PartitionBuilder()
    add_legacy(b, [(0, 0, b"a", b"old"), (1, 0, b"b", b"old"), (1, 1, b"a", b"new"), (0, 3, b"c", b"keep")])
    b.batch([(b"b", b"v2")]).roll().batch([(b"z", b"z")])
    b.write(tmp_path / "in")
    clean_both(referee, tmp_path / "in", tmp_path, now_ms=LATER)


def test_a_dedupe_buffer_too_small_for_the_dirty_keys_stops_alike(referee: Referee, tmp_path: Path) -> None:
    b = PartitionBuilder()
    for i in range(6):
        b.batch([(f"k{i}".encode(), b"1"), (f"k{i}".encode(), b"2")]).roll()
    b.batch([(b"z", b"z")])
    b.write(tmp_path / "in")
    _, _, result = clean_both(referee, tmp_path / "in", tmp_path, now_ms=LATER, dedupe_buffer_size=24 * 4)
    assert result.status == "cleaned" and result.end_offset is not None and result.end_offset < 12


def test_an_open_transaction_caps_the_range_alike(referee: Referee, tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"a", b"2")]).roll()
    b.batch([(b"a", b"3")], producer_id=10, transactional=True).roll()
    b.batch([(b"a", b"4")]).roll().batch([(b"z", b"z")])
    b.write(tmp_path / "in")
    _, _, result = clean_both(referee, tmp_path / "in", tmp_path, now_ms=LATER)
    assert result.first_uncleanable_offset == 2


def test_a_checkpoint_past_the_log_end_is_reset_alike(referee: Referee, tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"a", b"2")]).roll().batch([(b"z", b"z")])
    b.write(tmp_path / "in", cleaner_checkpoint=99)
    _, _, result = clean_both(referee, tmp_path / "in", tmp_path, now_ms=LATER)
    assert result.first_dirty_offset == 0


def test_min_compaction_lag_holds_back_recent_segments_alike(referee: Referee, tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"a", b"2")]).roll()
    b.ts += 10_000  # a segment written ten seconds later
    b.batch([(b"a", b"3")]).roll().batch([(b"z", b"z")])
    b.write(tmp_path / "in")
    _, _, result = clean_both(referee, tmp_path / "in", tmp_path, now_ms=BASE_TS + 5_000,
                              config={**COMPACT, "min.compaction.lag.ms": "4000"})
    assert result.first_uncleanable_offset == 2


# --- logs a real broker wrote ------------------------------------------------------------------------

FIXTURE_LOG_DIRS = ["kraft37-cleaned-logdir", "kraft37-consumer-offsets", "confluent512-lz4-logdir",
                    "bitnami2024-rolled-logdir"]
LOG_DIR_FILES = ("cleaner-offset-checkpoint", "replication-offset-checkpoint", "log-start-offset-checkpoint")


def roll_at_log_end(part: Path) -> bool:
    """End the active segment as a broker's roll does (an empty segment at the log end, its empty
    indexes); False for a partition without data."""
    log_end = open_partition(part).log_end_offset()
    if log_end == 0:
        return False
    for suffix in ("log", "index", "timeindex"):
        (part / segment_file_name(log_end, suffix)).touch()
    return True


@pytest.mark.parametrize("name", FIXTURE_LOG_DIRS)
def test_broker_written_partitions_clean_alike(referee: Referee, tmp_path: Path, name: str) -> None:
    """Every partition with data of a broker-written log dir (its active segment rolled first, so that
    both clean all of it; __cluster_metadata aside: kcompact never cleans it), alone in a log dir of its
    own with the log dir's checkpoint files (Kafka's cleaner manager keeps only the entries of the logs
    it holds), cleaned alike at two clocks: before and long after every delete horizon."""
    source = copy_tree_writable(real_fixture(name), tmp_path / "source")
    cleaned = 0
    for part in sorted(p for p in source.iterdir() if p.is_dir() and not p.name.startswith("__cluster")):
        if not roll_at_log_end(part):
            continue
        config = {**COMPACT, "segment.bytes": "104857600"}
        for now_ms in (FIXTURE_EARLY, FIXTURE_LATE):
            single = tmp_path / f"{part.name}-{now_ms}" / "in"
            shutil.copytree(part, single / part.name, copy_function=shutil.copy2)
            for file in LOG_DIR_FILES:
                if (source / file).exists():
                    shutil.copy2(source / file, single / file)
            _, _, result = clean_both(referee, single, single.parent, now_ms=now_ms, config=config)
            cleaned += result.status == "cleaned"
    assert cleaned > 0


# --- the property: any log the builders can make is cleaned alike -------------------------------------

KEYS = [b"k0", b"k1", b"k2", b"k3", b"k4", b"k5"]
CODECS = [0, 1, 2, 3, 4]  # none, gzip, snappy, lz4, zstd
IDEMPOTENT_PID = 7
TRANSACTIONAL_PIDS = (10, 11)
DAY_MS = 86_400_000

kv = st.tuples(
    st.one_of(st.sampled_from(KEYS), st.sampled_from(KEYS), st.sampled_from(KEYS), st.none()),
    st.one_of(st.binary(min_size=0, max_size=12), st.none()),
)
data_op = st.tuples(
    st.just("batch"),
    st.lists(kv, min_size=1, max_size=4),
    st.sampled_from(CODECS),
    st.sampled_from(["plain", "idempotent", "txn10", "txn11"]),
    st.sampled_from([(), (), (Header(b"h", b"v"),), (Header(b"trace", None), Header(b"h", b""))]),
)
marker_op = st.tuples(st.just("marker"), st.sampled_from(TRANSACTIONAL_PIDS), st.booleans())
roll_op = st.tuples(st.just("roll"))
bump_op = st.tuples(st.just("bump"), st.sampled_from((IDEMPOTENT_PID, *TRANSACTIONAL_PIDS)))  # a new epoch
# a batch as a broker stamps it: LogAppendTime (every record read at the batch's append time), a leader epoch
appended_op = st.tuples(st.just("appended"), st.lists(kv, min_size=1, max_size=3), st.sampled_from(CODECS))
ops = st.lists(st.one_of(data_op, data_op, marker_op, roll_op, bump_op, appended_op), min_size=1, max_size=14)
legacy_entry = st.tuples(
    st.sampled_from([0, 1]),  # magic
    st.sampled_from([0, 0, 1, 2, 3]),  # codec: a compressed entry is a wrapper of two messages
    st.sampled_from(KEYS),
    st.one_of(st.binary(max_size=6), st.none()),
)
legacy_prefix = st.lists(legacy_entry, max_size=4)


def apply_ops(b: PartitionBuilder, steps: list[tuple[object, ...]]) -> None:
    """Append the generated steps; a marker only where its producer has a transaction open, a new epoch
    only where it has none (a coordinator ends an open transaction before it bumps the epoch)."""
    epochs: dict[int, int] = getattr(b, "epochs", {})
    b.epochs = epochs  # type: ignore[attr-defined]  # kept for a second round's steps
    for step in steps:
        if step[0] == "roll":
            b.roll()
        elif step[0] == "bump":
            pid = int(step[1])  # type: ignore[call-overload]
            if pid not in b._open_txns:
                epochs[pid] = epochs.get(pid, 0) + 1
                b._sequences.pop(pid, None)  # a new epoch starts its sequences at 0
        elif step[0] == "appended":
            append_broker_stamped(b, step[1], int(step[2]))  # type: ignore[arg-type, call-overload]
        elif step[0] == "marker":
            pid = int(step[1])  # type: ignore[call-overload]
            if pid in b._open_txns:
                b.marker(pid, commit=bool(step[2]), producer_epoch=epochs.get(pid, 0))
        else:
            _, kvs, codec, role, headers = step
            if role == "plain":
                b.batch(kvs, compression=codec, headers=headers)  # type: ignore[arg-type]
            elif role == "idempotent":
                b.batch(kvs, compression=codec, headers=headers,  # type: ignore[arg-type]
                        producer_id=IDEMPOTENT_PID, producer_epoch=epochs.get(IDEMPOTENT_PID, 0))
            else:
                pid = int(str(role)[3:])
                b.batch(kvs, compression=codec, headers=headers,  # type: ignore[arg-type]
                        producer_id=pid, producer_epoch=epochs.get(pid, 0), transactional=True)


def append_broker_stamped(b: PartitionBuilder, kvs: list[tuple[bytes | None, bytes | None]], codec: int) -> None:
    """A plain batch with LogAppendTime (its append time a second after its records' own) and leader epoch 3."""
    records = [Record(b.next_offset + i, b.ts + i, key, value) for i, (key, value) in enumerate(kvs)]
    b.segments[-1].batches.append(encode_batch(
        records, base_offset=b.next_offset, compression=codec, timestamp_type=1,
        max_timestamp=b.ts + 1_000, partition_leader_epoch=3,
    ))
    b.next_offset += len(records)
    b.ts += len(records)


def add_legacy(b: PartitionBuilder, entries: list[tuple[int, int, bytes, bytes | None]]) -> None:
    """Legacy (magic 0/1) messages first, in a segment of their own, as a log upgraded from 0.10 has them;
    a compressed entry is a wrapper of the message and a second one of the same key."""
    if not entries:
        return
    for magic, codec, key, value in entries:
        if codec == 0:
            entry = encode_legacy_message(offset=b.next_offset, magic=magic, key=key, value=value, timestamp=b.ts)
            count = 1
        else:
            inner = [Record(b.next_offset, b.ts, key, value), Record(b.next_offset + 1, b.ts, key, b"again")]
            entry = encode_legacy_wrapper(inner, magic=magic, compression=codec)
            count = 2
        b.segments[-1].batches.append(entry)
        b.next_offset += count
        b.ts += 1
    b.roll()


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, object]:
    return {
        "legacy": draw(legacy_prefix),
        "ops": draw(ops),
        "more_ops": draw(st.one_of(st.just([]), ops)),
        "now_ms": draw(st.sampled_from([BASE_TS + 10, LATER, BASE_TS + 2 * DAY_MS])),
        "delete_retention_ms": draw(st.sampled_from([0, 1_000, DAY_MS])),
        "min_compaction_lag_ms": draw(st.sampled_from([0, 0, 5])),
        "segment_bytes": draw(st.sampled_from([None, 200, 600])),
        "index_interval_bytes": draw(st.sampled_from([4096, 100])),
        "checkpoint": draw(st.one_of(st.none(), st.integers(0, 40))),
        "log_start": draw(st.sampled_from([0, 0, 0, 1, 2, "second segment", "inside the second segment"])),
        "hw_back": draw(st.sampled_from([0, 0, 0, 1, 3])),
        "dedupe": draw(st.sampled_from([None, None, None, 24 * 4, 24 * 8])),
    }


def pick_log_start(b: PartitionBuilder, choice: object, log_end: int) -> int:
    """An offset inside the first segment, or the second segment's base (its predecessor then wholly below
    the log start), or one past it; always below the active segment."""
    bases = sorted({seg.base_offset for seg in b.segments})
    if isinstance(choice, int):
        end = bases[1] if len(bases) > 1 else log_end
        return min(choice, end - 1)
    if len(bases) < 3:  # no second segment before the active one
        return 0
    return bases[1] + (1 if choice == "inside the second segment" else 0)


def topic_config(s: dict[str, object]) -> dict[str, str]:
    config = {
        "cleanup.policy": "compact",
        "delete.retention.ms": str(s["delete_retention_ms"]),
        "min.compaction.lag.ms": str(s["min_compaction_lag_ms"]),
        "index.interval.bytes": str(s["index_interval_bytes"]),
    }
    if s["segment_bytes"] is not None:
        config["internal.segment.bytes"] = str(s["segment_bytes"])
    return config


# a fixed, modest count (every example is one or two rounds of each cleaner); KCOMPACT_REFEREE_EXAMPLES=N
# searches further, KCOMPACT_REFEREE_SEED=S elsewhere (random examples from that seed)
REFEREE_EXAMPLES = int(os.environ.get("KCOMPACT_REFEREE_EXAMPLES", "60"))
REFEREE_SEED = os.environ.get("KCOMPACT_REFEREE_SEED")


@settings(max_examples=REFEREE_EXAMPLES, deadline=None, derandomize=REFEREE_SEED is None,
          suppress_health_check=list(HealthCheck), database=None)
@seed(int(REFEREE_SEED or 0))
@given(scenario=scenarios())
def test_kcompact_cleans_as_kafka_does(referee: Referee, tmp_path_factory: pytest.TempPathFactory,
                                       scenario: dict[str, object]) -> None:
    work = tmp_path_factory.mktemp("referee-case")
    b = PartitionBuilder()
    add_legacy(b, scenario["legacy"])  # type: ignore[arg-type]
    apply_ops(b, scenario["ops"])  # type: ignore[arg-type]
    b.roll().batch([(b"active", b"x")])  # the active segment, never cleaned
    log_end = b.next_offset
    checkpoint = scenario["checkpoint"]
    b.write(
        work / "in",
        high_watermark=max(0, log_end - int(scenario["hw_back"])),  # type: ignore[call-overload]
        cleaner_checkpoint=None if checkpoint is None else min(int(checkpoint), log_end),  # type: ignore[call-overload]
        index_interval_bytes=int(scenario["index_interval_bytes"]),  # type: ignore[call-overload]
    )
    log_start = pick_log_start(b, scenario["log_start"], log_end)
    if log_start > 0:
        write_offset_checkpoint(work / "in" / "log-start-offset-checkpoint", {("orders", 0): log_start})
    now_ms = int(scenario["now_ms"])  # type: ignore[call-overload]
    config = topic_config(scenario)
    dedupe = scenario["dedupe"]
    ours, _, first = clean_both(referee, work / "in", work, now_ms=now_ms, config=config,
                                dedupe_buffer_size=dedupe)  # type: ignore[arg-type]
    event(f"round 1: {first.status}")
    if not scenario["more_ops"]:
        return
    # a second round: more data behind a new active segment, past every delete horizon of the first
    first_new = len(b.segments)
    b.roll()
    apply_ops(b, scenario["more_ops"])  # type: ignore[arg-type]
    b.roll().batch([(b"active", b"y")])
    for seg in b.segments[first_new:]:
        write_segment(ours / "orders-0", seg.base_offset, seg.batches, aborted=seg.aborted,
                      index_interval_bytes=int(scenario["index_interval_bytes"]))  # type: ignore[call-overload]
    write_offset_checkpoint(ours / "replication-offset-checkpoint", {("orders", 0): b.next_offset})
    later = now_ms + int(scenario["delete_retention_ms"]) + 1  # type: ignore[call-overload]
    _, _, second = clean_both(referee, ours, work / "round2", now_ms=later, config=config,
                              dedupe_buffer_size=dedupe)  # type: ignore[arg-type]
    event(f"round 2: {second.status}")
