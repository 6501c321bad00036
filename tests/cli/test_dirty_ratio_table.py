"""The ``inspect dirty-ratio`` table: printed as one stacked row when no cell wraps (fast on 10 000
partitions), byte for byte the table printed row by row, on a terminal of any width and on a pipe."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kcompact.cli import dirty_ratio_cmd
from kcompact.cli.main import cli
from kcompact.inspect.dirty_ratio import DirtyRatioRow
from tests.builders import BASE_TS, PartitionBuilder

TOPICS = ("orders", "a-rather-long-topic-name.with.dots_and_underscores-of-a-kafka-streams-changelog", "t")


def _log_dir(root: Path, *, closed: bool) -> Path:
    """Partitions of short and long names, an empty one, one whose CRC fails; with ``closed`` segments
    (statuses of several words), else only an active segment each (one-word statuses: a name folds on a
    narrow terminal while no cell wraps)."""
    log_dir = root / "logdir"
    for i, topic in enumerate(TOPICS):
        for partition in range(2):
            b = PartitionBuilder(topic, partition)
            for _ in range(i + partition + 1 if closed else 0):
                b.batch([(b"k%d" % k, b"v" * 40) for k in range(4)]).roll()
            b.batch([(b"k0", b"active")]).write(log_dir)
    PartitionBuilder("empty", 0).write(log_dir)
    broken = PartitionBuilder("broken", 0).batch([(b"k", b"v")]).roll().batch([(b"k", b"w")]).write(log_dir)
    log = broken / "00000000000000000000.log"
    log.write_bytes(log.read_bytes()[:-3] + b"xyz")  # its CRC fails: an error row, a line on stderr
    return log_dir


def _run(log_dir: Path, env: dict[str, str | None]) -> tuple[int, str, list[str]]:
    """Exit code, stdout, and stderr's messages (a terminal's progress bar left out)."""
    runner = CliRunner(env={"KCOMPACT_SERVER_PROPERTIES": None, **env})
    result = runner.invoke(cli, ["inspect", "dirty-ratio", str(log_dir), "--now-ms", str(BASE_TS + 10**9),
                                 "--config", "cleanup.policy=compact"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    messages = [line[line.index("kcompact: "):] for line in result.stderr.replace("\r", "\n").splitlines()
                if "kcompact: " in line]
    return result.exit_code, result.stdout, messages


@pytest.mark.parametrize("closed", [True, False])
@pytest.mark.parametrize("columns", [None, "200", "120", "100", "80", "60"])
def test_the_stacked_table_is_the_table_row_by_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns: str | None, closed: bool
) -> None:
    log_dir = _log_dir(tmp_path, closed=closed)
    env: dict[str, str | None] = {} if columns is None else {"TTY_COMPATIBLE": "1", "COLUMNS": columns}
    stacked: list[tuple[int, bool]] = []  # rows, and whether a name was folded
    real_stacked = dirty_ratio_cmd.stacked_cells

    def counting(rows: list[tuple[str, ...]]) -> list[str]:
        stacked.append((len(rows), any("\n" in row[1] for row in rows)))
        return real_stacked(rows)

    monkeypatch.setattr(dirty_ratio_cmd, "stacked_cells", counting)
    fast = _run(log_dir, env)
    monkeypatch.setattr(dirty_ratio_cmd, "_fits_unwrapped", lambda rows, width: False)
    row_by_row = _run(log_dir, env)
    assert fast == row_by_row
    assert fast[0] == 2 and any("fails its CRC" in line for line in fast[2])
    # every partition but the empty one, which is counted in a line below the table instead
    if columns in (None, "200"):
        assert stacked == [(len(TOPICS) * 2 + 1, False)]  # the fast path was taken
    if columns == "80" and not closed:
        assert stacked == [(len(TOPICS) * 2 + 1, True)]  # a long name folds; no cell wraps
    if columns == "60":
        assert stacked == []  # too narrow for the status words: cells wrap, printed row by row
    assert ("\x1b[" in fast[1]) == (columns is not None)  # a terminal's styles


def test_a_log_dir_of_empty_partitions_prints_without_comparing_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Empty partitions are counted in one line, not detailed; picking them out compared every row with
    every empty one (10 000 empty partitions: 10^8 comparisons of 25 fields)."""
    log_dir = tmp_path / "logdir"
    for partition in range(30):
        PartitionBuilder("empty", partition).write(log_dir)
    PartitionBuilder("orders", 0).batch([(b"k", b"v")]).write(log_dir)
    compared: list[object] = []

    def counting_eq(self: DirtyRatioRow, other: object) -> bool:
        compared.append(other)
        return self is other

    monkeypatch.setattr(DirtyRatioRow, "__eq__", counting_eq)
    code, stdout, _messages = _run(log_dir, {})
    assert code == 0 and "30 empty partitions" in stdout
    assert "orders-0: the active segment" in stdout and "empty-0:" not in stdout
    assert compared == []
