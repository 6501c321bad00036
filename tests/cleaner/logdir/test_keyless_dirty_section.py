"""The keyless guard counts the dirty section on its own, as the log-dir gate does: a large keyed clean
section does not dilute a dirty section that is mostly keyless (a topic whose policy was changed from
``delete`` to ``compact``), whose keyless records a clean would delete."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from kcompact.cleaner.logdir.keyless import count_keyless, sample_keyless
from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cli.main import cli
from kcompact.segment.partition import open_partition
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.cleaner.round.test_clean_failures import log_dir_digest

NOW = BASE_TS + 10_000_000
VALUE = b"x" * 1000
CHECKPOINT = 2000
DIRTY = f"1000 of the 1300 records of the dirty section [{CHECKPOINT}, 3300) have no key"


def keyed_clean_section_then_keyless(log_dir: Path) -> Path:
    """2000 keyed records below the cleaner checkpoint (the clean section, ~2 MB); past it 300 keyed
    records (more than the gate's sample) then 1000 keyless ones; an active segment with one keyed record.
    Of all 3300 records the round reads, 30 % have no key; of the 1300 dirty ones, 77 %."""
    builder = PartitionBuilder("clicks", 0)
    for i in range(200):
        builder.batch([(b"c%d" % j, VALUE) for j in range(i * 10, i * 10 + 10)])
        if i % 100 == 99:
            builder.roll()
    for i in range(30):
        builder.batch([(b"k%d" % (j % 50), VALUE) for j in range(i * 10, i * 10 + 10)])
    builder.roll()
    for _ in range(100):
        builder.batch([(None, VALUE) for _ in range(10)])
    builder.roll()
    part = builder.batch([(b"k0", b"active")]).write(log_dir, cleaner_checkpoint=CHECKPOINT)
    partition = open_partition(part)
    sample = sample_keyless(partition)
    assert (sample.start, sample.keyless, sample.exhaustive) == (CHECKPOINT, 0, False)  # the sample: keys only
    exact = count_keyless(partition)
    assert (exact.records, exact.keyless) == (1301, 1000)  # the gate's count, to the log end
    return part


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--now-ms", str(NOW)])


def test_a_mostly_keyless_dirty_section_is_refused_whatever_the_clean_section_holds(tmp_path: Path) -> None:
    part = keyed_clean_section_then_keyless(tmp_path)
    before = log_dir_digest(tmp_path)
    for extra in ((), ("--dry-run",)):
        result = run("clean", str(part), "--config", "cleanup.policy=compact", *extra)
        assert result.exit_code == 2, result.output
        assert result.stderr == (
            f"kcompact: error: {part}: cleanup.policy=compact (--config), but {DIRTY}, and a clean deletes "
            "every keyless record it reaches (a topic made compacted after they were written); give "
            "--allow-keyless-loss to compact it anyway, deleting them\n")
        assert log_dir_digest(tmp_path) == before
        assert not any(p.name.endswith(".cleaned") for p in part.iterdir())


def test_the_acknowledgement_deletes_them(tmp_path: Path) -> None:
    part = keyed_clean_section_then_keyless(tmp_path)
    result = run("clean", str(part), "--config", "cleanup.policy=compact", "--allow-keyless-loss", "--json")
    assert result.exit_code == 0, result.output
    keys = [key for _offset, key, _value in read_all_records(part)]
    assert None not in keys and len(keys) == 2000 + 50 + 1


def test_a_log_dir_skips_it_when_compact_is_only_assumed(tmp_path: Path) -> None:
    part = keyed_clean_section_then_keyless(tmp_path)
    before = log_dir_digest(tmp_path)
    result = run("clean", str(tmp_path), "--assume-compact", "--json")
    assert result.exit_code == 0, result.output
    [skip] = json.loads(result.stdout)["skipped"]
    assert skip["partition_dir"] == str(part) and DIRTY in skip["skipped_reason"]
    assert log_dir_digest(tmp_path) == before
    run_ = clean_path(tmp_path, cli_overrides={}, assume_compact=True, options=CleanOptions(now_ms=NOW))
    assert not run_.results and [s.partition_dir for s in run_.skipped] == [str(part)]
