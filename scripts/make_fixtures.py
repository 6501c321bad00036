#!/usr/bin/env python3
"""Write kcompact's own small sample log dirs into fixtures/, deterministically, each with expected.json.

    python scripts/make_fixtures.py            # (re)write every scenario
    python scripts/make_fixtures.py --check    # exit 1 if a committed fixture differs from a fresh build

Scenarios (each a log dir holding one partition plus the log dir's checkpoint files):
  sample-logdir/orders-0   compacted topic: 3 closed segments with duplicate keys, a tombstone, a keyless
                           record, an idempotent producer, a committed and an aborted transaction (with its
                           .txnindex), gzip and zstd batches, and a small active segment — what README's
                           first command cleans. Beside it, __cluster_metadata-0: a KRaft metadata log
                           (from offset 0, so complete) whose TopicRecord and ConfigRecord say orders has
                           cleanup.policy=compact, as a broker's controller writes them.
  codecs-logdir/codecs-0   one batch per codec (none, gzip, snappy, lz4, zstd) with headers and null values.
expected.json records what a decoder must find (batches, records, offsets) and, for sample-logdir, what a
clean with the default configuration must leave (the latest record of every key, per the cleaner's rules).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kcompact.records.record import Header  # noqa: E402 - after the sys.path line above
from tests.encoders import encode_unsigned_varint  # noqa: E402 - after the sys.path line above
from tests.partition_builder import PartitionBuilder  # noqa: E402 - after the sys.path line above

FIXTURES = ROOT / "fixtures"
FIXED_MTIME_MS = 1_700_000_000_000
ORDERS_TOPIC_ID = bytes.fromhex("6f72646572732d746f7069632d696430")  # 16 bytes of the sample's topic id
TOPIC_RECORD, CONFIG_RECORD = 2, 4  # KRaft metadata record api keys
RESOURCE_TOPIC = 2  # ConfigRecord.resourceType of a topic


def _compact_string(text: str) -> bytes:
    raw = text.encode()
    return encode_unsigned_varint(len(raw) + 1) + raw


def _metadata_value(api_key: int, body: bytes) -> bytes:
    """A KRaft record value: frame version 1, api key, record version 0, the body, no tagged fields."""
    return bytes((1, api_key, 0)) + body + b"\x00"


def build_metadata(log_dir: Path, topic: str, configs: dict[str, str]) -> None:
    """``__cluster_metadata-0`` with the topic's TopicRecord and one ConfigRecord per override."""
    values = [_metadata_value(TOPIC_RECORD, _compact_string(topic) + ORDERS_TOPIC_ID)]
    values += [_metadata_value(CONFIG_RECORD, bytes((RESOURCE_TOPIC,)) + _compact_string(topic)
                               + _compact_string(key) + _compact_string(value))
               for key, value in configs.items()]
    metadata = PartitionBuilder("__cluster_metadata", 0).batch([(None, v) for v in values])
    metadata.write(log_dir, high_watermark=None)  # a KRaft log: no replication-offset-checkpoint line


def build_sample(log_dir: Path) -> dict[str, object]:
    b = PartitionBuilder("orders", 0)
    for i in range(12):
        b.batch([(f"order-{(i * 5 + j) % 17:03d}".encode(), f"v{i}.{j}".encode()) for j in range(6)])
    b.batch([(b"order-003", None)])  # a tombstone
    b.batch([(None, b"keyless")])
    b.roll()
    for i in range(8):
        b.batch([(f"order-{(i * 3 + j) % 17:03d}".encode(), f"w{i}.{j}".encode()) for j in range(5)],
                producer_id=1000, producer_epoch=0)
    b.batch([(b"order-100", b"txn-commit")], producer_id=2000, transactional=True)
    b.marker(2000, commit=True)
    b.batch([(b"order-101", b"txn-abort")], producer_id=2001, transactional=True)
    b.marker(2001, commit=False)
    b.roll()
    for i in range(6):
        b.batch([(f"order-{(i * 7 + j) % 17:03d}".encode(), f"x{i}.{j}".encode()) for j in range(4)],
                compression=1 if i % 2 else 4)
    b.roll()
    b.batch([(b"order-001", b"active")])
    part = b.write(log_dir)
    build_metadata(log_dir, "orders", {"cleanup.policy": "compact"})
    return {"partition": part.name, "log_end_offset": b.next_offset, "segments": [s.base_offset for s in b.segments]}


def build_codecs(log_dir: Path) -> dict[str, object]:
    b = PartitionBuilder("codecs", 0)
    for codec in range(5):
        b.batch([(b"k%d" % codec, b"value-%d" % codec), (b"t%d" % codec, None)], compression=codec,
                headers=(Header(b"h", b"x"), Header(b"n", None)))
    part = b.write(log_dir)
    return {"partition": part.name, "log_end_offset": b.next_offset, "segments": [0]}


SCENARIOS = {"sample-logdir": build_sample, "codecs-logdir": build_codecs}


def _freeze_mtimes(directory: Path) -> None:
    import os

    for path in directory.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(FIXED_MTIME_MS * 1_000_000,) * 2)


def write_all(target: Path) -> None:
    for name, build in SCENARIOS.items():
        log_dir = target / name
        if log_dir.exists():
            shutil.rmtree(log_dir)
        log_dir.mkdir(parents=True)
        expected = build(log_dir)
        (log_dir.parent / f"{name}.expected.json").write_text(json.dumps(expected, indent=2) + "\n")
        _freeze_mtimes(log_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare a fresh build with fixtures/")
    args = parser.parse_args()
    if not args.check:
        write_all(FIXTURES)
        print(f"wrote {', '.join(SCENARIOS)} into {FIXTURES}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        write_all(Path(tmp))
        cmp = filecmp.dircmp(tmp, FIXTURES)
        diffs = _differences(cmp)
    print("fixtures up to date" if not diffs else "differ: " + ", ".join(diffs))
    return 1 if diffs else 0


def _differences(cmp: filecmp.dircmp) -> list[str]:  # type: ignore[type-arg]
    out = list(cmp.left_only) + list(cmp.right_only) + list(cmp.diff_files)
    for sub in cmp.subdirs.values():
        out += _differences(sub)
    return out


if __name__ == "__main__":
    sys.exit(main())
