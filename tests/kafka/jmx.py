"""A broker's JMX metrics, read with Kafka's own ``JmxTool`` (``kafka-jmx.sh``, in kafka-tools).

:func:`jmx_options` opens a JVM's JMX connector on 127.0.0.1 only (one port for the registry and the
connector, no authentication, no TLS: a test's own broker); :func:`read_gauge` polls one MBean once.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.kafka.broker import java_command

JMX_TOOL = "org.apache.kafka.tools.JmxTool"
TOOL_TIMEOUT_S = 120.0


def jmx_options(port: int) -> tuple[str, ...]:
    """JVM options for a JMX connector on ``127.0.0.1:port`` (registry and connector on the same port)."""
    return ("-Dcom.sun.management.jmxremote",
            f"-Dcom.sun.management.jmxremote.port={port}",
            f"-Dcom.sun.management.jmxremote.rmi.port={port}",
            "-Dcom.sun.management.jmxremote.host=127.0.0.1",
            "-Djava.rmi.server.hostname=127.0.0.1",
            "-Dcom.sun.management.jmxremote.authenticate=false",
            "-Dcom.sun.management.jmxremote.ssl=false")


def jmx_url(port: int) -> str:
    return f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"


def read_gauge(classpath: str, port: int, object_name: str, work: Path) -> str:
    """The ``Value`` of one MBean (a Yammer gauge, as Kafka's metrics register them), read once.

    Raises:
        AssertionError: the tool failed or printed no value for ``object_name``.
    """
    work.mkdir(parents=True, exist_ok=True)
    command = java_command(classpath, JMX_TOOL, "--jmx-url", jmx_url(port), "--object-name", object_name,
                           "--attributes", "Value", "--report-format", "properties", "--one-time", "true",
                           "--wait", logs_dir=work)
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=TOOL_TIMEOUT_S)
    wanted = f"{object_name}:Value="
    for line in done.stdout.splitlines():
        if line.startswith(wanted):
            return line[len(wanted):]
    raise AssertionError(f"JmxTool printed no {wanted!r} ({done.returncode}):\n{done.stdout}{done.stderr}")
