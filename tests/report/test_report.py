"""``kcompact report``: every number of the report is the one the matching inspect command's ``--json``
prints, a partition that fails to read is a row (not the end of the report), bad input is one line, and the
page made at scale from 100 000 Parquet rows stays small (``scripts/bench.py report`` times it)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kcompact.cli.main import cli
from kcompact.inspect.dirty_ratio import DirtyRatioRow, dirty_ratio_report
from tests.conftest import PROJECT_FIXTURES, real_fixture
from tests.inspect.test_transactions import committed_aborted_open
from tests.partition_builder import BASE_TS, PartitionBuilder
from tests.report.parquet_rows import many_rows_parquet

HOUR = 3_600_000
NOW = BASE_TS + 30 * 24 * HOUR  # a clock past every fixture's data (the real ones: given the same to all)


def run(*args: str) -> Any:
    """``kcompact ARGS`` in this process; the result (exit code, stdout, stderr)."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def run_json(*args: str) -> Any:
    done = run(*args)
    assert done.exit_code in (0, 2, 3), done.output  # 3: inspect replicas, the copies diverge
    return json.loads(done.stdout)


def mixed_log_dir(log_dir: Path) -> Path:
    """A log dir with what a report must show: duplicates a clean removes (orders-0, eligible), a hanging
    transaction (orders-3), and a partition with nothing to clean (prices-0)."""
    b = PartitionBuilder("orders", 0)
    for round_ in range(6):
        b.batch([(f"k{i}".encode(), f"v{round_}".encode() * 20) for i in range(10)]).roll()
    b.batch([(b"tail", b"1")])
    b.write(log_dir)
    committed_aborted_open(log_dir)
    PartitionBuilder("prices", 0).batch([(b"p", b"1")]).write(log_dir)
    return log_dir


def corrupt(part: Path) -> Path:
    """Cut the tail of the partition's first segment: its data no longer parses."""
    log = min(part.glob("*.log"))
    log.write_bytes(log.read_bytes()[:-5])
    return log


def log_dirs_under_test(name: str, tmp_path: Path) -> list[str]:
    if name == "mixed":
        return [str(mixed_log_dir(tmp_path / "logdir"))]
    if name.startswith("real/"):
        return [str(real_fixture(name.removeprefix("real/")))]
    return [str(PROJECT_FIXTURES / name)]


@pytest.mark.parametrize("name", ["mixed", "sample-logdir", "codecs-logdir", "real/bitnami2024-rolled-logdir",
                                  "real/kraft37-cleaned-logdir", "real/confluent512-lz4-logdir"])
def test_every_number_is_the_one_the_inspect_commands_json_prints(name: str, tmp_path: Path) -> None:
    paths = log_dirs_under_test(name, tmp_path)
    common = ["--now-ms", str(NOW), "--config", "cleanup.policy=compact"]
    report = run_json("report", *paths, *common, "--json")
    ratio_rows = run_json("inspect", "dirty-ratio", *paths, *common, "--json")
    assert [(p["topic"], p["partition"]) for p in report["partitions"]] == [
        (r["topic"], r["partition"]) for r in ratio_rows]
    size = reclaimable = 0
    for entry, ratio in zip(report["partitions"], ratio_rows, strict=True):
        for field in ("cleanup_policy", "clean_bytes", "dirty_bytes", "dirty_ratio", "min_cleanable_dirty_ratio",
                      "eligible", "cleaner_rank", "blocking_rule", "blocking_detail"):
            assert entry[field] == ratio[field], (entry["partition_dir"], field)
        part = entry["partition_dir"]
        keys = run_json("inspect", "keys", part, *common, "--json")
        assert (entry["size_in_bytes"], entry["size_in_bytes_after"]) == (
            keys["projection"]["size_in_bytes_before"], keys["projection"]["size_in_bytes_after"]), part
        assert entry["clean_skipped_reason"] == keys["projection"]["skipped_reason"]
        size += keys["projection"]["size_in_bytes_before"]
        reclaimable += keys["projection"]["size_in_bytes_before"] - keys["projection"]["size_in_bytes_after"]
        last = run_json("inspect", "last-clean", part, *common, "--json")
        assert (entry["compacted"], entry["last_clean_after_ms"], entry["records_since"]) == (
            last["compacted"], last["last_clean_after_ms"], last["records_since"]), part
        (txns,) = run_json("inspect", "transactions", part, *common, "--json")
        assert [(h["producer_id"], h["start_offset"], h["dirty_bytes_held_back"], h["abort_command"])
                for h in entry["hanging"]] == [
            (h["producer_id"], h["start_offset"], h["dirty_bytes_held_back"], h["abort_command"])
            for h in txns["hanging"]], part
    totals = report["totals"]
    assert (totals["size_in_bytes"], totals["reclaimable_bytes"]) == (size, reclaimable)
    assert totals["partitions"] == len(ratio_rows)
    assert totals["eligible"] == sum(r["eligible"] for r in ratio_rows)
    empty = [r for r in ratio_rows if r["log_end_offset"] is not None and r["log_end_offset"] == r["log_start_offset"]
             and not r["eligible"] and r["error"] is None]
    assert totals["empty"] == len(empty)  # nothing to clean: not blocked (inspect dirty-ratio counts them apart)
    assert totals["blocked"] == dict(Counter(r["blocking_rule"] for r in ratio_rows
                                             if not r["eligible"] and r not in empty))
    assert totals["dirty_bytes"] == sum(r["dirty_bytes"] for r in ratio_rows)


def test_the_mixed_log_dir_shows_what_a_clean_gives_back_and_the_hanging_transaction(tmp_path: Path) -> None:
    log_dir = mixed_log_dir(tmp_path / "logdir")
    report = run_json("report", str(log_dir), "--now-ms", str(NOW), "--config", "cleanup.policy=compact", "--json")
    by_name = {f"{p['topic']}-{p['partition']}": p for p in report["partitions"]}
    assert by_name["orders-0"]["eligible"] and by_name["orders-0"]["reclaimable_bytes"] > 0
    assert by_name["orders-3"]["blocking_rule"] == "open-transaction"
    (hanging,) = by_name["orders-3"]["hanging"]
    assert hanging["producer_id"] == 9 and hanging["dirty_bytes_held_back"] > 0
    assert report["totals"]["hanging_transactions"] == 1
    assert "open-transaction" in report["advice"]


def test_a_partition_that_fails_to_read_is_a_row_with_its_error_and_the_page_is_written(tmp_path: Path) -> None:
    log_dir = mixed_log_dir(tmp_path / "logdir")
    log = corrupt(log_dir / "prices-0")
    page = tmp_path / "report.html"
    done = run("report", str(log_dir), "--now-ms", str(NOW), "--output", str(page))
    assert done.exit_code == 2
    assert str(log) in done.stderr
    assert "Traceback" not in done.output
    text = page.read_text()
    assert str(log) in text  # the failing partition's row names the file
    report = run_json("report", str(log_dir), "--now-ms", str(NOW), "--json")
    by_name = {f"{p['topic']}-{p['partition']}": p for p in report["partitions"]}
    assert by_name["prices-0"]["errors"] and by_name["prices-0"]["status"] == "error"
    assert not by_name["orders-0"]["errors"] and by_name["orders-0"]["size_in_bytes"] > 0
    assert report["totals"]["errors"] == 1


@pytest.mark.parametrize("args, message", [
    (["report", "{tmp}"], "--output FILE.html is required"),
    (["report", "--output", "{tmp}/r.html"], "give either log dirs"),
    (["report", "{tmp}", "--from", "{tmp}", "--output", "{tmp}/r.html"], "give either log dirs"),
    (["report", "{tmp}/empty", "--output", "{tmp}/r.html"], "{tmp}/empty"),
    (["report", "--from", "{tmp}/not.parquet", "--output", "{tmp}/r.html"], "{tmp}/not.parquet: not the Parquet"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "not.parquet").write_text("hello\n")
    done = run(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert done.exit_code == 2
    assert message.replace("{tmp}", str(tmp_path)) in done.stderr
    assert "Traceback" not in done.output
    assert not (tmp_path / "r.html").exists()


def test_topic_filters_select_the_partitions_as_dirty_ratio_does(tmp_path: Path) -> None:
    log_dir = mixed_log_dir(tmp_path / "logdir")
    report = run_json("report", str(log_dir), "--topic", "orders", "--exclude-topic", "prices", "--partition", "3",
                      "--now-ms", str(NOW), "--json")
    assert [(p["topic"], p["partition"]) for p in report["partitions"]] == [("orders", 3)]
    assert [t["topic"] for t in report["topics"]] == ["orders"]


def write_rows_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """The rows as ``spark inspect dirty-ratio --output`` writes them: its columns, its types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kcompact.spark.rows import dataclass_columns

    arrow: dict[str, pa.DataType] = {
        "string": pa.string(), "bigint": pa.int64(), "int": pa.int32(), "double": pa.float64(),
        "boolean": pa.bool_(), "array<string>": pa.list_(pa.string())}
    schema = pa.schema([(name, arrow[kind]) for name, kind in dataclass_columns(DirtyRatioRow)])
    path.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path / "part-00000.parquet")
    (path / "_SUCCESS").write_text("")


def test_from_parquet_totals_are_the_dirty_ratio_rows(tmp_path: Path) -> None:
    log_dir = mixed_log_dir(tmp_path / "logdir")
    rows = [row.as_dict() for row in dirty_ratio_report([log_dir], cli_overrides={}, now_ms=NOW)]
    write_rows_parquet(rows, tmp_path / "ratio.parquet")
    report = run_json("report", "--from", str(tmp_path / "ratio.parquet"), "--json")
    totals = report["totals"]
    assert totals["partitions"] == len(rows)
    assert totals["dirty_bytes"] == sum(r["dirty_bytes"] for r in rows)
    assert totals["clean_bytes"] == sum(r["clean_bytes"] for r in rows)
    assert totals["eligible"] == sum(r["eligible"] for r in rows)
    assert totals["blocked"] == dict(Counter(r["blocking_rule"] for r in rows if not r["eligible"]))
    assert totals["size_in_bytes"] is None and totals["reclaimable_bytes"] is None  # not in those rows
    page = tmp_path / "r.html"
    assert run("report", "--from", str(tmp_path / "ratio.parquet"), "--output", str(page)).exit_code == 0
    assert "not in spark inspect dirty-ratio's rows" in page.read_text()


def test_from_parquet_of_100000_partitions_is_small(tmp_path: Path) -> None:
    from plotly.offline import get_plotlyjs  # type: ignore[import-untyped]

    many_rows_parquet(tmp_path / "ratio.parquet", 100_000, 2_000)
    page = tmp_path / "r.html"
    done = run("report", "--from", str(tmp_path / "ratio.parquet"), "--output", str(page))
    assert done.exit_code == 0, done.output
    own = page.stat().st_size - len(get_plotlyjs())
    assert own < 1_500_000  # 2 000 topics and the 200 largest partitions: about 1 MiB (its time: bench.py report)
    report = run_json("report", "--from", str(tmp_path / "ratio.parquet"), "--json")
    assert report["totals"]["partitions"] == 100_000
    assert len(report["topics"]) == 2_000 and report["partitions_listed"] == 200
    sizes = [p["clean_bytes"] + p["dirty_bytes"] for p in report["partitions"]]
    assert sizes == sorted(sizes, reverse=True)


def test_progress_is_told_partition_by_partition(tmp_path: Path) -> None:
    from kcompact.report.gather import PROGRESS_DIRTY_RATIO, PROGRESS_PARTITIONS, ConfigInputs, log_dir_report

    told: list[tuple[str, int, int]] = []
    log_dir_report([mixed_log_dir(tmp_path / "logdir")], ConfigInputs({}), now_ms=NOW,
                   progress=lambda what, done, total: told.append((what, done, total)))
    assert told[-1] == (PROGRESS_PARTITIONS, 3, 3)
    assert (PROGRESS_DIRTY_RATIO, 3, 3) in told
    assert [done for what, done, _ in told if what == PROGRESS_PARTITIONS] == [0, 1, 2, 3]


def test_several_log_dirs_compare_the_replicas_of_the_reported_partitions(tmp_path: Path) -> None:
    broker1 = mixed_log_dir(tmp_path / "b1")
    broker2 = tmp_path / "b2"
    PartitionBuilder("orders", 0).batch([(b"k0", b"other")]).write(broker2)  # orders-0's copy, diverging
    PartitionBuilder("orders", 3).batch([(b"o", b"1")]).write(broker2)
    report = run_json("report", str(broker1), str(broker2), "--now-ms", str(NOW), "--json")
    expected = run_json("inspect", "replicas", str(broker1), str(broker2), "--json")
    assert [(r["topic"], r["partition"], r["agree"], r["divergent_keys"]) for r in report["replicas"]] == [
        (r["topic"], r["partition"], r["agree"], r["divergent_keys"]) for r in expected]
    assert [r["partition"] for r in report["replicas"]] == [0, 3]
    assert report["totals"]["log_dirs"] == 2
    only = run_json("report", str(broker1), str(broker2), "--partition", "3", "--now-ms", str(NOW), "--json")
    assert [(r["topic"], r["partition"]) for r in only["replicas"]] == [("orders", 3)]


def test_from_parquet_takes_the_topic_filters_and_refuses_one_matching_nothing(tmp_path: Path) -> None:
    log_dir = mixed_log_dir(tmp_path / "logdir")
    write_rows_parquet([row.as_dict() for row in dirty_ratio_report([log_dir], cli_overrides={}, now_ms=NOW)],
                       tmp_path / "ratio.parquet")
    report = run_json("report", "--from", str(tmp_path / "ratio.parquet"), "--topic", "orders", "--json")
    assert sorted(p["partition"] for p in report["partitions"]) == [0, 3]
    done = run("report", "--from", str(tmp_path / "ratio.parquet"), "--topic", "nope", "--output",
               str(tmp_path / "r.html"))
    assert done.exit_code == 2
    assert done.stderr == (f"kcompact: error: no row of {tmp_path / 'ratio.parquet'} matches --topic 'nope' "
                           "(3 partitions in all)\n")
    assert not (tmp_path / "r.html").exists()


def test_the_dirty_ratio_histogram_counts_every_partition(tmp_path: Path) -> None:
    log_dir = mixed_log_dir(tmp_path / "logdir")
    rows = run_json("inspect", "dirty-ratio", str(log_dir), "--now-ms", str(NOW), "--json")
    report = run_json("report", str(log_dir), "--now-ms", str(NOW), "--json")
    totals = report["totals"]
    expected_eligible, expected_not = [0] * 20, [0] * 20
    for row in rows:
        (expected_eligible if row["eligible"] else expected_not)[min(int(row["dirty_ratio"] * 20), 19)] += 1
    assert (totals["ratio_bins_eligible"], totals["ratio_bins_not_eligible"]) == (expected_eligible, expected_not)
    assert totals["min_cleanable_dirty_ratios"] == sorted({r["min_cleanable_dirty_ratio"] for r in rows})


def tree_state(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
            for p in sorted(root.rglob("*"))}


def test_the_report_changes_nothing_in_the_log_dirs(tmp_path: Path) -> None:
    log_dir = mixed_log_dir(tmp_path / "logdir")
    before = tree_state(log_dir)
    done = run("report", str(log_dir), "--config", "cleanup.policy=compact", "--output", str(tmp_path / "r.html"))
    assert done.exit_code == 0, done.output
    assert tree_state(log_dir) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logdir", "r.html"]  # the page, no temporary left


def test_the_cli_draws_progress_on_a_terminal_and_never_with_json(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from kcompact.cli import render

    drawn, quiet = io.StringIO(), io.StringIO()
    console = Console(file=drawn, force_terminal=True, width=100)
    monkeypatch.setattr(render, "err_console", lambda: console)
    monkeypatch.setattr(render, "may_be_terminal", lambda stream: True)
    log_dir = mixed_log_dir(tmp_path / "logdir")
    done = run("report", str(log_dir), "--now-ms", str(NOW), "--output", str(tmp_path / "r.html"))
    assert done.exit_code == 0, done.output
    assert "reading partitions (dirty ratio)" in drawn.getvalue()
    assert "reading partitions (projection, last clean, transactions)" in drawn.getvalue()
    console.file = quiet
    assert run("report", str(log_dir), "--now-ms", str(NOW), "--json").exit_code == 0
    assert quiet.getvalue() == ""


def test_each_partition_is_loaded_once_for_the_projection_last_clean_and_transactions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kcompact.inspect import context
    from kcompact.log.state import log_state

    loaded: Counter[str] = Counter()
    real_load = log_state.load_log_state

    def counting(partition: Any, *args: Any, **kwargs: Any) -> Any:
        loaded[partition.path.name] += 1
        return real_load(partition, *args, **kwargs)

    monkeypatch.setattr(context, "load_log_state", counting)
    log_dir = mixed_log_dir(tmp_path / "logdir")
    report = run_json("report", str(log_dir), "--now-ms", str(NOW), "--config", "cleanup.policy=compact", "--json")
    assert loaded == {"orders-0": 1, "orders-3": 1, "prices-0": 1}
    assert report["totals"]["hanging_transactions"] == 1 and report["totals"]["reclaimable_bytes"] > 0


def test_the_exit_code_says_replicas_diverge_as_inspect_replicas_does(tmp_path: Path) -> None:
    import shutil

    broker1 = mixed_log_dir(tmp_path / "b1")
    same = shutil.copytree(broker1, tmp_path / "same")
    agreeing = run("report", str(broker1), str(same), "--now-ms", str(NOW), "--output", str(tmp_path / "a.html"))
    assert agreeing.exit_code == 0, agreeing.output
    other = tmp_path / "other"
    PartitionBuilder("orders", 0).batch([(b"k0", b"other")]).write(other)  # orders-0's copy, diverging
    page = tmp_path / "d.html"
    diverging = run("report", str(broker1), str(other), "--now-ms", str(NOW), "--output", str(page))
    assert diverging.exit_code == run("inspect", "replicas", str(broker1), str(other)).exit_code == 3
    assert diverging.stderr.endswith("the replica copies of 1 partition diverge: orders-0 (kcompact inspect "
                                     "replicas says how)\n")
    assert page.stat().st_size > 0  # the page is written first
    corrupt(broker1 / "prices-0")
    failing = run("report", str(broker1), str(other), "--now-ms", str(NOW), "--output", str(page))
    assert failing.exit_code == 2  # a partition that fails to read wins, as in inspect replicas


def test_report_help_names_its_exit_codes() -> None:
    done = run("report", "--help")
    assert "3 some partition's replica copies diverge" in " ".join(done.stdout.split())
