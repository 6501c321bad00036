"""``kcompact inspect dirty-ratio | keys | last-clean`` through click: whole outputs at 80 columns, the JSON
forms, help for every command, and exit code 2 with one line for bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.inspect.keys import keys_report
from tests.builders import BASE_TS, PartitionBuilder
from tests.conftest import real_fixture
from tests.inspect.keys.test_keys import COMPACT, NOW, TOP_FIELDS, mixed
from tests.inspect.test_dirty_ratio import ROW_FIELDS, segmented

CONSUMER_OFFSETS_44 = ("kraft37-cleaned-logdir", "__consumer_offsets-44")


def run(*args: str) -> Result:
    runner = CliRunner()
    return runner.invoke(cli, list(args), env={"COLUMNS": "80"}, catch_exceptions=False,
                         prog_name="kcompact")


@pytest.mark.parametrize("command", ["dirty-ratio", "keys", "last-clean", "dump"])
def test_every_inspect_command_has_help(command: str) -> None:
    result = run("inspect", command, "--help")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"Usage: kcompact inspect {command} [OPTIONS] ")
    assert "Exit codes: 0 success; 2 bad input" in result.stdout


def test_inspect_group_lists_the_commands() -> None:
    commands = run("inspect", "--help").stdout.split("Commands:")[1]
    assert [line.split()[0] for line in commands.strip().splitlines()[:4]] == [
        "dirty-ratio", "dump", "keys", "last-clean"]


# -- dirty-ratio --


def test_dirty_ratio_json_is_a_list_also_for_one_partition(tmp_path: Path) -> None:
    part = segmented().write(tmp_path / "logdir")
    result = run("inspect", "dirty-ratio", str(part), "--json", "--now-ms", str(NOW), "--config",
                 "cleanup.policy=compact")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert isinstance(rows, list) and len(rows) == 1
    assert list(rows[0]) == ROW_FIELDS
    assert (rows[0]["partition_dir"], rows[0]["cleaner_rank"]) == (str(part), 1)


def test_dirty_ratio_table(tmp_path: Path) -> None:
    """Piped (not a terminal), the table takes its natural width and no line is wrapped."""
    part = segmented().write(tmp_path / "logdir", cleaner_checkpoint=10)
    result = run("inspect", "dirty-ratio", str(part), "--now-ms", str(NOW), "--config",
                 "cleanup.policy=compact")
    assert result.exit_code == 0
    assert result.stdout == (
        "dirty ratio (what the broker's cleaner sees)                                                \n"
        "┏━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓\n"
        "┃ rank ┃ partition ┃   dirty ┃ clean ┃ ratio             ┃ status                          ┃\n"
        "┡━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩\n"
        "│    1 │ orders-0  │ 1.0 KiB │ 512 B │ ######|#.... 0.67 │ eligible (up to active-segment) │\n"
        "└──────┴───────────┴─────────┴───────┴───────────────────┴─────────────────────────────────┘\n"
        "orders-0: the active segment (base offset 30, 76 B) is never cleaned; its first batch is "
        "2h 46m old; a batch stamped after 2023-11-21T22:13:20Z (in 6d 21h; segment.ms 7d) rolls it; or "
        "an append that would take it past segment.bytes 1.0 GiB (1.0 GiB left) rolls it\n"
        "active-segment: the data waits in the active segment: lower segment.ms (or "
        "max.compaction.lag.ms, which also rolls compacted topics) so the broker rolls it; offline, "
        "`kcompact clean --roll`\n"
    )


def test_dirty_ratio_table_on_a_terminal(tmp_path: Path) -> None:
    """On an 80-column terminal the table and the advice keep to 80 columns."""
    part = segmented().write(tmp_path / "logdir", cleaner_checkpoint=10)
    result = CliRunner().invoke(cli, ["inspect", "dirty-ratio", str(part), "--now-ms", str(NOW), "--config",
                                      "cleanup.policy=compact"],
                                env={"COLUMNS": "80", "TTY_COMPATIBLE": "1"}, catch_exceptions=False)
    assert result.exit_code == 0
    assert re.sub(r"\x1b\[[0-9;]*m", "", result.stdout) == (  # without colours
        "dirty ratio (what the broker's cleaner sees)                                    \n"
        "┏━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━┓\n"
        "┃ rank ┃ partition ┃   dirty ┃ clean ┃ ratio             ┃ status              ┃\n"
        "┡━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━┩\n"
        "│    1 │ orders-0  │ 1.0 KiB │ 512 B │ ######|#.... 0.67 │ eligible (up to     │\n"
        "│      │           │         │       │                   │ active-segment)     │\n"
        "└──────┴───────────┴─────────┴───────┴───────────────────┴─────────────────────┘\n"
        "orders-0: the active segment (base offset 30, 76 B) is never cleaned; its first \n"
        "batch is 2h 46m old; a batch stamped after 2023-11-21T22:13:20Z (in 6d 21h; \n"
        "segment.ms 7d) rolls it; or an append that would take it past segment.bytes 1.0 \n"
        "GiB (1.0 GiB left) rolls it\n"
        "active-segment: the data waits in the active segment: lower segment.ms (or \n"
        "max.compaction.lag.ms, which also rolls compacted topics) so the broker rolls \n"
        "it; offline, `kcompact clean --roll`\n"
    )


def test_dirty_ratio_exits_2_when_a_partition_does_not_parse(tmp_path: Path) -> None:
    part = segmented().write(tmp_path / "logdir")
    log = part / "00000000000000000000.log"
    log.write_bytes(log.read_bytes()[:16] + b"\x09" + log.read_bytes()[17:])
    result = run("inspect", "dirty-ratio", str(tmp_path / "logdir"), "--json")
    assert result.exit_code == 2
    (row,) = json.loads(result.stdout)
    assert "00000000000000000000.log" in row["error"]


def test_dirty_ratio_of_a_directory_without_partitions_is_an_error_not_an_empty_table(tmp_path: Path) -> None:
    part = segmented().write(tmp_path / "logdir")
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in ([str(empty)], [str(part), str(empty)], [str(empty), "--json"]):
        result = run("inspect", "dirty-ratio", *args)
        assert (result.exit_code, result.stderr) == (
            2, (f"kcompact: error: no partition directories found under {empty} (expected a log dir, which "
               "holds <topic>-<partition> directories, or one of them)\n"))


# -- keys --


def test_keys_json_is_the_report(tmp_path: Path) -> None:
    part = mixed().write(tmp_path / "logdir")
    result = run("inspect", "keys", str(part), "--json", "--now-ms", str(NOW), "--partitions", "4",
                 "--config", "cleanup.policy=compact")
    assert result.exit_code == 0
    got = json.loads(result.stdout)
    assert list(got) == TOP_FIELDS
    expected = keys_report(part, cli_overrides=COMPACT, now_ms=NOW, partitions=4).as_dict()
    assert got == json.loads(json.dumps(expected))


def test_keys_text(tmp_path: Path) -> None:
    part = mixed().write(tmp_path / "logdir")
    result = run("inspect", "keys", str(part), "--now-ms", str(NOW), "--partitions", "4", "--top",
                 "3", "--config", "cleanup.policy=compact")
    assert result.exit_code == 0
    assert result.stdout == (
        "orders-0: 37 records in 14 batches, 1.3 KiB\n"
        "offsets       log start offset 0, log end offset 37, first dirty 0, first\n"
        "              uncleanable 32\n"
        "records       35 data, 2 control, 2 keyless\n"
        "consumers     35 read_uncommitted (to the high watermark 37)\n"
        "              29 read_committed (to the last stable offset 34)\n"
        "keys          14 distinct; 14 in the dirty section, 11 in the cleanable range\n"
        "duplicates    16 of 30 keyed records (219 B of records, uncompressed) have a\n"
        "              later record of their key\n"
        "tombstones    3, 0 with a delete horizon; the oldest at offset 23\n"
        "              (2023-11-14T22:13:20Z)\n"
        "              superseded: 1, removed by the next clean that covers them\n"
        "              no horizon yet: 2, removable from 2023-11-16T01:00:00Z at the\n"
        "              earliest\n"
        "transactions  1 COMMIT and 1 ABORT markers, 1 aborted transaction (3 records), 1\n"
        "              open\n"
        "              open: producer id 9 (epoch 0) from offset 34, last write\n"
        "              2023-11-14T22:13:20Z\n"
        "a clean now   37 -> 18 records, 1.3 KiB -> 985 B (-27.6%), checkpoint -> 32\n"
        "              removes 14 superseded, 1 tombstone, 1 keyless, 3 aborted, 0\n"
        "              markers\n"
        "dedupe        11 keys to map: one cleaning round; the broker's map holds 5033164\n"
        "              keys a round (log.cleaner.dedupe.buffer.size 128.0 MiB over 1\n"
        "              cleaner thread)\n"
        "partitioner   9 keys (18 records, 238 B) belong to another of 4 partitions\n"
        "most duplicated keys      \n"
        "┏━━━━━━━━━┳━━━━━━━━┳━━━━━┓\n"
        "┃ records ┃ latest ┃ key ┃\n"
        "┡━━━━━━━━━╇━━━━━━━━╇━━━━━┩\n"
        "│       4 │     30 │ k1  │\n"
        "│       3 │     31 │ k3  │\n"
        "│       3 │     32 │ k0  │\n"
        "└─────────┴────────┴─────┘\n"
    )
    assert result.stderr.startswith("kcompact: warning: no KRaft metadata log")


def test_keys_of_consumer_offsets_are_decoded_as_dump_decodes_them() -> None:
    result = run("inspect", "keys", str(real_fixture(*CONSUMER_OFFSETS_44)), "--now-ms", str(NOW))
    assert result.exit_code == 0
    # __consumer_offsets keys decoded as `inspect dump` decodes them, not as escaped bytes
    assert '│       2 │     10 │ {"version":2,"data":{"group":"rupia-transaction-group"}}' in result.stdout
    assert "\\x00" not in result.stdout
    assert "\x00" not in result.stdout


def test_keys_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    part = PartitionBuilder().batch([(b"a", b"1")]).roll().batch([(b"b", b"1")]).write(
        tmp_path / "logdir")
    log = part / "00000000000000000000.log"
    log.write_bytes(log.read_bytes()[:-3])  # the first segment's only batch loses its tail
    result = run("inspect", "keys", str(part))
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"kcompact: error: {log}")
    assert run("inspect", "keys", str(tmp_path / "logdir")).exit_code == 2  # a log dir
    bad = run("inspect", "keys", str(part), "--partitions", "0")
    assert bad.exit_code == 2 and "Invalid value for '--partitions'" in bad.stderr


# -- last-clean --


def test_last_clean_text_on_the_brokers_cleaned_partition() -> None:
    result = run("inspect", "last-clean", str(real_fixture(*CONSUMER_OFFSETS_44)))
    assert result.exit_code == 0
    assert result.stdout == (
        "__consumer_offsets-44: compaction provably ran after 2025-12-17T04:10:15Z\n"
        "newest gap    1 offset missing after offset 6, up to offset 8\n"
        "              (2025-12-17T04:10:15Z), before the dirty section\n"
        "              2 gaps with 7 missing offsets in all\n"
        "since         offset 8: 3 records in one contiguous run, possibly never cleaned\n"
        "              2 at or after the first dirty offset 9 (checkpoint 9)\n"
        "horizons      no batch carries a delete horizon\n"
        "empty batches 0 (left only by a clean)\n"
    )


def test_last_clean_text_without_evidence(tmp_path: Path) -> None:
    part = PartitionBuilder().batch([(b"a", b"1"), (b"a", b"2")]).write(tmp_path / "logdir")
    result = run("inspect", "last-clean", str(part), "--now-ms", str(BASE_TS))
    assert result.stdout == (
        "orders-0: no sign of compaction\n"
        "offsets       log start offset 0, log end offset 2: contiguous, no gap\n"
        "since         offset 0: 2 records in one contiguous run, possibly never cleaned\n"
        "              2 at or after the first dirty offset 0 (checkpoint none)\n"
        "horizons      no batch carries a delete horizon\n"
        "empty batches 0 (left only by a clean)\n"
    )


def test_last_clean_json() -> None:
    result = run("inspect", "last-clean", str(real_fixture(*CONSUMER_OFFSETS_44)), "--json")
    got = json.loads(result.stdout)
    assert got["newest_gap"] == {"after_offset": 6, "next_offset": 8, "missing_offsets": 1,
                                 "next_timestamp_ms": 1765944615543, "before_first_dirty": True}
    assert (got["records_since"], got["cleaned_after_ms"]) == (3, 1765944615543)
