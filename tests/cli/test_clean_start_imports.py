"""What ``kcompact clean`` loads: only what the clean uses. A clean with nothing to do (a broker-written
13 KiB ``__consumer_offsets`` partition whose only segment is the active one) plans its round and stops, so
it never loads numpy, the offset map, pass 2's filter or the workers' machinery (about 75 ms of CPU of
numpy's import alone; ``scripts/bench.py start``); a clean that rewrites segments loads them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_FIXTURES, REPO_ROOT, copy_tree_writable, real_fixture

# The console entry point in this process, then the pass modules it loaded, one per line on stderr.
CLEAN_THEN_MODULES = """
import sys
from kcompact.cli.main import main
sys.argv = ["kcompact", *sys.argv[1:]]
try:
    main()
finally:
    for name in ("numpy", "kcompact.log.offset_map", "kcompact.cleaner.round.filtering",
                 "kcompact.cleaner.workers.parallel"):
        if name in sys.modules:
            sys.stderr.write(f"loaded: {name}\\n")
"""


def _loaded(partition: Path) -> tuple[str, list[str]]:
    argv = [sys.executable, "-c", CLEAN_THEN_MODULES, "clean", str(partition)]
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, [line.split()[1] for line in proc.stderr.splitlines() if line.startswith("loaded: ")]


def test_a_clean_with_nothing_to_do_loads_no_numpy(tmp_path: Path) -> None:
    log_dir = copy_tree_writable(real_fixture("kraft37-consumer-offsets"), tmp_path / "kraft37")

    out, loaded = _loaded(log_dir / "__consumer_offsets-6")

    assert "__consumer_offsets-6: nothing to clean" in out
    assert loaded == []


@pytest.mark.parametrize("target", ["orders-0", "."], ids=["partition", "log-dir"])
def test_a_clean_that_rewrites_loads_the_passes(tmp_path: Path, target: str) -> None:
    log_dir = copy_tree_writable(PROJECT_FIXTURES / "sample-logdir", tmp_path / "sample-logdir")

    out, loaded = _loaded((log_dir / target).resolve())

    assert "nothing to clean" not in out.splitlines()[0]
    assert loaded == ["numpy", "kcompact.log.offset_map", "kcompact.cleaner.round.filtering",
                      "kcompact.cleaner.workers.parallel"]
