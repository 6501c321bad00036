"""``kcompact clean`` on a volume filled to the last byte (a real tmpfs, ``tests/full_volume.py``): what costs no
write goes first, then the partitions are cleaned in an order that fits; a clean that cannot fit is refused
with its numbers and changes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kcompact.cleaner.disk.space import SpaceNeed
from kcompact.cleaner.logdir.free_first import fit_order, run_need
from kcompact.cli.main import cli
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from tests.full_volume import REQUIRE_FULL_FS, fill, free_bytes, mounted_volumes
from tests.partition_builder import PartitionBuilder

KIB = 1024
SEGMENT_RECORDS = 400  # of 100-byte values: about 45 KiB a segment
NOW = 1_800_000_000_000


def run(*args: str | Path) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "200", "KCOMPACT_SERVER_PROPERTIES": None})
    return runner.invoke(cli, ["clean", *map(str, args), "--config", "cleanup.policy=compact", "--now-ms",
                               str(NOW)])


def partition(log_dir: Path, number: int, *, distinct_keys: int, segments: int = 3) -> Path:
    """``segments`` closed segments of 100-byte random values over ``distinct_keys`` keys (one batch
    each 50 records), then an active segment of one record."""
    rnd = random.Random(number)
    b = PartitionBuilder("orders", number)
    for s in range(segments):
        if s:
            b.roll()
        for start in range(0, SEGMENT_RECORDS, 50):
            b.batch([(f"k{rnd.randrange(distinct_keys) if distinct_keys < 10**6 else rnd.random()}".encode(),
                      rnd.randbytes(100)) for _ in range(start, start + 50)])
    b.roll().batch([(b"last", b"x")])
    return b.write(log_dir, high_watermark=None)


def high_watermarks(log_dir: Path) -> None:
    """The replication checkpoint of every partition, and the log dir's ``.lock`` as a stopped broker leaves it."""
    (log_dir / ".lock").touch()
    parts = sorted(p for p in log_dir.iterdir() if p.is_dir())
    entries = {("orders", int(p.name.rsplit("-", 1)[1])): 10**9 for p in parts}
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", entries)


def digest(directory: Path) -> dict[str, tuple[int, str]]:
    return {str(p.relative_to(directory)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(directory.rglob("*")) if p.is_file()}


def incident(log_dir: Path) -> None:
    """orders-0: every key distinct (its clean gives back little and needs most); orders-1..3: 20 keys
    (each gives back nearly all); orders-1 holds a crashed cleaner's ``.cleaned`` files, orders-2 a
    ``.deleted`` segment, orders-3 a segment wholly below its log start offset."""
    partition(log_dir, 0, distinct_keys=10**6)
    for number in (1, 2, 3):
        partition(log_dir, number, distinct_keys=20)
    high_watermarks(log_dir)
    one, two = log_dir / "orders-1", log_dir / "orders-2"
    for kind in ("log", "index", "timeindex"):
        shutil.copy(one / f"00000000000000000000.{kind}", one / f"00000000000000000000.{kind}.cleaned")
    shutil.copy(two / "00000000000000000000.log", two / "00000000000000000000.log.deleted")
    write_offset_checkpoint(log_dir / "log-start-offset-checkpoint", {("orders", 3): SEGMENT_RECORDS})


def test_a_full_volume_frees_leftovers_first_then_cleans_every_partition_in_an_order_that_fits(
    small_volume: Callable[[int], Path],
) -> None:
    volume = small_volume(1024 * KIB)
    log_dir = volume / "kafka-logs"
    incident(log_dir)
    filler = fill(volume)
    filler_digest = hashlib.sha256(filler.read_bytes()).hexdigest()

    result = run(log_dir)

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(r"^freed first, writing nothing Kafka keeps: \d+\.\d KiB$", out, re.M)
    for line in ("  orders-1: delete unfinished 00000000000000000000.log.cleaned",
                 "  orders-2: delete leftover 00000000000000000000.log.deleted",
                 f"  orders-3: delete 1 segment wholly below the log start offset {SEGMENT_RECORDS}"):
        assert line in out.splitlines()
    order = re.search(r"^cleaned in the order that fits the volume's free space \(not the broker's\): (.*)$",
                      out, re.M)
    assert order is not None and order.group(1).split(", ")[-1] == "orders-0"  # the broker's first needs most
    assert "4 partitions cleaned, 0 had nothing to clean, 0 skipped, 0 failed" in out
    assert read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint") == {
        ("orders", n): 3 * SEGMENT_RECORDS for n in range(4)}
    assert not [p for p in log_dir.rglob("*") if p.suffix in (".cleaned", ".deleted", ".swap")]
    assert not (log_dir / "orders-3" / "00000000000000000000.log").exists()
    assert free_bytes(volume) > 300 * KIB  # what the cleans gave back
    assert hashlib.sha256(filler.read_bytes()).hexdigest() == filler_digest


def test_a_dry_run_on_the_full_volume_says_what_each_clean_needs_and_the_run_total(
    small_volume: Callable[[int], Path],
) -> None:
    volume = small_volume(1024 * KIB)
    log_dir = volume / "kafka-logs"
    incident(log_dir)
    fill(volume)
    before = digest(volume)

    result = run(log_dir, "--dry-run", "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = {Path(r["partition_dir"]).name: r for r in report["results"]}
    assert rows["orders-0"]["space_peak_bytes"] > 100 * KIB  # every record kept: about the 3 segments
    assert rows["orders-0"]["space_gives_back_bytes"] < rows["orders-1"]["space_gives_back_bytes"]
    assert rows["orders-1"]["space_peak_bytes"] == 8 * KIB  # a 4 KiB .log and .timeindex; an empty .index
    freed = report["freed_first"]
    assert freed["freed_bytes"] > 0 and len(freed["actions"]) == 5  # 3 .cleaned, 1 .deleted, orders-3's segment
    assert report["order"][-1] == "orders-0"
    space = report["space"]
    assert space["free_bytes"] == 0 and space["peak_bytes"] == 0  # after freeing first, every clean fits
    assert space["gives_back_bytes"] > freed["freed_bytes"]
    assert digest(volume) == before

    text = run(log_dir, "--dry-run")
    assert re.search(r"^orders-0: .*$", text.stdout, re.M)
    assert re.search(r"^  space +needs \d+\.\d KiB free at peak, gives back \d+\.\d KiB; 0 B free", text.stdout,
                     re.M)
    assert re.search(r"^the run needs 0 B free at peak, gives back \d+\.\d KiB; 0 B free$", text.stdout, re.M)


def test_a_clean_that_cannot_fit_even_after_freeing_is_refused_with_its_numbers_and_changes_nothing(
    small_volume: Callable[[int], Path],
) -> None:
    volume = small_volume(512 * KIB)
    log_dir = volume / "kafka-logs"
    partition(log_dir, 0, distinct_keys=10**6)  # nothing superseded: its clean gives back next to nothing
    high_watermarks(log_dir)
    fill(volume)
    before = digest(volume)

    result = run(log_dir)

    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()[-1:]
    assert re.fullmatch(
        rf"kcompact: error: {re.escape(str(log_dir / 'orders-0'))}: not cleaned: needs \d+\.\d KiB free at peak, "
        r"gives back \d+\.\d KiB; 0 B free; ways out: free \d+\.\d KiB more on its volume, or grow it, and run it "
        r"again \(a log dir's clean first frees its partitions' crashed-clean leftovers and segments below the log "
        r"start, then cleans those that fit first\); nothing was changed", line)
    assert result.stdout == ""  # a partition alone in its log dir: no summary line
    assert digest(volume) == before

    alone = run(log_dir / "orders-0")
    assert alone.exit_code == 2 and alone.stderr.splitlines()[-1] == line
    assert digest(volume) == before


def test_the_order_that_fits_puts_the_least_needed_first_and_what_never_fits_last() -> None:
    needs = [SpaceNeed(100, 5), SpaceNeed(10, 50), None, SpaceNeed(10, 80), SpaceNeed(1000, 0)]
    assert fit_order(needs, 20) == [2, 3, 1, 0, 4]  # 20 -> 20 -> 100 -> 150 -> 155: 1000 never fits
    assert fit_order(needs, 0) == [2, 0, 1, 3, 4]  # nothing fits: the broker's order after the free one
    assert run_need([needs[i] for i in (2, 3, 1, 0)], 0) == SpaceNeed(10, 135)
    assert run_need([needs[i] for i in (2, 3, 1, 0)], 30) == SpaceNeed(0, 165)


def test_inspect_dirty_ratio_space_shows_each_clean_against_the_full_volume(
    small_volume: Callable[[int], Path],
) -> None:
    volume = small_volume(1024 * KIB)
    log_dir = volume / "kafka-logs"
    incident(log_dir)
    fill(volume)
    before = digest(volume)
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "200", "KCOMPACT_SERVER_PROPERTIES": None})
    args = ["inspect", "dirty-ratio", str(log_dir), "--space", "--config", "cleanup.policy=compact",
            "--now-ms", str(NOW)]

    rows = {row["partition"]: row for row in json.loads(runner.invoke(cli, [*args, "--json"]).stdout)}
    clean = json.loads(run(log_dir, "--dry-run", "--json").stdout)["results"]

    assert {row["partition"]: (row["space_peak_bytes"], row["space_gives_back_bytes"]) for row in clean} == {
        n: (row["space_peak_bytes"], row["space_gives_back_bytes"]) for n, row in rows.items()}
    assert all(row["free_bytes"] == 0 for row in rows.values())
    text = runner.invoke(cli, args).stdout
    assert re.search(r"^orders-0: its clean needs \d+\.\d KiB free at peak, gives back \d+\.\d KiB; 0 B free$",
                     text, re.M)
    assert digest(volume) == before
    plain = runner.invoke(cli, args[:-5] + args[-4:] + ["--json"]).stdout  # without --space: not measured
    assert {row["space_peak_bytes"] for row in json.loads(plain)} == {None}


def test_a_partition_named_alone_on_the_full_volume_settles_its_leftovers_and_is_cleaned(
    small_volume: Callable[[int], Path],
) -> None:
    volume = small_volume(512 * KIB)
    log_dir = volume / "kafka-logs"
    part = partition(log_dir, 1, distinct_keys=20)
    high_watermarks(log_dir)
    for kind in ("log", "index", "timeindex"):  # a crashed cleaner's output: its rehearsal must not copy a byte
        shutil.copy(part / f"00000000000000000000.{kind}", part / f"00000000000000000000.{kind}.cleaned")
    fill(volume)

    result = run(part)

    assert result.exit_code == 0, result.output
    assert "orders-1: recovered interrupted clean: delete unfinished 00000000000000000000.log.cleaned" in result.stdout
    assert re.search(r"^orders-1: cleaned dirty section \[0, 1200\)", result.stdout, re.M)
    assert not list(part.glob("*.cleaned")) and free_bytes(volume) > 100 * KIB


def test_without_root_the_full_volume_tests_skip_unless_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv(REQUIRE_FULL_FS, raising=False)
    with pytest.raises(pytest.skip.Exception, match="mounting a tmpfs needs root"):
        next(mounted_volumes(tmp_path))
    monkeypatch.setenv(REQUIRE_FULL_FS, "1")
    with pytest.raises(pytest.fail.Exception, match="KCOMPACT_REQUIRE_FULL_FS=1 but mounting a tmpfs needs root"):
        next(mounted_volumes(tmp_path))


def test_with_room_to_spare_a_log_dir_frees_nothing_first_and_keeps_the_brokers_order(tmp_path: Path) -> None:
    log_dir = tmp_path / "kafka-logs"
    incident(log_dir)
    before = digest(log_dir)

    report = json.loads(run(log_dir, "--dry-run", "--json").stdout)

    assert (report["freed_first"], report["order"]) == (None, None)
    rows = [r for r in report["results"] if r["space_peak_bytes"] is not None]
    first = rows[0]  # the broker's first pick (all equally dirty: by name), which needs most
    assert Path(first["partition_dir"]).name == "orders-0"
    assert report["space"]["peak_bytes"] == first["space_peak_bytes"] and report["space"]["free_bytes"] > 0
    assert report["space"]["gives_back_bytes"] == sum(r["space_gives_back_bytes"] for r in rows)
    assert digest(log_dir) == before
    done = run(log_dir)
    assert done.exit_code == 0 and "freed first" not in done.stdout and "order that fits" not in done.stdout
    assert "orders-1: recovered interrupted clean: delete unfinished 00000000000000000000.log.cleaned" in done.stdout
