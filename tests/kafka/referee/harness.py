"""Kafka 4.1's own log cleaner as a referee: ``Referee.java`` compiled once and served from one JVM.

The Java source beside this module runs one cleaning round of Kafka's ``Cleaner`` over a partition directory
(its header says exactly which inputs it takes, the same kcompact reads). It is compiled with ``javac``
against the jars of ``tests/kafka/jars.py`` into a cache outside the repository, keyed by a hash of the
source and the Kafka version, so a changed source is compiled again and no class file is ever committed.
One JVM (:class:`Referee`) serves a whole test session: a job a line on its stdin, a result a line on its
stdout, so a property test pays the JVM's start once, not per example.

The comparison helpers read what both cleaners must agree on byte for byte: every segment's ``.log``,
``.index``, ``.timeindex`` and ``.txnindex`` (which files exist, and their bytes) and the partition's
``cleaner-offset-checkpoint`` entry. Everything else a broker's loader writes (producer snapshots,
``leader-epoch-checkpoint``, ``.deleted`` files) is the loader's business, not the cleaner's.

One difference is allowed, and only one: the compressed bytes of a snappy batch either cleaner rebuilt.
Kafka's source fixes the codec and the framing (``SnappyCompression``: snappy-java's xerial stream of
32 KiB blocks), not the match finder: those bytes are whatever the library's compressor emits, and the
libraries differ (snappy-java binds Google's C++ snappy, kcompact's cramjam the Rust ``snap`` crate).
:func:`codec_bytes_only` accepts such a batch when every header field but its length and CRC is the same and
its records decompress to the same bytes; the offset index may then point at other positions, but at the
same batches. zstd is held byte for byte: kcompact pins python's zstandard to the libzstd Kafka 4.1's
zstd-jni bundles (1.5.6), and the stream's shape is Kafka's (``records.compression``); lz4 likewise.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from kcompact.errors import KcompactError
from kcompact.records.batch import iter_batches
from kcompact.records.batch_header import RECORD_BATCH_OVERHEAD
from kcompact.records.compression import decompress
from kcompact.segment.checkpoint import read_offset_checkpoint
from kcompact.segment.names import parse_segment_file_name
from kcompact.segment.offset_index import decode_offset_index
from tests.kafka.jars import REQUIRE_ENV, kafka_classpath, kafka_version

SOURCE = Path(__file__).with_name("Referee.java")
COMPARED_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
LIBRARY_DEFINED_CODECS = (2,)  # snappy: see the module docstring
_CODEC_MASK = 0x07
# a small heap is plenty (the offset map is at most 64 MiB); C1 only: the rounds are short
JVM_OPTIONS = ("-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


@dataclass(frozen=True, slots=True)
class RefereeJob:
    """One round: the partition directory, the clock, the dedupe buffer (None: every key fits), the topic config."""

    partition_dir: Path
    now_ms: int
    dedupe_buffer_size: int | None = None
    config: Mapping[str, str] = field(default_factory=dict)

    def line(self) -> str:
        pairs = [f"{key}={value}" for key, value in self.config.items()]
        for text in (str(self.partition_dir), *pairs):
            if "\t" in text or "\n" in text:
                raise ValueError(f"a tab or newline in a referee job: {text!r}")
        fields = [str(self.partition_dir.resolve()), str(self.now_ms), str(self.dedupe_buffer_size or 0), *pairs]
        return "\t".join(fields)


@dataclass(frozen=True, slots=True)
class RefereeResult:
    """What Kafka's cleaner did: ``cleaned`` (a round ran), ``nothing`` (no cleanable bytes), or ``error``."""

    status: str
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None
    end_offset: int | None = None
    error: str | None = None


def compiled_classes(source: Path = SOURCE) -> Path:
    """The directory of ``source``'s classes (``Referee.java``, or another harness beside it such as
    ``LineageWalk.java``), compiled on first use (skips where Kafka cannot run)."""
    classpath = kafka_classpath()
    if shutil.which("javac") is None:
        _unavailable("javac not on PATH (a JRE without the JDK): Kafka's cleaner cannot be compiled as referee")
    digest = hashlib.sha256(source.read_bytes() + kafka_version().encode()).hexdigest()[:16]
    cache = Path(os.environ.get("KCOMPACT_REFEREE_CACHE", Path.home() / ".cache" / "kcompact"))
    target = cache / f"{source.stem.lower()}-{digest}"
    main_class = f"{source.stem}.class"
    if (target / main_class).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # several pytest processes may compile at once
        if (target / main_class).exists():
            return target
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
        done = subprocess.run(
            ["javac", "-nowarn", "-d", str(staging), "-cp", classpath, str(source)],
            check=False, capture_output=True, text=True, timeout=300,
        )
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise RuntimeError(f"javac failed on {source}:\n{done.stdout}{done.stderr}")
        staging.rename(target)  # whole or not at all
    return target


def _unavailable(reason: str) -> None:
    """Skip the calling test, or fail it where Kafka must run (``KCOMPACT_REQUIRE_KAFKA=1``, as in CI)."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
    pytest.skip(reason)


class Referee:
    """One JVM running Kafka's cleaner on request; its Kafka logging goes to ``log_path``."""

    def __init__(self, log_path: Path) -> None:
        classes = compiled_classes()
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 (held for the JVM's life, closed by close())
        command = ["java", *JVM_OPTIONS, "-cp", os.pathsep.join([str(classes), kafka_classpath()]), "Referee"]
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1
        )

    def clean(self, job: RefereeJob) -> RefereeResult:
        """Run one round of Kafka's cleaner on ``job.partition_dir`` (changed in place)."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(job.line() + "\n")
        self._process.stdin.flush()
        reply = self._process.stdout.readline()
        if not reply:
            raise RuntimeError(f"the referee JVM ended (exit {self._process.wait()}); its log: {self.log_path}")
        fields = reply.rstrip("\n").split("\t")
        if fields[0] == "ERROR":
            return RefereeResult("error", error=fields[2])
        offsets: list[int | None] = [int(value) for value in fields[2:]]
        first_dirty, first_uncleanable, end = (offsets + [None, None, None])[:3]
        status = "nothing" if fields[0] == "NOTHING" else "cleaned"
        return RefereeResult(status, first_dirty, first_uncleanable, end)

    def close(self) -> None:
        """End the JVM (its stdin closed: it finishes the job at hand and exits)."""
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


def compared_files(partition_dir: Path) -> dict[str, bytes]:
    """Every segment file both cleaners must leave alike: name to bytes."""
    return {
        path.name: path.read_bytes()
        for path in sorted(partition_dir.iterdir())
        if path.is_file() and path.suffix in COMPARED_SUFFIXES
    }


def cleaner_checkpoint(partition_dir: Path) -> int | None:
    """The partition's ``cleaner-offset-checkpoint`` entry in its log dir, or None."""
    path = partition_dir.parent / "cleaner-offset-checkpoint"
    if not path.exists():
        return None
    topic, _, partition = partition_dir.name.rpartition("-")
    return read_offset_checkpoint(path).get((topic, int(partition)))


def codec_bytes_only(ours: bytes, theirs: bytes) -> dict[int, int] | None:
    """Whether two ``.log`` files differ only in the compressed bytes of snappy batches.

    Returns:
        None when they differ otherwise; else each batch position in ``ours`` mapped to the position of
        the same batch in ``theirs`` (for the offset indexes).
    """
    try:
        mine, kafka = list(iter_batches(ours)), list(iter_batches(theirs))
    except KcompactError:
        return None  # legacy entries: never rebuilt as such, so bytes must match
    if len(mine) != len(kafka):
        return None
    for a, b in zip(mine, kafka, strict=True):
        if bytes(a.buffer) == bytes(b.buffer):
            continue
        codec = a.attributes & _CODEC_MASK
        same_header = all(getattr(a, name) == getattr(b, name) for name in _HEADER_FIELDS)
        if codec not in LIBRARY_DEFINED_CODECS or not same_header:
            return None
        payloads = [bytes(batch.buffer[RECORD_BATCH_OVERHEAD:]) for batch in (a, b)]
        if decompress(codec, payloads[0]) != decompress(codec, payloads[1]):
            return None
    return {a.position: b.position for a, b in zip(mine, kafka, strict=True)}


_HEADER_FIELDS = ("base_offset", "partition_leader_epoch", "magic", "attributes", "last_offset_delta",
                  "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence",
                  "records_count")


def differences(ours: Path, theirs: Path) -> tuple[list[str], list[str]]:
    """How two cleaned partition directories differ: (disagreements, allowed codec-byte differences).

    Every compared file must exist in both with the same bytes, except a ``.log`` whose only differences
    are :func:`codec_bytes_only`'s, whose ``.index`` may then differ in positions of the same batches.
    """
    mine, kafka = compared_files(ours), compared_files(theirs)
    if sorted(mine) != sorted(kafka):
        return [f"segment files: kcompact {sorted(mine)}, Kafka {sorted(kafka)}"], []
    wrong: list[str] = []
    allowed: list[str] = []
    for name, data in mine.items():
        if data == kafka[name] or name.endswith(".index"):
            continue
        moved = codec_bytes_only(data, kafka[name]) if name.endswith(".log") else None
        if moved is None:
            wrong.append(f"{name}: {first_difference(data, kafka[name])}")
            continue
        allowed.append(name)
        index = name[: -len(".log")] + ".index"
        if mine.get(index, b"") != kafka.get(index, b"") and not _same_batches(index, mine, kafka, moved):
            wrong.append(f"{index}: other batches indexed")
    for name, data in mine.items():
        log = name[: -len(".index")] + ".log"
        if name.endswith(".index") and data != kafka[name] and log not in allowed:
            wrong.append(f"{name}: {first_difference(data, kafka[name])}")
    if cleaner_checkpoint(ours) != cleaner_checkpoint(theirs):
        wrong.append(f"cleaner-offset-checkpoint: kcompact {cleaner_checkpoint(ours)}, "
                     f"Kafka {cleaner_checkpoint(theirs)}")
    return wrong, allowed


def _same_batches(index: str, mine: dict[str, bytes], kafka: dict[str, bytes], moved: dict[int, int]) -> bool:
    parsed = parse_segment_file_name(index)
    base = parsed.base_offset if parsed is not None else 0
    ours, theirs = decode_offset_index(mine[index], base), decode_offset_index(kafka[index], base)
    return len(ours) == len(theirs) and all(
        a.offset == b.offset and moved.get(a.position) == b.position for a, b in zip(ours, theirs, strict=True)
    )


def first_difference(a: bytes, b: bytes) -> str:
    """Where two files first differ (for a failure message)."""
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"first difference at byte {at} (kcompact {len(a)} bytes, Kafka {len(b)} bytes)"
