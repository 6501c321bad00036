"""``clean --replica-dirs`` naming the very copy being cleaned: it is no other replica, and a fence from it is
its own log end — no fence at all, reported as if another copy had set it: refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.log.rules.test_fence_lineage import NOW, new_leader


@pytest.mark.parametrize("named", ["partition dir", "log dir"])
def test_the_cleaned_copy_is_refused_as_its_own_replica(tmp_path: Path, named: str) -> None:
    part = new_leader(tmp_path / "b1")
    copy = part if named == "partition dir" else part.parent
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})

    result = runner.invoke(cli, ["clean", str(part), "--replica-dirs", str(copy), "--now-ms", str(NOW),
                                 "--dry-run", "--config", "cleanup.policy=compact"])

    assert result.exit_code == 2, result.stdout
    assert len(result.stderr.splitlines()) == 1 and str(copy) in result.stderr
