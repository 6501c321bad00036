"""Commands that rewrite partitions refuse a URL with one line (exit 2, nothing touched), not click's usage text."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli


@pytest.mark.parametrize("command", [("clean",), ("repair",), ("repair", "--undo"), ("spark", "clean")])
def test_a_url_is_refused_with_one_line_naming_it(command: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*command, "s3://backups/kafka-logs/orders-0", "--json"], prog_name="kcompact")

    assert result.exit_code == 2
    assert result.stderr == (f"kcompact: error: s3://backups/kafka-logs/orders-0: {' '.join(command)} rewrites "
                             "partitions in place (rename, fsync, fcntl locks); expected a local POSIX path, "
                             "found a URL (the read-only commands read URLs: export, inspect dirty-ratio, keys, "
                             "dump, transactions, spark export, spark inspect dirty-ratio)\n")
    error = json.loads(result.stdout)["error"]
    assert (error["kind"], error["path"]) == ("RefusedError", "s3://backups/kafka-logs/orders-0")


def test_a_missing_local_path_is_still_clicks_usage_error() -> None:
    result = CliRunner().invoke(cli, ["clean", "/no/such/dir"], prog_name="kcompact")
    assert result.exit_code == 2 and result.stderr.startswith("Usage: ")


def test_spark_clean_takes_a_broker_hosts_path_and_clean_does_not() -> None:
    """``host:/path`` is a log dir on that host's disk for ``spark clean`` (its tasks prefer that host); the
    serial ``clean`` runs here and keeps click's "does not exist"."""
    from kcompact.cli.input_path import InputPath

    spark_paths = InputPath(refuse_as="spark clean", host_paths=True)
    assert spark_paths.convert("broker-1:/var/lib/kafka/data", None, None) == "broker-1:/var/lib/kafka/data"
    with pytest.raises(click.BadParameter, match="does not exist"):
        spark_paths.convert("/no/such/dir", None, None)
    result = CliRunner().invoke(cli, ["clean", "broker-1:/var/lib/kafka/data"], prog_name="kcompact")
    assert result.exit_code == 2 and result.stderr.startswith("Usage: ")
