"""``clean --roll`` interrupted at every rename, unlink, link and fsync, by a kill and by an I/O error.

The partition is the shape that once blocked every later clean: a dozen segments of ~3 KiB under
``internal.segment.bytes=4096`` (one group per segment), a committed transaction, one left open (it caps
the round) and another open in the active segment, a first segment wholly below the log start
(``log-start-offset-checkpoint``), and a cleaner checkpoint line of another partition. A reference run
records every file-system operation a real ``clean --roll`` makes (``os.fsync``, ``os.replace``,
``os.rename``, ``os.unlink``, ``os.link``: the roll, the ``.cleaned`` writes, the log-start deletion, the
swaps, the checkpoint, the lock files); then, for each operation ``k``:

* **kill**: a forked child runs the clean and dies with ``os._exit(137)`` as it enters operation ``k`` (no
  ``finally``, no flush: what a SIGKILL leaves). kcompact's recovery and the model of Kafka's loader in
  ``test_swap.py`` settle copies of what it left to the same bytes. The cleaner checkpoint is never ahead of what was
  swapped: it is either untouched or the reference's, and then every group is swapped.
* **EIO**: operation ``k`` fails with ``OSError(EIO)`` in this process. The clean either finishes or raises a
  one-line :class:`~kcompact.errors.KcompactError` (never another exception); a failure before the round's
  first change (its first swap, or the log-start deletion that comes with it) leaves every file of the log
  dir byte for byte as it was.

Each is followed by a second, uninterrupted ``clean --roll``, which must settle what was left (exactly as
Kafka's ``LogLoader`` would: orphaned indexes, ``.deleted``, ``.cleaned``, ``.swap``), succeed, and keep
what an uninterrupted clean keeps: the same records, the same checkpoint, nothing left over — and, where
the interruption came before the first swap, the very same bytes.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from kcompact.cleaner.disk.swap import unsettled_files
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import TopicConfig, defaults_with_overrides
from kcompact.errors import KcompactError
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from kcompact.segment.names import segment_file_name
from tests.builders import read_all_records
from tests.cleaner.disk.test_swap import recover_both_ways
from tests.cleaner.round.test_clean_failures import log_dir_digest
from tests.partition_builder import BASE_TS, PartitionBuilder

NOW = BASE_TS + 10_000_000
OVERRIDES = {"cleanup.policy": "compact", "internal.segment.bytes": "4096"}
OTHER_PARTITION = ("other", 3)
OPERATIONS = ("fsync", "replace", "rename", "unlink", "link")
SEGMENTS = 12


def topic_config() -> TopicConfig:
    config = defaults_with_overrides(OVERRIDES)
    return config


def roll_options() -> CleanOptions:
    return CleanOptions(now_ms=NOW, roll=True, jobs=1)


def small_segments_partition(log_dir: Path) -> Path:
    """A dozen ~3 KiB segments (see the module docstring); the active one holds an open transaction."""
    b = PartitionBuilder()
    n = 0
    for s in range(SEGMENTS):
        for _ in range(22):
            b.batch([(f"k{n % 23}".encode(), b"v" * 60 + str(n).encode())])
            n += 1
        if s == 5:
            b.batch([(b"t2", b"committed")], producer_id=6, transactional=True).marker(6, commit=True)
        if s == 9:
            b.batch([(b"t1", b"open")], producer_id=5, transactional=True)
        if s < SEGMENTS - 1:
            b.roll()
    b.batch([(b"t3", b"open too")], producer_id=8, transactional=True)
    part = b.write(log_dir, index_interval_bytes=4096)
    second = b.segments[1].base_offset
    write_offset_checkpoint(log_dir / "log-start-offset-checkpoint", {("orders", 0): second})
    write_offset_checkpoint(log_dir / "cleaner-offset-checkpoint", {("orders", 0): 0, OTHER_PARTITION: 42})
    return part


def file_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@dataclass(frozen=True)
class Reference:
    """An uninterrupted ``clean --roll`` of the partition: what it did and what it left."""

    operations: list[str]  # "<op> <file name>" of each file-system operation, in order
    files: dict[str, bytes]  # the partition directory after it
    records: list[tuple[int, bytes | None, bytes | None]]
    end_offset: int
    first_change: int  # index of the first operation that changes the partition for good

    def checkpoint(self) -> dict[tuple[str, int], int]:
        return {("orders", 0): self.end_offset, OTHER_PARTITION: 42}


@contextmanager
def faults(at: int | None, kind: str, seen: list[str] | None = None) -> Iterator[None]:
    """Count the file-system operations; the ``at``-th one is killed (``kind="kill"``) or fails (``"eio"``).

    No fsync reaches the disk meanwhile: the faults are a kill and an I/O error, never a power loss, and
    the page cache survives both (the fsyncs are still counted and are crash points like the rest).
    """
    real = {name: getattr(os, name) for name in OPERATIONS}
    count = [0]

    def wrap(name: str, function: Callable[..., object]) -> Callable[..., object]:
        def operation(*args: object, **kwargs: object) -> object:
            index = count[0]
            count[0] += 1
            if seen is not None:
                seen.append(f"{name} {Path(str(args[0])).name if not isinstance(args[0], int) else ''}")
            if index == at:
                if kind == "kill":
                    os._exit(137)
                target = args[0] if not isinstance(args[0], int) else None
                raise OSError(errno.EIO, os.strerror(errno.EIO), target)
            if name == "fsync":
                return None  # a kill, not a power loss: the page cache survives, so skip the disk's wait
            return function(*args, **kwargs)

        return operation

    for name, function in real.items():
        setattr(os, name, wrap(name, function))
    try:
        yield
    finally:
        for name, function in real.items():
            setattr(os, name, function)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_segments_partition(tmp_path_factory.mktemp("template") / "logdir")


@pytest.fixture(scope="module")
def reference(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    log_dir = shutil.copytree(template.parent, tmp_path_factory.mktemp("reference") / "logdir")
    part = log_dir / template.name
    seen: list[str] = []
    with faults(None, "kill", seen):
        result = clean_partition(part, topic_config(), roll_options())
    assert result.rolled and result.end_offset is not None and result.stats.groups >= 6
    assert result.retention is not None and result.retention.deleted_segments == [0]
    first_change = next(i for i, op in enumerate(seen)
                        if op.startswith("replace") and op.endswith((".cleaned", ".log", ".snapshot")))
    return Reference(seen, file_bytes(part), read_all_records(part), result.end_offset, first_change)


def killed_clean(part: Path, at: int) -> int:
    """Run ``clean --roll`` in a forked child killed at operation ``at``; its exit code (0: it finished)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            with faults(at, "kill"):
                clean_partition(part, topic_config(), roll_options())
        except BaseException:  # noqa: BLE001 - any other ending is reported by its code
            code = 3
        os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def assert_second_clean_keeps_the_reference(part: Path, reference: Reference, *, same_bytes: bool) -> None:
    with faults(None, "none"):
        result = clean_partition(part, topic_config(), roll_options())
    assert read_all_records(part) == reference.records
    assert unsettled_files(part) == []
    assert read_offset_checkpoint(part.parent / "cleaner-offset-checkpoint") == reference.checkpoint()
    assert not (part.parent / f".kcompact-{part.name}.lock").exists()  # a killed clean's is taken and removed
    assert not list(part.parent.parent.glob(".kcompact-rehearsal-*"))  # no staged copy left
    if same_bytes:
        assert file_bytes(part) == reference.files, result


def test_the_reference_run_covers_the_roll_the_log_start_deletion_and_every_swap(reference: Reference) -> None:
    ops = reference.operations
    rolled = segment_file_name(max(int(name.split(".")[0]) for name in reference.files if name.endswith(".log")),
                               "log")
    assert any(op == f"unlink {segment_file_name(0, 'log', 'deleted')}" for op in ops)  # below the log start
    assert sum(op.startswith("link ") for op in ops) == 2  # the roll's originals of the active indexes
    assert sum(op.startswith("fsync") for op in ops) > 20
    assert reference.files[rolled] == b""  # the rolled, empty active segment


@pytest.mark.parametrize("kind", ["kill", "eio"])
def test_clean_roll_interrupted_at_every_operation_is_settled_by_the_next_clean(
    tmp_path: Path, template: Path, reference: Reference, kind: str
) -> None:
    before = log_dir_digest(template.parent)
    outcomes: dict[str, int] = {"failed": 0, "finished": 0}
    for k in range(len(reference.operations)):
        log_dir = shutil.copytree(template.parent, tmp_path / f"{kind}-{k}" / "logdir")
        part = log_dir / template.name
        where = f"{kind} at operation {k}: {reference.operations[k]}"
        if kind == "kill":
            code = killed_clean(part, k)
            assert code == 137, where
            recover_both_ways(part, tmp_path / f"{kind}-{k}" / "loaded")  # kcompact settles as Kafka's loader
        else:
            try:
                with faults(k, "eio"):
                    clean_partition(part, topic_config(), roll_options())
            except KcompactError as err:
                assert "\n" not in str(err), where
                outcomes["failed"] += 1
                if k < reference.first_change:
                    assert log_dir_digest(log_dir) == before, where  # all or nothing
            else:
                outcomes["finished"] += 1
        checkpoint = read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint")
        if checkpoint[("orders", 0)] != 0:  # never ahead of what was swapped
            assert checkpoint == reference.checkpoint(), where
            assert read_all_records(part) == reference.records, where
        try:
            assert_second_clean_keeps_the_reference(part, reference, same_bytes=k < reference.first_change)
        except AssertionError as err:
            raise AssertionError(f"{where}: {err}") from err
        shutil.rmtree(log_dir.parent)
    if kind == "eio":
        assert outcomes["failed"] > len(reference.operations) // 2, outcomes
