"""The keyless guard holds for every record a clean reads, not only for the gate's sample: a partition
whose first 256 KiB carry keys and whose rest has none is refused (named alone) or skipped (in its
log dir) by the round itself, before its first change, unless the loss is acknowledged."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from kcompact.cleaner.logdir.keyless import sample_keyless
from kcompact.cleaner.logdir.run import PartitionSkip, clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cli.main import cli
from kcompact.segment.partition import open_partition
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.cleaner.round.test_clean_failures import log_dir_digest

NOW = BASE_TS + 10_000_000
VALUE = b"x" * 1000
READ = "3000 of the 3300 records the round reads (below offset 3300) have no key"
ROLLED = "3000 of the 3301 records the round reads (below offset 3301) have no key"  # --roll: the active one too


def keyed_then_keyless(log_dir: Path, topic: str = "clicks") -> Path:
    """300 keyed records (~300 KB, more than the gate's sample), then 3000 keyless ones (~3 MB) in three
    segments, then an active segment with one keyed record."""
    builder = PartitionBuilder(topic, 0)
    for i in range(30):
        builder.batch([(b"k%d" % (j % 50), VALUE) for j in range(i * 10, i * 10 + 10)])
    builder.roll()
    for i in range(300):
        builder.batch([(None, VALUE) for _ in range(10)])
        if i % 100 == 99:
            builder.roll()
    part = builder.batch([(b"k0", b"active")]).write(log_dir)
    sample = sample_keyless(open_partition(part))
    assert (sample.records, sample.keyless, sample.exhaustive) == (260, 0, False)  # the gate sees keys only
    return part


def keyed(log_dir: Path) -> Path:
    builder = PartitionBuilder("orders", 0)
    for _ in range(2):
        builder.batch([(b"k%d" % i, b"v" * 30) for i in range(5)]).roll()
    return builder.batch([(b"k0", b"active")]).write(log_dir)


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--now-ms", str(NOW)])


def no_cleaned_files(part: Path) -> bool:
    return not any(p.name.endswith(".cleaned") for p in part.iterdir())


def test_log_dir_skips_a_partition_keyless_past_the_sample_when_compact_is_assumed(tmp_path: Path) -> None:
    clicks, orders = keyed_then_keyless(tmp_path), keyed(tmp_path)
    before = log_dir_digest(clicks)
    for allow in (False, True):  # an assumption is never enough, acknowledged or not
        run_ = clean_path(tmp_path, cli_overrides={}, assume_compact=True, allow_keyless_loss=allow,
                          options=CleanOptions(now_ms=NOW, roll=True))
        assert run_.skipped == [PartitionSkip(str(clicks), (
            f"cleanup.policy=compact is only assumed (--assume-compact), but {ROLLED}, and a clean deletes "
            "every keyless record it reaches: a compacted topic's records carry keys, and compaction would "
            "delete these; clean this partition alone with --config cleanup.policy=compact and "
            "--allow-keyless-loss to compact it anyway"))]
        assert not run_.failures and [r.topic for r in run_.results] == ["orders"]
        assert log_dir_digest(clicks) == before and no_cleaned_files(clicks)  # not even rolled
    assert [k for _o, k, _v in read_all_records(orders)] == [b"k1", b"k2", b"k3", b"k4", b"k0"]  # cleaned


def test_log_dir_cli_reports_the_skip_and_exits_0(tmp_path: Path) -> None:
    clicks = keyed_then_keyless(tmp_path)
    keyed(tmp_path)
    before = log_dir_digest(clicks)
    for dry_run in ((), ("--dry-run",)):
        result = run("clean", str(tmp_path), "--assume-compact", "--json", *dry_run)
        assert result.exit_code == 0, result.output
        [skip] = json.loads(result.stdout)["skipped"]
        assert (Path(skip["partition_dir"]).name, skip["status"]) == ("clicks-0", "skipped")
        assert READ in skip["skipped_reason"]
        assert log_dir_digest(clicks) == before


def test_partition_named_alone_is_refused_with_the_exact_count_and_left_byte_for_byte(tmp_path: Path) -> None:
    part = keyed_then_keyless(tmp_path)
    before = log_dir_digest(tmp_path)
    for extra in ((), ("--roll",), ("--dry-run",), ("--dry-run", "--roll")):
        result = run("clean", str(part), "--config", "cleanup.policy=compact", *extra)
        assert result.exit_code == 2, result.output
        counted = ROLLED if "--roll" in extra else READ
        assert result.stderr == (
            f"kcompact: error: {part}: cleanup.policy=compact (--config), but {counted}, and a clean deletes "
            "every keyless record it reaches (a topic made compacted after they were written); give "
            "--allow-keyless-loss to compact it anyway, deleting them\n")
        assert log_dir_digest(tmp_path) == before and no_cleaned_files(part)


def test_the_acknowledgement_compacts_an_explicitly_compacted_partition(tmp_path: Path) -> None:
    part = keyed_then_keyless(tmp_path)
    result = run("clean", str(part), "--config", "cleanup.policy=compact", "--allow-keyless-loss", "--json")
    assert result.exit_code == 0, result.output
    assert [key for _offset, key, _value in read_all_records(part)] == [b"k%d" % i for i in range(50)] + [b"k0"]


def test_repair_clean_makes_the_same_decision(tmp_path: Path) -> None:
    part = keyed_then_keyless(tmp_path)
    before = log_dir_digest(tmp_path)
    refused = run("repair", "--clean", "--config", "cleanup.policy=compact", str(part))
    assert refused.exit_code == 2 and f"clean failed: {part}: cleanup.policy=compact (--config), but {READ}" \
        in refused.stderr
    assert log_dir_digest(tmp_path) == before
    allowed = run("repair", "--clean", "--config", "cleanup.policy=compact", "--allow-keyless-loss", str(part))
    assert allowed.exit_code == 0, allowed.output
    assert len(read_all_records(part)) == 51
