"""Kafka's own Java producer, consumer and admin client, and its command-line tools, run from the tests.

``java/KcompactClients.java`` (its header says the JSON it reads and prints) is compiled with ``javac`` against
Kafka's classpath once per source version, into a cache outside the repository beside the jars. The Java
producer is the point: it writes zstd through zstd-jni's ``ZstdOutputStream`` (frames of several blocks, the last
one empty), idempotent and transactional batches, exactly as a real producer writes them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tests.kafka.broker import java_command
from tests.kafka.jars import libs_dir

if TYPE_CHECKING:
    from kafka import KafkaConsumer, TopicPartition

IsolationLevel = Literal["read_uncommitted", "read_committed"]

SOURCE = Path(__file__).with_name("java") / "KcompactClients.java"
MAIN_CLASS = "KcompactClients"
RUN_TIMEOUT_S = 180.0


class ClientError(RuntimeError):
    """A client run failed (its stderr in the message)."""


def compiled_classes(classpath: str) -> Path:
    """The directory of the compiled client (compiled on first use, keyed by the source's sha256)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    target = libs_dir().parent / f"clients-{digest}"
    if (target / f"{MAIN_CLASS}.class").exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".clients-{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / f"{MAIN_CLASS}.class").exists():
            done = subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", str(target), str(SOURCE)],
                                  capture_output=True, text=True, check=False, timeout=RUN_TIMEOUT_S)
            if done.returncode != 0:
                raise ClientError(f"javac {SOURCE.name} failed:\n{done.stdout}{done.stderr}")
    return target


@dataclass(frozen=True, slots=True)
class Record:
    """One record as the consumer returned it."""

    partition: int
    offset: int
    key: str | None
    value: str | None
    headers: tuple[tuple[str, str | None], ...]
    timestamp: int
    timestamp_type: str


@dataclass
class Clients:
    """The Java clients against one classpath; ``work`` holds their logs."""

    classpath: str
    work: Path
    hung: list[subprocess.Popen[str]] = field(default_factory=list)  # producers waiting to be killed

    def _command(self, *args: str) -> list[str]:
        classes = compiled_classes(self.classpath)
        self.work.mkdir(parents=True, exist_ok=True)
        return java_command(f"{classes}{os.pathsep}{self.classpath}", MAIN_CLASS, *args, logs_dir=self.work)

    def run(self, command: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
        """Runs one command with ``spec`` on stdin; the JSON lines it printed."""
        done = subprocess.run(self._command(command), input=json.dumps(spec), capture_output=True, text=True,
                              check=False, timeout=RUN_TIMEOUT_S)
        if done.returncode != 0:
            raise ClientError(f"{command} failed ({done.returncode}):\n{done.stderr[-6000:]}")
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    def create_topic(self, bootstrap: str, name: str, configs: dict[str, str] | None = None,
                     partitions: int = 1, replication_factor: int = 1) -> None:
        self.run("admin", {"bootstrap": bootstrap, "create_topics": [
            {"name": name, "partitions": partitions, "replication_factor": replication_factor,
             "configs": configs or {}}]})

    def produce(self, bootstrap: str, topic: str, steps: list[dict[str, Any]],
                config: dict[str, str] | None = None,
                producers: dict[str, dict[str, str]] | None = None) -> list[int]:
        """Runs the producers' steps (see the Java source); the offset of every record sent, in order.

        ``config`` applies to every producer; ``producers`` names several (a step's ``producer`` picks one).
        """
        spec: dict[str, Any] = {"bootstrap": bootstrap, "topic": topic, "config": config or {}, "steps": steps}
        if producers:
            spec["producers"] = producers
        lines = self.run("produce", spec)
        return [line["offset"] for line in lines if "offset" in line]

    def produce_then_hang(self, bootstrap: str, topic: str, steps: list[dict[str, Any]],
                          config: dict[str, str]) -> tuple[subprocess.Popen[str], list[int]]:
        """Starts a producer that runs ``steps``, flushes and waits to be killed (``kill -9``: it never ends
        its transaction); returns it once it waits, and the offsets of the records it sent."""
        process = subprocess.Popen(self._command("produce"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        self.hung.append(process)
        assert process.stdin is not None and process.stdout is not None
        spec = {"bootstrap": bootstrap, "topic": topic, "config": config, "steps": [*steps, {"await_kill": True}]}
        process.stdin.write(json.dumps(spec))
        process.stdin.close()
        offsets: list[int] = []
        for line in process.stdout:
            if '"awaiting_kill"' in line:
                return process, offsets
            if line.startswith("{") and '"offset"' in line:
                offsets.append(json.loads(line)["offset"])
        process.wait()
        assert process.stderr is not None
        raise ClientError(f"producer exited before it was killed:\n{process.stderr.read()[-6000:]}")

    def produce_in_background(self, bootstrap: str, topic: str, steps: list[dict[str, Any]],
                              config: dict[str, str]) -> subprocess.Popen[str]:
        """Starts a producer that runs ``steps`` and returns at once: its stdout gives a ``{"partition",
        "offset"}`` line per record as the broker acknowledges it (the test kills the producer, or its broker,
        mid-way; it is killed at the end of the test if still running)."""
        process = subprocess.Popen(self._command("produce"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
        self.hung.append(process)
        assert process.stdin is not None
        process.stdin.write(json.dumps({"bootstrap": bootstrap, "topic": topic, "config": config, "steps": steps}))
        process.stdin.close()
        return process

    def consume(self, bootstrap: str, topic: str, isolation_level: str, partitions: tuple[int, ...] = (0,),
                timeout_ms: int = 60000, config: dict[str, str] | None = None) -> list[Record]:
        """Every record from the log start to the end offset (the LSO under read_committed); ``config``: more
        consumer settings (e.g. ``client.rack``)."""
        lines = self.run("consume", {"bootstrap": bootstrap, "topic": topic, "partitions": list(partitions),
                                     "isolation_level": isolation_level, "timeout_ms": timeout_ms,
                                     "config": config or {}})
        return [Record(line["partition"], line["offset"], line["key"], line["value"],
                       tuple((k, v) for k, v in line["headers"]), line["timestamp"], line["timestamp_type"])
                for line in lines if "offset" in line]

    def end_positions(self, bootstrap: str, topic: str, isolation_level: str,
                      partitions: tuple[int, ...] = (0,)) -> dict[int, int]:
        """Per partition the end offset a consumer reads to (the LSO under read_committed)."""
        lines = self.run("consume", {"bootstrap": bootstrap, "topic": topic, "partitions": list(partitions),
                                     "isolation_level": isolation_level})
        return {line["partition"]: line["end_offset"] for line in lines if "end_offset" in line}

    def kill_hung(self) -> None:
        for process in self.hung:
            if process.poll() is None:
                process.kill()
            process.wait()

    def tool(self, main_class: str, *args: str) -> subprocess.CompletedProcess[str]:
        """One of Kafka's command-line tools by its main class (``kafka-transactions`` is
        ``org.apache.kafka.tools.TransactionsCommand``)."""
        return subprocess.run(java_command(self.classpath, main_class, *args, logs_dir=self.work),
                              capture_output=True, text=True, check=False, timeout=RUN_TIMEOUT_S)


def python_consume(bootstrap: str, topic: str, isolation_level: IsolationLevel, partition: int = 0,
                   timeout_s: float = 60.0) -> list[Record]:
    """What kafka-python's consumer reads of one partition, from the log start to the end offset."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation_level,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        assigned = TopicPartition(topic, partition)
        consumer.assign([assigned])
        consumer.seek_to_beginning(assigned)
        end = consumer.end_offsets([assigned])[assigned]
        records: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while _position(consumer, assigned) < end:
            if time.monotonic() > deadline:
                raise ClientError(f"kafka-python did not reach offset {end} of {topic}-{partition}")
            for record in consumer.poll(timeout_ms=200).get(assigned, []):
                records.append(Record(
                    record.partition, record.offset, _text(record.key), _text(record.value),
                    tuple((key, _text(value)) for key, value in record.headers), record.timestamp,
                    "CreateTime" if record.timestamp_type == 0 else "LogAppendTime"))
        return records
    finally:
        consumer.close()


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode()


def _position(consumer: KafkaConsumer, partition: TopicPartition) -> int:
    position = consumer.position(partition)
    assert position is not None  # an assigned partition has one (kafka-python resets it if need be)
    return position
