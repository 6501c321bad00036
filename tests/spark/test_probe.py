"""The probe job: executors that cannot run kcompact, or cannot see the inputs, stop a command with one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kcompact import __version__
from kcompact.errors import RefusedError
from kcompact.spark import probe
from kcompact.spark.probe import check_executors
from tests.spark.logdirs import build_log_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SYSTEM_PYTHON = "/usr/bin/python3"


def test_an_input_the_executors_cannot_see_is_named_with_what_to_do(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 1)
    unseen = tmp_path / "only-on-the-driver"

    found = check_executors(spark.sparkContext, [str(log_dir)], always=True)
    with pytest.raises(RefusedError) as caught:
        check_executors(spark.sparkContext, [str(log_dir), str(unseen)], always=True)

    assert found.hosts and found.python == spark.sparkContext.pythonExec
    assert str(caught.value).startswith(f"{unseen}: executor ")
    assert "cannot see it; expected every executor to see the inputs at the driver's paths" in str(caught.value)


def _without_kcompact(python: str) -> str | None:
    if not Path(python).exists():
        return f"{python} does not exist"
    found = subprocess.run([python, "-c", "import kcompact"], capture_output=True, cwd="/", check=False)
    return "it imports kcompact" if found.returncode == 0 else None


@pytest.mark.skipif(_without_kcompact(SYSTEM_PYTHON) is not None,
                    reason=f"needs {SYSTEM_PYTHON} without kcompact: {_without_kcompact(SYSTEM_PYTHON)}")
def test_executors_whose_python_lacks_kcompact_exit_2_with_one_line_saying_what_to_set(
    spark: SparkSession, tmp_path: Path
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 1)
    env = {**os.environ, "PYSPARK_PYTHON": SYSTEM_PYTHON}
    env.pop("PYTHONPATH", None)

    done = subprocess.run([sys.executable, "-m", "kcompact", "spark", "export", str(log_dir), "--output",
                           str(tmp_path / "out"), "--master", "local[1]"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300, check=False)

    errors = [line for line in done.stderr.splitlines() if "kcompact: error:" in line]
    assert done.returncode == 2, done.stderr
    assert len(errors) == 1
    # No traceback of kcompact's. Spark's own Python worker daemon may print the start of one while the JVM
    # shuts it down (an idle reused worker reading EOF, copied by a JVM thread that dies mid-copy); seen only
    # under heavy load, never with a frame of kcompact's.
    assert not re.search(r'File "[^"]*kcompact[/\\]', done.stderr), done.stderr
    assert f"Python {SYSTEM_PYTHON} (from PYSPARK_PYTHON) cannot import kcompact" in errors[0]
    assert errors[0].endswith("set --executor-python (or PYSPARK_PYTHON, spark.pyspark.python) to a Python that "
                              f"has kcompact {__version__} at the same path on every worker")
    assert not (tmp_path / "out").exists()


def test_an_executor_whose_probe_worker_dies_is_named_with_why(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 1)
    dying = "    import os, signal, socket, sys\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    monkeypatch.setattr(probe, "_PROBE_SOURCE", probe._PROBE_SOURCE.replace("    import os, socket, sys\n", dying))

    with pytest.raises(RefusedError) as caught:
        check_executors(spark.sparkContext, [str(log_dir)], always=True)

    assert str(caught.value).startswith(f"executors could not run Python {spark.sparkContext.pythonExec} (")
    assert "): Python worker exited unexpectedly (crashed); set --executor-python" in str(caught.value)
