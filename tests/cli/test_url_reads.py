"""The serial read-only commands read a log dir behind a URL without Spark, and say what they say of the
same log dir on local disk: ``export``, ``inspect dirty-ratio``, ``keys``, ``dump`` and ``transactions``
on an ``s3://`` copy of a broker-written log dir, served by an S3-protocol server on 127.0.0.1 (moto's).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.conftest import copy_tree_writable, real_fixture
from tests.counting_s3 import upload_log_dir

if TYPE_CHECKING:
    from tests.counting_s3 import CountingS3

NOW = "1800000000000"
PART = "__consumer_offsets-31"  # a segment the broker's cleaner compacted, then the active one


@pytest.fixture(scope="module")
def copies(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    """A broker-written log dir on local disk and uploaded to a new bucket: its path, its URL, and the
    storage options that read it. Each local file takes its object's modification time, as a copy
    of the bucket would."""
    import s3fs

    local = copy_tree_writable(real_fixture("kraft37-cleaned-logdir"), tmp_path_factory.mktemp("url") / "logs")
    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**options)
    bucket = f"kcompact-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        key = f"{bucket}/logs/{path.relative_to(local)}"
        fs.put_file(str(path), key)
        modified = fs.info(key)["LastModified"].timestamp()
        os.utime(path, (modified, modified))
    flags = [arg for key, value in options.items() for arg in ("--storage-option", f"{key}={value}")]
    return local, f"s3://{bucket}/logs", flags


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "100"}).invoke(cli, list(args), prog_name="kcompact",
                                                      catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("command, under", [
    (("inspect", "dirty-ratio", "--now-ms", NOW), ""),
    (("inspect", "dirty-ratio", "--now-ms", NOW, "--json"), ""),
    (("inspect", "dirty-ratio", "--now-ms", NOW, "--json"), f"/{PART}"),
    (("inspect", "dirty-ratio", "--now-ms", NOW, "--topic", "topic_.*", "--partition", "0"), ""),
    (("inspect", "keys", "--now-ms", NOW), f"/{PART}"),
    (("inspect", "keys", "--now-ms", NOW, "--json"), f"/{PART}"),
    (("inspect", "transactions", "--now-ms", NOW, "--json"), ""),
    (("inspect", "dump", "--records", "--verify-index"), f"/{PART}"),
    (("inspect", "dump", "--json", "--records"), f"/{PART}/00000000000000000003.log"),
    (("inspect", "dump", "--verify-index"), f"/{PART}/00000000000000000000.timeindex"),
    (("inspect", "dump"), "/cleaner-offset-checkpoint"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_a_url_reads_as_the_same_log_dir_on_disk(copies: tuple[Path, str, list[str]], command: tuple[str, ...],
                                                 under: str) -> None:
    local, url, flags = copies
    verb, rest = command[:2], command[2:]

    on_disk = run(*verb, f"{local}{under}", *rest)
    remote = run(*verb, f"{url}{under}", *rest, *flags)

    assert on_disk[0] == 0, on_disk[2]
    assert remote == (0, on_disk[1].replace(str(local), url), on_disk[2].replace(str(local), url))


def test_export_of_a_url_writes_the_rows_of_the_log_dir_on_disk(copies: tuple[Path, str, list[str]],
                                                               tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    local, url, flags = copies
    code, out, err = run("export", str(local), "--output", str(tmp_path / "a"), "--json")
    assert code == 0, err
    code, remote_out, err = run("export", url, "--output", str(tmp_path / "b"), "--json", *flags)
    assert code == 0, err

    def rows(directory: Path) -> list[dict[str, Any]]:
        return pq.read_table(directory / "part-00000.parquet").to_pylist()

    assert rows(tmp_path / "b") == rows(tmp_path / "a") != []
    summary = json_without_timing(out)
    assert json_without_timing(remote_out) == {**summary, "output": str(tmp_path / "b")}


def json_without_timing(text: str) -> dict[str, Any]:
    import json

    return {k: v for k, v in json.loads(text).items() if k != "elapsed_s"}


def test_a_url_with_nothing_there_is_one_line_naming_it(copies: tuple[Path, str, list[str]]) -> None:
    _local, url, flags = copies

    code, out, err = run("inspect", "keys", f"{url}/orders-0", *flags)

    assert (code, out) == (2, "")
    assert err == f"kcompact: error: {url}/orders-0: cannot read it: FileNotFoundError: no file there\n"


def test_dump_of_a_partition_url_reads_its_files_not_the_metadata_log(
        counting_s3: CountingS3, tmp_path: Path) -> None:
    """``inspect dump`` resolves no topic config: the log dir's metadata log (1.2 MB here, the partition
    1 KB) is not fetched for it; the partition's files and its log dir's are, once each."""

    local = real_fixture("kraft37-cleaned-logdir")
    url, options = upload_log_dir(counting_s3.endpoint, local)
    flags = [arg for key, value in options.items() for arg in ("--storage-option", f"{key}={value}")]
    counting_s3.clear()

    remote = run("inspect", "dump", "--records", f"{url}/{PART}", *flags)

    wanted = [p for p in (local / PART).iterdir()] + [p for p in local.iterdir() if p.is_file()]
    prefix = url.removeprefix("s3://")
    assert counting_s3.bytes_by_key() == {f"{prefix}/{p.relative_to(local)}": p.stat().st_size for p in wanted}
    on_disk = run("inspect", "dump", "--records", f"{local}/{PART}")
    assert remote == (0, on_disk[1].replace(str(local), url), on_disk[2].replace(str(local), url))


@pytest.mark.parametrize("command", [["inspect", "dirty-ratio"], ["inspect", "keys"], ["inspect", "transactions"],
                                     ["inspect", "dump"], ["export"]])
def test_a_url_whose_file_system_cannot_start_is_one_line(command: list[str], tmp_path: Path) -> None:
    """``hdfs://`` through pyarrow needs libhdfs and a JVM on this machine: without them the file system's own
    constructor fails (and its native code prints where it looked): one line naming the URL, exit 2."""
    import subprocess
    import sys

    pytest.importorskip("pyarrow")
    options = ["--output", str(tmp_path / "out")] if command == ["export"] else []
    done = subprocess.run([sys.executable, "-m", "kcompact", *command, "hdfs://127.0.0.1:9/kafka-logs", *options],
                          capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "JAVA_HOME": str(tmp_path / "no-java")})
    assert done.returncode == 2
    assert done.stderr.startswith("kcompact: error: hdfs://127.0.0.1:9/kafka-logs: ")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
