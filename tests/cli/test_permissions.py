"""Files the OS will not let kcompact read or write are bad input: one line naming the file, exit 2,
nothing changed; in a log dir that partition fails and the others go on.

Every command runs in a child process that file modes apply to (``tests/unprivileged.py``: as root,
with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped). The damage is always to ``orders-0``; the log
dir also holds ``other-0``, which a log-dir command must still clean or report.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.segment.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from tests.builders import PartitionBuilder
from tests.cleaner.disk.test_crash_recovery import NOW, OVERRIDES, build_partition
from tests.cleaner.round.test_clean_failures import log_dir_digest, middle_segment
from tests.unprivileged import Outcome, run_kcompact_batch

CLEAN_CONFIG = [arg for key, value in OVERRIDES.items() for arg in ("--config", f"{key}={value}")]
TOPIC_ID = "dqK7-AskTSux4so_l6jJXg"


def make_log_dir(root: Path) -> Path:
    """``orders-0`` (six closed segments, a txn index, partition.metadata) and ``other-0`` beside it."""
    part = build_partition(root / "logdir")
    (part / "partition.metadata").write_text(f"version: 0\ntopic_id: {TOPIC_ID}\n")
    b = PartitionBuilder("other", 0)
    for s in range(3):
        b.batch([(b"a", f"v{s}".encode()), (b"b", f"w{s}".encode())]).roll()
    b.batch([(b"a", b"active")])
    high_watermarks = part.parent / "replication-offset-checkpoint"
    orders = read_offset_checkpoint(high_watermarks)
    b.write(part.parent)  # its high watermark replaces the file: put orders-0's back
    write_offset_checkpoint(high_watermarks, {**orders, **read_offset_checkpoint(high_watermarks)})
    return part


READ_ONLY = "read-only partition dir"
LEFTOVERS = "read-only partition dir with an interrupted clean's leftovers"


def _with_leftovers(part: Path) -> Path:
    """A killed clean's unfinished ``.cleaned`` file: a clean must settle it before anything else."""
    (part / "00000000000000000005.log.cleaned").write_bytes(b"partial output of a killed clean")
    return part


DAMAGES: dict[str, tuple[Callable[[Path], Path], int]] = {  # what to pick in orders-0, its new mode
    "unreadable partition dir": (lambda part: part, 0o000),
    "unreadable .log": (middle_segment, 0o000),
    "unreadable active .log": (lambda part: max(part.glob("*.log")), 0o000),
    "unreadable .txnindex": (lambda part: next(part.glob("*.txnindex")), 0o000),
    "unreadable partition.metadata": (lambda part: part / "partition.metadata", 0o000),
    "unreadable cleaner-offset-checkpoint": (lambda part: part.parent / "cleaner-offset-checkpoint", 0o000),
    READ_ONLY: (lambda part: part, 0o555),
    LEFTOVERS: (_with_leftovers, 0o555),
    "unreadable .log beside an interrupted clean's leftovers": (
        lambda part: middle_segment(_with_leftovers(part)), 0o000),
}

PARTITION_COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "inspect dirty-ratio": lambda p: ["inspect", "dirty-ratio", str(p), "--now-ms", str(NOW)],
    "inspect keys": lambda p: ["inspect", "keys", str(p), "--now-ms", str(NOW)],
    "inspect last-clean": lambda p: ["inspect", "last-clean", str(p), "--now-ms", str(NOW)],
    "clean": lambda p: ["clean", str(p), "--now-ms", str(NOW), *CLEAN_CONFIG],
    "clean --roll": lambda p: ["clean", str(p), "--roll", "--now-ms", str(NOW), *CLEAN_CONFIG],
    "repair": lambda p: ["repair", str(p), "--backup-dir", str(p.parent.parent / "backup")],
    "inspect dump": lambda p: ["inspect", "dump", str(p)],
    "config show": lambda p: ["config", "show", str(p)],
}
LOG_DIR_COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "inspect dirty-ratio LOGDIR": lambda d: ["inspect", "dirty-ratio", str(d), "--now-ms", str(NOW), "--json"],
    "clean LOGDIR": lambda d: ["clean", str(d), "--now-ms", str(NOW), "--json", *CLEAN_CONFIG],
    "clean --roll LOGDIR": lambda d: ["clean", str(d), "--roll", "--now-ms", str(NOW), "--json", *CLEAN_CONFIG],
}
WRITERS = {"clean", "clean --roll", "repair"}

# The commands that need the damaged file: they must fail (exit 2); any other must succeed (exit 0).
_RANGE_READERS = {"inspect dirty-ratio", "inspect keys", "inspect last-clean", "clean", "clean --roll"}
MUST_FAIL = {
    "unreadable partition dir": set(PARTITION_COMMANDS),
    "unreadable .log": set(PARTITION_COMMANDS) - {"config show"},
    "unreadable active .log": set(PARTITION_COMMANDS) - {"config show"},
    "unreadable .txnindex": _RANGE_READERS | {"repair"},
    "unreadable partition.metadata": _RANGE_READERS | {"config show"},
    "unreadable cleaner-offset-checkpoint": _RANGE_READERS | {"repair"},
    # repair writes nothing here: the indexes (index.interval.bytes 100) are valid, only not the default's
    READ_ONLY: {"clean", "clean --roll"},
    LEFTOVERS: {"clean", "clean --roll", "repair"},
    "unreadable .log beside an interrupted clean's leftovers": set(PARTITION_COMMANDS) - {"config show"},
}


@dataclass(frozen=True)
class Case:
    """One damaged copy, the command run on it, and what it did."""

    outcome: Outcome
    damaged: Path  # the file or directory whose mode was changed
    mode: int  # its mode before
    log_dir: Path
    before: dict[str, str]  # log_dir_digest before the damage

    def digest_after(self) -> dict[str, str]:
        self.damaged.chmod(self.mode)  # so that a non-root parent can read it back
        return log_dir_digest(self.log_dir)


def run_cases(root: Path, commands: dict[str, Callable[[Path], list[str]]], *,
              on_log_dir: bool) -> dict[tuple[str, str], Case]:
    """Every (damage, command) on its own damaged copy, all run in one unprivileged child."""
    prepared: list[tuple[tuple[str, str], list[str], Path, int, Path, dict[str, str]]] = []
    for damage_name, (pick, new_mode) in DAMAGES.items():
        for command_name, argv in commands.items():
            part = make_log_dir(root / str(len(prepared)))
            damaged = pick(part)
            before = log_dir_digest(part.parent)
            mode = damaged.stat().st_mode
            damaged.chmod(new_mode)
            prepared.append(((damage_name, command_name), argv(part.parent if on_log_dir else part),
                             damaged, mode, part.parent, before))
    outcomes = run_kcompact_batch([argv for _key, argv, *_rest in prepared])
    return {key: Case(outcome, damaged, mode, log_dir, before)
            for (key, _argv, damaged, mode, log_dir, before), outcome in zip(prepared, outcomes, strict=True)}


@pytest.fixture(scope="module")
def partition_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Case]:
    return run_cases(tmp_path_factory.mktemp("partition-cases"), PARTITION_COMMANDS, on_log_dir=False)


def error_lines(outcome: Outcome) -> list[str]:
    """stderr without its warnings."""
    return [line for line in outcome.stderr.splitlines() if not line.startswith("kcompact: warning: ")]


# ``clean --roll`` rolls before it reads the rest of the partition; a failed clean undoes its roll, so
# these too leave every byte as it was.
PARTITION_CASES = [
    pytest.param(damage, command, id=f"{damage}-{command}")
    for damage in DAMAGES for command in PARTITION_COMMANDS
]


@pytest.mark.parametrize(("damage", "command"), PARTITION_CASES)
def test_partition_command_fails_in_one_line_naming_the_file(
    partition_cases: dict[tuple[str, str], Case], damage: str, command: str
) -> None:
    case = partition_cases[(damage, command)]
    outcome = case.outcome
    assert outcome.traceback is None, outcome.traceback
    if command not in MUST_FAIL[damage]:
        assert outcome.exit_code == 0, outcome.stderr
        if command not in WRITERS:
            assert case.digest_after() == case.before
        return
    assert outcome.exit_code == 2, outcome.stdout + outcome.stderr
    errors = error_lines(outcome)
    if damage == "unreadable partition dir":  # click checks the argument before kcompact runs
        assert errors[-1].endswith(f"'{case.damaged}' is not readable."), errors
    else:
        assert len(errors) == 1 and errors[0].startswith("kcompact: error: "), errors
        assert str(case.damaged) in errors[0] and ": cannot " in errors[0], errors
        assert "(Permission denied)" in errors[0], errors
    assert case.digest_after() == case.before  # no file changed, none appeared (.cleaned, .swap, …)


@pytest.fixture(scope="module")
def log_dir_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Case]:
    return run_cases(tmp_path_factory.mktemp("log-dir-cases"), LOG_DIR_COMMANDS, on_log_dir=True)


@pytest.mark.parametrize("command", LOG_DIR_COMMANDS)
@pytest.mark.parametrize("damage", DAMAGES)
def test_log_dir_command_fails_that_partition_and_goes_on(
    log_dir_cases: dict[tuple[str, str], Case], damage: str, command: str
) -> None:
    case = log_dir_cases[(damage, command)]
    outcome = case.outcome
    assert outcome.traceback is None, outcome.traceback
    report = json.loads(outcome.stdout)
    if damage == "unreadable cleaner-offset-checkpoint":  # the log dir's file: one error, not one per partition
        assert outcome.exit_code == 2, outcome.stderr
        assert report["error"]["kind"] == "FileAccessError" and report["error"]["path"] == str(case.damaged)
        assert outcome.stderr == f"kcompact: error: {case.damaged}: cannot read (Permission denied)\n"
        assert case.digest_after() == case.before
        return
    if command.startswith("clean"):
        failed = {Path(f["partition_dir"]).name: f["error"] for f in report["failures"]}
        done = {Path(r["partition_dir"]).name for r in report["results"]}
    else:
        failed = {Path(r["partition_dir"]).name: r["error"] for r in report if r["error"] is not None}
        done = {Path(r["partition_dir"]).name for r in report if r["error"] is None}
    if damage in (READ_ONLY, LEFTOVERS) and not command.startswith("clean"):
        assert (outcome.exit_code, failed, done) == (0, {}, {"orders-0", "other-0"}), outcome.stderr
        return
    assert outcome.exit_code == 2, outcome.stderr
    assert set(failed) == {"orders-0"}, failed
    assert done == {"other-0"}
    for error in failed.values():
        assert str(case.damaged) in error and ": cannot " in error and "(Permission denied)" in error, error
        assert "\n" not in error
    after = case.digest_after()
    assert {k: v for k, v in after.items() if k.startswith("orders-0/")} == \
           {k: v for k, v in case.before.items() if k.startswith("orders-0/")}
    orders = read_offset_checkpoint(case.log_dir / "cleaner-offset-checkpoint")[("orders", 0)]
    assert orders == 0  # as build_partition wrote it


# --- the CLI's last line of defence ------------------------------------------------------------------


def _raising(err: OSError) -> Callable[..., object]:
    def report(*_args: object, **_kwargs: object) -> object:
        raise err

    return report


def test_a_stray_os_error_naming_a_file_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kcompact.inspect.dirty_ratio

    part = make_log_dir(tmp_path)
    unreadable = part / "00000000000000000000.log"
    monkeypatch.setattr(kcompact.inspect.dirty_ratio, "dirty_ratio_report",
                        _raising(PermissionError(13, "Permission denied", str(unreadable))))
    result = CliRunner().invoke(cli, ["inspect", "dirty-ratio", str(part)], catch_exceptions=False)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"kcompact: error: {unreadable}: cannot access (Permission denied)\n"


def test_an_os_error_naming_no_file_is_a_bug(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kcompact.inspect.dirty_ratio

    part = make_log_dir(tmp_path)
    monkeypatch.setattr(kcompact.inspect.dirty_ratio, "dirty_ratio_report",
                        _raising(OSError(22, "Invalid argument")))
    with pytest.raises(OSError, match="Invalid argument"):
        CliRunner().invoke(cli, ["inspect", "dirty-ratio", str(part)], catch_exceptions=False)
