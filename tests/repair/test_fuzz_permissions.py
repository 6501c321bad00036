"""The fuzz of ``test_fuzz.py`` with permission damage: files and directories the OS will not let kcompact
read or write, alone or beside damaged bytes, thrown at ``inspect dump``, ``inspect dirty-ratio``,
``inspect keys``, ``clean`` (also ``--roll``) and ``repair``.

None may crash (exit code 0 or 2, never 1); a command that exits 2 leaves every byte of the partition and
of its log dir's checkpoints as it was, and so does a read-only command that succeeds; a ``repair`` that
succeeds leaves a partition a broker's full recovery has nothing to change in.

File modes do not stop root, so every command runs in one child process without the capabilities that
ignore them (``tests/unprivileged.py``); a case prepares one damaged copy per command first. Seeded like
the content fuzz (``random.Random(seed)``): ``KCOMPACT_FUZZ_PERMISSION_CASES`` seeds (default 12, 60 with
``KCOMPACT_SLOW``), about 4 s. A failure names the seed, the damages and the command.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.repair.support import broker_would_change, partition_digest, real_partition
from tests.repair.test_fuzz import NOW, generated_template, legacy_template, mutate
from tests.unprivileged import Outcome, run_kcompact_batch

CASES = int(os.environ.get("KCOMPACT_FUZZ_PERMISSION_CASES", "60" if os.environ.get("KCOMPACT_SLOW") else "12"))
TOPIC_ID = "dqK7-AskTSux4so_l6jJXg"
COMMANDS: dict[str, list[str]] = {  # each then gets its copy of the partition
    "inspect dump": ["inspect", "dump", "{part}", "--records", "--verify-index"],
    "inspect dirty-ratio": ["inspect", "dirty-ratio", "{part}", "--now-ms", str(NOW)],
    "inspect keys": ["inspect", "keys", "{part}", "--now-ms", str(NOW)],
    "clean": ["clean", "{part}", "--now-ms", str(NOW), "--config", "cleanup.policy=compact"],
    "clean --roll": ["clean", "{part}", "--roll", "--now-ms", str(NOW), "--config", "cleanup.policy=compact"],
    "repair": ["repair", "{part}", "--backup-dir", "{backup}"],
}
READERS = {"inspect dump", "inspect dirty-ratio", "inspect keys"}


def _unreadable(suffix: str) -> str:
    return f"unreadable {suffix}"


def permission_damage(rng: random.Random, part: Path) -> tuple[str, Path, int] | None:
    """Pick one file or directory of (or around) ``part`` and the mode that damages it; None: none fits."""
    kind = rng.choice([".log", ".index", ".timeindex", ".txnindex", ".snapshot", "leader-epoch-checkpoint",
                       "partition.metadata", "cleaner-offset-checkpoint", "replication-offset-checkpoint",
                       "read-only partition dir", "unreadable partition dir", "read-only log dir"])
    if kind == "read-only partition dir":
        return kind, part, 0o555
    if kind == "unreadable partition dir":
        return kind, part, 0o000
    if kind == "read-only log dir":
        return kind, part.parent, 0o555
    if kind.endswith("-offset-checkpoint"):
        path = part.parent / kind
        return (_unreadable(kind), path, 0o000) if path.exists() else None
    candidates = sorted(p for p in part.iterdir() if p.name.endswith(kind))
    return (_unreadable(kind), rng.choice(candidates), 0o000) if candidates else None


@dataclass
class Prepared:
    """One command's damaged copy, ready to run."""

    command: str
    argv: list[str]
    part: Path
    modes: list[tuple[Path, int, int]]  # (path, mode before, damaged mode)
    before: dict[str, str]  # partition_digest before the damage to modes

    def restore(self) -> None:
        for path, mode, _damaged in reversed(self.modes):
            if path.exists():  # a successful clean may have replaced or removed it
                path.chmod(mode)


def prepare_case(seed: int, template: Path, work: Path) -> tuple[str, list[Prepared]]:
    """Damage ``seed``'s copy of ``template`` (bytes first, then modes); one copy per command."""
    rng = random.Random(seed)
    base = work / "base"
    shutil.copytree(template.parent, base / "logdir")
    part = base / "logdir" / template.name
    if not (part / "partition.metadata").exists():
        (part / "partition.metadata").write_text(f"version: 0\ntopic_id: {TOPIC_ID}\n")
    damages = [mutate(rng, part) for _ in range(rng.randint(0, 1))]  # sometimes also damaged bytes
    chosen = [found for found in (permission_damage(rng, part) for _ in range(rng.randint(1, 2))) if found]
    damages += [f"{kind} {path.name}" for kind, path, _mode in chosen]
    prepared = []
    for command, template_argv in COMMANDS.items():
        copy = work / command.replace(" ", "_")
        shutil.copytree(base, copy)
        copy_part = copy / "logdir" / part.name
        modes = []
        for _kind, path, mode in chosen:
            target = copy / path.relative_to(base)
            modes.append((target, target.stat().st_mode & 0o7777, mode))
        argv = [a.format(part=copy_part, backup=copy / "backup") for a in template_argv]
        prepared.append(Prepared(command, argv, copy_part, modes, partition_digest(copy_part)))
        for target, _mode, damaged in modes:
            target.chmod(damaged)
    return f"seed {seed} on {template.name} ({'; '.join(damages) or 'no damage'})", prepared


def judge(where: str, case: Prepared, outcome: Outcome) -> list[str]:
    """What went wrong in one command's run (empty: nothing)."""
    case.restore()
    said = f"{where}: `{case.command}`"
    if outcome.traceback is not None or outcome.exit_code not in (0, 2):
        return [f"{said} exited {outcome.exit_code}: {(outcome.traceback or outcome.stderr)[-2000:]}"]
    unchanged = outcome.exit_code == 2 or case.command in READERS  # a failed `clean --roll` undoes its roll
    if unchanged and partition_digest(case.part) != case.before:
        return [f"{said} exited {outcome.exit_code} but changed the partition: {outcome.stderr[-500:]}"]
    if case.command == "repair" and outcome.exit_code == 0 and broker_would_change(case.part):
        return [f"{said}: after it a broker would change {broker_would_change(case.part)}"]
    return []


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("templates")
    out = [generated_template(root / "generated"), legacy_template(root / "legacy")]
    try:
        out.append(real_partition(root / "real", "kraft37-cleaned-logdir", "__consumer_offsets-44"))
    except pytest.skip.Exception:
        pass
    return out


def test_permission_damage_never_crashes_the_cli_nor_half_changes(tmp_path: Path, templates: list[Path]) -> None:
    cases = [prepare_case(seed, templates[seed % len(templates)], tmp_path / str(seed)) for seed in range(CASES)]
    outcomes = iter(run_kcompact_batch([p.argv for _where, prepared in cases for p in prepared]))
    failures = [problem for where, prepared in cases for p in prepared for problem in judge(where, p, next(outcomes))]
    assert failures == [], "\n".join(failures[:5])
