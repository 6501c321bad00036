"""``repair --undo`` run twice: the second is refused and touches nothing the broker wrote since; an undo
killed part-way is resumed by the next one and then counts as finished."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.records.batch import iter_batches
from kcompact.repair import undo as undo_module
from kcompact.segment.partition import open_partition
from tests.repair.support import batch_positions, build_partition, partition_digest, patch
from tests.repair.test_undo_after_failure import broker_writes_a_segment

LOG0 = "00000000000000000000.log"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def repaired(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A partition with a damaged batch length, repaired into a backup; also its digest before the repair."""
    part = build_partition(tmp_path / "logdir", segments=2, batches=5)
    position, _size = batch_positions(part / LOG0)[2]
    patch(part / LOG0, position + 8, ">i", 5)  # a size field Kafka refuses: below 14
    original = partition_digest(part)
    backup = tmp_path / "backup"
    code, _out, err = run("repair", str(part), "--backup-dir", str(backup))
    assert code == 0, err
    assert partition_digest(part) != original
    return part, backup, original


def broker_appends(part: Path) -> Path:
    """What a broker appends to the active segment: one more batch's bytes."""
    active = open_partition(part).segments[-1].log_path
    first = next(iter(iter_batches(active.read_bytes())))
    with open(active, "ab") as out:
        out.write(bytes(first.buffer))
    return active


def test_second_undo_is_refused_and_keeps_what_the_broker_wrote_since(tmp_path: Path) -> None:
    part, backup, original = repaired(tmp_path)
    code, _out, err = run("repair", "--undo", str(backup))
    assert code == 0, err
    assert partition_digest(part) == original
    new_log = broker_writes_a_segment(part)
    appended = broker_appends(part)
    written = {new_log: new_log.read_bytes(), appended: appended.read_bytes()}
    before = partition_digest(part)

    code, out, err = run("repair", "--undo", str(backup))
    dry_code, _dry_out, dry_err = run("repair", "--undo", str(backup), "--dry-run")
    json_code, json_out, _json_err = run("repair", "--undo", str(backup), "--json")

    assert code == 2 and out == ""
    assert err.startswith(f"kcompact: error: {backup}: already undone at ")
    assert err.strip().endswith("; nothing changed") and len(err.strip().splitlines()) == 1
    assert dry_code == 2 and "already undone at" in dry_err
    assert json_code == 2 and json.loads(json_out)["error"]["kind"] == "RefusedError"
    assert {path: path.read_bytes() for path in written} == written
    assert partition_digest(part) == before


def test_undo_killed_part_way_is_resumed_and_then_counts_as_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part, backup, original = repaired(tmp_path)
    restore = undo_module._restore
    calls: list[Path] = []

    def dies_on_second_file(copy: Path, saved: object, target: Path) -> None:
        calls.append(target)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        restore(copy, saved, target)  # type: ignore[arg-type]

    monkeypatch.setattr(undo_module, "_restore", dies_on_second_file)
    code, _out, err = run("repair", "--undo", str(backup))
    assert code == 2 and "No space left" in err
    assert partition_digest(part) != original  # the undo stopped half-way
    monkeypatch.undo()

    code, _out, err = run("repair", "--undo", str(backup))

    assert code == 0, err
    assert partition_digest(part) == original
    code, _out, err = run("repair", "--undo", str(backup))
    assert code == 2 and "already undone at" in err
    assert partition_digest(part) == original
