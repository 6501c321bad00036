"""The project's own sample log dirs in fixtures/ are what scripts/make_fixtures.py builds today (README's
first command cleans one of them, so a stale fixture would make the newcomer's first run lie)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import PROJECT_FIXTURES, REPO_ROOT


def test_committed_fixtures_equal_a_fresh_build() -> None:
    assert (PROJECT_FIXTURES / "sample-logdir" / "__cluster_metadata-0").is_dir()
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "make_fixtures.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (0, "fixtures up to date\n"), done.stderr
