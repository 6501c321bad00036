"""Each way Kafka 4.1's cleaner throws on a closed segment (``Cleaner.cleanInto`` / ``growBuffersOrFail``, the
cleaned segment's index append) is named by ``repair`` (a finding that blocks cleaning, with Kafka's exception)
and by ``inspect dirty-ratio`` (the row's error, or ``cleaner_fails`` where the broker serves the shape
without a word and only its cleaner trips)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.repair.support import batch_positions, build_partition

LOG0 = "00000000000000000000.log"


def patched(log: Path, position: int, fmt: str, value: int) -> None:
    data = bytearray(log.read_bytes())
    struct.pack_into(fmt, data, position, value)
    log.write_bytes(bytes(data))


def short_tail(log: Path) -> None:  # fewer bytes than an entry's offset and size
    log.write_bytes(log.read_bytes() + b"\x00" * 10)


def size_zero(log: Path) -> None:  # "Record size 0 is less than the minimum record overhead"
    patched(log, batch_positions(log)[4][0] + 8, ">i", 0)


def size_past_the_end(log: Path) -> None:  # "batch size > bytes left in segment"
    patched(log, batch_positions(log)[-1][0] + 8, ">i", 100_000)


def truncated(log: Path) -> None:
    position, size = batch_positions(log)[-1]
    log.write_bytes(log.read_bytes()[: position + size // 2])


def offsets_backwards(log: Path) -> None:  # the base offset is outside the CRC
    patched(log, batch_positions(log)[5][0], ">q", 2)


def invalid_magic(log: Path) -> None:
    data = bytearray(log.read_bytes())
    data[batch_positions(log)[4][0] + 16] = 3
    log.write_bytes(bytes(data))


SHAPES: dict[str, tuple[Callable[[Path], None], str]] = {
    "short-tail": (short_tail, "IllegalStateException"),
    "size-zero": (size_zero, "CorruptRecordException"),
    "size-past-the-end": (size_past_the_end, "CorruptRecordException"),
    "truncated": (truncated, "IllegalStateException"),
    "offsets-backwards": (offsets_backwards, "InvalidOffsetException"),
    "invalid-magic": (invalid_magic, "CorruptRecordException"),
}


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("shape", list(SHAPES))
def test_repair_and_inspect_name_what_kafkas_cleaner_throws_on(tmp_path: Path, shape: str) -> None:
    damage, exception = SHAPES[shape]
    part = build_partition(tmp_path / "logdir", segments=2, batches=10)
    damage(part / LOG0)

    code, out, _err = run("repair", "--dry-run", "--json", str(part))
    assert code == 2
    blocking = [f for f in json.loads(out)["findings"] if f["blocks_cleaning"]]
    assert blocking and blocking[0]["path"].endswith(LOG0)
    assert exception in blocking[0]["cleaner_effect"] and "uncleanable" in blocking[0]["cleaner_effect"]

    code, out, _err = run("inspect", "dirty-ratio", "--json", "--config", "cleanup.policy=compact", str(part))
    (row,) = json.loads(out)
    said = row["error"] or row["cleaner_fails"]
    assert said is not None and LOG0 in said, (code, row)
    assert code == (2 if row["error"] else 0)
    if row["cleaner_fails"]:
        assert exception in row["cleaner_fails"]
        assert any("Kafka's cleaner fails here" in w for w in row["warnings"])
