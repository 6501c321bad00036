"""``kcompact clean``: the report (text and --json), --dry-run, --config errors, log dirs, refusals,
exit codes."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.records.batch_header import CRC_OFFSET, MAGIC_OFFSET
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.config.test_effective import snapshot_without_its_tail
from tests.conftest import PROJECT_FIXTURES, copy_tree_writable, real_fixture

NOW = BASE_TS + 1_000
RESULT_FIELDS = {
    "partition_dir",
    "topic",
    "partition",
    "status",
    "error",
    "dry_run",
    "now_ms",
    "first_dirty_offset",
    "first_uncleanable_offset",
    "end_offset",
    "checkpoint_before",
    "checkpoint_written",
    "rolled",
    "dirty_ratio",
    "blocking_rule",
    "skipped_reason",
    "recovery_actions",
    "scratch_actions",
    "warnings",
    "fence",
    "clean_limit",
    "high_watermark",
    "high_watermark_note",
    "retention_deleted_segments",
    "retention_reasons",
    "retention_bytes_deleted",
    "retention_log_start_before",
    "retention_log_start_after",
    "retention_rolled",
    "space_peak_bytes",
    "space_gives_back_bytes",
    "scratch_peak_bytes",
    "scratch_free_bytes",
}
STATS_FIELDS = {
    "bytes_read",
    "bytes_written",
    "records_read",
    "records_written",
    "records_scanned",
    "batches_read",
    "batches_copied",
    "batches_rebuilt",
    "empty_batches_retained",
    "batches_dropped",
    "superseded_removed",
    "tombstones_removed",
    "invalid_records",
    "aborted_records_removed",
    "markers_removed",
    "map_entries",
    "map_memory_bytes",
    "groups",
    "elapsed_s",
    "size_reduction",
}


def run(*args: str | Path | int) -> Result:
    runner = CliRunner(
        catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None}
    )
    return runner.invoke(cli, ["clean", *map(str, args)])


def orders(log_dir: Path, *, topic: str = "orders", rounds: int = 3) -> Path:
    """30 records over 4 keys in one segment (26 superseded), then an active segment; checkpoint at
    0."""
    b = PartitionBuilder(topic)
    for i in range(rounds):
        b.batch([(f"k{j % 4}".encode(), f"v{i}{j}".encode()) for j in range(10)])
    b.roll().batch([(b"x", b"1")])
    return b.write(log_dir, cleaner_checkpoint=0)


def digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def only_warnings(stderr: str) -> bool:
    """stderr holds warnings only (which notes the configuration lookup adds is not this file's
    business)."""
    return all(line.startswith("kcompact: warning: ") for line in stderr.splitlines())


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("kcompact: warning: ")]


def normalized(text: str) -> str:
    """The report without its clock-dependent part (elapsed time, rate) and rich's cell padding."""
    text = re.sub(r" in \d+\.\d\d s \(\d+(\.\d)? (B|KiB|MiB|GiB)/s\)", " in <t> s (<r>/s)", text)
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def test_text_report_shows_the_dirty_section_and_size_reduction(tmp_path: Path) -> None:
    part = orders(tmp_path / "logdir")
    result = run(part, "--now-ms", NOW, "--config", "cleanup.policy=compact")
    assert result.exit_code == 0 and only_warnings(result.stderr)
    assert "no KRaft metadata log" in result.stderr
    assert normalized(result.stdout) == (
        "orders-0: cleaned dirty section [0, 30) (dirty ratio 1.000)\n"
        "  read              543 B, 30 records in <t> s (<r>/s)\n"
        "  written           109 B, 4 records\n"
        "  size reduction    79.9%\n"
        "  removed           26 superseded, 0 tombstones, 0 aborted, 0 markers, 0 keyless\n"
        "  batches           0 copied, 1 rebuilt, 0 kept empty, 2 dropped\n"
        "  offset map        4 keys, 16.2 KiB\n"
        "  checkpoint        0 -> 30\n"
    )
    assert [o for o, _k, _v in read_all_records(part)] == [26, 27, 28, 29, 30]


def test_nothing_to_clean_says_why(tmp_path: Path) -> None:
    part = orders(tmp_path / "logdir")
    run(part, "--now-ms", NOW, "--config", "cleanup.policy=compact")
    result = run(part, "--now-ms", NOW, "--config", "cleanup.policy=compact")
    assert result.exit_code == 0 and only_warnings(result.stderr)
    assert result.stdout.startswith(
        "orders-0: nothing to clean — the active segment (base offset 30, 70 B) is never cleaned; "
    )


def test_json_report_has_a_fixed_field_set(tmp_path: Path) -> None:
    part = orders(tmp_path / "logdir")
    result = run(part, "--now-ms", NOW, "--json", "--config", "cleanup.policy=compact")
    assert (result.exit_code, result.stderr) == (0, "")
    report = json.loads(result.stdout)
    assert report.keys() == {"results", "failures", "skipped", "notes", "gives_back_with_roll", "freed_first", "order",
                             "space"}
    assert (report["freed_first"], report["order"], report["space"]) == (None, None, None)  # a log dir's
    assert report["failures"] == [] and all(isinstance(note, str) for note in report["notes"])
    (only,) = report["results"]
    assert only.keys() == RESULT_FIELDS | STATS_FIELDS  # one row, as spark clean's
    assert (only["space_peak_bytes"], only["space_gives_back_bytes"]) == (None, None)  # measured by a dry run
    retention = {k: only[k] for k in RESULT_FIELDS if k.startswith("retention_")}
    assert retention == {"retention_deleted_segments": [], "retention_reasons": [], "retention_bytes_deleted": 0,
                         "retention_log_start_before": 0, "retention_log_start_after": 0,
                         "retention_rolled": False}
    space = {"space_peak_bytes", "space_gives_back_bytes"}
    assert {k: only[k] for k in RESULT_FIELDS - retention.keys() - space - {"partition_dir"}} == {
        "topic": "orders",
        "partition": 0,
        "status": "cleaned",
        "error": None,
        "dry_run": False,
        "now_ms": NOW,
        "first_dirty_offset": 0,
        "first_uncleanable_offset": 30,
        "end_offset": 30,
        "checkpoint_before": 0,
        "checkpoint_written": True,
        "rolled": False,
        "dirty_ratio": 1.0,
        "blocking_rule": "active-segment",
        "skipped_reason": None,
        "recovery_actions": [],
        "scratch_actions": [],
        "warnings": [],
        "fence": None,
        "clean_limit": None,
        "high_watermark": 31,
        "high_watermark_note": None,
        "scratch_peak_bytes": None,  # a dry run's with --scratch-dir
        "scratch_free_bytes": None,
    }
    assert Path(only["partition_dir"]) == part
    assert (only["records_read"], only["records_written"], only["superseded_removed"]) == (30, 4, 26)
    assert only["size_reduction"] == round(1 - only["bytes_written"] / only["bytes_read"], 6)


def test_dry_run_changes_nothing_and_reports_what_would_go(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    part = orders(log_dir)
    before = digest(log_dir)
    result = run(part, "--now-ms", NOW, "--dry-run", "--json", "--config", "cleanup.policy=compact")
    assert result.exit_code == 0
    (only,) = json.loads(result.stdout)["results"]
    assert (only["dry_run"], only["checkpoint_written"], only["end_offset"]) == (True, False, 30)
    assert only["superseded_removed"] == 26
    assert digest(log_dir) == before  # not a byte, not even a lock file

    text = run(part, "--now-ms", NOW, "--dry-run", "--config", "cleanup.policy=compact")
    assert "would clean dirty section [0, 30)" in text.stdout
    assert "checkpoint        not written (dry run)" in text.stdout
    assert digest(log_dir) == before


def test_bad_config_value_is_one_line_naming_the_key(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    part = orders(log_dir)
    before = digest(log_dir)
    result = run(part, "--config", "segment.bytes=abc")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "kcompact: error: segment.bytes=abc: not a valid int\n"
    assert digest(log_dir) == before


def test_unknown_config_key_is_refused(tmp_path: Path) -> None:
    part = orders(tmp_path / "logdir")
    result = run(part, "--config", "bogus.key=1")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(
        "kcompact: error: bogus.key: unknown config key; expected one of "
    )
    assert result.stderr.count("\n") == 1


def two_partitions(log_dir: Path) -> tuple[Path, Path]:
    """``a-0`` half clean (dirty ratio about 0.5) and ``b-0`` all dirty (1.0)."""
    half_clean = PartitionBuilder("a")
    for _segment in range(2):
        half_clean.batch([(f"k{j % 4}".encode(), b"v") for j in range(10)]).roll()
    half_clean.batch([(b"x", b"1")])
    half = half_clean.write(log_dir)
    dirty = orders(log_dir, topic="b")
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("a", 0): 21, ("b", 0): 31})
    write_offset_checkpoint(log_dir / "cleaner-offset-checkpoint", {("a", 0): 10, ("b", 0): 0})
    return half, dirty


def test_log_dir_clean_goes_dirtiest_first(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    half, dirty = two_partitions(log_dir)

    result = run(log_dir, "--now-ms", NOW, "--json", "--config", "cleanup.policy=compact")

    assert (result.exit_code, result.stderr) == (0, "")
    report = json.loads(result.stdout)
    got = [
        (r["topic"], r["first_dirty_offset"], r["end_offset"], r["dirty_ratio"])
        for r in report["results"]
    ]
    assert [g[:3] for g in got] == [("b", 0, 30), ("a", 10, 20)]
    assert got[0][3] == 1.0 > got[1][3]
    assert report["failures"] == []
    assert read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint") == {
        ("a", 0): 20,
        ("b", 0): 30,
    }
    assert [o for o, _k, _v in read_all_records(dirty)] == [26, 27, 28, 29, 30]
    assert [o for o, _k, _v in read_all_records(half)] == [16, 17, 18, 19, 20]


def test_log_dir_clean_takes_equal_dirty_ratios_by_name(tmp_path: Path) -> None:
    """rules.ranges.pick_order: equal ratios in listing order (by name), whatever order they were made in."""
    log_dir = tmp_path / "logdir"
    for topic in ("c", "a", "b"):
        orders(log_dir, topic=topic)

    result = run(log_dir, "--now-ms", NOW, "--json", "--config", "cleanup.policy=compact")

    assert (result.exit_code, result.stderr) == (0, "")
    rows = json.loads(result.stdout)["results"]
    assert [(r["topic"], r["dirty_ratio"]) for r in rows] == [("a", 1.0), ("b", 1.0), ("c", 1.0)]


def test_broker_log_dir_with_roll_cleans_and_leaves_the_metadata_log(tmp_path: Path) -> None:
    """A real KRaft log dir (bitnami Kafka 3.7): its own metadata log says __consumer_offsets is
    compacted; --roll makes the active segment's 13 records cleanable; __cluster_metadata-0 is left
    byte for byte."""
    log_dir = copy_tree_writable(real_fixture("kraft37-consumer-offsets"), tmp_path / "logdir")
    metadata_before = digest(log_dir / "__cluster_metadata-0")
    result = run(log_dir, "--roll", "--now-ms", 1_769_800_000_000, "--json")
    assert result.exit_code == 0 and only_warnings(result.stderr)
    report = json.loads(result.stdout)
    assert report["failures"] == []
    assert [(r["topic"], r["partition"], r["end_offset"]) for r in report["results"]] == [
        ("__consumer_offsets", 6, 13)
    ]
    assert digest(log_dir / "__cluster_metadata-0") == metadata_before
    part = log_dir / "__consumer_offsets-6"
    assert len(read_all_records(part)) == report["results"][0]["records_written"]


def test_log_dir_text_report_ends_with_a_summary(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    two_partitions(log_dir)
    result = run(log_dir, "--now-ms", NOW, "--config", "cleanup.policy=compact")
    assert result.exit_code == 0 and only_warnings(result.stderr)
    report = (
        "{name}: cleaned dirty section [{first}, {end}) (dirty ratio {ratio})\n"
        "  read              {read_size}, {read} records in <t> s (<r>/s)\n"
        "  written           {written_size}, 4 records\n"
        "  size reduction    {reduction}\n"
        "  removed           {superseded} superseded, 0 tombstones, 0 aborted, 0 markers, 0 keyless\n"
        "  batches           0 copied, 1 rebuilt, 0 kept empty, {dropped} dropped\n"
        "  offset map        4 keys, 16.2 KiB\n"
        "  checkpoint        {first} -> {end}\n"
    )
    assert normalized(result.stdout) == (
        report.format(
            name="b-0",
            first=0,
            end=30,
            ratio="1.000",
            read=30,
            read_size="543 B",
            written_size="109 B",
            reduction="79.9%",
            superseded=26,
            dropped=2,
        )
        + report.format(
            name="a-0",
            first=10,
            end=20,
            ratio="0.500",
            read=20,
            read_size="322 B",
            written_size="101 B",
            reduction="68.6%",
            superseded=16,
            dropped=1,
        )
        + "2 partitions cleaned, 0 had nothing to clean, 0 skipped, 0 failed; 865 B read, 210 B written\n"
    )


def test_delete_topics_of_a_broker_log_dir_are_skipped_not_emptied(tmp_path: Path) -> None:
    """bitnami: first-0, sensor-data-0 and sensor-data-topic-0 have no cleanup.policy override in the
    complete metadata log, so their broker uses Kafka's default delete. `clean --roll` on the log dir
    exits 0, says per partition why it skipped them, and leaves them byte for byte; named alone, one
    is refused (exit 2)."""
    log_dir = copy_tree_writable(real_fixture("bitnami2024-rolled-logdir"), tmp_path / "logdir")
    user_topics = ("first-0", "sensor-data-0", "sensor-data-topic-0")
    before = {name: digest(log_dir / name) for name in user_topics}
    result = run(log_dir, "--roll", "--now-ms", 1_769_800_000_000, "--verbose")  # each one's own line
    assert result.exit_code == 0
    skipped = [line for line in result.stdout.splitlines() if ": skipped — " in line]
    assert [line.split(":")[0] for line in skipped] == [*user_topics, "test-0"]
    reason = ("cleanup.policy=delete (Kafka's default: no topic override in the metadata log, no dynamic config, "
              "no --config, server.properties not given); a broker never compacts this topic; 11 of 11 records "
              "sampled have no key, as in a topic that is not compacted (compaction would delete them); ")
    assert skipped[0] == (f"first-0: skipped — {reason}clean this partition alone with --config "
                          "cleanup.policy=compact and --allow-keyless-loss to compact it anyway")
    assert "kcompact clean" not in result.stdout and "--assume-compact" not in result.stdout  # no command to copy
    summary = result.stdout.splitlines()[-1]
    assert summary.startswith("5 partitions cleaned, 45 had nothing to clean, 4 skipped, 0 failed")
    assert {name: digest(log_dir / name) for name in user_topics} == before
    alone = run(log_dir / "first-0", "--roll", "--now-ms", 1_769_800_000_000)
    assert (alone.exit_code, alone.stdout) == (2, "")
    assert error_lines(alone.stderr) == [
        (f"kcompact: error: {log_dir / 'first-0'}: {reason}give --config cleanup.policy=compact and "
         "--allow-keyless-loss to compact it anyway")]
    assert {name: digest(log_dir / name) for name in user_topics} == before


def test_config_compact_for_a_whole_log_dir_does_not_change_a_known_delete_policy(tmp_path: Path) -> None:
    """`--config cleanup.policy=compact` on a log dir covers the partitions whose policy is unknown; bitnami's
    user topics are known to be delete (a complete metadata log, no override), so it skips them all."""
    log_dir = copy_tree_writable(real_fixture("bitnami2024-rolled-logdir"), tmp_path / "logdir")
    user_topics = ("first-0", "sensor-data-0", "sensor-data-topic-0", "test-0")
    before = {name: digest(log_dir / name) for name in user_topics}
    result = run(log_dir, "--roll", "--now-ms", 1_769_800_000_000, "--config", "cleanup.policy=compact", "--json")
    assert result.exit_code == 0
    skipped = {Path(row["partition_dir"]).name: row["skipped_reason"] for row in json.loads(result.stdout)["skipped"]}
    assert sorted(skipped) == list(user_topics)
    assert skipped["test-0"] == (
        "cleanup.policy=delete (Kafka's default: no topic override in the metadata log, no dynamic config, "
        "no --config, server.properties not given); a broker never compacts this topic; a --config for a whole "
        "log dir does not change a known policy: clean this partition alone with --config cleanup.policy=compact "
        "if it really is compacted")
    assert {name: digest(log_dir / name) for name in user_topics} == before


def test_a_mostly_keyless_partition_is_compacted_only_with_the_acknowledgement(tmp_path: Path) -> None:
    """bitnami's first-0 holds 11 keyless records. Even with `--config cleanup.policy=compact` on it alone,
    `clean --roll` refuses (exit 2, partition unchanged) and says how many records would go, naming
    --allow-keyless-loss and no command line; with that flag it compacts, deleting them all."""
    log_dir = copy_tree_writable(real_fixture("bitnami2024-rolled-logdir"), tmp_path / "logdir")
    part = log_dir / "first-0"
    before = digest(part)
    refused = run(part, "--roll", "--now-ms", 1_769_800_000_000, "--config", "cleanup.policy=compact")
    assert (refused.exit_code, refused.stdout) == (2, "")
    assert error_lines(refused.stderr) == [
        (f"kcompact: error: {part}: cleanup.policy=compact (--config), but 11 of the 11 records of the partition "
         "have no key, and a clean deletes every keyless record it reaches (a topic made compacted after they "
         "were written); give --allow-keyless-loss to compact it anyway, deleting them")]
    assert digest(part) == before  # not even rolled
    rehearsed = run(part, "--roll", "--now-ms", 1_769_800_000_000, "--config", "cleanup.policy=compact",
                    "--allow-keyless-loss", "--dry-run")
    lines = rehearsed.stdout.splitlines()
    given_up = ("first-0: would delete 11 records with no key (11 of the 11 records read): their data would be lost, "
                "not compacted")
    (reduction,) = [line for line in lines if "size reduction" in line]
    assert lines.index(given_up) < lines.index(reduction)  # what is given up, before what it buys
    assert reduction.split("size reduction")[1].strip().endswith("% (with 11 keyless records deleted)")
    allowed = run(part, "--roll", "--now-ms", 1_769_800_000_000, "--config", "cleanup.policy=compact",
                  "--allow-keyless-loss")
    assert allowed.exit_code == 0 and read_all_records(part) == []  # what was acknowledged
    assert ("first-0: deleted 11 records with no key (11 of the 11 records read): their data is gone, not "
            "compacted") in allowed.stdout.splitlines()


def test_skipped_partitions_are_rows_of_the_json_report(tmp_path: Path) -> None:
    log_dir = copy_tree_writable(real_fixture("bitnami2024-rolled-logdir"), tmp_path / "logdir")
    result = run(log_dir, "--roll", "--now-ms", 1_769_800_000_000, "--json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    skipped = {(r["topic"], r["partition"]): r for r in report["skipped"]}
    assert sorted(skipped) == [("first", 0), ("sensor-data", 0), ("sensor-data-topic", 0), ("test", 0)]
    first = skipped[("first", 0)]
    assert list(first) == list(report["results"][0])  # the one row shape of every clean report
    assert first["status"] == "skipped" and first["skipped_reason"].startswith("cleanup.policy=delete (Kafka's")
    assert first["partition_dir"] == str(log_dir / "first-0") and first["end_offset"] is None


def test_readme_demo_cleans_the_sample_partition_its_metadata_log_calls_compacted(tmp_path: Path) -> None:
    """README's first command on a copy of fixtures/sample-logdir: orders-0's cleanup.policy=compact
    comes from the sample's own KRaft metadata log, so a plain `clean` of it compacts it."""
    log_dir = tmp_path / "demo"
    shutil.copytree(PROJECT_FIXTURES / "sample-logdir", log_dir)
    result = run(log_dir / "orders-0")
    assert (result.exit_code, result.stderr) == (0, "")  # every source read, nothing assumed
    assert result.stdout.startswith("orders-0: cleaned dirty section [0, 142)")
    keys = [k for _o, k, _v in read_all_records(log_dir / "orders-0")[:-1] if k is not None]
    assert len(keys) == len(set(keys))  # one record per key left in the cleaned section


def test_a_policy_only_last_known_from_a_snapshot_is_not_acted_on_alone(tmp_path: Path) -> None:
    """The README demo's log dir whose metadata log is only a snapshot, the log after it gone: its
    cleanup.policy=compact is as of the snapshot, a later record may have changed it, so clean treats
    the policy as unknown: refused alone, skipped in its log dir, compacted with --assume-compact."""
    log_dir = copy_tree_writable(PROJECT_FIXTURES / "sample-logdir", tmp_path / "demo")
    last = snapshot_without_its_tail(log_dir / "__cluster_metadata-0")
    before = digest(log_dir / "orders-0")

    alone = run(log_dir / "orders-0", "--roll")
    walked = run(log_dir, "--roll", "--json")

    assert alone.exit_code == 2
    assert error_lines(alone.stderr)[0].startswith(
        f"kcompact: error: {log_dir / 'orders-0'}: cleanup.policy is not known: compact (topic override, last "
        f"known at metadata offset {last}) is where what was read of the metadata log ends, and a later record, "
        f"missing from disk (or unread), may have changed it; kcompact compacts only a partition known to be "
        f"compacted")
    assert error_lines(alone.stderr)[0].endswith("give --config cleanup.policy=compact or --assume-compact to "
                                                 "compact it")
    assert walked.exit_code == 0, walked.output
    (skipped,) = json.loads(walked.stdout)["skipped"]
    assert skipped["skipped_reason"].startswith("cleanup.policy is not known: compact (topic override, last known")
    assert digest(log_dir / "orders-0") == before  # not even rolled

    assumed = run(log_dir / "orders-0", "--assume-compact")
    assert assumed.exit_code == 0, assumed.output
    assert assumed.stdout.startswith("orders-0: cleaned dirty section [0, 142)")


def corrupt_magic(part: Path) -> Path:
    """Kafka's testMessageLargerThanMaxMessageSizeWithCorruptHeader: magic byte of the first batch
    -> 0xff."""
    log = part / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[MAGIC_OFFSET] = 0xFF
    log.write_bytes(bytes(data))
    return log


def without_locks(directory: Path) -> dict[str, str]:
    """The digest minus the lock files a (refused) write leaves at the top of the log dir
    (segment/lock.py)."""
    return {k: v for k, v in digest(directory).items() if not k.endswith(".lock")}


def test_corrupt_partition_exits_2_with_one_line(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    log = corrupt_magic(orders(log_dir))
    before = digest(log_dir)
    result = run(log.parent, "--now-ms", NOW, "--config", "cleanup.policy=compact")
    assert (result.exit_code, result.stdout) == (2, "")
    (error,) = error_lines(result.stderr)
    assert error.startswith(f"kcompact: error: {log} at position 0: ") and "magic" in error
    assert "Traceback" not in result.stderr
    assert without_locks(log_dir) == before


def test_bad_crc_in_a_batch_kept_as_is_is_refused(tmp_path: Path) -> None:
    """A batch that would be copied byte for byte but fails its CRC: refused as it is read."""
    log_dir = tmp_path / "logdir"
    b = (
        PartitionBuilder("orders")
        .batch([(b"a", b"1")])
        .batch([(b"b", b"1")])
        .roll()
        .batch([(b"c", b"1")])
    )
    part = b.write(log_dir)
    log = part / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[CRC_OFFSET] ^= 0xFF
    log.write_bytes(bytes(data))
    before = digest(log_dir)
    result = run(part, "--now-ms", NOW, "--config", "cleanup.policy=compact")
    assert (result.exit_code, result.stdout) == (2, "")
    (error,) = error_lines(result.stderr)
    assert error.startswith("kcompact: error: ")
    assert error.startswith(f"kcompact: error: {log} at position 0: batch (last offset 0) fails its CRC")
    assert error.endswith(f"(`kcompact repair {part}` sets such batches aside and keeps every batch that passes)")
    assert "Traceback" not in result.stderr
    assert without_locks(log_dir) == before


def test_log_dir_with_a_corrupt_partition_cleans_the_others_and_exits_2(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    bad = orders(log_dir, topic="bad")
    good = orders(log_dir, topic="good")
    write_offset_checkpoint(
        log_dir / "replication-offset-checkpoint", {("bad", 0): 31, ("good", 0): 31}
    )
    log = corrupt_magic(bad)
    result = run(log_dir, "--now-ms", NOW, "--config", "cleanup.policy=compact")
    assert result.exit_code == 2
    (error,) = error_lines(result.stderr)
    assert error.startswith(f"kcompact: error: {log} at position 0: ")
    assert "Traceback" not in result.stderr
    assert "good-0: cleaned dirty section [0, 30)" in result.stdout
    summary = result.stdout.splitlines()[-1]
    assert summary.startswith("1 partition cleaned, 0 had nothing to clean, 0 skipped, 1 failed; ")
    assert [o for o, _k, _v in read_all_records(good)] == [26, 27, 28, 29, 30]


def test_cluster_metadata_is_refused(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    part = PartitionBuilder("__cluster_metadata").batch([(b"k", b"v")]).roll().batch([(b"k", b"w")])
    metadata_dir = part.write(log_dir)
    before = digest(log_dir)
    result = run(metadata_dir, "--now-ms", NOW)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"kcompact: error: {metadata_dir}: __cluster_metadata is KRaft's own log; "
        "no cleaner touches it\n"
    )
    assert digest(log_dir) == before


@pytest.mark.parametrize("layout", ["empty", "files only", "other directories"])
def test_a_directory_without_partitions_is_not_a_silent_success(tmp_path: Path, layout: str) -> None:
    wrong = tmp_path / "not-a-log-dir"
    wrong.mkdir()
    if layout == "files only":
        (wrong / "notes.txt").write_text("x")
    elif layout == "other directories":
        (wrong / "pytest-of-root").mkdir()  # like /tmp: directories, none named <topic>-<partition>
    result = run(wrong, "--now-ms", NOW, "--json")
    assert (result.exit_code, result.stderr) == (
        2, (f"kcompact: error: no partition directories found under {wrong} (expected a log dir, which "
           "holds <topic>-<partition> directories, or one of them)\n"))


def test_a_log_dir_whose_partitions_are_all_skipped_is_a_success(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    part = PartitionBuilder("events").batch([(b"k", b"v")]).roll().batch([(b"k", b"w")]).write(log_dir)
    result = run(log_dir, "--now-ms", NOW, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["results"], report["failures"]) == ([], [])
    assert [row["partition_dir"] for row in report["skipped"]] == [str(part)]


@pytest.mark.parametrize("name", ["__cluster_metadata-0", "orders-0.0123456789abcdef0123456789abcdef-delete"])
def test_a_dir_holding_no_partition_a_cleaner_works_on_is_an_error(tmp_path: Path, name: str) -> None:
    """A metadata.log.dir of its own, or only partitions being deleted: nothing to clean is a wrong path."""
    log_dir = tmp_path / "logdir"
    PartitionBuilder("__cluster_metadata").batch([(b"k", b"v")]).write(log_dir)
    if name != "__cluster_metadata-0":
        shutil.rmtree(log_dir / "__cluster_metadata-0")
        PartitionBuilder("orders").batch([(b"k", b"v")]).write(log_dir).rename(log_dir / name)
    result = run(log_dir, "--now-ms", NOW)
    assert (result.exit_code, result.stdout) == (2, "")
    if name == "__cluster_metadata-0":
        assert error_lines(result.stderr) == [
            (f"kcompact: error: no partition a cleaner works on under {log_dir}: only KRaft's metadata log or "
            "partitions being deleted or moved (-delete, -future, -stray)")]
    else:  # the listing every command shares leaves set-aside directories out (segment.partition)
        assert error_lines(result.stderr) == [
            (f"kcompact: error: no partition directories found under {log_dir}: only 1 partition Kafka set "
             "aside (being deleted or moved: -delete, -future, -stray); name one alone to read it")]




def test_the_removed_line_counts_one_in_the_singular(tmp_path: Path) -> None:
    log_dir = tmp_path / "sample"
    copy_tree_writable(PROJECT_FIXTURES / "sample-logdir", log_dir)  # README's demo: one tombstone goes

    result = run(log_dir / "orders-0")

    assert result.exit_code == 0, result.output
    [removed] = [line for line in result.stdout.splitlines() if line.lstrip().startswith("removed")]
    assert removed.split(None, 1)[1].strip() == "119 superseded, 1 tombstone, 1 aborted, 0 markers, 1 keyless"
