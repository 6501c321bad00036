"""``kcompact spark report`` and ``spark export`` whose Spark job fails under them: a task's Python worker
SIGKILLed (as ``test_lost_task`` kills ``spark clean``'s), or the driver's JVM killed. Each is one error line
naming the job and why, exit 2, no Spark traceback; ``--json`` prints the JSON error object; nothing of the
log dir changes, and no ``--output`` is left looking like an export (no directory: no ``_SUCCESS``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.errors import KcompactError
from kcompact.spark import export, replicas_job, report_job
from kcompact.spark.output import write_new_parquet
from tests.spark.conftest import _why_no_spark
from tests.spark.logdirs import NOW, build_log_dir, tree_digest
from tests.spark.worker_noise import without_worker_tracebacks

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrameWriter, SparkSession

PROJECT = Path(__file__).parents[2]
CRASHED = "Python worker exited unexpectedly (crashed)"
NO_REPORT = "nothing was changed (spark report only reads) and no report was made: run it again"
REPORT_ARGS = ("--now-ms", str(NOW), "--config", "cleanup.policy=compact", "--json")


def kcompact(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "80"}, catch_exceptions=False, prog_name="kcompact")


def dying_task() -> Callable[..., Any]:
    """A Spark task body whose Python worker SIGKILLs itself; a closure, so Spark ships it by value."""

    def dying(*_: Any, **__: Any) -> Any:
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)

    return dying


dying = dying_task()


def assert_one_line(result: Result, line: str) -> None:
    """Exit 2, ``line`` alone on stderr, its JSON error object alone on stdout, no Spark traceback."""
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [f"kcompact: error: {line}"]
    assert json.loads(result.stdout)["error"]["message"] == line
    for text in ("Traceback", "Py4JJavaError", "\tat org.apache"):
        assert text not in result.stdout + result.stderr


def test_spark_report_whose_task_is_lost_is_one_line_and_changes_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 4)
    before = tree_digest(log_dir)
    monkeypatch.setattr(report_job, "run_report_task", dying)
    page = tmp_path / "cluster.html"

    result = kcompact("spark", "report", str(log_dir), *REPORT_ARGS, "--output", str(page))

    assert_one_line(result, f"spark report: the reading job failed: {CRASHED}; {NO_REPORT}")
    assert not page.exists()
    assert tree_digest(log_dir) == before


def test_spark_report_whose_replicas_task_is_lost_is_one_line(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    brokers = [build_log_dir(tmp_path / name, 2, topics=("orders",)) for name in ("b1", "b2")]
    monkeypatch.setattr(replicas_job, "run_replicas_task", dying)

    result = kcompact("spark", "report", *map(str, brokers), *REPORT_ARGS)

    assert_one_line(result, f"spark report: the replicas job failed: {CRASHED}; {NO_REPORT}")


def test_spark_export_whose_checking_task_is_lost_writes_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 4)
    out = tmp_path / "records.parquet"
    monkeypatch.setattr(export, "_check_split", dying)

    result = kcompact("spark", "export", str(log_dir), "--output", str(out), "--json")

    assert_one_line(result, (f"spark export: the checking job failed: {CRASHED}; nothing was written ({out} not "
                             "created), the logs are only read: run it again"))
    assert json.loads(result.stdout)["error"]["path"] == str(out)
    assert not out.exists()


def test_spark_export_whose_write_task_is_lost_leaves_no_output(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 4)
    out = tmp_path / "records.parquet"
    read_records = export.read_records

    def reading(*args: Any, **kwargs: Any) -> Any:  # the write's tasks die on the rows they write
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType

        def dying_at(offset: int) -> int:
            if offset == 3:
                dying()
            return offset

        frame = read_records(*args, **kwargs)
        return frame.withColumn("offset", F.udf(dying_at, LongType(), useArrow=False)("offset"))

    monkeypatch.setattr(export, "read_records", reading)

    result = kcompact("spark", "export", str(log_dir), "--output", str(out), "--json")

    assert_one_line(result, (f"spark export: the write job failed: {CRASHED}; nothing was written ({out} does not "
                             "exist): run it again"))
    assert not out.exists()  # Spark had made it, part files under _temporary, no _SUCCESS


def run_with_dying_jvm(job: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``kcompact ARGS`` in a process of its own whose Spark JVM the ``job``'s task kills (``dying_jvm``)."""
    reason = _why_no_spark()
    if reason is not None:
        pytest.skip(reason)
    return subprocess.run([sys.executable, "-m", "tests.spark.dying_jvm", job, *args, "--master", "local[2]"],
                          cwd=PROJECT, env={**os.environ, "COLUMNS": "80"}, capture_output=True, text=True,
                          timeout=300, check=False)


def assert_jvm_gone_line(done: subprocess.CompletedProcess[str], job: str, state: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("kcompact:")]
    (line,) = errors
    assert line.startswith(f"kcompact: error: {job} failed: Spark's JVM is gone (") and line.endswith(f"; {state}")
    assert json.loads(done.stdout)["error"]["message"] == line.removeprefix("kcompact: error: ")
    for text in ("Traceback", "Py4JJavaError", "Py4JNetworkError"):  # Spark's own workers may print theirs
        assert text not in done.stdout + without_worker_tracebacks(done.stderr)


def test_spark_report_whose_jvm_dies_is_one_line(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)

    done = run_with_dying_jvm("report", "spark", "report", str(log_dir), *REPORT_ARGS)

    assert_jvm_gone_line(done, "spark report: the reading job", NO_REPORT)


def test_spark_export_whose_jvm_dies_mid_write_leaves_no_output(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    out = tmp_path / "records.parquet"

    done = run_with_dying_jvm("write", "spark", "export", str(log_dir), "--output", str(out), "--json")

    assert_jvm_gone_line(done, "spark export: the write job", f"nothing was written ({out} does not exist): run it "
                                                              "again")
    assert not out.exists()  # the JVM cannot remove it: kcompact does, a local path


class DyingJvm:
    """The driver JVM as ``write_new_parquet`` reaches it (py4j's ``_jvm``, ``_jsc``, Hadoop's FileSystem of
    the output), alive until the write's ``parquet`` call kills it: every call then raises as py4j does."""

    def __init__(self) -> None:
        self.dead = False
        self.java = SimpleNamespace(lang=SimpleNamespace(System=SimpleNamespace(currentTimeMillis=self.answer)))
        self.org = SimpleNamespace(apache=SimpleNamespace(hadoop=SimpleNamespace(fs=SimpleNamespace(Path=self.path))))

    def answer(self, *_: Any) -> bool:
        if self.dead:
            raise ConnectionRefusedError(111, "Connection refused")
        return False  # currentTimeMillis' value does not matter; FileSystem.exists: not there (yet)

    def path(self, uri: str) -> Any:
        file_system = SimpleNamespace(exists=self.answer, delete=self.answer)
        return SimpleNamespace(getFileSystem=lambda _conf: file_system)

    def parquet(self, uri: str) -> None:
        self.dead = True
        raise ConnectionRefusedError(111, "Connection refused")


def test_an_output_uri_the_dead_jvm_cannot_clear_is_named_as_not_to_be_used() -> None:
    jvm = DyingJvm()
    context = cast("SparkContext", SimpleNamespace(_jvm=jvm, _jsc=SimpleNamespace(hadoopConfiguration=lambda: None)))
    writer = cast("DataFrameWriter", SimpleNamespace(parquet=jvm.parquet))

    with pytest.raises(KcompactError) as raised:
        write_new_parquet(writer, "s3a://bucket/records", context, verbose=True, job="spark export: the write job")

    assert str(raised.value) == (
        "spark export: the write job failed: Spark's JVM is gone ([Errno 111] Connection refused); "
        "s3a://bucket/records may hold an incomplete output (no _SUCCESS) that must not be used: remove "
        "it, then run again")
    assert raised.value.path == "s3a://bucket/records"
