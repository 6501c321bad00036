"""Kafka 4.1's jars, resolved from Maven Central through ``tests/kafka/pom.xml`` into a cache outside the
repository, once per machine.

The cache is ``$KCOMPACT_KAFKA_LIBS`` or ``~/.cache/kcompact/kafka-<version>``; a ``.complete`` marker holding
the pom's sha256 is written only after Maven copied every jar, so an interrupted download is done again, and so
is one made for an older pom (a dependency added later is copied in on first use). ``.ci/run`` calls
``python -m tests.kafka.jars`` before the tests (one line: the directory); a test that needs the jars calls
:func:`kafka_classpath`, which resolves on first use, or skips with the reason where Java or Maven is missing
(never in CI: ``KCOMPACT_REQUIRE_KAFKA=1`` turns that skip into a failure).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.maven import missing_tool, pom_property, resolve_jars

POM = Path(__file__).with_name("pom.xml")
REQUIRE_ENV = "KCOMPACT_REQUIRE_KAFKA"
LIBS_ENV = "KCOMPACT_KAFKA_LIBS"


class KafkaUnavailable(RuntimeError):
    """Java or Maven is missing, or Maven could not resolve the jars."""


def kafka_version() -> str:
    """The Kafka version the pom pins."""
    version = pom_property(POM, "kafka.version")
    if version is None:
        raise KafkaUnavailable(f"{POM}: no <kafka.version> property")
    return version


def libs_dir() -> Path:
    """Where the jars are cached (outside the repository)."""
    override = os.environ.get(LIBS_ENV)
    if override:
        return Path(override)
    return Path.home() / ".cache" / "kcompact" / f"kafka-{kafka_version()}"


def why_unavailable() -> str | None:
    """Why Kafka cannot run here (no java or no mvn on PATH), or None."""
    tool = missing_tool()
    return None if tool is None else f"{tool} not on PATH: Kafka {kafka_version()}'s broker cannot run in the tests"


def resolve() -> Path:
    """Copy the pom's dependencies into :func:`libs_dir` unless already there; returns that directory.

    Raises:
        KafkaUnavailable: java or mvn is missing, or Maven failed (its output in the message).
    """
    return resolve_jars(POM, libs_dir(), KafkaUnavailable, why_unavailable())


def kafka_classpath() -> str:
    """The classpath of every resolved jar; skips the calling test where Kafka cannot run (fails in CI)."""
    import pytest

    try:
        directory = resolve()
    except KafkaUnavailable as err:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but Kafka is unavailable: {err}")
        pytest.skip(str(err))
    return os.pathsep.join(str(jar) for jar in sorted(directory.glob("*.jar")))


def main() -> int:
    """``python -m tests.kafka.jars``: resolve, print the directory."""
    try:
        print(resolve())
    except KafkaUnavailable as err:
        print(f"kafka jars: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
