"""Commands that rewrite partitions refuse a URL with one line (exit 2, nothing touched), not click's usage text."""

from __future__ import annotations

import json

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
