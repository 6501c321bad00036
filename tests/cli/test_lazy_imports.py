"""``kcompact --help`` (and each command's ``--help``) starts without the heavy libraries: numpy, the
codecs and pyspark are imported by the commands that use them, which keeps ``--help`` well under
0.1 s (measured by ``scripts/bench.py small``, not here)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HEAVY = ("numpy", "zstandard", "xxhash", "lz4", "cramjam", "pyspark", "kcompact.cleaner.offset_map")


def _imported(*argv: str) -> set[str]:
    env = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "kcompact", *argv],
                          capture_output=True, text=True, env=env, check=True)
    return {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:")}


@pytest.mark.parametrize("argv", [("--help",), ("--version",), ("clean", "--help")])
def test_help_imports_no_heavy_library(argv: tuple[str, ...]) -> None:
    imported = _imported(*argv)
    assert "kcompact.cli.main" in imported  # the probe sees kcompact's own imports
    assert sorted(name for name in imported if name.split(".")[0] in HEAVY or name in HEAVY) == []
