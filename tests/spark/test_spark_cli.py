"""``kcompact spark …`` through click: help, exit codes, --json and --output, the same report as the
serial inspect, and a core install that never imports pyspark for help."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner, Result

from kcompact.cleaner.logdir.run import clean_path
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cli.main import cli
from kcompact.cli.render import size_text
from tests.cleaner.logdir.test_run_config import keyless_partition
from tests.cleaner.round.test_clean_failures import BROKER, child_process
from tests.spark.logdirs import (
    COMPACT,
    NOW,
    build_log_dir,
    build_partition,
    flip_crc_of_a_kept_batch,
    undecodable_batch,
)
from tests.spark.worker_noise import without_worker_tracebacks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parents[2]


def parquet_rows(directory: Path) -> list[dict[str, object]]:
    import pyarrow.parquet as pq  # the spark extra: imported once a test runs, so a core install skips

    rows: list[dict[str, object]] = pq.read_table(directory).to_pylist()
    return rows


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "80"}, catch_exceptions=False,
                              prog_name="kcompact")


@pytest.mark.parametrize("command", [("clean",), ("inspect", "dirty-ratio"), ("export",)])
def test_every_spark_command_has_help_that_says_start_up_costs_seconds(command: tuple[str, ...]) -> None:
    result = run("spark", *command, "--help")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"Usage: kcompact spark {' '.join(command)} [OPTIONS] PATHS...")
    text = " ".join(result.stdout.split())
    assert "Starting Spark costs seconds (a JVM and Python workers): for one partition, or a few " \
           "small ones, the serial command is faster." in text
    assert "Exit codes: 0 success; 2 bad input" in text


def test_spark_group_lists_its_commands() -> None:
    commands = run("spark", "--help").stdout.split("Commands:")[1]
    assert [line.split()[0] for line in commands.strip().splitlines()[:3]] == ["clean", "export", "inspect"]


def test_export_help_names_the_isolation_of_latest() -> None:
    assert "read_committed consumer" in " ".join(run("spark", "export", "--help").stdout.split())


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code.rstrip())], capture_output=True, text=True,
                          cwd=REPO_ROOT, check=False)


def test_help_and_the_job_modules_never_import_pyspark() -> None:
    proc = _python("""
        import sys
        from click.testing import CliRunner
        from kcompact.cli.main import cli
        for args in (["--help"], ["spark", "--help"], ["spark", "clean", "--help"]):
            assert CliRunner().invoke(cli, args).exit_code == 0, args
        import kcompact.spark.clean_job, kcompact.spark.inspect_job, kcompact.spark.export
        import kcompact.spark.session, kcompact.spark.plan, kcompact.cli.spark_cmds
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j", "pyarrow"))
        print(loaded)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_without_pyspark_a_spark_command_exits_2_saying_what_to_install(tmp_path: Path) -> None:
    proc = _python(f"""
        import sys
        sys.modules["pyspark"] = None  # as in a core install
        from kcompact.cli.main import main
        sys.argv = ["kcompact", "spark", "clean", {str(tmp_path)!r}]
        main()
    """)
    assert proc.returncode == 2
    assert proc.stderr.startswith("kcompact: error: the Spark commands need pyspark and pyarrow; "
                                  "expected them installed (pip install 'kcompact[spark]'), found ")


def test_spark_clean_refuses_a_running_brokers_log_dir_before_starting_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kcompact.spark.session

    def no_session(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(kcompact.spark.session, "command_session", no_session)
    log_dir = build_log_dir(tmp_path / "logs", count=2)
    with child_process(BROKER, str(log_dir / ".lock")):
        before = {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()}
        for target in (log_dir, log_dir / "orders-0"):
            result = CliRunner().invoke(cli, ["spark", "clean", str(target)])
            assert result.exit_code == 2, result.output
            assert result.output == f"kcompact: error: {log_dir / '.lock'} is held by a running Kafka broker; " \
                                    "stop it or work on a copy\n"
    assert {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()} == before


def test_spark_clean_json_and_parquet_rows_exit_2_for_a_failed_partition(
    spark: SparkSession, tmp_path: Path, shipped_packs: list[list[int]]
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 3)
    flip_crc_of_a_kept_batch(log_dir / "orders-1")

    result = run("spark", "clean", str(log_dir), "--now-ms", str(NOW), "--json", "--task-bytes", "1",
                 "--config", "cleanup.policy=compact",
                 "--output", str(tmp_path / "stats.parquet"))

    assert result.exit_code == 2
    assert sorted(shipped_packs) == [[0], [1], [2]]  # --task-bytes 1: one Spark task per partition
    assert json.loads(result.stdout)["spark_tasks"] == 3
    report = json.loads(result.stdout)
    assert report["now_ms"] == NOW and report["notes"]
    assert [(Path(r["partition_dir"]).name, r["status"]) for r in report["partitions"]] == [
        ("orders-0", "cleaned"), ("orders-1", "failed"), ("users-0", "cleaned")]
    assert parquet_rows(tmp_path / "stats.parquet") == report["partitions"]


def test_spark_clean_text_report_is_a_table_and_a_summary(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    serial = clean_path(log_dir, cli_overrides=COMPACT, options=CleanOptions(now_ms=NOW, dry_run=True)).results

    result = run("spark", "clean", str(log_dir), "--now-ms", str(NOW), "--dry-run", "--config",
                 "cleanup.policy=compact")

    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].strip() == "spark clean"
    assert lines[2].split() == ["partition", "status", "dirty", "offsets", "read", "written", "saved", "s"]
    assert [line.split()[:5] for line in lines[4:6]] == [
        ["orders-0", "would", "clean", "[0,", "23)"], ["users-0", "would", "clean", "[0,", "23)"]]
    read = sum(r.stats.bytes_read for r in serial)
    written = sum(r.stats.bytes_written for r in serial)
    assert lines[-1] == f"2 partitions: 2 would clean; would read {size_text(read)}, write {size_text(written)}"
    assert "Spark session start-up: " in result.stderr


def test_spark_inspect_dirty_ratio_prints_what_the_serial_command_prints(
    spark: SparkSession, tmp_path: Path
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 4)
    (log_dir / "users-1" / "00000000000000000000.log").write_bytes(b"\x00" * 30)
    args = ("dirty-ratio", str(log_dir), "--now-ms", str(NOW))

    serial, spark_json = run("inspect", *args, "--json"), run("spark", "inspect", *args, "--json")
    serial_text, spark_text = run("inspect", *args), run("spark", "inspect", *args,
                                                         "--output", str(tmp_path / "r.parquet"))

    assert serial.exit_code == spark_json.exit_code == 2
    assert spark_json.stdout == serial.stdout
    assert spark_text.stdout == serial_text.stdout
    assert parquet_rows(tmp_path / "r.parquet") == json.loads(serial.stdout)


def test_spark_export_latest_summary(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    shutil.rmtree(log_dir / "users-0")

    result = run("spark", "export", str(log_dir), "--output", str(tmp_path / "out"), "--latest")

    assert result.exit_code == 0
    assert result.stdout == (f"6 latest live records (one per key) of 1 partition (4 segments) written "
                             f"to {tmp_path / 'out'}\n")
    assert len(parquet_rows(tmp_path / "out")) == 6


def test_an_existing_output_is_refused_with_exit_2(tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 1)
    result = run("spark", "export", str(log_dir), "--output", str(log_dir))
    assert result.exit_code == 2
    assert result.stderr == (f"kcompact: error: {log_dir}: the --output directory; expected a new path, "
                             f"found it exists\n")


def test_the_spark_submit_driver_file_runs_the_command_line_without_shadowing_the_stdlib() -> None:
    proc = subprocess.run([sys.executable, "-m", "kcompact.cli.spark_cmds", "--path"], capture_output=True,
                          text=True, check=True, cwd=REPO_ROOT)
    driver = proc.stdout.strip()
    assert driver.endswith("kcompact/cli/spark_cmds.py")
    ran = subprocess.run([sys.executable, driver, "spark", "--help"], capture_output=True, text=True,
                         check=False, cwd="/")  # as spark-submit runs it: its directory first on sys.path
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("Usage: kcompact spark [OPTIONS] COMMAND [ARGS]...")


def test_an_unreadable_segment_fails_its_partition_and_the_others_go_on(spark: SparkSession, tmp_path: Path) -> None:
    from tests.cleaner.round.test_clean_failures import log_dir_digest
    from tests.unprivileged import run_kcompact_batch

    log_dir = build_log_dir(tmp_path / "logs", 2)
    unreadable = min((log_dir / "orders-0").glob("*.log"))
    before = log_dir_digest(log_dir / "orders-0")
    unreadable.chmod(0o000)
    spark_args = ["--master", "local[1]", "--now-ms", str(NOW), "--json"]

    clean, report = run_kcompact_batch([  # in a child that file modes apply to, even as root
        ["spark", "clean", str(log_dir), "--config", "cleanup.policy=compact", *spark_args],
        ["spark", "inspect", "dirty-ratio", str(log_dir), *spark_args]])

    unreadable.chmod(0o644)
    failure = f"{unreadable}: cannot read (Permission denied)"
    assert (clean.exit_code, report.exit_code) == (2, 2), clean.stderr + report.stderr
    assert [(Path(r["partition_dir"]).name, r["status"], r["error"]) for r in json.loads(clean.stdout)["partitions"]] \
        == [("users-0", "cleaned", None), ("orders-0", "failed", failure)]
    assert {Path(r["partition_dir"]).name: r["error"] for r in json.loads(report.stdout)} == {
        "users-0": None, "orders-0": failure}
    assert log_dir_digest(log_dir / "orders-0") == before


def test_spark_clean_compacts_a_mostly_keyless_partition_only_with_the_acknowledgement(
    spark: SparkSession, tmp_path: Path
) -> None:
    part = keyless_partition(tmp_path / "logs")
    refused = run("spark", "clean", str(part), "--now-ms", str(NOW), "--json", "--config", "cleanup.policy=compact")
    assert refused.exit_code == 2
    [row] = json.loads(refused.stdout)["partitions"]
    assert row["status"] == "failed" and "9 of the 9 records of the partition have no key" in row["error"]
    assert "--allow-keyless-loss" in row["error"] and "kcompact clean" not in row["error"]
    allowed = run("spark", "clean", str(part), "--now-ms", str(NOW), "--json", "--config", "cleanup.policy=compact",
                  "--allow-keyless-loss")
    assert allowed.exit_code == 0
    [row] = json.loads(allowed.stdout)["partitions"]
    assert row["status"] == "cleaned"


def test_spark_commands_take_the_topic_filters_as_the_serial_ones_do(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 4)  # orders-0, orders-1, users-0, users-1
    args = ("dirty-ratio", str(log_dir), "--now-ms", str(NOW), "--json", "--topic", "users", "--partition", "1")
    serial, spark_json = run("inspect", *args), run("spark", "inspect", *args)
    assert serial.exit_code == spark_json.exit_code == 0, spark_json.output
    assert spark_json.stdout == serial.stdout
    assert [Path(r["partition_dir"]).name for r in json.loads(serial.stdout)] == ["users-1"]
    assert "kcompact: --topic 'users' --partition 1 matched 1 of 4 partitions" in spark_json.stderr.splitlines()

    result = run("spark", "export", str(log_dir), "--output", str(tmp_path / "out"), "--exclude-topic", "users",
                 "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["partitions"] == 2
    assert {(row["topic"], row["partition"]) for row in parquet_rows(tmp_path / "out")} == {
        ("orders", 0), ("orders", 1)}

    cleaned = run("spark", "clean", str(log_dir), "--now-ms", str(NOW), "--config", "cleanup.policy=compact",
                  "--dry-run", "--json",
                  "--topic", "orders", "--partition", "0")
    assert cleaned.exit_code == 0, cleaned.output
    assert [Path(r["partition_dir"]).name for r in json.loads(cleaned.stdout)["partitions"]] == ["orders-0"]


def test_spark_clean_refuses_a_partition_keyless_past_the_gates_sample(spark: SparkSession, tmp_path: Path) -> None:
    """The round's own keyless guard runs in the Spark task as in ``kcompact clean``: keyed records first
    (all the gate's sample sees), keyless ones after; skipped in its log dir (the others cleaned),
    refused with the exact count when named alone, left as it was."""
    from tests.cleaner.logdir.test_keyless_past_sample import READ, keyed, keyed_then_keyless
    from tests.cleaner.round.test_clean_failures import log_dir_digest

    part = keyed_then_keyless(tmp_path / "logs")
    keyed(tmp_path / "logs")
    before = log_dir_digest(part)
    in_log_dir = run("spark", "clean", str(tmp_path / "logs"), "--now-ms", str(NOW), "--json", "--assume-compact",
                     "--allow-keyless-loss")
    assert in_log_dir.exit_code == 0, in_log_dir.output
    rows = {Path(r["partition_dir"]).name: r for r in json.loads(in_log_dir.stdout)["partitions"]}
    assert (rows["clicks-0"]["status"], rows["orders-0"]["status"]) == ("skipped", "cleaned")
    assert rows["clicks-0"]["skipped_reason"].startswith(
        f"cleanup.policy=compact is only assumed (--assume-compact), but {READ}")
    assert log_dir_digest(part) == before
    before = log_dir_digest(tmp_path / "logs")
    refused = run("spark", "clean", str(part), "--now-ms", str(NOW), "--json", "--config", "cleanup.policy=compact")
    assert refused.exit_code == 2
    [row] = json.loads(refused.stdout)["partitions"]
    assert row["status"] == "failed" and f"cleanup.policy=compact (--config), but {READ}" in row["error"]
    assert log_dir_digest(tmp_path / "logs") == before
    allowed = run("spark", "clean", str(part), "--now-ms", str(NOW), "--json", "--config", "cleanup.policy=compact",
                  "--allow-keyless-loss")
    assert allowed.exit_code == 0 and json.loads(allowed.stdout)["partitions"][0]["status"] == "cleaned"


def test_spark_worker_tracebacks_are_recognised_and_nothing_else() -> None:
    daemon = ("PySpark daemon failed to flush the output to the worker process:\n"
              "Traceback (most recent call last):\n"
              '  File "/x/pyspark.zip/pyspark/daemon.py", line 95, in worker\n'
              "BrokenPipeError: [Errno 32] Broken pipe\n")
    worker = ('Traceback (most recent call last):\n  File "/x/pyspark.zip/pyspark/daemon.py", line 1, in manager\n'
              '  File "/x/pyspark.zip/pyspark/serializers.py", line 2, in read_int\nEOFError\n')
    ours = 'Traceback (most recent call last):\n  File "/x/kcompact/cli/main.py", line 1\nValueError: x\n'
    mixed = ('Traceback (most recent call last):\n  File "/x/pyspark/sql/session.py", line 1\n'
             '  File "/x/kcompact/spark/export.py", line 2\npy4j.protocol.Py4JJavaError: x\n')
    assert without_worker_tracebacks("a\n" + daemon + "b\n" + worker + "c\n") == "a\nb\nc\n"
    assert without_worker_tracebacks(ours) == ours
    assert without_worker_tracebacks(mixed) == mixed


def test_spark_export_of_a_bad_segment_says_one_line_and_leaves_no_output(spark: SparkSession,
                                                                          tmp_path: Path) -> None:
    """A task that fails (a batch whose records do not parse though its CRC passes): Spark's own
    tracebacks and stacks (~200 lines) silenced, kcompact's line, exit 2, no --output directory."""
    part = build_partition(tmp_path / "logs", "orders", 0)
    segment, _ = undecodable_batch(part)

    done = subprocess.run([sys.executable, "-m", "kcompact", "spark", "export", str(part), "--output",
                           str(tmp_path / "out"), "--master", "local[1]"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, check=False)

    assert done.returncode == 2, done.stderr
    errors = re.findall(r"kcompact: error: .*", done.stderr)
    assert len(errors) == 1 and errors[0].startswith(f"kcompact: error: {segment} at position ")
    assert not re.search(r'File "[^"]*kcompact[/\\]', done.stderr), done.stderr  # no frame of ours
    stderr = without_worker_tracebacks(done.stderr)
    for noise in ("Traceback", "Exception", " ERROR ", "\tat "):
        assert noise not in stderr
    shown = [line.strip() for line in re.split(r"[\r\n]+", stderr)]
    said = [line for line in shown if line and not line.startswith("[Stage ")]  # Spark's progress bar aside
    assert [line for line in said if not line.startswith("WARNING: Using incubator modules")] == errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]
