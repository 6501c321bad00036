"""Damaged segments, indexes and checkpoints thrown at ``inspect dump``, ``inspect dirty-ratio``, ``clean``
and ``repair`` through the CLI: none may crash (exit code 0 or 2, never 1 or an escaping exception), a
refused ``clean`` must leave every byte as it was, and a successful ``repair`` must leave a partition a
broker's full recovery has nothing to change in.

A seeded mutator (``random.Random(seed)``) picks 1-3 damages per case; seeds run in order until the time
budget is spent (``KCOMPACT_FUZZ_SECONDS``, default 10 s; 60 s with ``KCOMPACT_SLOW``). A failure names
the seed, the damages and the command, so it replays with ``replay(seed, template)``.
"""

from __future__ import annotations

import os
import random
import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.segment.partition import open_partition
from tests.builders import PartitionBuilder
from tests.repair.support import broker_would_change, partition_digest, real_partition

NOW = 1_800_000_000_000
BUDGET_S = float(os.environ.get("KCOMPACT_FUZZ_SECONDS", "60" if os.environ.get("KCOMPACT_SLOW") else "10"))
MIN_CASES = 12


def generated_template(log_dir: Path) -> Path:
    b = PartitionBuilder()
    for s in range(3):
        for i in range(12):
            b.batch([(f"k{(i + j) % 9}".encode(), (None if (i + j) % 11 == 0 else b"v" * (i + 5)))
                     for j in range(3)], compression=(0, 1, 3, 4)[i % 4])
        b.batch([(b"t", b"x")], producer_id=5, transactional=True).marker(5, commit=s != 1)
        b.roll()
    b.batch([(b"last", b"1")])
    return b.write(log_dir, cleaner_checkpoint=12, index_interval_bytes=200)


def legacy_template(log_dir: Path) -> Path:
    """v1 messages and gzip/lz4 wrappers, then v0 messages, then a v2 active segment."""
    from kcompact.records.batch import encode_batch
    from kcompact.records.legacy import encode_legacy_message, encode_legacy_wrapper
    from kcompact.records.record import Record
    from kcompact.segment.writer import write_segment

    part = log_dir / "legacy-0"
    first: list[bytes] = []
    for i in range(0, 30, 3):
        records = [Record(i + j, NOW + i + j, b"k%d" % ((i + j) % 7), b"v" * (i + 3)) for j in range(3)]
        if i % 2:
            first.append(encode_legacy_wrapper(records, magic=1, compression=(1, 3)[i % 2]))
        else:
            first += [encode_legacy_message(offset=r.offset, magic=1, key=r.key, value=r.value,
                                            timestamp=r.timestamp) for r in records]
    second = [encode_legacy_message(offset=o, magic=0, key=b"k%d" % (o % 5), value=b"x" * o)
              for o in range(30, 45)]
    write_segment(part, 0, first)
    write_segment(part, 30, second)
    write_segment(part, 45, [encode_batch([Record(45, NOW, b"k", b"v")], base_offset=45)])
    return part


def _files(part: Path, suffix: str) -> list[Path]:
    return sorted(p for p in part.iterdir() if p.name.endswith(suffix))


def _pick(rng: random.Random, part: Path, suffix: str) -> Path | None:
    files = [p for p in _files(part, suffix) if suffix != ".log" or p.stat().st_size > 0]
    return rng.choice(files) if files else None


def _rewrite(path: Path, change: Callable[[bytearray], bytearray]) -> None:
    path.write_bytes(bytes(change(bytearray(path.read_bytes()))))


def mutate(rng: random.Random, part: Path) -> str:
    """Apply one random damage; return what it was."""
    kind = rng.choice(["flip", "noise", "truncate", "append", "size", "insert", "duplicate",
                       "index", "drop-index", "checkpoint", "checkpoint-entry"])
    if kind in ("index", "drop-index"):
        path = _pick(rng, part, rng.choice([".index", ".timeindex", ".txnindex"]))
        if path is None:
            return f"{kind}: no such index"
        if kind == "drop-index":
            path.unlink()
        else:
            path.write_bytes(rng.randbytes(rng.choice([0, 3, 8, 12, 34, 36, 100])))
        return f"{kind} {path.name}"
    if kind.startswith("checkpoint"):
        target = part.parent / "cleaner-offset-checkpoint"
        if kind == "checkpoint":
            target.write_bytes(rng.choice([b"", b"1\n", b"0\n1\n", b"0\n2\norders 0 5\n"])
                               + rng.randbytes(rng.randint(0, 20)))
        else:
            entry = rng.choice([-5, 10**12, 0, 2**63 - 1])
            target.write_bytes(f"0\n1\norders 0 {entry}\n".encode())
        return f"{kind}"
    log = _pick(rng, part, ".log")
    if log is None:
        return f"{kind}: no log"
    size = log.stat().st_size
    at = rng.randrange(size)
    if kind == "flip":
        _rewrite(log, lambda d: _set(d, at, d[at] ^ rng.randrange(1, 256)))
    elif kind == "noise":
        _rewrite(log, lambda d: d[:at] + rng.randbytes(min(rng.randint(1, 200), size - at))
                 + d[at + min(200, size - at):])
    elif kind == "truncate":
        _rewrite(log, lambda d: d[:at])
    elif kind == "append":
        _rewrite(log, lambda d: d + rng.choice([bytes(rng.randint(1, 5000)), rng.randbytes(40)]))
    elif kind == "size":
        _rewrite(log, lambda d: _set_int(d, at, rng.choice([-1, 0, 13, 48, 2**31 - 1, rng.randrange(2**20)])))
    elif kind == "insert":
        _rewrite(log, lambda d: d[:at] + rng.randbytes(rng.randint(1, 300)) + d[at:])
    else:
        length = rng.randint(1, min(500, size - at))
        _rewrite(log, lambda d: d[: at + length] + d[at : at + length] + d[at + length:])
    return f"{kind} {log.name}@{at}"


def _set(data: bytearray, at: int, value: int) -> bytearray:
    data[at] = value
    return data


def _set_int(data: bytearray, at: int, value: int) -> bytearray:
    end = min(at + 4, len(data))
    data[at:end] = value.to_bytes(4, "big", signed=True)[: end - at]
    return data


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(result.exception))
        return 1, trace
    return result.exit_code, result.output


def run_case(seed: int, template: Path, work: Path) -> list[str]:
    """Damage a copy of ``template`` with ``seed``; return what went wrong (empty: nothing)."""
    rng = random.Random(seed)
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(template.parent, work / "logdir")
    part = work / "logdir" / template.name
    damages = [mutate(rng, part) for _ in range(rng.randint(1, 3))]
    where = f"seed {seed} on {template.name} ({'; '.join(damages)})"
    failures = []
    for args in (["inspect", "dump", str(part), "--records", "--verify-index"],
                 ["inspect", "dirty-ratio", str(part)]):
        code, out = invoke(*args)
        if code not in (0, 2):
            failures.append(f"{where}: `{' '.join(args[:2])}` exited {code}: {out[-2000:]}")
    shutil.copytree(work / "logdir", work / "clean-copy")
    clean_part = work / "clean-copy" / template.name
    before = partition_digest(clean_part)
    code, out = invoke("clean", str(clean_part), "--now-ms", str(NOW))
    if code not in (0, 2):
        failures.append(f"{where}: `clean` exited {code}: {out[-2000:]}")
    elif code == 2 and partition_digest(clean_part) != before:
        failures.append(f"{where}: `clean` refused but changed the partition")
    code, out = invoke("repair", str(part), "--backup-dir", str(work / "backup"))
    if code not in (0, 2):
        failures.append(f"{where}: `repair` exited {code}: {out[-2000:]}")
    elif code == 0 and broker_would_change(part):
        failures.append(f"{where}: after `repair` a broker would change {broker_would_change(part)}")
    return failures


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("templates")
    out = [generated_template(root / "generated"), legacy_template(root / "legacy")]
    for name, (log_dir, partition) in enumerate((
            ("confluent512-lz4-logdir", "__consumer_offsets-37"),  # lz4, no indexes
            ("kraft37-cleaned-logdir", "__consumer_offsets-44"))):  # cleaned by a broker, checkpoint
        try:
            out.append(real_partition(root / f"real{name}", log_dir, partition))
        except pytest.skip.Exception:
            pass
    for part in out:
        assert open_partition(part).segments
    return out


def test_fuzzed_partitions_never_crash_the_cli(tmp_path: Path, templates: list[Path]) -> None:
    deadline = time.monotonic() + BUDGET_S
    failures: list[str] = []
    seed = 0
    while time.monotonic() < deadline or seed < MIN_CASES:
        failures += run_case(seed, templates[seed % len(templates)], tmp_path / "case")
        seed += 1
    assert failures == [], "\n".join(failures[:5])


def test_refused_clean_with_leftovers_changes_nothing(tmp_path: Path) -> None:
    import struct

    from tests.repair.support import batch_positions, build_partition

    part = build_partition(tmp_path / "logdir")
    log = part / "00000000000000000000.log"
    position, _size = batch_positions(log)[5]
    data = bytearray(log.read_bytes())
    struct.pack_into(">i", data, position + 8, 3)  # a size field Kafka refuses
    log.write_bytes(bytes(data))
    (part / "00000000000000000120.log.cleaned").write_bytes(b"partial output of a killed clean")
    before = partition_digest(part)
    code, _out = invoke("clean", str(part), "--now-ms", str(NOW))
    assert code == 2
    assert partition_digest(part) == before
