"""Damaged segments, indexes and checkpoints thrown at ``inspect dump``, ``inspect dirty-ratio``, ``clean``
and ``repair`` through the CLI: none may crash (exit code 0 or 2, never 1 or an escaping exception), a
refused ``clean`` must leave every byte as it was, and a successful ``repair`` must leave a partition a
broker's full recovery has nothing to change in.

A seeded mutator (``random.Random(seed)``) picks 1-3 damages per case; a fixed number of seeds runs, in
order (``KCOMPACT_FUZZ_CASES``, default 40; 200 with ``KCOMPACT_SLOW``), so every machine runs the same
cases. A failure names the seed, the damages and the command, so it replays with ``replay(seed, template)``.

One damage is aimed: a flipped CRC in a batch a clean would drop whole (every record keyless or
superseded), the corruption Kafka's cleaner launders without a trace. It is applied alone, and the clean
must then refuse (exit 2, "fails its CRC") and leave every byte as it was; every template also gets it
once, deterministically (``test_a_crc_flip_in_a_batch_a_clean_would_drop_is_refused``).
"""

from __future__ import annotations

import os
import random
import shutil
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.segment.partition import open_partition
from tests.builders import PartitionBuilder
from tests.repair.support import broker_would_change, partition_digest, real_partition

NOW = 1_800_000_000_000
COMPACT = {"cleanup.policy": "compact"}  # clean compacts only where the policy is known to say so
SUPERSEDED_CRC = "superseded-crc"
CASES = int(os.environ.get("KCOMPACT_FUZZ_CASES", "200" if os.environ.get("KCOMPACT_SLOW") else "40"))


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
    from kcompact.records.batch_encoding import encode_batch
    from kcompact.records.record import Record
    from tests.encoders import encode_legacy_message, encode_legacy_wrapper
    from tests.segment_writer import write_segment

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


def superseded_batches(part: Path) -> list[tuple[Path, int, int]]:
    """The batches a clean of the intact ``part`` would drop whole: ``(log, position, CRC position)``.

    Non-transactional data batches below the first uncleanable offset whose records are each keyless or
    have a later non-transactional record of their key in the dirty range (what the offset map holds);
    none when no round would run (a clean that reads nothing checks nothing).
    """
    from kcompact.config.topic_config import defaults_with_overrides
    from kcompact.log.rules.ranges import compute_cleanable_range
    from kcompact.log.state.log_state import load_log_state
    from kcompact.records.legacy import legacy_records
    from kcompact.records.record import decode_records

    config = defaults_with_overrides(COMPACT)
    state = load_log_state(open_partition(part), config)
    rng = compute_cleanable_range(state.range_inputs(config, NOW))
    start, end = rng.first_dirty_offset, rng.first_uncleanable_offset
    if rng.dirty_bytes == 0 or end <= start:
        return []
    found: list[tuple[Path, int, int, list[tuple[int, bytes | None]]]] = []
    latest: dict[bytes, int] = {}
    for seg in (s for s in state.segments if s.base_offset < end):
        with seg.files.open() as log:
            for batch in log.iter_batches():
                if batch.is_control or batch.is_transactional:
                    continue
                any_batch: Any = batch  # a v2 batch or a legacy entry, told apart by its magic
                records = decode_records(any_batch) if batch.magic >= 2 else legacy_records(any_batch)
                keyed = [(r.offset, None if r.key is None else bytes(r.key)) for r in records]
                latest.update((k, o) for o, k in keyed if k is not None and start <= o < end)
                found.append((seg.files.log_path, batch.position, 17 if batch.magic >= 2 else 12, keyed))
    return [(log, position, crc) for log, position, crc, keyed in found
            if keyed and all(k is None or latest.get(k, -1) > o for o, k in keyed)]


def flip_superseded_crc(rng: random.Random, part: Path) -> str | None:
    """Flip a byte of the stored CRC of a batch a clean would drop whole; None when there is none."""
    candidates = superseded_batches(part)
    if not candidates:
        return None
    log, position, crc = rng.choice(candidates)
    at = position + crc + rng.randrange(4)
    _rewrite(log, lambda d: _set(d, at, d[at] ^ rng.randrange(1, 256)))
    return f"{SUPERSEDED_CRC} {log.name}@{position}"


def mutate(rng: random.Random, part: Path, *, first: bool = False) -> str:
    """Apply one random damage; return what it was. The aimed CRC flip only comes first (it reads the
    partition, which must still be intact)."""
    kinds = ["flip", "noise", "truncate", "append", "size", "insert", "duplicate", "index", "drop-index",
             "checkpoint", "checkpoint-entry"]
    kind = rng.choice([*kinds, SUPERSEDED_CRC] if first else kinds)
    if kind == SUPERSEDED_CRC:
        return flip_superseded_crc(rng, part) or f"{kind}: none"
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
    damages = [mutate(rng, part, first=True)]
    aimed = damages[0].startswith(SUPERSEDED_CRC + " ")  # applied alone: the clean must refuse it
    damages += [] if aimed else [mutate(rng, part) for _ in range(rng.randint(0, 2))]
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
    code, out = invoke("clean", str(clean_part), "--now-ms", str(NOW), "--config", "cleanup.policy=compact")
    if code not in (0, 2):
        failures.append(f"{where}: `clean` exited {code}: {out[-2000:]}")
    elif code == 2 and partition_digest(clean_part) != before:
        failures.append(f"{where}: `clean` refused but changed the partition")
    elif aimed and (code != 2 or "fails its CRC" not in out):
        failures.append(f"{where}: `clean` did not refuse the batch that fails its CRC: {out[-2000:]}")
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
    failures: list[str] = []
    for seed in range(CASES):
        failures += run_case(seed, templates[seed % len(templates)], tmp_path / "case")
    assert failures == [], "\n".join(failures[:5])


def test_a_crc_flip_in_a_batch_a_clean_would_drop_is_refused(tmp_path: Path, templates: list[Path]) -> None:
    checked = []
    for number, template in enumerate(templates):
        shutil.copytree(template.parent, tmp_path / f"case{number}" / "logdir")
        part = tmp_path / f"case{number}" / "logdir" / template.name
        damage = flip_superseded_crc(random.Random(number), part)
        if damage is None:
            continue  # nothing to clean here: a clean reads nothing (the broker-cleaned partition)
        log, position = damage.split()[1].split("@")
        before = partition_digest(part)
        code, out = invoke("clean", str(part), "--now-ms", str(NOW), "--config", "cleanup.policy=compact")
        assert code == 2, out
        assert f"{part / log} at position {position}: batch (last offset " in out and "fails its CRC" in out
        assert partition_digest(part) == before
        checked.append(template.name)
    assert {"orders-0", "legacy-0"} <= set(checked)


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
