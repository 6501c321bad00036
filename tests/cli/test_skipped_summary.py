"""What ``clean`` says of a log dir's partitions it leaves alone, as an operator reads it: one line per reason
(with the count and a few names) instead of one per partition, every row with --verbose and --json; an empty
partition told there is nothing to clean instead of options that would change nothing; a dry run's last line in
the conditional, since nothing was done."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from tests.builders import BASE_TS, PartitionBuilder
from tests.conftest import copy_tree_writable, real_fixture

NOW = 1_769_800_000_000
UNKNOWN = ("cleanup.policy is not known (no KRaft metadata log was found); Kafka's default is 'delete', and kcompact "
           "compacts only a partition known to be compacted")


def run(*args: str | Path | int) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    return runner.invoke(cli, [str(arg) for arg in args], prog_name="kcompact")


def skipped(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if ": skipped — " in line]


def test_a_zookeeper_era_log_dir_says_each_skip_reason_once_with_its_count(tmp_path: Path) -> None:
    """confluent512 (no metadata log): 52 partitions of unknown policy. 41 of them hold no record, 10 hold keyed
    records, one is keyless: three lines, not 52; --verbose and --json keep one per partition."""
    log_dir = copy_tree_writable(real_fixture("confluent512-lz4-logdir"), tmp_path / "logdir")
    result = run("clean", log_dir, "--dry-run", "--now-ms", NOW)
    assert result.exit_code == 0, result.output
    lines = skipped(result.stdout)
    assert [line.split(" (")[0] for line in lines] == [
        "41 partitions", "10 partitions",
        "_confluent-controlcenter-5-1-2-1-monitoring-message-rekey-0: skipped — cleanup.policy is not known"]
    assert lines[0].endswith(f"and 38 more): skipped — {UNKNOWN}; no records: nothing to clean, whatever the policy")
    assert "--assume-compact" not in lines[0]
    assert lines[1].endswith(
        f"and 7 more): skipped — {UNKNOWN}; if the topic is compacted, clean it alone with --config "
        "cleanup.policy=compact, or give --assume-compact, to compact it")
    assert "11 of 11 records sampled have no key" in lines[2]  # alone: its own reason, counts and all
    verbose = run("clean", log_dir, "--dry-run", "--now-ms", NOW, "--verbose")
    assert len(skipped(verbose.stdout)) == 52
    assert "_schemas-0: skipped — " + UNKNOWN + "; all 63 records sampled carry a key;" in verbose.stdout
    rows = json.loads(run("clean", log_dir, "--dry-run", "--now-ms", NOW, "--json").stdout)["skipped"]
    assert len(rows) == 52


def test_a_dry_run_says_what_it_would_do_and_a_clean_what_it_did(tmp_path: Path) -> None:
    log_dir = tmp_path / "logdir"
    for number in range(2):
        b = PartitionBuilder("orders", number)
        for i in range(4):
            b.batch([(f"k{i % 2}".encode(), b"v")])
        b.roll().batch([(b"k", b"v")]).write(log_dir, high_watermark="log-end")
    dry = run("clean", log_dir, "--dry-run", "--now-ms", BASE_TS + 1_000, "--config", "cleanup.policy=compact")
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines()[-1] == (
        "would clean 2 partitions, 0 have nothing to clean, 0 would be skipped, 0 failed; would read 568 B, "
        "would write 284 B (dry run: nothing changed)")
    done = run("clean", log_dir, "--now-ms", BASE_TS + 1_000, "--config", "cleanup.policy=compact")
    assert done.stdout.splitlines()[-1] == (
        "2 partitions cleaned, 0 had nothing to clean, 0 skipped, 0 failed; 568 B read, 284 B written")


def test_an_empty_partition_named_alone_is_told_there_is_nothing_to_clean(tmp_path: Path) -> None:
    log_dir = copy_tree_writable(real_fixture("confluent512-lz4-logdir"), tmp_path / "logdir")
    result = run("clean", log_dir / "_confluent-metrics-0", "--now-ms", NOW)
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(f"{UNKNOWN}; no records: nothing to clean, whatever the policy")


def test_dirty_ratio_says_a_detail_shared_by_many_partitions_once(tmp_path: Path) -> None:
    """confluent512: 11 partitions holding records have an unknown policy; the table lists each, and the
    advice under it is one line naming the count, not eleven copies."""
    log_dir = copy_tree_writable(real_fixture("confluent512-lz4-logdir"), tmp_path / "logdir")
    result = run("inspect", "dirty-ratio", log_dir, "--now-ms", NOW)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # rich wraps at 80 columns
    detail = "cleanup.policy is not known (no KRaft metadata log was found): a broker uses Kafka's default"
    assert text.count(detail) == 1
    assert ("11 partitions (_confluent-command-0, _confluent-controlcenter-5-1-2-1-KSTREAM-OUTEROTHER-0000000096-"
            "store-changelog-0, _confluent-controlcenter-5-1-2-1-KSTREAM-OUTERTHIS-0000000095-store-changelog-0 and "
            f"8 more): {detail}") in text
    assert len([line for line in result.stdout.splitlines() if "cleanup-policy-unknown" in line]) >= 11  # rows


def test_empty_partitions_get_no_advice_that_changes_nothing(tmp_path: Path) -> None:
    """Three empty partitions of unknown policy: dirty-ratio counts them and offers no --config or
    --assume-compact (nothing to clean); clean says the same."""
    log_dir = tmp_path / "logdir"
    for number in range(3):
        PartitionBuilder("idle", number).write(log_dir, high_watermark=0)
    ratio = run("inspect", "dirty-ratio", log_dir, "--now-ms", BASE_TS)
    assert ratio.exit_code == 0, ratio.output
    assert ratio.stdout == "3 empty partitions (no records): nothing to clean\n"
    clean = run("clean", log_dir, "--now-ms", BASE_TS, "--dry-run")
    assert "--assume-compact" not in clean.stdout and "--config" not in clean.stdout
    assert clean.stdout.splitlines()[0] == ("idle-0, idle-1, idle-2: skipped — cleanup.policy is not "
                                            "known (no KRaft metadata log was found); Kafka's default is 'delete', "
                                            "and kcompact compacts only a partition known to be compacted; no "
                                            "records: nothing to clean, whatever the policy")
