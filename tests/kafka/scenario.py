"""What the broker scenarios share: running ``kcompact`` as a user would, copying a stopped broker's log dir,
reading what is on disk (segment files, checkpoints, batch headers), and the records Kafka's consumer returns."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kcompact.records.compression import decompress
from kcompact.segment.checkpoint import read_offset_checkpoint
from tests.kafka.clients import Record

KCOMPACT = Path(sys.executable).with_name("kcompact")
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


def kcompact(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The installed ``kcompact`` command, as a user runs it (the tree under test: ``PYTHONPATH`` is passed on, so
    a worktree's tests run the worktree's code, not the checkout the console script was installed from)."""
    env = {"COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run([str(KCOMPACT), *map(str, args)], capture_output=True, text=True, check=False,
                          timeout=600, env=env)


def kcompact_json(*args: str | Path) -> list[dict[str, Any]]:
    """``kcompact ... --json``: its JSON (one object, or one per line)."""
    done = kcompact(*args, "--json")
    if done.returncode not in (0, 3):
        raise AssertionError(f"kcompact {' '.join(map(str, args))} exited {done.returncode}:\n"
                             f"{done.stdout[-4000:]}{done.stderr[-4000:]}")
    text = done.stdout.strip()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return parsed if isinstance(parsed, list) else [parsed]


def copy_log_dir(source: Path, target: Path) -> Path:
    """A copy of a stopped broker's log dir, file times kept (Kafka's cleaner reads segment mtimes)."""
    shutil.copytree(source, target, symlinks=True)
    return target


def segment_files(partition_dir: Path) -> dict[str, bytes]:
    """Every segment file (log and indexes) under its final name, by name."""
    return {path.name: path.read_bytes() for path in sorted(partition_dir.iterdir())
            if path.suffix in SEGMENT_SUFFIXES}


def digests(root: Path) -> dict[str, str]:
    """sha256 (and mode) of every file under ``root``, by relative path."""
    return {str(path.relative_to(root)): f"{hashlib.sha256(path.read_bytes()).hexdigest()} {path.stat().st_mode:o}"
            for path in sorted(root.rglob("*")) if path.is_file()}


def active_base_offset(partition_dir: Path) -> int:
    """The base offset of the partition's newest segment (the active one)."""
    return max(int(path.stem) for path in partition_dir.glob("*.log"))


def cleaner_checkpoint(log_dir: Path, topic: str, partition: int = 0) -> int | None:
    path = log_dir / "cleaner-offset-checkpoint"
    if not path.exists() or path.stat().st_size == 0:
        return None
    return read_offset_checkpoint(path).get((topic, partition))


def wait_cleaner_checkpoint(log_dir: Path, topic: str, at_least: int, timeout_s: float = 120.0) -> int:
    """Waits until the broker's cleaner has checkpointed ``topic``-0 at or past ``at_least``."""
    deadline = time.monotonic() + timeout_s
    while True:
        offset = cleaner_checkpoint(log_dir, topic)
        if offset is not None and offset >= at_least:
            return offset
        if time.monotonic() > deadline:
            raise AssertionError(f"the broker's cleaner did not reach offset {at_least} of {topic}-0 "
                                 f"in {timeout_s:.0f}s (checkpoint: {offset})")
        time.sleep(0.3)


def batches(partition_dir: Path) -> list[dict[str, Any]]:
    """The batch headers of every segment (``kcompact inspect dump --json``)."""
    return [row for row in kcompact_json("inspect", "dump", partition_dir) if row.get("type") == "batch"]


def latest_by_key(records: list[Record]) -> dict[str | None, str | None]:
    """Each key's last value (``None`` for a tombstone), as a compacted topic promises to keep it."""
    latest: dict[str | None, str | None] = {}
    for record in records:
        latest[record.key] = record.value
    return latest


BATCH_LENGTH_END = 12  # base_offset (8) + batch_length (4)
CRC_SPAN = (17, 21)  # the CRC-32C field, after partition_leader_epoch and magic
ATTRIBUTES_SPAN = (21, 23)
V2_HEADER_SIZE = 61
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
# Codecs whose compressed bytes depend on the library build: Kafka 4.1 compresses snappy with snappy-java
# 1.1.10.7 (Google's snappy 1.1.10), kcompact with cramjam's (the Rust snap crate). lz4 and zstd match byte for
# byte (records.compression writes lz4-java's blocks and zstd-jni's stream, with the libzstd it bundles).
LIBRARY_DEPENDENT_CODECS = frozenset({2})


def split_batches(data: bytes) -> list[bytes]:
    """A ``.log`` file's v2 batches, each as its bytes."""
    out = []
    position = 0
    while position < len(data):
        length = int.from_bytes(data[position + 8:position + BATCH_LENGTH_END], "big", signed=True)
        out.append(data[position:position + BATCH_LENGTH_END + length])
        position += BATCH_LENGTH_END + length
    return out


def recompressed_differences(ours: dict[str, bytes], theirs: dict[str, bytes]) -> list[str]:
    """Compares two cleans' segment files; fails on any difference but one: a batch both rebuilt in a
    library-dependent codec whose compressed bytes differ while its header and its records are identical.
    Returns those, one line each (``file@offset codec: ours N bytes, Kafka's M``)."""
    assert sorted(ours) == sorted(theirs), "the two cleans left different segment files"
    found: list[str] = []
    logs_differing = set()
    for name in sorted(ours):
        if name.endswith(".log") and ours[name] != theirs[name]:
            logs_differing.add(name[: -len(".log")])
            ours_batches, theirs_batches = split_batches(ours[name]), split_batches(theirs[name])
            assert len(ours_batches) == len(theirs_batches), f"{name}: a different number of batches"
            for mine, kafka in zip(ours_batches, theirs_batches, strict=True):
                if mine == kafka:
                    continue
                codec = int.from_bytes(kafka[slice(*ATTRIBUTES_SPAN)], "big") & 0x7
                base_offset = int.from_bytes(kafka[:8], "big")
                where = f"{name}@{base_offset} {CODEC_NAMES.get(codec, codec)}"
                same_header = (mine[BATCH_LENGTH_END:CRC_SPAN[0]] == kafka[BATCH_LENGTH_END:CRC_SPAN[0]]
                               and mine[CRC_SPAN[1]:V2_HEADER_SIZE] == kafka[CRC_SPAN[1]:V2_HEADER_SIZE])
                assert codec in LIBRARY_DEPENDENT_CODECS and same_header, f"{where}: the batches differ"
                assert decompress(codec, mine[V2_HEADER_SIZE:]) == decompress(codec, kafka[V2_HEADER_SIZE:]), (
                    f"{where}: the records differ")
                found.append(f"{where}: ours {len(mine)} bytes, Kafka's {len(kafka)}")
    for name in sorted(ours):
        stem, suffix = name.rsplit(".", 1)
        if suffix != "log" and ours[name] != theirs[name]:
            # an offset index records byte positions, which a differently sized batch before them moves
            assert suffix == "index" and stem in logs_differing, f"{name} differs"
            assert _index_offsets(ours[name]) == _index_offsets(theirs[name]), f"{name}: different offsets"
    return found


def _index_offsets(data: bytes) -> list[int]:
    return [int.from_bytes(data[i:i + 4], "big") for i in range(0, len(data), 8)]
