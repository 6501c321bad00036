"""Kafka's own log cleaner on the benchmark's shapes, in the same run as kcompact's clean (``bench.py ratio --kafka``).

Why: the speed goals are stated against Kafka's own cleaner; a figure measured once, on another day, moves with
this VM's speed (±4 % between runs here) while the clean it is compared to is measured now. Measured beside the
clean, in the same repetitions, both see the same machine.

What runs: the referee the property tests hold kcompact to (``tests/kafka/referee/Referee.java``: one round of
Kafka 4.1's ``Cleaner.doClean`` over the partition directory, the log opened as a broker's ``LogManager`` opens
it), one JVM per run, its start included as the clean's process start is; the JVM options are the ones
``kafka-server-start.sh`` gives a broker (``KAFKA_HEAP_OPTS`` and ``KAFKA_JVM_PERFORMANCE_OPTS``), not the
referee's test settings, and the dedupe buffer is the broker's default (``log.cleaner.dedupe.buffer.size``,
128 MiB, one cleaner thread). The output is compared with kcompact's file by file (``harness.differences``):
the bench says whether Kafka's cleaner wrote the same bytes.

A log dir of many partitions (``bench.py tiny --kafka``, ``bench.py codecs240``) is cleaned in one JVM
(``kafka_clean_log_dir``): every partition's job fed to one referee running ``--threads 2``, two cleaner threads
each with its own ``Cleaner`` kept from round to round and half the dedupe buffer, as a broker's
``LogCleaner`` with ``log.cleaner.threads=2`` splits it.

Needs Java, Maven's jars (``python -m tests.kafka.jars``) and ``javac``; without them the rows say why, and
the rest of the section runs.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# the broker's own JVM settings: kafka-server-start.sh's heap, kafka-run-class.sh's performance options
BROKER_JVM_OPTIONS = ("-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                      "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                      "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true")
REPO = Path(__file__).resolve().parents[1]
DEDUPE_BUFFER_BYTES = 128 << 20  # log.cleaner.dedupe.buffer.size's default, one cleaner thread


@dataclass(frozen=True, slots=True)
class KafkaRun:
    """One round of Kafka's cleaner in its own JVM: wall seconds (JVM start included), CPU seconds of the JVM."""

    seconds: float
    cpu_seconds: float


def kafka_command() -> list[str] | str:
    """The command that runs the referee with the broker's JVM options, or why Kafka cannot run here."""
    try:
        from tests.kafka.jars import kafka_classpath
        from tests.kafka.referee.harness import compiled_classes

        classpath = os.pathsep.join([str(compiled_classes()), kafka_classpath()])
    except BaseException as err:  # pytest's skip is a BaseException: its message is the reason
        if isinstance(err, KeyboardInterrupt):
            raise
        return f"Kafka's cleaner not measured: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
    return ["java", *BROKER_JVM_OPTIONS, "-cp", classpath, "Referee"]


def kafka_clean(command: list[str], partition: Path, now_ms: int) -> KafkaRun:
    """Clean ``partition`` (changed in place) with Kafka's cleaner, one round, as ``kcompact clean`` does."""
    job = "\t".join([str(partition.resolve()), str(now_ms), str(DEDUPE_BUFFER_BYTES), "cleanup.policy=compact"])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, input=job + "\n", capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or not done.stdout.startswith("CLEANED"):
        raise SystemExit(f"Kafka's cleaner on {partition}: exit {done.returncode}, {done.stdout.strip()!r}\n"
                         f"{done.stderr[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return KafkaRun(seconds, cpu)


_COMPARE = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tests.kafka.referee.harness import differences
wrong, allowed = differences(Path(sys.argv[2]), Path(sys.argv[3]))
print("\\n".join(wrong + [name + ": codec bytes only" for name in allowed]))
"""


def same_as_kafka(ours: Path, kafka: Path) -> list[str]:
    """Where kcompact's cleaned partition differs from Kafka's (empty: the same bytes, checkpoint included).

    In a child process: the comparison reads every segment whole, and a child forked later would inherit the
    peak (Linux carries ``ru_maxrss`` over fork and exec), spoiling the next clean's peak RSS."""
    done = subprocess.run([sys.executable, "-c", _COMPARE, str(REPO), str(ours), str(kafka)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"comparing {ours} with {kafka} failed:\n{done.stderr[-2000:]}")
    return [line for line in done.stdout.splitlines() if line]


def kafka_clean_log_dir(command: list[str], partitions: list[Path], now_ms: int, threads: int) -> KafkaRun:
    """Clean every one of ``partitions`` (changed in place) with Kafka's cleaner, one round each, in one JVM of
    ``threads`` cleaner threads (the referee's ``--threads``), each given ``DEDUPE_BUFFER_BYTES / threads`` as
    ``LogCleaner.CleanerThread`` sizes its offset map."""
    dedupe = str(DEDUPE_BUFFER_BYTES // threads)
    jobs = "".join("\t".join([str(p.resolve()), str(now_ms), dedupe, "cleanup.policy=compact"]) + "\n"
                   for p in partitions)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([*command, "--threads", str(threads)], input=jobs, capture_output=True, text=True,
                          check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    results = done.stdout.splitlines()
    failed = [line for line in results if not line.startswith(("CLEANED", "NOTHING"))]
    if done.returncode != 0 or failed or len(results) != len(partitions):
        raise SystemExit(f"Kafka's cleaner on {len(partitions)} partitions: exit {done.returncode}, "
                         f"{len(results)} results, {failed[:3]!r}\n{done.stderr[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return KafkaRun(seconds, cpu)
