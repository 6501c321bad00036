"""A Spark command that cannot work says so in one line before its session starts (or, for what only the JVM
can tell, before its first job): an unlistable input URL, an output whose file system needs a package, an
executors' Python without kcompact. "Before the session" is counted, not timed: the session's start is
replaced by one that records it was asked for."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner, Result

from kcompact import __version__
from kcompact.cli.main import cli
from kcompact.spark.hadoop_fs import bundled_hadoop_version
from tests.spark.logdirs import build_log_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMMANDS = {
    "spark clean": ("spark", "clean", "--dry-run"),
    "spark inspect dirty-ratio": ("spark", "inspect", "dirty-ratio"),
    "spark export": ("spark", "export", "--output", "OUT"),
    "spark inspect replicas": ("spark", "inspect", "replicas"),
    "spark report": ("spark", "report", "--json"),
}


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200", **(env or {})}, catch_exceptions=False,
                              prog_name="kcompact")


def error_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def command_args(name: str, tmp_path: Path, inputs: list[str]) -> list[str]:
    args = [str(tmp_path / "out") if arg == "OUT" else arg for arg in COMMANDS[name]]
    return [*args, *inputs]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_an_executors_python_without_kcompact_is_one_line_before_the_session(
    name: str, tmp_path: Path, python_without_kcompact: str, session_starts: list[str | None]
) -> None:
    log_dir = str(build_log_dir(tmp_path / "logs", 1))
    inputs = [log_dir, str(build_log_dir(tmp_path / "copy", 1))] if name.endswith("replicas") else [log_dir]

    by_option = run(*command_args(name, tmp_path, inputs), "--executor-python", python_without_kcompact)
    by_env = run(*command_args(name, tmp_path, inputs), env={"PYSPARK_PYTHON": python_without_kcompact})

    for result, chosen_by in ((by_option, "--executor-python"), (by_env, "PYSPARK_PYTHON")):
        assert result.exit_code == 2, result.output
        assert error_lines(result) == [
            (f"kcompact: error: executors' Python {python_without_kcompact} (from {chosen_by}) cannot import "
            "kcompact and pyarrow (ModuleNotFoundError: No module named 'kcompact'); set --executor-python (or "
            f"PYSPARK_PYTHON, spark.pyspark.python) to a Python that has kcompact {__version__} at the same path "
            "on every worker")]
    assert session_starts == []
    assert not (tmp_path / "out").exists()


def test_an_executors_python_that_does_not_exist_is_one_line_before_the_session(
    tmp_path: Path, session_starts: list[str | None]
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 1)
    missing = tmp_path / "no-such-python"

    result = run("spark", "inspect", "dirty-ratio", str(log_dir), "--executor-python", str(missing))

    assert result.exit_code == 2
    [line] = error_lines(result)
    assert line.startswith(f"kcompact: error: executors' Python {missing} (from --executor-python) cannot run "
                           "(FileNotFoundError: ")
    assert session_starts == []


def test_on_a_cluster_the_executors_python_is_left_to_the_probe(
    tmp_path: Path, python_without_kcompact: str, session_starts: list[str | None]
) -> None:
    """The driver cannot run the workers' Python: the session starts (and the probe asks the executors)."""
    log_dir = build_log_dir(tmp_path / "logs", 1)

    with pytest.raises(AssertionError, match="the Spark session was started"):
        run("spark", "inspect", "dirty-ratio", str(log_dir), "--master", "spark://127.0.0.1:1",
            "--executor-python", python_without_kcompact)

    assert session_starts == ["spark://127.0.0.1:1"]


@pytest.mark.parametrize("name", ["spark export", "spark inspect dirty-ratio"])
def test_an_input_url_that_cannot_be_listed_is_one_line_before_the_session(
    name: str, tmp_path: Path, s3_endpoint: str, session_starts: list[str | None]
) -> None:
    url = f"s3://kcompact-missing-{uuid.uuid4().hex[:12]}/logs"

    result = run(*command_args(name, tmp_path, [url]), "--storage-option", f"endpoint_url={s3_endpoint}",
                 "--storage-option", "key=testing", "--storage-option", "secret=testing")

    assert result.exit_code == 2
    [line] = error_lines(result)
    assert line.startswith(f"kcompact: error: {url}: cannot list it: ")
    assert session_starts == []


@pytest.mark.parametrize("name", ["spark export", "spark inspect dirty-ratio", "spark clean"])
def test_an_s3a_output_without_hadoop_aws_names_the_package_before_the_session(
    name: str, tmp_path: Path, session_starts: list[str | None]
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 1)
    output_args = ("--output", str(tmp_path / "out"))
    args = [arg for arg in command_args(name, tmp_path, [str(log_dir)]) if arg not in output_args]

    result = run(*args, "--output", "s3a://bucket/out")

    assert result.exit_code == 2
    assert error_lines(result) == [
        ("kcompact: error: s3a://bucket/out: s3a:// needs hadoop-aws, which pyspark does not ship; expected "
        f"--conf spark.jars.packages=org.apache.hadoop:hadoop-aws:{bundled_hadoop_version()}")]
    assert session_starts == []


def test_the_hadoop_version_named_is_the_one_pyspark_was_built_with() -> None:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    assert (jars / f"hadoop-client-api-{bundled_hadoop_version()}.jar").is_file()


def test_a_conf_pair_without_equals_is_one_line(tmp_path: Path, session_starts: list[str | None]) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 1)

    result = run("spark", "inspect", "dirty-ratio", str(log_dir), "--conf", "spark.executor.memory")

    assert result.exit_code == 2
    assert error_lines(result) == [("kcompact: error: --conf: expected KEY=VALUE (a Spark setting), found "
                                   "'spark.executor.memory'")]
    assert session_starts == []


# --- once the JVM runs: before any job ---------------------------------------------------------------------


@pytest.fixture
def export_jobs(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The export jobs a command started (none should)."""
    from kcompact.spark import export

    started: list[object] = []
    monkeypatch.setattr(export, "spark_export", lambda *args, **_: started.append(args))
    return started


def test_an_s3a_output_whose_package_is_not_in_the_jvm_is_named_before_any_job(
    spark: SparkSession, tmp_path: Path, export_jobs: list[object]
) -> None:
    """--conf names hadoop-aws, so only the JVM can tell: this session was started without it."""
    log_dir = build_log_dir(tmp_path / "logs", 1)
    package = f"org.apache.hadoop:hadoop-aws:{bundled_hadoop_version()}"

    result = run("spark", "export", str(log_dir), "--output", "s3a://bucket/out", "--conf",
                 f"spark.jars.packages={package}")

    assert result.exit_code == 2
    [line] = error_lines(result)
    assert line.startswith("kcompact: error: s3a://bucket/out: s3a:// has no Hadoop file system in Spark's JVM; "
                           f"expected --conf spark.jars.packages={package}, found ")
    assert "ClassNotFoundException" in line and "S3AFileSystem" in line
    assert export_jobs == []


def test_an_output_scheme_hadoop_does_not_know_is_one_line_before_any_job(
    spark: SparkSession, tmp_path: Path, export_jobs: list[object]
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 1)

    result = run("spark", "export", str(log_dir), "--output", "gopher://host/out")

    assert result.exit_code == 2
    [line] = error_lines(result)
    assert line.startswith("kcompact: error: gopher://host/out: gopher:// has no Hadoop file system in Spark's "
                           "JVM; expected a package whose Hadoop FileSystem serves it on Spark's class path")
    assert 'No FileSystem for scheme "gopher"' in line
    assert export_jobs == []


def test_hdfs_needs_no_package(spark: SparkSession) -> None:
    from kcompact.spark.hadoop_fs import check_output_filesystem

    check_output_filesystem(spark.sparkContext, "hdfs://127.0.0.1:1/out")  # the class loads: nothing raised


def test_verbose_says_where_the_local_driver_listens(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 1)
    port = spark.sparkContext.getConf().get("spark.driver.port")

    result = run("spark", "inspect", "dirty-ratio", str(log_dir), "--config", "cleanup.policy=compact",
                 "--verbose")

    assert result.exit_code == 0, result.output
    assert f"Spark driver (local[2]) listens on 127.0.0.1:{port}\n" in result.stderr
    assert spark.sparkContext.getConf().get("spark.driver.bindAddress") == "127.0.0.1"
