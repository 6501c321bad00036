"""Apache Kafka 4.1 KRaft nodes the tests format, start, stop and kill, every port on 127.0.0.1.

A :class:`KafkaCluster` is either one combined node (``process.roles=broker,controller``: the single broker most
scenarios use) or one controller and N broker-only nodes (a controller apart, so that stopping every broker is a
controlled shutdown the controller sees through). Each node has its own log dir, given by the test (under its
``tmp_path``), and a home beside it for its ``server.properties`` and, per start, its own ``server.log``.

Ports are chosen afresh at every start (a static quorum, ``controller.quorum.voters``, keeps the controllers'
addresses out of the metadata log), so a log dir can be stopped, copied and started again anywhere — which is what
most scenarios do. A node is ready when its own log says ``Kafka Server started`` (a broker says it only once the
controller has unfenced it); :meth:`KafkaCluster.stop` sends SIGTERM and requires the clean shutdown marker
(``.kafka_cleanshutdown``) that ``LogManager.shutdown`` leaves; :meth:`KafkaCluster.kill` is ``kill -9``.

Memory and start-up are kept small: ``-Xmx256m``, the serial collector, the C1 compiler only, one partition
for each internal topic, no initial delays.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
JVM_OPTIONS = ("-Xmx256m", "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 90.0

# Settings for every node: small and quick, nothing created that a test did not ask for.
BASE_PROPERTIES = {
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.initial.task.delay.ms": "0",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "background.threads": "2",
}


class KafkaError(RuntimeError):
    """A node did not start, stop or format as it should (its log's tail in the message)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 free right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def new_cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` prints it (a base64url UUID), never starting with
    ``-``: Kafka's ``Uuid.randomUuid`` draws again for those, and ``kafka-storage format -t`` would take
    one for an option (1 format in 64 failed so)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def java_command(classpath: str, main_class: str, *args: str, logs_dir: Path,
                 jvm_options: tuple[str, ...] = ()) -> list[str]:
    """``java`` with the tests' small JVM (and ``jvm_options``), Kafka's classpath and its log4j2 config writing
    to ``logs_dir``."""
    return ["java", *JVM_OPTIONS, *jvm_options, f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            f"-Dkafka.logs.dir={logs_dir}", "-cp", classpath, main_class, *args]


def write_properties(path: Path, properties: dict[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))


def tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of a text file ('' where it does not exist)."""
    if not path.exists():
        return ""
    return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])


@dataclass
class KafkaNode:
    """One KRaft node: its id, roles, log dir, and the process while it runs."""

    classpath: str
    node_id: int
    roles: str
    log_dir: Path
    home: Path
    broker_port: int = 0
    controller_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    runs: int = 0
    start_seconds: list[float] = field(default_factory=list)
    jvm_options: tuple[str, ...] = ()  # added to the broker's JVM at its next start (e.g. JMX)
    own_properties: dict[str, str] = field(default_factory=dict)  # this node's only (e.g. broker.rack), last

    @property
    def run_dir(self) -> Path:
        """Where the current (or last) start writes its ``server.log`` and stdout."""
        return self.home / f"run-{self.runs}"

    @property
    def server_log(self) -> Path:
        return self.run_dir / "server.log"

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    def properties(self, voters: str, overrides: dict[str, str]) -> dict[str, str]:
        listeners = []
        if self.is_broker:
            listeners.append(f"PLAINTEXT://127.0.0.1:{self.broker_port}")
        if self.is_controller:
            listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_port}")
        properties = {
            **BASE_PROPERTIES,
            "process.roles": self.roles,
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners),
            "log.dirs": str(self.log_dir),
        }
        if self.is_broker:
            properties["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.broker_port}"
        properties.update(overrides)
        properties.update(self.own_properties)
        return properties

    def format(self, cluster_id: str, voters: str, overrides: dict[str, str]) -> None:
        """``kafka-storage format`` of this node's log dir (a static quorum)."""
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.home / "format.properties"
        write_properties(config, self.properties(voters, overrides))
        command = java_command(self.classpath, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                               "-c", str(config), logs_dir=self.home / "format")
        failures = []
        # Tried twice: one full broker run of the suite (of several) saw this JVM fail once, the cause not
        # kept; the second try accepts a log dir the first one already formatted (--ignore-formatted).
        for attempt in (command, [*command, "--ignore-formatted"]):
            done = subprocess.run(attempt, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)
            if done.returncode == 0:
                return
            failures.append(f"exit {done.returncode}:\n{done.stdout}{done.stderr}")
            (self.home / f"format-failure-{len(failures)}.txt").write_text(failures[-1])
        raise KafkaError(f"kafka-storage format of node {self.node_id} failed twice:\n" + "\n".join(failures))

    def start(self, voters: str, overrides: dict[str, str]) -> None:
        """Starts the JVM on this node's log dir (see :meth:`wait_started`)."""
        self.runs += 1
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config = self.run_dir / "server.properties"
        write_properties(config, self.properties(voters, overrides))
        with open(self.run_dir / "stdout.txt", "wb") as stdout:
            self.process = subprocess.Popen(
                java_command(self.classpath, "kafka.Kafka", str(config), logs_dir=self.run_dir,
                             jvm_options=self.jvm_options),
                stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_started(self, started_at: float, deadline: float) -> None:
        marker = f"[KafkaRaftServer nodeId={self.node_id}] Kafka Server started"
        while True:
            if self.server_log.exists() and marker in self.server_log.read_text(errors="replace"):
                self.start_seconds.append(time.monotonic() - started_at)
                return
            if self.process is None or self.process.poll() is not None:
                raise KafkaError(f"node {self.node_id} exited while starting:\n{self.report()}")
            if time.monotonic() > deadline:
                raise KafkaError(f"node {self.node_id} not started after {START_TIMEOUT_S:.0f}s:\n{self.report()}")
            time.sleep(0.2)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def terminate(self) -> None:
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)

    def wait_stopped(self, deadline: float) -> None:
        """Waits for the JVM to exit after SIGTERM; a broker must leave the clean shutdown marker (a controller
        alone has no ``LogManager`` to write it)."""
        if self.process is None:
            return
        try:
            self.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired as err:
            self.kill()
            raise KafkaError(
                f"node {self.node_id} ignored SIGTERM for {STOP_TIMEOUT_S:.0f}s:\n{self.report()}") from err
        self.process = None
        if self.is_broker and not (self.log_dir / CLEAN_SHUTDOWN_MARKER).exists():
            raise KafkaError(f"node {self.node_id} stopped without {CLEAN_SHUTDOWN_MARKER}:\n{self.report()}")

    def kill(self) -> None:
        """``kill -9``: no shutdown, no marker (a crash)."""
        if self.process is not None:
            if self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.process = None

    def report(self, lines: int = 60) -> str:
        """The tail of this node's own log and stdout of its current (or last) start."""
        parts = [f"--- node {self.node_id} ({self.roles}) {self.server_log} ---", tail(self.server_log, lines)]
        stdout = tail(self.run_dir / "stdout.txt", 20)
        if stdout.strip():
            parts += [f"--- node {self.node_id} stdout ---", stdout]
        return "\n".join(parts)


@dataclass
class KafkaCluster:
    """One combined node, or a controller and broker-only nodes; ``overrides`` go into every node's config."""

    nodes: list[KafkaNode]
    overrides: dict[str, str] = field(default_factory=dict)

    @property
    def brokers(self) -> list[KafkaNode]:
        return [node for node in self.nodes if node.is_broker]

    @property
    def controllers(self) -> list[KafkaNode]:
        return [node for node in self.nodes if node.is_controller]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{node.broker_port}" for node in self.brokers if node.running)

    def voters(self) -> str:
        return ",".join(f"{node.node_id}@127.0.0.1:{node.controller_port}" for node in self.controllers)

    def format(self) -> None:
        cluster_id = new_cluster_id()
        for node in self.controllers:
            node.controller_port = free_port()
        for node in self.nodes:
            node.format(cluster_id, self.voters(), self.overrides)

    def start(self, nodes: list[KafkaNode] | None = None, same_ports: bool = False) -> None:
        """Starts the given nodes (all by default) and waits until each is ready: on fresh ports, or
        ``same_ports`` on those of their last start (an address printed while they were stopped)."""
        chosen = self.nodes if nodes is None else nodes
        for node in chosen:
            if not (same_ports and node.broker_port):
                node.broker_port = free_port() if node.is_broker else 0
            # a controller's port is in every node's quorum: it moves only when all of them start
            if node.is_controller and (nodes is None or node.controller_port == 0) and not (
                    same_ports and node.controller_port):
                node.controller_port = free_port()
        started_at = time.monotonic()
        for node in chosen:
            node.start(self.voters(), self.overrides)
        deadline = started_at + START_TIMEOUT_S
        for node in chosen:
            node.wait_started(started_at, deadline)

    def stop(self, nodes: list[KafkaNode] | None = None) -> None:
        """SIGTERM: the brokers first (each a controlled shutdown), then the controllers; each must stop clean."""
        chosen = self.nodes if nodes is None else nodes
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for wave in ([n for n in chosen if not n.is_controller], [n for n in chosen if n.is_controller]):
            for node in wave:
                node.terminate()
            for node in wave:
                node.wait_stopped(deadline)

    def kill(self, nodes: list[KafkaNode] | None = None) -> None:
        for node in self.nodes if nodes is None else nodes:
            node.kill()

    def report(self) -> str:
        return "\n".join(node.report() for node in self.nodes if node.runs)


# A single broker's internal topics have one replica.
SINGLE_NODE_PROPERTIES = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}


def single_node(classpath: str, log_dir: Path, home: Path, node_id: int = 1) -> KafkaCluster:
    """One combined broker and controller on ``log_dir`` (formatted by the caller where new)."""
    return KafkaCluster([KafkaNode(classpath, node_id, "broker,controller", log_dir, home)],
                        dict(SINGLE_NODE_PROPERTIES))


def three_brokers(classpath: str, root: Path) -> KafkaCluster:
    """A controller (node 0) and brokers 1, 2, 3, each with its own log dir ``root/<id>/logs``."""
    nodes = [KafkaNode(classpath, 0, "controller", root / "0" / "logs", root / "0" / "home")]
    nodes += [KafkaNode(classpath, i, "broker", root / str(i) / "logs", root / str(i) / "home") for i in (1, 2, 3)]
    return KafkaCluster(nodes)
