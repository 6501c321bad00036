"""``repair --backup-dir URL`` and ``repair --undo URL`` are refused with one line, exit 2, nothing written
(a URL would otherwise become a local ``./s3:/…`` directory)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.repair.support import (
    batch_positions,
    build_partition,
    partition_digest,
    patch,
    tree_digest,
)

LOG0 = "00000000000000000000.log"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("target", ["partition", "log dir"])
def test_backup_dir_url_is_refused_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    part = build_partition(tmp_path / "logdir", segments=1, batches=5)
    position, _size = batch_positions(part / LOG0)[2]
    patch(part / LOG0, position + 8, ">i", 5)  # damage a repair would fix
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    before = tree_digest(tmp_path)
    path = part if target == "partition" else part.parent

    code, out, err = run("repair", str(path), "--backup-dir", "s3://bucket/x")
    json_code, json_out, _json_err = run("repair", str(path), "--backup-dir", "s3://bucket/x", "--json")

    assert code == 2 and out == ""
    assert err.startswith("kcompact: error: s3://bucket/x: --backup-dir ") and "found a URL" in err
    assert len(err.strip().splitlines()) == 1
    assert json_code == 2
    assert {k: json.loads(json_out)["error"][k] for k in ("kind", "path")} == {
        "kind": "RefusedError", "path": "s3://bucket/x"}
    assert list(cwd.iterdir()) == []
    assert tree_digest(tmp_path) == before


def test_undo_url_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = build_partition(tmp_path / "logdir", segments=1, batches=5)
    before = partition_digest(part)
    monkeypatch.chdir(tmp_path)

    code, out, err = run("repair", "--undo", "s3://bucket/x")

    assert code == 2 and out == ""
    assert err.startswith("kcompact: error: s3://bucket/x: repair --undo ") and "found a URL" in err
    assert len(err.strip().splitlines()) == 1
    assert partition_digest(part) == before
