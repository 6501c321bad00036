"""A Kafka 0.10 partition (magic 0/1 entries) that Kafka 4.1's cleaner can never clean, and the way out.

When the entry that ends a cleaning round is legacy and loses every record (keyless, in a topic made
compacted later), Kafka's ``Cleaner.cleanInto`` must keep it as an empty batch, which ``MemoryRecords.filterTo``
refuses for magic < 2 (``IllegalStateException: Empty batches are only supported for magic v2 and above``):
the broker marks the partition uncleanable, and ``kcompact clean`` refuses the same way. ``inspect`` says
so; ``repair`` rewrites the segment's legacy entries as magic 2 batches with the same records, offsets and
timestamps (what Kafka's cleaner writes for kept legacy data), after which both cleaners proceed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from click.testing import CliRunner
from kafka.record.memory_records import MemoryRecords

from kcompact.cli.main import cli
from kcompact.records.batch import iter_batches
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.batch_header import RecordBatch
from kcompact.records.legacy import legacy_records
from kcompact.records.record import Record, decode_records
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.names import segment_file_name
from tests.encoders import encode_legacy_message, encode_legacy_wrapper
from tests.repair.support import broker_would_change, partition_digest
from tests.segment_writer import write_segment

T0 = 1_500_000_000_000
KAFKA_FAILS = "Empty batches are only supported for magic v2 and above"
COMPACT = ("--config", "cleanup.policy=compact")
FullRecord = tuple[int, int, bytes | None, bytes | None]


def kafka_010_partition(log_dir: Path) -> Path:
    """Magic 0 and 1 entries (plain, gzip, LogAppendTime); the closed segment ends with keyless ones."""
    part = log_dir / "events-0"
    entries = [encode_legacy_message(offset=0, magic=0, key=b"k0", value=b"a")]
    entries += [encode_legacy_message(offset=i, magic=1, key=b"k%d" % (i % 3), value=b"v%d" % i,
                                      timestamp=T0 + i) for i in range(1, 5)]
    entries.append(encode_legacy_wrapper(
        [Record(5, T0 + 5, b"k1", b"w"), Record(6, T0 + 6, None, b"nokey")], magic=1, compression=1))
    entries.append(encode_legacy_message(offset=7, magic=1, key=b"k2", value=b"t", timestamp=T0 + 7,
                                         timestamp_type=1))
    entries.append(encode_legacy_wrapper(
        [Record(8, T0 + 8, None, b"a"), Record(9, T0 + 9, None, b"b")], magic=1, compression=1))
    write_segment(part, 0, entries)
    write_segment(part, 10, [encode_legacy_message(offset=10, magic=1, key=b"k1", value=b"x",
                                                   timestamp=T0 + 10)])
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("events", 0): 11})
    return part


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def records_of(part: Path) -> list[FullRecord]:
    """(offset, timestamp, key, value) of every record, as a consumer reads them."""
    out: list[FullRecord] = []
    for log in sorted(part.glob("*.log")):
        for batch in iter_batches(log.read_bytes()):
            records = decode_records(batch) if isinstance(batch, RecordBatch) else legacy_records(batch)
            out += [(r.offset, r.timestamp, r.key, r.value) for r in records]
    return out


def magics(log: Path) -> list[int]:
    return [b.magic for b in iter_batches(log.read_bytes())]


def test_clean_refuses_as_kafkas_cleaner_fails_naming_the_file(tmp_path: Path) -> None:
    part = kafka_010_partition(tmp_path / "logdir")
    before = partition_digest(part)

    code, _out, err = run("clean", str(part), *COMPACT)

    assert code == 2
    assert f"{segment_file_name(0, 'log')} at position" in err and "kcompact repair" in err
    assert partition_digest(part) == before


def test_inspect_dirty_ratio_and_keys_say_the_brokers_cleaner_fails_and_why(tmp_path: Path) -> None:
    part = kafka_010_partition(tmp_path / "logdir")

    code, out, err = run("inspect", "dirty-ratio", str(part), *COMPACT, "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert KAFKA_FAILS in row["cleaner_fails"] and "offset 9" in row["cleaner_fails"]
    assert "all 2 records keyless" in row["cleaner_fails"]

    code, out, err = run("inspect", "keys", str(part), *COMPACT)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "Kafka's cleaner fails here" in flat and KAFKA_FAILS in flat and "kcompact repair" in flat


def test_repair_rewrites_the_legacy_segment_as_magic_2_and_both_cleaners_proceed(tmp_path: Path) -> None:
    part = kafka_010_partition(tmp_path / "logdir")
    original = partition_digest(part)
    served = records_of(part)

    code, out, _err = run("repair", "--dry-run", "--json", str(part))
    assert code == 2
    (finding,) = json.loads(out)["findings"]
    assert finding["kind"] == "legacy-empty-batch" and finding["blocks_cleaning"]
    assert finding["impact"] == "cleaner" and KAFKA_FAILS in finding["cleaner_effect"]

    code, out, err = run("repair", "--json", str(part), "--backup-dir", str(tmp_path / "backup"))
    assert code == 0, err
    assert json.loads(out)["remaining"] == []
    log0 = part / segment_file_name(0, "log")
    assert set(magics(log0)) == {2} and len(magics(log0)) == 8  # one v2 batch per legacy entry
    assert records_of(part) == served  # every record, offset and timestamp a broker served
    assert broker_would_change(part) == []  # indexes rebuilt for the new layout

    code, _out, err = run("clean", str(part), *COMPACT, "--now-ms", str(T0 + 10**9))
    assert code == 0, err
    kept = records_of(part)
    assert [r for r in kept if r[2] is None] == []  # the keyless records went
    assert {r[2] for r in kept} == {b"k0", b"k1", b"k2"}

    code, _out, err = run("repair", "--undo", str(tmp_path / "backup"))
    assert code == 2 and "changed since the repair" in err  # the clean changed it since
    assert partition_digest(part) != original


def test_undo_of_the_conversion_restores_the_legacy_segment(tmp_path: Path) -> None:
    part = kafka_010_partition(tmp_path / "logdir")
    original = partition_digest(part)
    code, _out, err = run("repair", str(part), "--backup-dir", str(tmp_path / "backup"))
    assert code == 0, err

    code, _out, err = run("repair", "--undo", str(tmp_path / "backup"))

    assert code == 0, err
    assert partition_digest(part) == original


def upgraded_kafka_010_partition(log_dir: Path) -> Path:
    """:func:`kafka_010_partition` after a broker upgrade: two later segments of magic 2 batches."""
    part = kafka_010_partition(log_dir)
    for base in (10, 11):
        (part / segment_file_name(base, "log")).unlink(missing_ok=True)
        for kind in ("index", "timeindex"):
            (part / segment_file_name(base, kind)).unlink(missing_ok=True)
    write_segment(part, 10, [encode_batch([Record(10, T0 + 10, b"k1", b"x")], base_offset=10)])
    write_segment(part, 11, [encode_batch([Record(11, T0 + 11, b"k2", b"y")], base_offset=11)])
    return part


def test_a_legacy_segment_that_ends_no_round_now_is_converted_for_the_rounds_that_end_there(
        tmp_path: Path) -> None:
    part = upgraded_kafka_010_partition(tmp_path / "logdir")
    # min.compaction.lag.ms holds segment 10 back (its batch is the only one newer than now - lag), so
    # the round's first uncleanable offset is 10 and the legacy entry ending at 9 is its last batch
    lagged = ("--config", f"min.compaction.lag.ms={10**9 - 9}", "--now-ms", str(T0 + 10**9))
    code, _out, err = run("clean", str(part), *COMPACT, *lagged)
    assert code == 2 and "offset 9" in err and "`kcompact repair` rewrites" in err

    code, out, err = run("repair", "--dry-run", "--json", str(part))
    assert code == 2, err
    (finding,) = json.loads(out)["findings"]
    assert (finding["kind"], finding["impact"], finding["blocks_cleaning"]) == (
        "legacy-empty-batch", "cleaner", False)
    assert "min.compaction.lag.ms" in finding["cleaner_effect"] and finding["action"]

    code, _out, err = run("repair", str(part), "--backup-dir", str(tmp_path / "backup"))
    assert code == 0, err
    assert set(magics(part / segment_file_name(0, "log"))) == {2}
    code, _out, err = run("clean", str(part), *COMPACT, *lagged)  # the same clean
    assert code == 0, err
    assert [r for r in records_of(part) if r[0] < 10 and r[2] is None] == []
    assert broker_would_change(part) == []


def test_a_damaged_index_does_not_hide_the_legacy_entry(tmp_path: Path) -> None:
    part = kafka_010_partition(tmp_path / "logdir")
    (part / segment_file_name(0, "index")).write_bytes(b"\x00\x00\x00\x03\x9b\x1f\x00\x00")  # position < 0

    code, out, _err = run("repair", "--dry-run", "--json", str(part))

    assert code == 2
    kinds = {f["kind"] for f in json.loads(out)["findings"]}
    assert kinds == {"legacy-empty-batch", "index-corrupt"}


def kafka_010_keyless_topic(log_dir: Path) -> Path:
    """A topic a Kafka 0.10 producer wrote without keys (one magic 1 message per entry), made compacted
    after the fact; one segment, the active one, copied without its indexes as log dirs often are."""
    part = log_dir / "topic1-0"
    write_segment(part, 0, [encode_legacy_message(offset=i, magic=1, key=None, value=b"v%d" % i,
                                                  timestamp=T0 + i) for i in range(5)], with_indexes=False)
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("topic1", 0): 5})
    return part


def test_clean_and_repair_do_not_send_each_other_round_on_keyless_legacy_data(tmp_path: Path) -> None:
    part = kafka_010_keyless_topic(tmp_path / "logdir")
    clean = ("clean", str(part), "--roll", *COMPACT, "--allow-keyless-loss")
    code, _out, err = run(*clean)
    assert code == 2 and "offset 4" in err and "`kcompact repair` rewrites" in err

    code, out, err = run("repair", str(part), *COMPACT, "--json", "--backup-dir", str(tmp_path / "backup"))

    assert code == 0, err
    report = json.loads(out)
    legacy = [f for f in report["findings"] if f["kind"] == "legacy-empty-batch"]
    assert [(f["offset"], f["impact"]) for f in legacy] == [(4, "cleaner")] and legacy[0]["action"]
    assert "kcompact clean --roll" in legacy[0]["cleaner_effect"]
    assert set(magics(part / segment_file_name(0, "log"))) == {2}
    code, out, err = run(*clean)  # exactly the clean that sent the user to repair
    assert code == 0, err
    assert records_of(part) == []  # every record was keyless: all went, as the flag acknowledged
    (kept,) = list(MemoryRecords((part / segment_file_name(0, "log")).read_bytes()))  # kafka-python reads it
    assert (kept.base_offset, kept.last_offset_delta, list(kept)) == (4, 0, [])  # the log end kept
    assert broker_would_change(part) == []
    code, out, err = run("repair", "--dry-run", "--json", str(part))
    assert code == 0, err
    assert json.loads(out)["findings"] == []


def test_kafkas_own_reader_takes_the_round_trips_result(tmp_path: Path) -> None:
    """Kafka 4.1's DumpLogSegments (its FileRecords and index readers) reads every file of the result."""
    from tests.kafka.jars import kafka_classpath

    classpath = kafka_classpath()
    part = kafka_010_keyless_topic(tmp_path / "logdir")
    assert run("repair", str(part), *COMPACT, "--backup-dir", str(tmp_path / "backup"))[0] == 0
    assert run("clean", str(part), "--roll", *COMPACT, "--allow-keyless-loss")[0] == 0
    files = sorted(str(p) for p in part.iterdir() if p.suffix in (".log", ".index", ".timeindex"))

    done = subprocess.run(["java", "-cp", classpath, "kafka.tools.DumpLogSegments", "--deep-iteration",
                           "--index-sanity-check", "--files", ",".join(files)],
                          capture_output=True, text=True, timeout=120, check=False)

    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    batches = [line for line in done.stdout.splitlines() if line.startswith("baseOffset:")]
    assert len(batches) == 1 and "magic: 2" in batches[0] and "isvalid: true" in batches[0]
    assert "Exception" not in done.stdout and "Corrupt" not in done.stdout
    checked = [line for line in done.stdout.splitlines() if line.endswith(("passed sanity check.", "is empty."))]
    assert len(checked) == sum(1 for f in files if not f.endswith(".log"))
