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

from kcompact.segment.checkpoint import read_offset_checkpoint
from tests.kafka.jars import kafka_classpath, kafka_version

SOURCE = Path(__file__).with_name("Referee.java")
COMPARED_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
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


def compiled_classes() -> Path:
    """The directory of ``Referee``'s classes, compiled on first use (skips where Kafka cannot run)."""
    classpath = kafka_classpath()
    digest = hashlib.sha256(SOURCE.read_bytes() + kafka_version().encode()).hexdigest()[:16]
    target = Path(os.environ.get("KCOMPACT_REFEREE_CACHE", Path.home() / ".cache" / "kcompact")) / f"referee-{digest}"
    if (target / "Referee.class").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # several pytest processes may compile at once
        if (target / "Referee.class").exists():
            return target
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
        done = subprocess.run(
            ["javac", "-nowarn", "-d", str(staging), "-cp", classpath, str(SOURCE)],
            check=False, capture_output=True, text=True, timeout=300,
        )
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise RuntimeError(f"javac failed on {SOURCE}:\n{done.stdout}{done.stderr}")
        staging.rename(target)  # whole or not at all
    return target


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
        offsets = [int(value) for value in fields[2:]]
        if fields[0] == "NOTHING":
            return RefereeResult("nothing", *offsets)
        return RefereeResult("cleaned", *offsets)

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
