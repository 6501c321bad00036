"""``inspect keys`` labels the duplicates' bytes for what they are: records as encoded inside their batches,
uncompressed, which in compressed batches can be far more than the partition's size on disk."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.builders import BASE_TS, PartitionBuilder

GZIP = 1


def test_duplicates_of_compressed_batches_are_labelled_uncompressed(tmp_path: Path) -> None:
    b = PartitionBuilder("orders", 0)
    for round_ in range(8):
        b.batch([(f"k{i}".encode(), f"{round_}".encode() * 1000) for i in range(20)], compression=GZIP)
    part = b.write(tmp_path / "logdir")
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "200"})
    result = runner.invoke(cli, ["inspect", "keys", str(part), "--now-ms", str(BASE_TS + 1_000), "--config",
                                 "cleanup.policy=compact"])
    assert result.exit_code == 0, result.output
    on_disk = re.search(r"^orders-0: 160 records in 8 batches, ([\d.]+) KiB$", result.stdout, re.M)
    text = " ".join(result.stdout.split())  # the entries wrap at the terminal's width
    duplicates = re.search(r" duplicates 140 of 160 keyed records \(([\d.]+) KiB of records, uncompressed\) have a "
                           r"later record of their key ", text)
    assert on_disk is not None and duplicates is not None, result.stdout
    assert float(duplicates.group(1)) > 10 * float(on_disk.group(1))  # what the label is there for
