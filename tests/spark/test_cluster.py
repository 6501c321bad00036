"""The Spark commands on a real standalone cluster (a master and a worker on 127.0.0.1, see
``tests/services.py``), run as a user runs them: ``kcompact spark … --master spark://…`` in a fresh
process, with no ``PYSPARK_PYTHON`` set, the results compared with the serial commands'."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kcompact import __version__
from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from tests.spark.logdirs import COMPACT, NOW, build_log_dir, tree_digest
from tests.spark.test_export import format_layer_rows, parquet_rows

DRIVER_PYTHON_NOTE = f"executors run {sys.executable} (the driver's Python; set PYSPARK_PYTHON"


def kcompact_on(master: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kcompact ARGS --master MASTER`` in a new process, as a user with no PYSPARK_PYTHON runs it."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYSPARK_PYTHON", "PYTHONPATH")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "kcompact", *args, "--master", master], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def serial_json(*args: str) -> object:
    done = subprocess.run([sys.executable, "-m", "kcompact", *args, "--json"], capture_output=True, text=True,
                          timeout=300, check=False)
    return json.loads(done.stdout)


def test_spark_clean_on_the_cluster_with_the_distributed_map_equals_the_serial_clean(
    spark_cluster: str, tmp_path: Path
) -> None:
    source = build_log_dir(tmp_path / "source", 3)
    serial = Path(shutil.copytree(source, tmp_path / "serial"))
    cluster = Path(shutil.copytree(source, tmp_path / "cluster"))
    assert not clean_path(serial, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW)).failures

    done = kcompact_on(spark_cluster, tmp_path, "spark", "clean", str(cluster), "--config",
                       "cleanup.policy=compact", "--now-ms", str(NOW), "--map-budget", "1", "--json")

    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["partitions"]
    assert [(r["status"], r["distributed_map"]) for r in rows] == [("cleaned", True)] * 3
    assert tree_digest(cluster) == tree_digest(serial)
    assert DRIVER_PYTHON_NOTE in done.stderr


def test_spark_dirty_ratio_on_the_cluster_equals_the_serial_report(spark_cluster: str, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 4)
    args = ("inspect", "dirty-ratio", str(log_dir), "--config", "cleanup.policy=compact", "--now-ms", str(NOW))

    done = kcompact_on(spark_cluster, tmp_path, "spark", *args, "--json")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == serial_json(*args)


def test_spark_export_on_the_cluster_writes_every_record_to_a_file_uri(spark_cluster: str, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)

    refused = kcompact_on(spark_cluster, tmp_path, "spark", "export", str(log_dir), "--output", "plain")
    done = kcompact_on(spark_cluster, tmp_path, "spark", "export", str(log_dir), "--output",
                       f"file://{tmp_path}/out", "--json")

    assert refused.returncode == 2 and not (tmp_path / "plain").exists()
    assert "kcompact: error: plain: --output is a plain local path with master spark://" in refused.stderr
    assert done.returncode == 0, done.stderr
    exported = parquet_rows(tmp_path / "out")
    assert exported == format_layer_rows(log_dir)
    assert json.loads(done.stdout)["records"] == len(exported)


def test_spark_inspect_replicas_probes_the_executors_a_wrong_python_is_one_line(
    spark_cluster: str, tmp_path: Path, python_without_kcompact: str
) -> None:
    """On a cluster the driver cannot run the workers' Python: the probe job asks them, before any work."""
    copies = [str(build_log_dir(tmp_path / name, 1)) for name in ("b1", "b2")]

    done = kcompact_on(spark_cluster, tmp_path, "spark", "inspect", "replicas", *copies, "--executor-python",
                       python_without_kcompact)

    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("kcompact: error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"Python {python_without_kcompact} (from --executor-python)" in errors[0]
    assert errors[0].endswith(f"a Python that has kcompact {__version__} at the same path on every worker")
    assert done.stdout == ""
