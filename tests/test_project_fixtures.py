"""The project's own sample log dirs in fixtures/ are what scripts/make_fixtures.py builds today (README's
first command cleans one of them, so a stale fixture would make the newcomer's first run lie), and what
their expected.json says they hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_FIXTURES, REPO_ROOT


def test_committed_fixtures_equal_a_fresh_build() -> None:
    assert (PROJECT_FIXTURES / "sample-logdir" / "__cluster_metadata-0").is_dir()
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "make_fixtures.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (0, "fixtures up to date\n"), done.stderr


@pytest.mark.parametrize("expected_json", sorted(PROJECT_FIXTURES.glob("*.expected.json")), ids=lambda p: p.name)
def test_expected_json_is_what_dump_finds(expected_json: Path) -> None:
    """Each fixture's expected.json (partition, segment bases, log end) against ``inspect dump --json``."""
    expected = json.loads(expected_json.read_text())
    partition = PROJECT_FIXTURES / expected_json.name.removesuffix(".expected.json") / expected["partition"]
    done = subprocess.run([sys.executable, "-m", "kcompact", "inspect", "dump", str(partition), "--json"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    items = [json.loads(line) for line in done.stdout.splitlines()]
    segments = [item["base_offset"] for item in items if item["type"] == "file" and item["kind"] == "log"]
    log_end = max(item["last_offset"] for item in items if item["type"] == "batch") + 1
    assert {"partition": partition.name, "log_end_offset": log_end, "segments": segments} == expected


def test_every_fixture_has_its_expected_json() -> None:
    log_dirs = sorted(p.name for p in PROJECT_FIXTURES.iterdir() if p.is_dir())
    assert log_dirs == sorted(p.name.removesuffix(".expected.json") for p in PROJECT_FIXTURES.glob("*.expected.json"))
