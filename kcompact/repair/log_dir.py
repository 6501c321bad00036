"""``kcompact repair LOG_DIR``: verify every partition of a log dir, repair those that need it.

:func:`repair_log_dir` does for a log dir what :func:`~kcompact.repair.repair.repair_partition` does for one
partition, once per partition, in forked worker processes as ``clean`` does for a log dir
(``fork_pool``: how many, and how; results in name order whatever the pool):

* causes that belong to the whole log dir are said once, before any partition is read: a damaged or
  unreadable offset checkpoint (``segment.log_dir_check``), a broker holding ``.lock``, a log dir this
  process may not write (not for a dry run), a backup directory inside the log dir or already in use;
  and a stray directory in the log dir, which every partition's verification finds, is one finding of
  the log dir (:attr:`LogDirRepair.log_dir_findings`), not one per partition;
* each partition that needs a repair gets its own backup under one root for the run (``--backup-dir DIR``:
  ``DIR/<partition>``; default: ``<log dir>.kcompact-backup/repair.<UTC time>/<partition>``), so each is undone
  on its own, and the whole run by one ``repair --undo`` of the root (``undo.undo_backups``);
* KRaft's ``__cluster_metadata`` is verified and reported, never rewritten (as for one partition), and
  decides no exit code (:attr:`LogDirRepair.ok`); partitions being deleted or moved (``-delete``,
  ``-future``, ``-stray``) are left alone with a note;
* one partition's failure is reported and does not stop the others; nor does a worker process that dies
  (killed, out of memory): that partition fails, the lock files it held are removed, and the others go
  on in a new worker.
"""

from __future__ import annotations

import contextlib
from dataclasses import field, replace
from functools import partial
from pathlib import Path
from typing import Any

from kcompact.clock import run_clock_ms
from kcompact.errors import KcompactError, RefusedError
from kcompact.fork_pool import (
    ProgressCallback,
    WorkerDeath,
    partition_workers,
    run_in_pool,
)
from kcompact.log.rules.fence import refuse_log_dir_safe_offset
from kcompact.repair.backup import BACKUP_SUFFIX, MANIFEST_NAME, check_backup_location, default_run_backup_dir
from kcompact.repair.findings import KIND_STRAY, Finding
from kcompact.repair.repair import RepairOptions, RepairResult, repair_partition
from kcompact.repair.verify import verify_partition
from kcompact.segment.lock import broker_holds_lock, clear_abandoned_locks
from kcompact.segment.log_dir_check import check_log_dir_checkpoints, log_dir_writer
from kcompact.segment.names import parse_partition_dir_name
from kcompact.segment.partition import (
    METADATA_TOPIC,
    iter_set_aside_dirs,
    named_path,
    open_partition,
)
from kcompact.segment.partition_filter import PartitionFilter, require_partition_dirs
from kcompact.value import frozen, mutable

STATUS_SOUND = "sound"  # nothing to repair
STATUS_REPAIRED = "repaired"
STATUS_WOULD_REPAIR = "would repair"  # dry run
STATUS_SETTLES = "Kafka settles"  # dry run: repair would act only on what Kafka settles itself as it loads it
STATUS_LEFT = "problems left"  # repaired, but something still needs a repair or blocks the cleaner
STATUS_CLEAN_FAILED = "clean failed"  # --clean: the repair left nothing, its clean failed or was refused
STATUS_REPORTED = "reported only"  # __cluster_metadata: verified, never rewritten
STATUS_FAILED = "failed"  # refused or failed: left as it was, or changed in part with its backup named


@frozen
class PartitionRepairFailure:
    """A partition whose repair was refused or failed: left as it was, or — ``backup_dir`` — changed in part,
    its originals in that backup (the error says what was changed)."""

    partition_dir: str
    error: str
    backup_dir: str | None = None


@mutable
class LogDirRepair:
    """The outcome of ``kcompact repair LOG_DIR``."""

    log_dir: str
    dry_run: bool
    results: list[RepairResult] = field(default_factory=list)
    failures: list[PartitionRepairFailure] = field(default_factory=list)
    log_dir_findings: list[Finding] = field(default_factory=list)  # said once, not per partition
    notes: list[str] = field(default_factory=list)
    reported_only: set[str] = field(default_factory=set)  # partition dirs verified, never rewritten
    backup_root: str | None = None  # where the run's backups go (one per partition): ``repair --undo`` undoes them all

    @property
    def ok(self) -> bool:
        """Every partition sound or repaired (a dry run: sound, or with only what Kafka settles itself), none
        failed; a partition reported only (``__cluster_metadata``, never rewritten) decides nothing: its report
        is all there is to it."""
        return not self.failures and all(self.status(r) in (STATUS_SOUND, STATUS_SETTLES, STATUS_REPAIRED)
                                         for r in self.results
                                         if r.partition_dir not in self.reported_only)

    def status(self, result: RepairResult) -> str:
        """One partition's status in the summary (one of the ``STATUS_*`` constants)."""
        if result.partition_dir in self.reported_only:
            return STATUS_SOUND if result.ok and not result.plan else STATUS_REPORTED
        if result.dry_run:
            return STATUS_WOULD_REPAIR if not result.ok else STATUS_SETTLES if result.plan else STATUS_SOUND
        if result.clean_error is not None and not any(f.blocks_cleaning or f.action for f in result.remaining):
            return STATUS_CLEAN_FAILED  # the row's error says why
        if result.backup_dir is not None:
            return STATUS_REPAIRED if result.ok else STATUS_LEFT
        return STATUS_SOUND if result.ok and not result.plan else STATUS_LEFT

    def rows(self) -> list[dict[str, Any]]:
        """The summary table: one row per partition, in name order (failures among them)."""
        rows = [self._row(r) for r in self.results]
        rows += [_failure_row(f) for f in self.failures]
        return sorted(rows, key=lambda row: row["partition"])

    def _row(self, result: RepairResult) -> dict[str, Any]:
        problems = [f for f in result.findings if f.problem]
        records = [g.records for g in result.given_up]
        return {
            "partition": Path(result.partition_dir).name,
            "partition_dir": result.partition_dir,
            "status": self.status(result),
            "problems": len(problems),
            "uncleanable": result.uncleanable,
            "regions_given_up": len(result.given_up),
            "bytes_given_up": sum(g.size_in_bytes for g in result.given_up),
            "records_given_up": None if None in records else sum(r or 0 for r in records),
            "backup_dir": result.backup_dir,
            "error": result.clean_error,
        }

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``kcompact repair LOG_DIR --json``)."""
        return {
            "log_dir": self.log_dir,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "rows": self.rows(),
            "log_dir_findings": [f.as_dict() for f in self.log_dir_findings],
            "partitions": [r.as_dict() for r in self.results],
            "failures": [{"partition_dir": f.partition_dir, "error": f.error, "backup_dir": f.backup_dir}
                         for f in self.failures],
            "notes": self.notes,
            "backup_root": self.backup_root if self.backed_up else None,
        }

    @property
    def backed_up(self) -> bool:
        """Whether any partition's repair kept a backup (under ``backup_root``)."""
        return any(r.backup_dir is not None for r in self.results) or any(f.backup_dir for f in self.failures)


def _failure_row(failure: PartitionRepairFailure) -> dict[str, Any]:
    return {"partition": Path(failure.partition_dir).name, "partition_dir": failure.partition_dir,
            "status": STATUS_FAILED, "problems": None, "uncleanable": None, "regions_given_up": None,
            "bytes_given_up": None, "records_given_up": None, "backup_dir": failure.backup_dir,
            "error": failure.error}


def repair_log_dir(
    log_dir: str | Path,
    options: RepairOptions,
    *,
    selection: PartitionFilter | None = None,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
) -> LogDirRepair:
    """Verify every partition of ``log_dir`` and repair those that need it (see the module docstring).

    Args:
        log_dir: the log dir.
        options: as for one partition; ``backup_dir`` is the root of one backup per partition.
        selection: the partitions to work on (``--topic``, ``--exclude-topic``, ``--partition``).
        jobs: worker processes (see :func:`~kcompact.fork_pool.partition_workers`); None: auto.
        progress: told each partition's walks, always in this process.

    Returns:
        The :class:`LogDirRepair`, partitions in name order.

    Raises:
        RefusedError: a broker holds the log dir, the backup directory is inside it or in use, or
            ``options.safe_offset`` is given (an offset of one partition's log).
        KcompactError: no partition directory (none matching ``selection``), an offset checkpoint that
            does not parse, a log dir that cannot be written (not for a dry run).
    """
    root = named_path(log_dir)
    options = replace(options, now_ms=run_clock_ms(options.now_ms))  # every partition's clean at one clock
    refuse_log_dir_safe_offset(root, options.safe_offset)
    dirs = require_partition_dirs(root, selection)
    check_log_dir_checkpoints(root)
    if options.backup_dir is not None:
        _refuse_earlier_backups(options.backup_dir, root, dirs)
    elif not options.dry_run:  # one root for the run: one undo puts every partition back
        options = replace(options, backup_dir=default_run_backup_dir(root))
    if options.backup_dir is not None:
        check_backup_location(options.backup_dir, root)
    outcome = LogDirRepair(str(root), options.dry_run,
                           backup_root=None if options.backup_dir is None else str(options.backup_dir))
    live = _live(dirs, outcome)
    set_aside = list(iter_set_aside_dirs(root))
    outcome.notes.extend(f"{part.name}: a partition being deleted or moved; left alone"
                         for part in (set_aside if selection is None else selection.select(set_aside)))
    if options.dry_run and broker_holds_lock(root):
        raise RefusedError(f"{root}: held by a running Kafka broker; stop it or work on a copy", path=root)
    with contextlib.nullcontext() if options.dry_run else log_dir_writer(root):
        workers = partition_workers(jobs, [_size_in_bytes(d) for d in live])
        work = partial(_repair_one, options, outcome.reported_only)
        if workers > 1:
            done = run_in_pool(live, work, workers, progress, partial(_repair_died, options))
        else:
            done = [work(d, progress) for d in live]
    for item in done:
        if isinstance(item, PartitionRepairFailure):
            outcome.failures.append(item)
        else:
            outcome.results.append(item)
    _say_log_dir_findings_once(root, outcome)
    return outcome


def _refuse_earlier_backups(backup_dir: Path, root: Path, dirs: list[Path]) -> None:
    """Refuse a ``--backup-dir`` holding an earlier repair's backups of this log dir's partitions, saying
    which of those partitions are finished and how to undo each (a killed run rerun as it was), or, when
    every one is (a finished run rerun as it was), that there is nothing left to finish.

    A refusal (exit 2) either way: the backup directory is taken, so the log dir was not verified again,
    and a partition the earlier run left sound may have changed since."""
    names = {part.name for part in dirs}
    found = backup_dir.glob(f"*/{MANIFEST_NAME}") if backup_dir.is_dir() else iter(())
    earlier = sorted(manifest.parent.name for manifest in found if manifest.parent.name in names)
    if not earlier:
        return
    unfinished = [name for name in earlier if verify_partition(root / name).needs_repair]
    undo = f"kcompact repair --undo {backup_dir}/<partition>"
    if not unfinished:
        raise RefusedError(f"{backup_dir}: holds the backups of an earlier repair of this log dir, finished "
                           f"({', '.join(earlier)}: nothing left to repair); give another --backup-dir (or none) "
                           f"to verify and repair the log dir again, or undo a partition's repair with: {undo}; "
                           "nothing changed")
    states = ", ".join(f"{name}: {'not finished' if name in unfinished else 'finished'}" for name in earlier)
    raise RefusedError(f"{backup_dir}: holds the backups of an earlier repair of this log dir ({states}); run "
                       f"the repair again with a new --backup-dir (or none) to finish {', '.join(unfinished)}; "
                       f"undo a partition's repair with: {undo}; nothing changed")


def _live(dirs: list[Path], outcome: LogDirRepair) -> list[Path]:
    """The partitions to verify (``require_partition_dirs`` lists none Kafka set aside); KRaft's metadata
    log is reported only."""
    for part in dirs:
        name = parse_partition_dir_name(part.name)
        if name is not None and name.topic == METADATA_TOPIC:
            outcome.reported_only.add(str(part))
    return dirs


def _size_in_bytes(part: Path) -> int:
    """A partition's segment bytes, for the pool's size; 0 when it cannot be listed (its repair says why)."""
    try:
        return open_partition(part).size_in_bytes
    except (KcompactError, OSError):
        return 0


def _repair_one(options: RepairOptions, reported_only: set[str], part: Path,
                progress: ProgressCallback | None) -> RepairResult | PartitionRepairFailure:
    """Verify and repair one partition of the log dir; its deliberate errors become its failure. Its clean
    takes ``--config`` as a log dir's clean does: no known or explicit ``cleanup.policy`` changes by it."""
    own = replace(options, named_alone=False)
    if str(part) in reported_only:
        own = replace(own, dry_run=True, clean=False)
    elif options.backup_dir is not None:
        own = replace(own, backup_dir=options.backup_dir / part.name)
    try:
        return repair_partition(part, own, progress)
    except KcompactError as err:
        return PartitionRepairFailure(str(part), str(err), err.backup_dir)


def _repair_died(options: RepairOptions, part: Path, death: WorkerDeath) -> PartitionRepairFailure:
    """A partition whose worker process ended mid-repair: its failure, and the lock files it left removed.

    Every rewrite of a repair is swapped in crash-safely and backed up first (``repair.repair``), so a
    new repair settles what it left, and its backup (if it made one) can undo it."""
    clear_abandoned_locks(part.parent, part.name)
    backups = options.backup_dir / part.name if options.backup_dir is not None else \
        part.resolve().parent.parent / f"{part.resolve().parent.name}{BACKUP_SUFFIX}"
    return PartitionRepairFailure(str(part), (
        f"{part}: the worker process repairing it was {death.describe()}; nothing is lost (rewrites are "
        f"backed up and swapped in crash-safely): repair it again, or undo it with its backup under {backups}"))


def _say_log_dir_findings_once(root: Path, outcome: LogDirRepair) -> None:
    """Move the findings about the log dir itself (stray directories) out of every partition's report."""
    seen: dict[str, Finding] = {}
    for result in outcome.results:
        mine = [f for f in result.findings if f.kind == KIND_STRAY and Path(f.path).parent == root]
        for finding in mine:
            seen.setdefault(finding.path, finding)
        result.findings = [f for f in result.findings if f not in mine]
        result.remaining = [f for f in result.remaining if f not in mine]
    outcome.log_dir_findings = list(seen.values())
