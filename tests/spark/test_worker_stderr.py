"""What Spark's Python workers and their daemon write to stderr (pyspark's "daemon failed to flush the output
to the worker process" BrokenPipeError tracebacks under load, a task's own prints) reaches the user only with
--verbose: the JVM copies the daemon's stderr to its own, which is the command's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.spark.conftest import _why_no_spark

SCRIPT = textwrap.dedent("""
    import sys
    from kcompact.spark.session import spark_session

    def noisy(x):
        import sys
        print("worker-stderr-line", file=sys.stderr, flush=True)
        return x

    session = spark_session("local[1]", verbose=sys.argv[1] == "verbose")
    assert session.sparkContext.parallelize([1, 2], 1).map(noisy).collect() == [1, 2]
    session.stop()
""")


@pytest.mark.parametrize("mode", ["quiet", "verbose"])
def test_python_worker_stderr_reaches_the_user_only_with_verbose(mode: str) -> None:
    why = _why_no_spark()
    if why is not None:
        pytest.skip(why)
    # as a user with no PYSPARK_PYTHON runs it (a session started in this process sets it for its executors)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_SUBMIT_ARGS", "PYSPARK_GATEWAY_PORT", "PYSPARK_PYTHON")}
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert ("worker-stderr-line" in done.stderr) == (mode == "verbose")


def test_the_quiet_daemon_only_where_its_stderr_is_the_users_and_its_python_is_ours() -> None:
    from kcompact.spark import session

    def daemon(*, local: bool, own_python: bool) -> str | None:
        conf = session._session_conf(False, local=local, launched=False, own_python=own_python)
        return conf.get("spark.python.daemon.module")

    assert daemon(local=True, own_python=True) == "kcompact.spark.quiet_daemon"
    assert daemon(local=False, own_python=True) is None  # a cluster: the executor's log, not the user's
    assert daemon(local=True, own_python=False) is None  # PYSPARK_PYTHON may not have kcompact
    assert session._session_conf(True, local=True, launched=False, own_python=True).get(
        "spark.python.daemon.module") is None  # --verbose
