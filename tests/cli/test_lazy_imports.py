"""``kcompact --help`` (and each command's ``--help``) starts without the heavy libraries: numpy, the
codecs and pyspark are imported by the commands that use them, which keeps ``--help`` well under
0.1 s (measured by ``scripts/bench.py small``, not here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import PartitionBuilder

HEAVY = ("numpy", "zstandard", "xxhash", "lz4", "cramjam", "pyspark", "kcompact.log.offset_map")


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


def test_top_help_imports_only_the_cli_and_its_errors() -> None:
    # The layers below the CLI (segment, cleaner, config, …) load with the command that runs, not with
    # the help text: each one imported here costs the --help of every command. errors and text (counted
    # nouns) are below every layer and import nothing of kcompact.
    kcompact_modules = {name for name in _imported("--help") if name.split(".")[0] == "kcompact"}
    assert "kcompact.cli.main" in kcompact_modules
    outside_cli = ("kcompact", "kcompact.errors", "kcompact.text")
    assert sorted(name for name in kcompact_modules
                  if not name.startswith("kcompact.cli") and name not in outside_cli) == []


def test_a_clean_imports_only_what_it_uses(tmp_path: Path) -> None:
    """A clean of a partition with no KRaft metadata imports no KRaft metadata reader (~10-20 ms of every
    clean's start), nor rich, nor the readers of other commands."""
    b = PartitionBuilder("imports")
    b.batch([(b"k%d" % (i % 3), b"v") for i in range(10)]).roll().batch([(b"z", b"z")])
    part = b.write(tmp_path)
    imported = _imported("clean", "--json", "--config", "cleanup.policy=compact", "--jobs", "1", str(part))
    assert "kcompact.cleaner.round.steps" in imported  # the probe saw the clean
    unused = ["rich", "kcompact.config.kraft", "kcompact.inspect", "kcompact.repair", "kcompact.spark", *NOT_IN_A_CLEAN]
    assert _among(imported, unused) == []


# What no clean uses: fsspec's reading of URLs, the other commands' modules and their libraries.
NOT_IN_A_CLEAN = [
    "fsspec", "plotly", "pyspark", "pyarrow", "kcompact.report", "kcompact.segment.remote",
    *(f"kcompact.cli.{module}" for module in (
        "dump_cmd", "dirty_ratio_cmd", "keys_cmd", "last_clean_cmd", "replicas_cmd", "transactions_cmd",
        "repair_cmd", "config_cmd", "spark_cmds", "export_cmd", "report_cmd")),
]


def _among(imported: set[str], prefixes: list[str]) -> list[str]:
    return sorted(name for name in imported
                  if any(name.startswith(f"{prefix}.") or name == prefix for prefix in prefixes))  # fmt: skip


def test_a_clean_of_a_kraft_partition_reads_the_metadata_but_loads_no_other_command(tmp_path: Path) -> None:
    """A clean with nothing to do (the 13 KiB partition's only segment is the active one) plans its round and
    stops: it loads no pass of a round (numpy, the offset map, pass 2's filter, the workers; numpy alone is
    about 75 ms of CPU, ``scripts/bench.py start``), and its text output on a pipe no rich (lines only), nor
    what only ``--scratch-dir`` (hashlib), a rehearsal or a remote segment (tempfile) use, nor any module of
    the commands that did not run."""
    from tests.conftest import real_fixture

    shutil.copytree(real_fixture("kraft37-consumer-offsets"), tmp_path / "logs")
    imported = _imported("clean", str(tmp_path / "logs" / "__consumer_offsets-6"))
    assert "kcompact.config.kraft.metadata_state" in imported  # the probe saw the KRaft config read
    assert "kcompact.cleaner.round.steps" in imported  # and the round's planning
    assert _among(imported, [*ROUND_PASSES, "rich", "hashlib", "tempfile", *NOT_IN_A_CLEAN, *RARE_PATHS]) == []


# What a clean imports only where a rare path starts: --roll (roll), a dry run's totals and a volume short of
# space (free_first), a dry run without --roll (with_roll), a truncated segment (torn_tail), legacy magic 0/1
# entries (legacy, legacy_rows), lz4 batches (lz4_framing), an input the C scan declines or a missing extension
# (reference), --replica-dirs (lineage, recovery) and a remote segment (source).
RARE_PATHS = [
    "kcompact.cleaner.disk.roll", "kcompact.cleaner.logdir.free_first", "kcompact.cleaner.logdir.torn_tail",
    "kcompact.cleaner.logdir.with_roll", "kcompact.records.legacy", "kcompact.records.lz4_framing",
    "kcompact.records.scan.legacy_rows", "kcompact.records.scan.reference", "kcompact.segment.lineage",
    "kcompact.segment.recovery", "kcompact.segment.source",
]


def test_a_clean_s_modules_load_no_rare_path() -> None:
    """The modules a clean starts with (``scripts/bench.py start``'s "imports a clean needs") load none of the
    modules only a rare path calls: each is imported where its path starts, not with every clean's start-up."""
    code = ("import sys, kcompact.cli.main, kcompact.cli.clean_cmd, kcompact.cleaner.logdir.run; "
            "print(*sorted(sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert "kcompact.cleaner.logdir.run" in loaded  # the probe saw the imports
    assert _among(loaded, RARE_PATHS) == []


def test_a_clean_with_work_loads_the_passes(tmp_path: Path) -> None:
    b = PartitionBuilder("passes")
    b.batch([(b"k%d" % (i % 3), b"v") for i in range(10)]).roll().batch([(b"z", b"z")])
    part = b.write(tmp_path)
    imported = _imported("clean", "--config", "cleanup.policy=compact", str(part))
    assert set(ROUND_PASSES) <= imported


# What only a round with work to do runs: the offset map, pass 2, the workers' machinery.
ROUND_PASSES = ["numpy", "kcompact.log.offset_map", "kcompact.cleaner.round.mapping",
                "kcompact.cleaner.round.filtering", "kcompact.cleaner.workers.parallel"]
