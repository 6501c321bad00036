"""A clean that fails leaves the partition byte for byte as it was, and says why in one line (exit 2).

Bad input (a flipped CRC, a truncated batch, a record-count mismatch),
a refused or full disk, a self-check violation, a live broker holding the log dir's ``.lock`` and another
kcompact holding the partition: each is checked with the sha256 of every file of the log dir before and
after — the cleaner checkpoint included, which is never written on failure. The broker's ``.lock``, which
kcompact creates empty when it is missing (as a broker would), is left out of the comparison; kcompact's
own ``.kcompact-*.lock`` files are in it: they exist only while held (segment/lock.py), so a refused or
failed clean leaves none behind. Also: what the checkpoint file keeps and when it is reset.
"""

from __future__ import annotations

import errno
import hashlib
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cleaner.disk import swap
from kcompact.cleaner.disk.swap import CRASH_POINTS, leftover_files
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.cli.main import cli
from kcompact.errors import (
    BatchCrcError,
    CleanerStateError,
    CorruptCheckpointError,
    CorruptRecordError,
    KcompactError,
    RefusedError,
    TruncatedDataError,
)
from kcompact.records.batch import iter_batches
from kcompact.records.crc import crc32c
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from kcompact.segment.index_builder import IndexBuilder
from kcompact.segment.names import segment_file_name
from tests.builders import PartitionBuilder, read_all_records
from tests.cleaner.disk.test_crash_recovery import (
    COMPLETING,
    NOW,
    OTHER_PARTITION,
    OVERRIDES,
    REPO_ROOT,
    assert_recovered,
    build_partition,
    make_layout,
    topic_config,
)
from tests.unprivileged import run_kcompact

CRC_POSITION = 17  # baseOffset(8) batchLength(4) partitionLeaderEpoch(4) magic(1), then crc(4)
CRC_COVERS_FROM = 21  # the CRC-32C covers attributes to the end of the batch
RECORDS_COUNT_POSITION = 57  # the last field of the 61-byte v2 header


def log_dir_digest(log_dir: Path) -> dict[str, str]:
    """sha256 of every file under the log dir but the broker's ``.lock``, which must be empty (kcompact's
    own lock files count: one left behind is litter)."""
    out = {}
    for path in sorted(log_dir.rglob("*")):
        if not path.is_file():
            continue
        if path.name == ".lock":
            assert path.stat().st_size == 0, path
            continue
        out[str(path.relative_to(log_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def middle_segment(part: Path) -> Path:
    """The third of the six closed segments: inside the second group, in the dirty range."""
    return sorted(part.glob("*.log"))[2]


def error_lines(stderr: str) -> list[str]:
    """The error lines of a command's stderr; every other line must be a warning."""
    lines = stderr.splitlines()
    assert all(line.startswith(("kcompact: error: ", "kcompact: warning: ")) for line in lines), lines
    return [line for line in lines if line.startswith("kcompact: error: ")]


def cli_clean(part: Path) -> tuple[int, list[str]]:
    """``kcompact clean`` through click; returns the exit code and the error lines on stderr."""
    argv = ["clean", str(part), "--now-ms", str(NOW), "--json"]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    return result.exit_code, error_lines(result.stderr)


def assert_fails_unchanged(part: Path, error: type[Exception], match: str) -> None:
    """The clean raises ``error`` (message matching ``match``), in one line, and changes nothing."""
    before = log_dir_digest(part.parent)
    with pytest.raises(error, match=match) as info:
        clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))
    assert type(info.value) is error
    assert "\n" not in str(info.value)
    assert log_dir_digest(part.parent) == before
    assert leftover_files(part) == []


# --- bad input ------------------------------------------------------------------------------------------


def test_flipped_crc_in_a_batch_copied_verbatim_is_refused(tmp_path: Path) -> None:
    """Refused as the batch is read (tests/cleaner/round/test_clean_crc.py has every case), before the
    self-check, which would refuse the copied batch too."""
    part = build_partition(tmp_path / "logdir")
    seg = middle_segment(part)
    data = bytearray(seg.read_bytes())
    last = list(iter_batches(bytes(data)))[-1]  # the segment's own key: survives, copied byte for byte
    data[last.position + CRC_POSITION] ^= 0xFF
    seg.write_bytes(data)

    assert_fails_unchanged(part, BatchCrcError, rf"{seg.name} at position {last.position}: batch "
                                                r"\(last offset \d+\) fails its CRC")
    code, stderr = cli_clean(part)
    assert code == 2 and len(stderr) == 1 and stderr[0].startswith(f"kcompact: error: {seg} at position "
                                                                   f"{last.position}: batch (last offset ")


def test_truncated_last_batch_of_a_closed_segment(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    seg = middle_segment(part)
    seg.write_bytes(seg.read_bytes()[:-5])

    assert_fails_unchanged(part, TruncatedDataError, rf"{seg.name} at position \d+: entry declares \d+ bytes "
                                                     r"but only \d+ remain")


def test_record_count_larger_than_the_records_in_the_batch(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    seg = middle_segment(part)
    data = bytearray(seg.read_bytes())
    first = next(iter_batches(bytes(data)))
    assert first.records_count == 3
    struct.pack_into(">i", data, RECORDS_COUNT_POSITION, 4)
    crc = crc32c(bytes(data[CRC_COVERS_FROM : first.size_in_bytes]))
    struct.pack_into(">I", data, CRC_POSITION, crc)  # a valid CRC: only the count is wrong
    seg.write_bytes(data)

    assert_fails_unchanged(part, CorruptRecordError, r"expected 4 records, found 3")


def test_unreadable_checkpoint_fails_before_anything_is_written(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    (part.parent / "cleaner-offset-checkpoint").write_text("0\n2\norders 0 0\n")  # count says 2

    assert_fails_unchanged(part, CorruptCheckpointError, "cleaner-offset-checkpoint")


def test_index_the_self_check_rejects_aborts_the_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = build_partition(tmp_path / "logdir")
    real = IndexBuilder.finish_encoded

    def off_by_one(builder: IndexBuilder) -> tuple[bytes, bytes]:  # a kcompact bug, caught before any swap
        index, timeindex = real(builder)
        data = bytearray(index)
        if data:
            data[-1] ^= 1  # the last entry's position no longer starts a batch
        return bytes(data), timeindex

    monkeypatch.setattr(IndexBuilder, "finish_encoded", off_by_one)
    assert_fails_unchanged(part, CleanerStateError, r"fails kcompact's self-check, nothing was changed: "
                                                    r"0+\.index\.cleaned: entry does not point at a batch start")


# --- the disk refuses -------------------------------------------------------------------------------------


def test_refused_create_of_the_cleaned_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = build_partition(tmp_path / "logdir")
    real_open = open
    opened = []

    def refuse_second(path: object, *args: object, **kwargs: object) -> object:
        opened.append(path)
        if len(opened) == 2:  # the second group's .log.cleaned: the first must be removed again
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(swap, "open", refuse_second, raising=False)
    assert_fails_unchanged(part, KcompactError, r"cannot write the cleaned segment \(Permission denied\); "
                                                "the partition was left as it was")


def test_read_only_partition_directory(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    before = log_dir_digest(part.parent)
    part.chmod(0o500)
    argv = ["clean", str(part), "--now-ms", str(NOW), "--json"]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]
    try:
        proc = run_kcompact(*argv)  # as root, without the capabilities that ignore file modes
    finally:
        part.chmod(0o755)

    assert proc.returncode == 2, proc.stderr
    assert error_lines(proc.stderr) == [f"kcompact: error: {part}: cannot write (Permission denied)"]
    assert log_dir_digest(part.parent) == before
    assert leftover_files(part) == []


def test_read_only_log_dir_is_refused_before_the_partition_changes(tmp_path: Path) -> None:
    """The partition directory is writable but the log dir (checkpoint, lock files) is not, and a lock
    file an earlier kcompact left lets the partition lock be taken: finding out at the checkpoint write,
    after the swaps and the roll, would be a half-change. The log dir is checked before anything."""
    part = build_partition(tmp_path / "logdir")
    (part.parent / f".kcompact-{part.name}.lock").touch()  # kept by kcompact versions before 0.1
    before = log_dir_digest(part.parent)
    part.parent.chmod(0o555)
    argv = ["clean", str(part), "--roll", "--now-ms", str(NOW)]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]
    try:
        proc = run_kcompact(*argv)
    finally:
        part.parent.chmod(0o755)
    assert proc.returncode == 2, proc.stderr
    assert error_lines(proc.stderr) == [f"kcompact: error: {part.parent}: cannot write (Permission denied)"]
    assert log_dir_digest(part.parent) == before


def test_a_stale_lock_file_kcompact_may_not_write_is_a_refusal_not_a_traceback(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    stale = part.parent / f".kcompact-{part.name}.lock"
    stale.touch()
    stale.chmod(0o444)  # left by another user's kcompact
    before = log_dir_digest(part.parent)
    argv = ["clean", str(part), "--now-ms", str(NOW)]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]
    proc = run_kcompact(*argv)
    assert proc.returncode == 2, proc.stderr
    assert error_lines(proc.stderr) == [
        (f"kcompact: error: cannot open lock file {stale}: Permission denied (a file another user's "
        "kcompact left? remove it if no kcompact is running)")]
    assert log_dir_digest(part.parent) == before


def test_full_disk_exits_2_with_one_line_and_changes_nothing(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    before = log_dir_digest(part.parent)
    # RLIMIT_FSIZE makes the kernel refuse writes past 200 bytes (EFBIG) as a full disk refuses with ENOSPC.
    script = textwrap.dedent("""
        import resource, signal, sys
        from kcompact.cli.main import main
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, resource.RLIM_INFINITY))
        sys.argv = ["kcompact", *sys.argv[1:]]
        main()
    """)
    argv = [sys.executable, "-c", script, "clean", str(part), "--now-ms", str(NOW), "--json"]
    for key, value in OVERRIDES.items():
        argv += ["--config", f"{key}={value}"]
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)

    assert proc.returncode == 2, proc.stderr
    cleaned = part / segment_file_name(0, "log", "cleaned")
    assert error_lines(proc.stderr) == [
        f"kcompact: error: {cleaned}: cannot write the cleaned segment (File too large); "
        + "the partition was left as it was"
    ]
    assert log_dir_digest(part.parent) == before
    assert leftover_files(part) == []


@pytest.mark.parametrize("group", [0, 1])
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_io_error_during_the_swap_is_recovered_at_once(tmp_path: Path, point: str, group: int) -> None:
    layout = make_layout(tmp_path / "reference")
    part = build_partition(tmp_path / "logdir")
    before = log_dir_digest(part.parent)
    reached: list[str] = []

    def fail(name: str) -> None:
        reached.append(name)
        if name == point and reached.count(name) == group + 1:
            raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(KcompactError) as info:
        clean_partition(part, topic_config(), CleanOptions(now_ms=NOW, crash_hook=fail))

    message = str(info.value)
    completed = point in COMPLETING
    assert type(info.value) is KcompactError and "\n" not in message
    assert message.endswith(
        f"swapping in the cleaned {segment_file_name(layout.new_bases[group], 'log')} failed (Input/output "
        f"error); its swap was {'completed, as a broker would' if completed else 'rolled back'}, earlier "
        "segments stay swapped and the cleaner checkpoint was not advanced"
    )
    assert_recovered(part, layout, set(range(group)) | ({group} if completed else set()))
    if group == 0 and not completed:
        assert log_dir_digest(part.parent) == before


# --- refusals ---------------------------------------------------------------------------------------------


@contextmanager
def child_process(code: str, *args: str) -> Iterator[None]:
    """Run ``code`` in a child process until the block ends; it prints "locked" once it holds its lock."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO_ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the child reads to EOF, exits, and its lock goes with it
        proc.wait(timeout=10)


BROKER = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(fd, fcntl.LOCK_EX)  # what FileChannel.tryLock does in a broker
    print("locked", flush=True)
    sys.stdin.read()
""")
OTHER_KCOMPACT = textwrap.dedent("""
    import sys
    from kcompact.segment.lock import partition_lock
    with partition_lock(sys.argv[1], sys.argv[2]):
        print("locked", flush=True)
        sys.stdin.read()
""")


def test_refuses_while_a_broker_holds_the_log_dir_lock(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    with child_process(BROKER, str(part.parent / ".lock")):
        assert_fails_unchanged(part, RefusedError, r"\.lock is held by a running Kafka broker")
        code, stderr = cli_clean(part)
        assert code == 2
        lock = part.parent / ".lock"
        assert stderr == [f"kcompact: error: {lock} is held by a running Kafka broker; stop it or work on a copy"]
    clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))  # the broker is gone: it works
    assert read_offset_checkpoint(part.parent / "cleaner-offset-checkpoint")[("orders", 0)] > 0


def test_refuses_while_another_kcompact_works_on_the_partition(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    with child_process(OTHER_KCOMPACT, str(part.parent), part.name):
        assert_fails_unchanged(part, RefusedError, r"another kcompact process is working on orders-0")
    clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))


# --- the checkpoint file ----------------------------------------------------------------------------------


def test_checkpoint_keeps_other_partitions_lines_in_place(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    checkpoint = part.parent / "cleaner-offset-checkpoint"
    write_offset_checkpoint(checkpoint, {OTHER_PARTITION: 42, ("orders", 0): 0, ("zeta", 1): 7})

    result = clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))

    assert result.checkpoint_written and result.end_offset is not None
    assert checkpoint.read_text().splitlines() == [
        "0", "3", "other 3 42", f"orders 0 {result.end_offset}", "zeta 1 7"
    ]


def test_checkpoint_is_not_written_on_failure(tmp_path: Path) -> None:
    part = build_partition(tmp_path / "logdir")
    checkpoint = part.parent / "cleaner-offset-checkpoint"
    before = checkpoint.read_bytes()
    middle_segment(part).write_bytes(middle_segment(part).read_bytes()[:-1])
    with pytest.raises(TruncatedDataError):
        clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))
    assert checkpoint.read_bytes() == before


@pytest.mark.parametrize(("checkpointed", "reset_to"), [(999, 0), (-1, 0)])
def test_invalid_checkpoint_is_reset_even_when_nothing_is_cleaned(
    tmp_path: Path, checkpointed: int, reset_to: int
) -> None:
    b = PartitionBuilder().batch([(b"a", b"1"), (b"a", b"2")])  # only an active segment: nothing to clean
    part = b.write(tmp_path / "logdir")
    checkpoint = part.parent / "cleaner-offset-checkpoint"
    write_offset_checkpoint(checkpoint, {("orders", 0): checkpointed, OTHER_PARTITION: 42})
    records = read_all_records(part)

    dry = clean_partition(part, topic_config(), CleanOptions(now_ms=NOW, dry_run=True))
    assert not dry.checkpoint_written
    assert read_offset_checkpoint(checkpoint)[("orders", 0)] == checkpointed
    result = clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))

    assert result.skipped_reason is not None and result.checkpoint_written
    assert read_offset_checkpoint(checkpoint) == {("orders", 0): reset_to, OTHER_PARTITION: 42}
    assert read_all_records(part) == records


def test_full_disk_at_the_checkpoint_write_is_one_line_and_leaves_the_checkpoint_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kcompact.segment import checkpoint as checkpoint_module

    layout = make_layout(tmp_path / "reference")
    part = build_partition(tmp_path / "logdir")

    def full(path: object, *args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(checkpoint_module, "write_replacing", full)  # the checkpoint's one write
    with pytest.raises(KcompactError, match="No space left on device"):
        clean_partition(part, topic_config(), CleanOptions(now_ms=NOW))
    monkeypatch.undo()
    # every group was swapped, and the checkpoint stayed behind them: the next clean redoes the round
    assert_recovered(part, layout, set(range(len(layout.groups))))
