"""``--topic``, ``--exclude-topic``, ``--partition`` on every command that takes a log dir: which partitions
are worked on (and which are left byte for byte), the count said on stderr, and the refusals (exit 2,
one line)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cli.main import cli
from kcompact.config.sources import ConfigSources
from kcompact.inspect.export import list_segments
from kcompact.segment.names import parse_partition_dir_name
from kcompact.segment.partition_filter import PartitionFilter
from kcompact.spark.plan import plan_spark_clean
from tests.builders import BASE_TS, PartitionBuilder
from tests.conftest import real_fixture

NOW = BASE_TS + 1_000
CONFLUENT = "confluent512-lz4-logdir"


def run(*args: str | Path | int) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    return runner.invoke(cli, [*map(str, args)])


def digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def not_warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("kcompact: warning: ")]


def expected_dirs(log_dir: Path, keep: re.Pattern[str], drop: re.Pattern[str] | None,
                  numbers: set[int] | None) -> set[str]:
    """The partitions a filter should keep, worked out independently of kcompact's filter."""
    out = set()
    for entry in log_dir.iterdir():
        match = re.fullmatch(r"(.+)-(\d+)", entry.name)
        if not entry.is_dir() or match is None:
            continue
        topic, number = match.group(1), int(match.group(2))
        if keep.fullmatch(topic) and not (drop and drop.fullmatch(topic)) and (
                numbers is None or number in numbers):
            out.add(entry.name)
    return out


def compacted_log_dir(tmp_path: Path) -> Path:
    """Three compacted topics with superseded keys in a closed segment, ready for a clean."""
    log_dir = tmp_path / "logs"
    for topic in ("orders", "orders-dlq", "payments"):
        for number in (0, 1):
            b = PartitionBuilder(topic, number)
            for i in range(3):
                b.batch([(f"k{j % 2}".encode(), f"v{i}{j}".encode()) for j in range(4)])
            b.roll().batch([(b"x", b"1")])
            b.write(log_dir, cleaner_checkpoint=0)
    return log_dir


# -- inspect dirty-ratio, on broker-written data --------------------------------------------------------


def test_dirty_ratio_reports_exactly_the_matched_partitions_of_a_real_log_dir() -> None:
    log_dir = real_fixture(CONFLUENT)
    result = run("inspect", "dirty-ratio", log_dir, "--now-ms", NOW, "--json",
                 "--topic", "__consumer_offsets", "--topic", "_schemas", "--partition", "0", "--partition", "1")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    want = expected_dirs(log_dir, re.compile("__consumer_offsets|_schemas"), None, {0, 1})
    assert want == {"__consumer_offsets-0", "__consumer_offsets-1", "_schemas-0"}
    assert {Path(row["partition_dir"]).name for row in rows} == want
    total = sum(1 for p in log_dir.iterdir() if p.is_dir() and parse_partition_dir_name(p.name))
    assert not_warnings(result.stderr) == [
        (f"kcompact: --topic '__consumer_offsets' --topic '_schemas' --partition 0 --partition 1 matched "
        f"3 of {total} partitions")]


def test_exclude_topic_leaves_out_every_partition_of_the_topics_it_matches() -> None:
    log_dir = real_fixture(CONFLUENT)
    result = run("inspect", "dirty-ratio", log_dir, "--now-ms", NOW, "--json",
                 "--exclude-topic", "__.*", "--exclude-topic", "_confluent-command")
    assert result.exit_code == 0, result.output
    names = {Path(row["partition_dir"]).name for row in json.loads(result.stdout)}
    assert names == expected_dirs(log_dir, re.compile(".*"), re.compile("__.*|_confluent-command"), None)
    assert names and not any(name.startswith("__") for name in names)


def test_a_topic_pattern_must_match_the_whole_topic() -> None:
    result = run("inspect", "dirty-ratio", real_fixture(CONFLUENT), "--now-ms", NOW, "--json",
                 "--topic", "_schema")  # a prefix of _schemas only
    assert result.exit_code == 2
    assert not_warnings(result.stderr)[0].startswith(
        f"kcompact: error: no partition under {real_fixture(CONFLUENT)} matches --topic '_schema' (0 of ")


@pytest.mark.parametrize("command", [["inspect", "dirty-ratio"], ["clean", "--dry-run"],
                                     ["repair", "--dry-run"]])
def test_a_bad_regex_is_one_line_and_exit_2(command: list[str]) -> None:
    result = run(*command, real_fixture(CONFLUENT), "--topic", "orders[")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        ("kcompact: error: --topic 'orders[': not a regular expression "
        "(unterminated character set at position 6)")]


def test_none_matched_is_one_line_and_exit_2_with_a_json_error(tmp_path: Path) -> None:
    log_dir = compacted_log_dir(tmp_path)
    before = digest(log_dir)
    result = run("clean", log_dir, "--now-ms", NOW, "--config", "cleanup.policy=compact", "--json",
                 "--topic", "shipments", "--partition", "0")
    assert result.exit_code == 2
    message = f"no partition under {log_dir} matches --topic 'shipments' --partition 0 (0 of 6 partitions)"
    assert result.stderr.splitlines() == [f"kcompact: error: {message}"]
    assert json.loads(result.stdout)["error"]["message"] == message
    assert digest(log_dir) == before


# -- clean: only the matched partitions change -----------------------------------------------------------


def test_clean_changes_only_the_matched_partitions(tmp_path: Path) -> None:
    log_dir = compacted_log_dir(tmp_path)
    before = {p.name: digest(p) for p in log_dir.iterdir() if p.is_dir()}
    result = run("clean", log_dir, "--now-ms", NOW, "--config", "cleanup.policy=compact", "--json",
                 "--topic", "orders.*", "--exclude-topic", "orders-dlq", "--partition", "1")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [Path(r["partition_dir"]).name for r in report["results"]] == ["orders-1"]
    changed = {p.name for p in log_dir.iterdir() if p.is_dir() and digest(p) != before[p.name]}
    assert changed == {"orders-1"}
    assert not_warnings(result.stderr) == [
        "kcompact: --topic 'orders.*' --exclude-topic 'orders-dlq' --partition 1 matched 1 of 6 partitions"]


def test_clean_of_a_partition_named_alone_that_the_filter_leaves_out_is_refused(tmp_path: Path) -> None:
    part = compacted_log_dir(tmp_path) / "payments-0"
    before = digest(part)
    result = run("clean", part, "--now-ms", NOW, "--config", "cleanup.policy=compact", "--topic", "orders")
    assert result.exit_code == 2
    assert not_warnings(result.stderr) == [
        f"kcompact: error: no partition under {part} matches --topic 'orders' (0 of 1 partitions)"]
    assert digest(part) == before


# -- the spark commands' driver side: the same filter, before any task -----------------------------------


def test_spark_clean_plans_only_the_matched_partitions(tmp_path: Path) -> None:
    log_dir = compacted_log_dir(tmp_path)
    sources = ConfigSources({"cleanup.policy": "compact"})
    selection = PartitionFilter.of(["payments|orders"], (), [0])
    plan = plan_spark_clean([log_dir], sources, options=CleanOptions(now_ms=NOW), selection=selection)
    assert sorted(Path(t.partition_dir).name for t in plan.tasks) == ["orders-0", "payments-0"]
    assert plan.failures == [] and plan.skipped == []


def test_spark_export_lists_only_the_matched_partitions_segments() -> None:
    log_dir = real_fixture(CONFLUENT)
    selection = PartitionFilter.of(["_schemas|__consumer_offsets"], (), [0])
    refs = list_segments([log_dir], selection=selection)
    assert {Path(r.partition_dir).name for r in refs} == {"_schemas-0", "__consumer_offsets-0"} & {
        Path(r.partition_dir).name for r in list_segments([log_dir])}
    assert refs


def test_the_filter_options_are_on_every_command_that_takes_a_log_dir() -> None:
    for command in (["clean"], ["inspect", "dirty-ratio"], ["repair"], ["spark", "clean"],
                    ["spark", "inspect", "dirty-ratio"], ["spark", "export"], ["export"]):
        text = " ".join(run(*command, "--help").stdout.split())
        for option in ("--topic REGEX", "--exclude-topic REGEX", "--partition N"):
            assert option in text, (command, option)
