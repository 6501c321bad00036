"""The services some tests need, on 127.0.0.1 only: a Spark standalone master and worker (from the pip
pyspark), an S3-protocol server (moto's standalone server) and an HDFS (Hadoop's MiniDFSCluster, from
Maven Central: ``tests/hdfs``).

CI (``.ci/run``) starts them once for the whole suite and passes their addresses to the tests::

    python -m tests.services start DIR   # prints export lines; DIR keeps the pids and logs
    python -m tests.services stop DIR    # stops every process start started (their process groups)

The tests read :data:`SPARK_MASTER_ENV`, :data:`S3_ENDPOINT_ENV` and :data:`HDFS_ENV`/:data:`WEBHDFS_ENV`; when
unset, their fixtures start their own with the same functions (so ``python -m pytest`` alone works) and stop
them afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SPARK_MASTER_ENV = "KCOMPACT_TEST_SPARK_MASTER"
S3_ENDPOINT_ENV = "KCOMPACT_TEST_S3_ENDPOINT"
HDFS_ENV = "KCOMPACT_TEST_HDFS"  # hdfs://127.0.0.1:PORT, the NameNode's RPC
WEBHDFS_ENV = "KCOMPACT_TEST_WEBHDFS"  # webhdfs://127.0.0.1:PORT, its HTTP server
HOST = "127.0.0.1"
READY_TIMEOUT_S = 180.0
WORKER_CORES = 2
WORKER_MEMORY = "2g"


@dataclass
class Services:
    """Processes started here (each the leader of its own process group) and their addresses."""

    directory: Path
    pids: list[int] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        """Stop every process group started here: TERM, then KILL what is left after a few seconds."""
        for pid in self.pids:
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for pid in self.pids:
            while _group_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            _signal_group(pid, signal.SIGKILL)
        self.pids.clear()


def why_no_java() -> str | None:
    """Why Spark cannot start here, or None."""
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and (Path(java_home) / "bin" / "java").exists()):
        return "no Java runtime (java not on PATH and JAVA_HOME unset): Spark cannot start"
    return None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def start_spark(services: Services, workers: int = 1) -> str:
    """A standalone master and ``workers`` workers on 127.0.0.1; returns the master URL once a worker is alive."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    spark_class = spark_home / "bin" / "spark-class"
    conf_dir = services.directory / "spark-conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": HOST, "SPARK_CONF_DIR": str(conf_dir),
           "SPARK_LOG_DIR": str(services.directory), "SPARK_WORKER_DIR": str(services.directory / "work")}
    port, ui_port = free_port(), free_port()
    master = f"spark://{HOST}:{port}"
    _spawn(services, "spark-master", [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", HOST,
                                      "--port", str(port), "--webui-port", str(ui_port)], env)
    for n in range(workers):
        _spawn(services, f"spark-worker-{n}", [
            str(spark_class), "org.apache.spark.deploy.worker.Worker", master, "--host", HOST,
            "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY, "--webui-port", str(free_port()),
            "--work-dir", str(services.directory / f"work-{n}")], env)
    _wait(lambda: _alive_workers(ui_port) >= workers, f"{workers} Spark worker(s) registered at {master}",
          services)
    services.env[SPARK_MASTER_ENV] = master
    return master


def start_s3(services: Services) -> str:
    """moto's S3-protocol server on 127.0.0.1; returns its endpoint URL once it answers."""
    port = free_port()
    endpoint = f"http://{HOST}:{port}"
    _spawn(services, "moto", [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)], dict(os.environ))
    _wait(lambda: _answers(endpoint), f"the S3 server at {endpoint}", services)
    services.env[S3_ENDPOINT_ENV] = endpoint
    return endpoint


def start_hdfs(services: Services) -> dict[str, str]:
    """Hadoop's MiniDFSCluster on 127.0.0.1 (jars resolved from Maven Central on first use); returns its
    ``hdfs`` and ``webhdfs`` URLs once its DataNode serves blocks."""
    from tests.hdfs.cluster import HdfsUnavailable, launch_argv, wait_for_urls

    base = services.directory / "hdfs"
    base.mkdir(parents=True, exist_ok=True)
    proc = _spawn(services, "hdfs", launch_argv(base), dict(os.environ))
    try:
        urls = wait_for_urls(services.directory / "hdfs.log", proc)
    except HdfsUnavailable:
        services.stop()
        raise
    services.env[HDFS_ENV], services.env[WEBHDFS_ENV] = urls["hdfs"], urls["webhdfs"]
    return urls


def _spawn(services: Services, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = (services.directory / f"{name}.log").open("ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    services.pids.append(proc.pid)
    with (services.directory / "pids").open("a") as pids:
        pids.write(f"{proc.pid}\n")
    return proc


def _wait(ready: Callable[[], bool], what: str, services: Services) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            services.stop()
            raise RuntimeError(f"{what}: not ready after {READY_TIMEOUT_S:.0f} s (logs in {services.directory})")
        time.sleep(0.5)


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{ui_port}/json/", timeout=5) as answer:
            return int(json.load(answer).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except OSError:
        return False


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def main(argv: list[str]) -> int:
    """``start DIR`` (prints ``export`` lines) or ``stop DIR``."""
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.services start|stop DIR", file=sys.stderr)
        return 2
    directory = Path(argv[1])
    directory.mkdir(parents=True, exist_ok=True)
    if argv[0] == "stop":
        pids_file = directory / "pids"
        pids = [int(line) for line in pids_file.read_text().split()] if pids_file.exists() else []
        Services(directory, pids).stop()
        return 0
    from tests.hdfs.cluster import why_unavailable

    services = Services(directory)
    if why_no_java() is None:
        start_spark(services)
    if why_unavailable() is None:
        start_hdfs(services)
    start_s3(services)
    for key, value in services.env.items():
        print(f"export {key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
