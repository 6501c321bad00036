"""A broker's data directory holding its log dirs, given where a log dir is expected: every command says which log
dirs it saw there, instead of only that it found no partition directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.builders import PartitionBuilder


@pytest.mark.parametrize("command", [["clean"], ["clean", "--dry-run"], ["inspect", "dirty-ratio"], ["repair"],
                                     ["inspect", "transactions"]])
def test_a_data_dir_of_log_dirs_names_them(tmp_path: Path, command: list[str]) -> None:
    data = tmp_path / "data"
    for log_dir in ("logs-a", "logs-b"):
        PartitionBuilder("orders", 0).batch([(b"k", b"v")]).write(data / log_dir)
    (data / "lost+found").mkdir()
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "300"})
    result = runner.invoke(cli, [*command, str(data)])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"kcompact: error: no partition directories found under {data}: it holds 2 log dirs "
                             f"({data / 'logs-a'}, {data / 'logs-b'}); give those\n")
    as_json = runner.invoke(cli, [*command, str(data), "--json"])
    assert json.loads(as_json.stdout)["error"]["path"] == str(data)
