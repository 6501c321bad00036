"""``kcompact clean LOG_DIR`` and ``kcompact repair LOG_DIR`` with worker processes, one of which is killed
(SIGKILL) half-way through swapping its partition's output in: that partition is the run's one failure
(a row, one line, exit 2), the others are done in a new worker, no lock file is left, and the next run
settles the killed partition."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import kcompact.cleaner.disk.swap as swap_module
import kcompact.fork_pool as pool_module
from kcompact.cli.main import cli
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.cleaner.workers.test_parallel import many_keys, tree
from tests.repair.test_log_dir import BATCHES, RECORDS_PER_BATCH, damaged_log_dir

NOW = str(BASE_TS + 1_000_000)
PARTITIONS = [("events", 0), ("events", 1), ("orders", 0), ("orders", 1)]
VICTIM = "orders-0"
KILLED = "killed by signal 9 (SIGKILL)"

KillHook = Callable[[str], None]


def invoke(*args: str | Path) -> Result:
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "200", "KCOMPACT_SERVER_PROPERTIES": None})
    return runner.invoke(cli, [*map(str, args)])


@pytest.fixture
def kill_worker_in(monkeypatch: pytest.MonkeyPatch) -> KillHook:
    """Arm the test hook: a worker process (never this one) SIGKILLs itself right after it renamed the
    named partition's first output file to ``.swap``, with its partition lock held. Two workers are
    used whatever the machine's cores (forked workers inherit the patch)."""
    test_process = os.getpid()
    original = swap_module._rename

    def arm(partition_dir_name: str) -> None:
        def rename(src: Path, dst: Path) -> None:
            original(src, dst)
            if (os.getpid() != test_process and dst.name.endswith(".swap")
                    and dst.parent.name == partition_dir_name):
                os.kill(os.getpid(), signal.SIGKILL)

        monkeypatch.setattr(swap_module, "_rename", rename)
        monkeypatch.setattr(pool_module, "usable_cpus", lambda: 2)

    return arm


def compacted_log_dir(log_dir: Path) -> Path:
    """Four partitions, each two segments of overwrites of seven keys and an active segment."""
    high_watermarks = {}
    for topic, number in PARTITIONS:
        b = PartitionBuilder(topic, number)
        for round_ in range(6):
            b.batch([(f"k{j % 7}".encode(), f"{topic}{number}-{round_}-{j}".encode()) for j in range(20)])
            if round_ == 2:
                b.roll()
        b.roll().batch([(b"x", b"1")])
        b.write(log_dir, high_watermark=None)
        high_watermarks[(topic, number)] = b.next_offset
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", high_watermarks)
    return log_dir


def lock_files(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir() if p.name.startswith(".kcompact-"))


def swap_litter(part: Path) -> list[str]:
    return sorted(p.name for p in part.iterdir() if p.suffix in (".swap", ".cleaned", ".deleted"))


def clean(log_dir: Path, *args: str) -> Result:
    return invoke("clean", log_dir, "--config", "cleanup.policy=compact", "--now-ms", NOW, *args)


def test_a_killed_clean_worker_fails_its_partition_alone(kill_worker_in: KillHook, tmp_path: Path) -> None:
    log_dir = compacted_log_dir(tmp_path / "logs")
    reference = Path(shutil.copytree(log_dir, tmp_path / "reference"))
    kill_worker_in(VICTIM)
    result = clean(log_dir, "--jobs", "2", "--json")
    assert result.exit_code == 2, result.output
    report = json.loads(result.stdout)
    (failure,) = report["failures"]
    assert failure["partition_dir"] == str(log_dir / VICTIM)
    assert failure["error"] == (f"{log_dir / VICTIM}: the worker process cleaning it was {KILLED}; nothing "
                                "is lost (segments are swapped in crash-safely): clean it again to settle "
                                "what it left")
    assert sorted(Path(r["partition_dir"]).name for r in report["results"]) == [
        "events-0", "events-1", "orders-1"]
    checkpoint = read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint")
    assert sorted(checkpoint) == [("events", 0), ("events", 1), ("orders", 1)]
    assert all(offset > 0 for offset in checkpoint.values())
    assert lock_files(log_dir) == []
    assert swap_litter(log_dir / VICTIM)  # killed half-way through its swap

    again = clean(log_dir, "--json")  # no hook now: the worker was killed once
    assert again.exit_code == 0, again.output
    rows = {Path(r["partition_dir"]).name: r for r in json.loads(again.stdout)["results"]}
    assert {name: row["status"] for name, row in rows.items()} == {
        "events-0": "nothing to clean", "events-1": "nothing to clean", "orders-0": "cleaned",
        "orders-1": "nothing to clean"}
    assert rows[VICTIM]["recovery_actions"]  # the interrupted swap settled first
    assert read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint")[("orders", 0)] > 0
    assert swap_litter(log_dir / VICTIM) == [] and lock_files(log_dir) == []
    assert clean(reference, "--jobs", "1").exit_code == 0
    assert read_all_records(log_dir / VICTIM) == read_all_records(reference / VICTIM)  # nothing lost


def test_a_killed_clean_worker_is_one_line_on_stderr(kill_worker_in: KillHook, tmp_path: Path) -> None:
    log_dir = compacted_log_dir(tmp_path / "logs")
    kill_worker_in(VICTIM)
    result = clean(log_dir, "--jobs", "2")
    assert result.exit_code == 2
    assert [line for line in result.stderr.splitlines() if "error" in line] == [
        (f"kcompact: error: {log_dir / VICTIM}: the worker process cleaning it was {KILLED}; nothing is "
         "lost (segments are swapped in crash-safely): clean it again to settle what it left")]
    assert "Traceback" not in result.output
    assert result.stdout.splitlines()[-1].startswith("3 partitions cleaned, 0 had nothing to clean, 0 "
                                                     "skipped, 1 failed;")


def test_a_killed_repair_worker_fails_its_partition_alone(kill_worker_in: KillHook, tmp_path: Path) -> None:
    log_dir, expected = damaged_log_dir(tmp_path)  # orders-0, orders-1, payments-0 need a repair
    kill_worker_in(VICTIM)
    result = invoke("repair", log_dir, "--jobs", "2", "--json")
    assert result.exit_code == 2, result.output
    report = json.loads(result.stdout)
    (failure,) = report["failures"]
    assert failure["partition_dir"] == str(log_dir / VICTIM)
    assert failure["error"].startswith(f"{log_dir / VICTIM}: the worker process repairing it was {KILLED}; ")
    assert [(row["partition"], row["status"]) for row in report["rows"]] == [
        ("orders-0", "failed"), ("orders-1", "repaired"), ("payments-0", "repaired"), ("payments-1", "sound")]
    assert lock_files(log_dir) == []
    assert "Traceback" not in result.stderr

    again = invoke("repair", log_dir, "--json")
    assert again.exit_code == 0, again.output
    assert {row["status"] for row in json.loads(again.stdout)["rows"]} <= {"repaired", "sound"}
    assert swap_litter(log_dir / VICTIM) == [] and lock_files(log_dir) == []
    lost = set(range(12, 16))  # the batch whose CRC fails (``damaged_log_dir``)
    assert expected[VICTIM]["first_offset"] == 12
    assert [r[0] for r in read_all_records(log_dir / VICTIM)] == [
        o for o in range(BATCHES * RECORDS_PER_BATCH + 1) if o not in lost]


# --- a worker killed inside one partition's round (``clean PARTITION --jobs N``) ---------------------

# Run as ``python -c KILL_IN_PASS PASS BASE_OFFSET kcompact-args...``: the CLI with a test hook that a
# worker process (never the CLI's own) SIGKILLs itself on starting pass PASS over a range of the segment
# at BASE_OFFSET that begins past its first byte. Chunks are cut small so that each segment is several.
KILL_IN_PASS = """
import os, signal, sys
from kcompact.cleaner.workers import parallel
parent = os.getpid()
which, base = sys.argv[1], int(sys.argv[2])
parallel.CHUNK_MIN_BYTES = 200
parallel.usable_cpus = lambda: 2

def doomed(seg, start):
    if os.getpid() != parent and seg.base_offset == base and start > 0:
        os.kill(os.getpid(), signal.SIGKILL)

if which == "1":
    keys = parallel.iter_dirty_keys
    def iter_dirty_keys(plan, seg, start=0, end=None):
        doomed(seg, start)
        return keys(plan, seg, start, end)
    parallel.iter_dirty_keys = iter_dirty_keys
else:
    filter_segment = parallel.filter_segment
    def hooked(plan, seg, ctx, sink, start=0, end=None, sink_run=None):
        doomed(seg, start)
        return filter_segment(plan, seg, ctx, sink, start, end, sink_run)
    parallel.filter_segment = hooked
from kcompact.cli.main import main
sys.argv = ["kcompact", *sys.argv[3:]]
main()
"""
KILLED_SEGMENT = 180  # ``many_keys``: four segments of 180 records


def clean_with_a_worker_killed(part: Path, in_pass: int, spool: Path, *more: str
                               ) -> subprocess.CompletedProcess[str]:
    """``clean PART --jobs 2`` (PART: a partition or a log dir) with the hook armed; a hang fails the test
    after a minute."""
    env = {**os.environ, "TMPDIR": str(spool), "COLUMNS": "200"}
    env.pop("KCOMPACT_SERVER_PROPERTIES", None)
    args = [sys.executable, "-c", KILL_IN_PASS, str(in_pass), str(KILLED_SEGMENT), "clean", str(part),
            "--config", "cleanup.policy=compact", "--now-ms", NOW, "--jobs", "2", *more]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the CLI and its workers: its own session
            process.communicate()
            pytest.fail("clean --jobs 2 hung after one of its worker processes was killed")
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


@pytest.mark.parametrize("in_pass", [1, 2])
def test_a_worker_killed_in_a_round_fails_the_partition_unchanged(in_pass: int, tmp_path: Path) -> None:
    part = many_keys(tmp_path / "logs")
    reference = Path(shutil.copytree(part.parent, tmp_path / "reference")) / part.name
    before = tree(part.parent)
    spool = tmp_path / "tmp"
    spool.mkdir()

    result = clean_with_a_worker_killed(part, in_pass, spool)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    doing = "reading the keys of" if in_pass == 1 else "filtering"
    (line,) = [line for line in result.stderr.splitlines() if "error" in line]
    assert re.fullmatch(
        rf"kcompact: error: {re.escape(str(part))}: the worker process {doing} 00000000000000000180\.log "
        rf"from byte \d+ \(pass {in_pass} of the round\) was {re.escape(KILLED)}; the round changed nothing: "
        r"clean it again", line), line
    assert tree(part.parent) == before  # no .cleaned file, no checkpoint, nothing swapped
    assert lock_files(part.parent) == [] and list(spool.iterdir()) == []

    again = invoke("clean", part, "--config", "cleanup.policy=compact", "--now-ms", NOW, "--jobs", "2")
    assert again.exit_code == 0, again.output
    assert invoke("clean", reference, "--config", "cleanup.policy=compact", "--now-ms", NOW,
                  "--jobs", "1").exit_code == 0
    assert tree(part.parent) == tree(reference.parent)  # as a serial clean, byte for byte


def test_a_worker_killed_in_a_round_of_a_log_dir_is_that_partitions_row(tmp_path: Path) -> None:
    """A log dir whose one compacted partition is cleaned with workers inside its round."""
    part = many_keys(tmp_path / "logs")
    before = tree(part.parent)
    spool = tmp_path / "tmp"
    spool.mkdir()
    result = clean_with_a_worker_killed(part.parent, 2, spool, "--json")
    assert result.returncode == 2, result.stdout + result.stderr
    report = json.loads(result.stdout)
    (failure,) = report["failures"]
    assert failure["partition_dir"] == str(part)
    assert f"(pass 2 of the round) was {KILLED}; the round changed nothing" in failure["error"]
    assert report["results"] == []
    assert tree(part.parent) == before and lock_files(part.parent) == [] and list(spool.iterdir()) == []
