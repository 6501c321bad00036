"""Fixtures for the tests that run Apache Kafka 4.1 itself (marked ``broker``).

``kafka`` makes nodes under the test's ``tmp_path`` (:class:`Kafka`); every node a test started is killed at its
end if still running, and when the test fails the tail of each node's own ``server.log`` is added to the report.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kafka.broker import KafkaCluster, single_node, three_brokers
from tests.kafka.clients import Clients
from tests.kafka.jars import kafka_classpath


class Kafka:
    """Starts nodes for one test: a fresh single broker, a broker on an existing log dir, three brokers."""

    def __init__(self, classpath: str, root: Path) -> None:
        self.classpath = classpath
        self.root = root
        self.clusters: list[KafkaCluster] = []
        self.clients = Clients(classpath, root / "clients")

    def _home(self, name: str) -> Path:
        return self.root / "homes" / f"{len(self.clusters)}-{name}"

    def single(self, log_dir: Path, overrides: dict[str, str] | None = None, start: bool = True) -> KafkaCluster:
        """A new combined broker and controller, formatted on ``log_dir`` (created), started."""
        cluster = single_node(self.classpath, log_dir, self._home(log_dir.name))
        cluster.overrides.update(overrides or {})
        self.clusters.append(cluster)
        cluster.format()
        if start:
            cluster.start()
        return cluster

    def on(self, log_dir: Path, overrides: dict[str, str] | None = None, start: bool = True) -> KafkaCluster:
        """A combined node on an existing log dir (a stopped broker's, or a copy of it), started."""
        node_id = int(_meta_properties(log_dir)["node.id"])
        cluster = single_node(self.classpath, log_dir, self._home(log_dir.name), node_id)
        cluster.overrides.update(overrides or {})
        self.clusters.append(cluster)
        if start:
            cluster.start()
        return cluster

    def three(self, overrides: dict[str, str] | None = None) -> KafkaCluster:
        """A controller and three brokers, formatted and started."""
        cluster = three_brokers(self.classpath, self.root / f"cluster-{len(self.clusters)}")
        cluster.overrides.update(overrides or {})
        self.clusters.append(cluster)
        cluster.format()
        cluster.start()
        return cluster

    def three_on(self, root: Path, overrides: dict[str, str] | None = None) -> KafkaCluster:
        """A controller and three brokers on existing log dirs ``root/<id>/logs`` (copies of a stopped
        :meth:`three` cluster's), not started."""
        cluster = three_brokers(self.classpath, root)
        cluster.overrides.update(overrides or {})
        self.clusters.append(cluster)
        return cluster

    def report(self) -> str:
        return "\n".join(cluster.report() for cluster in self.clusters)

    def kill_all(self) -> None:
        self.clients.kill_hung()
        for cluster in self.clusters:
            cluster.kill()


def _meta_properties(log_dir: Path) -> dict[str, str]:
    lines = (log_dir / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    kafka = getattr(item, "_kcompact_kafka", None)
    if kafka is not None and report.failed:
        report.sections.append(("Kafka's own logs (tails)", kafka.report()))
    return report


@pytest.fixture
def kafka(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kafka]:
    """Kafka nodes for this test (skips where Java or Maven is missing; fails instead in CI)."""
    started = Kafka(kafka_classpath(), tmp_path / "kafka")
    request.node._kcompact_kafka = started
    yield started
    started.kill_all()
