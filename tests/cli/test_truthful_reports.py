"""Every report says what is true of the files: no garbled warning, no phantom file, no silent reset, no
"100.0%" while something is left, no known path reported as null, no "eligible" that ``clean`` refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.inspect import context, dirty_ratio
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from kcompact.segment.partition import Partition, open_partition
from tests.builders import BASE_TS, PartitionBuilder
from tests.cleaner.round.test_clean_failures import BROKER, OTHER_KCOMPACT, child_process
from tests.unprivileged import run_kcompact

NOW = BASE_TS + 10_000_000
COMPACT = ("--config", "cleanup.policy=compact")


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False,
                              env={"COLUMNS": "200", "KCOMPACT_SERVER_PROPERTIES": None})


def warnings(stderr: str) -> list[str]:
    return [line.removeprefix("kcompact: warning: ") for line in stderr.splitlines()
            if line.startswith("kcompact: warning: ")]


def log_dir_of(root: Path, topics: tuple[str, ...] = ("orders", "users"),
               checkpoint: dict[tuple[str, int], int] | None = None) -> Path:
    """Partitions of 3 closed segments (4 keys overwritten in each) and an active one; one
    replication-offset-checkpoint (the log ends) and, when given, one cleaner-offset-checkpoint."""
    log_dir = root / "logdir"
    ends = {}
    for topic in topics:
        b = PartitionBuilder(topic)
        for s in range(3):
            b.batch([(f"k{j}".encode(), f"v{s}".encode()) for j in range(4)]).roll()
        b.batch([(b"k1", b"active")])
        b.write(log_dir, high_watermark=None)
        ends[(topic, 0)] = b.next_offset
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", ends)
    if checkpoint is not None:
        write_offset_checkpoint(log_dir / "cleaner-offset-checkpoint", checkpoint)
    return log_dir


# --- warnings that were garbled or named what is not there ------------------------------------------------


def test_a_run_refused_by_a_broker_says_nothing_of_checkpoint_line_order(tmp_path: Path) -> None:
    """Every partition refused: the run changed nothing, so no note about reordering checkpoint lines."""
    log_dir = log_dir_of(tmp_path)
    with child_process(BROKER, str(log_dir / ".lock")):
        result = run("clean", log_dir, "--jobs", "2", "--now-ms", str(NOW), *COMPACT)
    assert result.exit_code == 2
    assert not any("cleaner-offset-checkpoint" in line for line in warnings(result.stderr)), result.stderr
    assert "is held by a running Kafka broker" in result.stderr


def test_a_read_only_log_dir_is_named_not_a_lock_file_that_is_not_there(tmp_path: Path) -> None:
    log_dir = log_dir_of(tmp_path, topics=("orders",))
    log_dir.chmod(0o555)
    try:
        proc = run_kcompact("repair", str(log_dir / "orders-0"), "--json")
    finally:
        log_dir.chmod(0o755)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == f"kcompact: error: {log_dir}: cannot write (Permission denied)"
    assert json.loads(proc.stdout)["error"]["path"] == str(log_dir)
    assert not (log_dir / ".lock").exists()


def test_a_refusal_json_names_the_partition_it_refuses(tmp_path: Path) -> None:
    """Unknown policy (no metadata log), named alone: refused, and the JSON error carries the path."""
    part = log_dir_of(tmp_path, topics=("orders",)) / "orders-0"
    result = run("clean", part, "--json", "--now-ms", str(NOW))
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert (error["kind"], error["path"]) == ("RefusedError", str(part))
    with child_process(OTHER_KCOMPACT, str(part.parent), part.name):  # the path is not the message's head
        busy = run("clean", part, "--json", "--now-ms", str(NOW), *COMPACT)
    error = json.loads(busy.stdout)["error"]
    assert error["message"].startswith("another kcompact process is working on orders-0")
    assert (busy.exit_code, error["kind"], error["path"]) == (2, "RefusedError", str(part))


# --- reports that said something untrue -----------------------------------------------------------------


def test_a_checkpoint_past_the_log_end_is_reset_with_a_word(tmp_path: Path) -> None:
    log_dir = log_dir_of(tmp_path, topics=("orders",), checkpoint={("orders", 0): 1000})
    part = log_dir / "orders-0"
    said = ("orders-0: cleaner-offset-checkpoint holds 1000 for this partition, past the log end offset 13: "
            "reset to the log start offset 0, as the broker's cleaner does (LogCleanerManager), so the whole "
            "log counts as dirty")
    for command in (("inspect", "last-clean"), ("inspect", "keys")):
        result = run(*command, part, "--now-ms", str(NOW), *COMPACT)
        assert result.exit_code == 0
        assert said.removeprefix("orders-0: ") in warnings(result.stderr), command
    result = run("clean", part, "--now-ms", str(NOW), *COMPACT)
    assert result.exit_code == 0 and said in warnings(result.stderr)
    assert read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint")[("orders", 0)] == 12


def test_last_clean_counts_a_checkpoint_above_the_log_start_as_a_clean(tmp_path: Path) -> None:
    """A clean that removed nothing leaves no gap, but the cleaner wrote its checkpoint at its end."""
    part = log_dir_of(tmp_path, topics=("orders",), checkpoint={("orders", 0): 8}) / "orders-0"
    result = run("inspect", "last-clean", part, "--now-ms", str(NOW), *COMPACT)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == (
        "orders-0: compaction ran, at a time nothing here dates (cleaner-offset-checkpoint says a clean "
        "reached offset 8)")
    data = json.loads(run("inspect", "last-clean", part, "--json", "--now-ms", str(NOW), *COMPACT).stdout)
    assert data["compacted"] is True and data["gaps"] == 0
    never = log_dir_of(tmp_path / "never", topics=("orders",), checkpoint={("orders", 0): 0}) / "orders-0"
    first = run("inspect", "last-clean", never, "--now-ms", str(NOW), *COMPACT).stdout.splitlines()[0]
    assert first == "orders-0: no sign of compaction"


def test_dump_of_a_partition_without_segments_says_so(tmp_path: Path) -> None:
    part = tmp_path / "logdir" / "orders-0"
    part.mkdir(parents=True)
    (part / "leader-epoch-checkpoint").write_text("0\n0\n")
    for extra in ((), ("--json",)):
        result = run("inspect", "dump", part, *extra)
        assert result.exit_code == 0
        assert warnings(result.stderr) == [
            (f"{part}: no segment (no .log file): nothing to dump; a broker loading this directory creates "
             "an empty segment at its log start offset")]


def test_size_reduction_never_rounds_to_100_percent_while_records_are_left(tmp_path: Path) -> None:
    """~800 KiB of one key's values, then its last value: what is left is well under 0.05%."""
    b = PartitionBuilder()
    for i in range(8):
        b.batch([(b"k", bytes([i]) * 1000) for _ in range(100)])
    b.batch([(b"k", b"1")]).roll().batch([(b"x", b"active")])
    part = b.write(tmp_path / "logdir", cleaner_checkpoint=0)
    result = run("clean", part, "--now-ms", str(NOW), *COMPACT)
    assert result.exit_code == 0
    (line,) = [x for x in result.stdout.splitlines() if "size reduction" in x]
    assert line.split() == ["size", "reduction", ">", "99.9%"]
    keys = run("inspect", "keys", part, "--now-ms", str(NOW), *COMPACT)
    assert "100.0%" not in keys.stdout


def test_dirty_ratio_says_an_unknown_policy_is_unknown(tmp_path: Path) -> None:
    """No metadata log: the topic's overrides are unknown, so its policy is not "delete", only unknown."""
    part = log_dir_of(tmp_path, topics=("orders",)) / "orders-0"
    (row,) = json.loads(run("inspect", "dirty-ratio", part, "--json", "--now-ms", str(NOW)).stdout)
    assert (row["cleanup_policy"], row["blocking_rule"], row["eligible"]) == (
        "unknown", "cleanup-policy-unknown", False)
    assert row["blocking_detail"].startswith(
        "cleanup.policy is not known (no KRaft metadata log was found): a broker uses Kafka's default "
        "'delete' unless the topic overrides it")
    assert "cleanup.policy is delete" not in row["blocking_detail"]


def test_dirty_ratio_s_legend_says_unknown_not_not_compacted(tmp_path: Path) -> None:
    """The legend under the table names the unknown policy as unknown, and suggests compacting it only
    if the topic is compacted."""
    log_dir = log_dir_of(tmp_path, topics=("orders",))
    lines = run("inspect", "dirty-ratio", log_dir, "--now-ms", str(NOW)).stdout.splitlines()
    assert "cleanup-policy-unknown: cleanup.policy is unknown (the topic's overrides could not be read): a " \
           "broker uses Kafka's default 'delete' unless the topic overrides it; if the topic is compacted, give " \
           "--config cleanup.policy=compact (`kcompact clean` of a log dir also takes --assume-compact)" in lines
    assert not any("not compacted" in line for line in lines)


def test_assume_compact_is_never_suggested_without_if_the_topic_is_compacted(tmp_path: Path) -> None:
    log_dir = log_dir_of(tmp_path, topics=("orders",))
    outputs = [run("inspect", "dirty-ratio", log_dir, "--now-ms", str(NOW)),
               run("inspect", "dirty-ratio", log_dir, "--now-ms", str(NOW), "--json"),
               run("clean", log_dir, "--now-ms", str(NOW)), run("clean", log_dir, "--now-ms", str(NOW), "--json"),
               run("clean", log_dir / "orders-0", "--now-ms", str(NOW))]
    said = [line for result in outputs for line in (result.stdout + result.stderr).splitlines()
            if "--assume-compact" in line]
    assert said
    assert all("if the topic is compacted" in line for line in said), said


def test_dirty_ratio_never_calls_eligible_what_clean_refuses(tmp_path: Path) -> None:
    """Tiered storage: ``clean`` refuses it, so dirty-ratio neither calls it eligible nor ranks it."""
    log_dir = log_dir_of(tmp_path)
    tiered = (*COMPACT, "--config", "remote.storage.enable=true")
    rows = json.loads(run("inspect", "dirty-ratio", log_dir, "--json", "--now-ms", str(NOW), *tiered).stdout)
    for row in rows:
        assert (row["eligible"], row["must_clean"], row["cleaner_rank"]) == (False, False, None)
        assert row["blocking_rule"] == "tiered-storage"
        assert row["blocking_detail"] == "remote.storage.enable=true (tiered storage); kcompact does not clean it"
    refused = run("clean", log_dir / "orders-0", "--json", "--now-ms", str(NOW), *tiered)
    assert refused.exit_code == 2
    assert json.loads(refused.stdout)["error"]["message"] == (
        f"{log_dir / 'orders-0'}: remote.storage.enable=true (tiered storage); kcompact does not clean it")
    plain = json.loads(run("inspect", "dirty-ratio", log_dir, "--json", "--now-ms", str(NOW), *COMPACT).stdout)
    assert all(row["eligible"] for row in plain)  # the same partitions without tiered storage are


def test_a_segment_swapped_out_by_a_running_clean_is_said_as_that_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only command takes no lock: a clean beside it may swap a segment out (``.log`` ->
    ``.log.deleted``) between the listing and the read. With that clean's partition lock held, the error
    names the clean and says to run again, not "No such file or directory"; without it, the OS's words stay."""
    log_dir = log_dir_of(tmp_path, topics=("orders",))
    part = log_dir / "orders-0"
    swapped = part / "00000000000000000004.log"

    def racing(path: str | Path) -> Partition:
        listed = open_partition(path)
        swapped.rename(swapped.with_name(swapped.name + ".deleted"))  # what the swap does meanwhile
        return listed

    monkeypatch.setattr(context, "open_partition", racing)
    monkeypatch.setattr(dirty_ratio, "open_partition", racing)

    def read(*command: str) -> tuple[Result, str]:
        result = run(*command, part, "--json", "--now-ms", str(NOW), *COMPACT)
        swapped.with_name(swapped.name + ".deleted").rename(swapped)
        text = json.dumps(json.loads(result.stdout))
        return result, text

    said = (f"{part}: a kcompact clean is working on this partition (another kcompact holds "
            ".kcompact-orders-0.lock); 00000000000000000004.log changed while it was read: run the command "
            "again once the clean is done")
    with child_process(OTHER_KCOMPACT, str(log_dir), "orders-0"):
        keys, _ = read("inspect", "keys")
        assert keys.exit_code == 2 and json.loads(keys.stdout)["error"]["message"] == said
        assert json.loads(keys.stdout)["error"]["path"] == str(part)
        ratio, _ = read("inspect", "dirty-ratio")
        assert json.loads(ratio.stdout)[0]["error"] == said
    alone, text = read("inspect", "keys")
    assert alone.exit_code == 2 and "cannot read (No such file or directory)" in text
