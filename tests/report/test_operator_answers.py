"""The report's answers, as an operator starting from a stopped broker's log dir reads them: what a clean gives
back now and with ``--roll`` (the data of a stopped broker sits in active segments), both checked against what
``clean --roll`` then frees; empty partitions counted apart, as ``inspect dirty-ratio`` does, not as blocked;
what unblocks the cleaner before the charts; the partitions giving back most first; keyless topics sent to
retention, not told to be compacted; axes in the cards' binary units; tables that fit their box."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kcompact.report.model import KEYLESS_ADVICE
from tests.conftest import copy_tree_writable, real_fixture
from tests.report.browser import open_page, require_browser
from tests.report.test_report import NOW, run, run_json

FIGURE = re.compile(r'<div class="chart" id="([a-z-]+)"></div><script>\(function\(\)\{var a=(.*?);Plotly')


def log_bytes(log_dir: Path) -> int:
    return sum(p.stat().st_size for p in log_dir.glob("*/*.log"))


def page_of(log_dir: Path, tmp_path: Path) -> tuple[dict[str, Any], str]:
    """The report's JSON and its page, made by one command (``--json`` with ``--output``)."""
    page = tmp_path / "report.html"
    report = run_json("report", str(log_dir), "--now-ms", str(NOW), "--json", "--output", str(page))
    return report, page.read_text(encoding="utf-8")


def card(text: str, key: str) -> str:
    found = re.search(rf'id="total-{key}" data-value="([^"]*)"', text)
    assert found is not None, key
    return found.group(1)


def test_a_stopped_brokers_log_dir_shows_what_a_clean_gives_back_now_and_with_roll(tmp_path: Path) -> None:
    """kraft37 (written by a real broker): its two __consumer_offsets partitions with records hold their dirty
    data in the active segment. A clean now gives back 0 B; the page says so and what `clean --roll` gives back,
    and `clean --roll` then frees exactly that many bytes of .log files."""
    log_dir = copy_tree_writable(real_fixture("kraft37-cleaned-logdir"), tmp_path / "logdir")
    report, page = page_of(log_dir, tmp_path)
    totals = report["totals"]
    assert totals["reclaimable_bytes"] == 0 and card(page, "reclaimable_bytes") == "0"
    with_roll = totals["reclaimable_bytes_with_roll"]
    assert with_roll > 0 and card(page, "reclaimable_bytes_with_roll") == str(with_roll)
    assert "with --roll (active segments cleaned too)" in page
    before = log_bytes(log_dir)
    done = run("clean", str(log_dir), "--roll", "--now-ms", str(NOW))
    assert done.exit_code == 0, done.output
    assert before - log_bytes(log_dir) == with_roll


def test_empty_partitions_are_counted_apart_as_dirty_ratio_counts_them_not_as_blocked(tmp_path: Path) -> None:
    log_dir = real_fixture("kraft37-cleaned-logdir")
    report, page = page_of(log_dir, tmp_path)
    done = run("inspect", "dirty-ratio", str(log_dir), "--now-ms", str(NOW))
    said = re.search(r"^(\d+) empty partitions \(no records\): nothing to clean$", done.stdout, re.M)
    assert said is not None
    totals = report["totals"]
    assert totals["empty"] == int(said.group(1)) == 49
    assert totals["blocked"] == {"active-segment": 2, "cleanup-policy": 1}  # the two with records, the metadata log
    assert card(page, "blocked") == "3" and card(page, "empty") == "49"
    statuses = {(p["topic"], p["partition"]): p["status"] for p in report["partitions"]}
    assert statuses[("__consumer_offsets", 0)] == "empty"


def test_what_unblocks_the_cleaner_comes_first_and_the_partitions_giving_back_most_lead(tmp_path: Path) -> None:
    _report, page = page_of(real_fixture("kraft37-cleaned-logdir"), tmp_path)
    assert page.index("<h2>At a glance</h2>") < page.index("<h2>What unblocks the cleaner</h2>") < page.index(
        "<h2>Where the disk went</h2>")
    body = page[page.index('id="partitions-table"'):]
    rows = re.findall(r'<tr><td class="t" data-value="([^"]*)">[^<]*</td><td data-value="(\d+)">', body)
    assert rows[:2] == [("__consumer_offsets", "31"), ("__consumer_offsets", "44")]  # 732 B, then 262 B with --roll


def test_keyless_topics_are_retentions_job_not_told_to_be_compacted(tmp_path: Path) -> None:
    """bitnami: first-0, sensor-data-0 and sensor-data-topic-0 hold only keyless records (a delete topic)."""
    report, page = page_of(real_fixture("bitnami2024-rolled-logdir"), tmp_path)
    statuses = {f"{p['topic']}-{p['partition']}": p["status"] for p in report["partitions"]}
    assert [name for name, status in statuses.items() if status == "keyless"] == [
        "first-0", "sensor-data-0", "sensor-data-topic-0"]
    assert report["advice"]["keyless"] == KEYLESS_ADVICE
    assert "a clean would delete them" in KEYLESS_ADVICE and "retention's job" in KEYLESS_ADVICE
    assert "cleanup.policy=compact" not in " ".join(report["advice"].values())
    assert statuses["__cluster_metadata-0"] == "cleanup-policy"  # KRaft's own log: not a topic's keyless data


def test_the_charts_bytes_are_in_the_binary_units_of_the_cards(tmp_path: Path) -> None:
    _report, page = page_of(real_fixture("kraft37-cleaned-logdir"), tmp_path)
    figures = {div_id: json.loads(payload) for div_id, payload in FIGURE.findall(page)}
    traces, layout, _config = figures["chart-disk"]
    assert layout["xaxis"]["title"]["text"] == "KiB" and "exponentformat" not in layout["xaxis"]
    for trace in traces:
        assert trace["x"] == [exact / 1024 for exact in trace["customdata"]]
        assert "%{customdata:,} bytes" in trace["hovertemplate"]  # the exact count on hover


def test_the_tables_fit_their_box_in_a_browser(tmp_path: Path) -> None:
    """confluent512: 102 partitions, topic names up to 91 characters; at 1280 pixels no column is cut."""
    require_browser()
    _report, _page = page_of(real_fixture("confluent512-lz4-logdir"), tmp_path)
    with open_page(tmp_path / "report.html", tmp_path / "profile") as visit:
        for table in ("topics-table", "partitions-table"):
            width, box = visit.page.evaluate(
                f"(() => {{ const t = document.getElementById('{table}'); "
                "return [t.scrollWidth, t.parentElement.clientWidth]; })()")
            assert width <= box, table


def test_json_with_output_prints_the_data_and_writes_the_page_as_the_docs_say(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    done = run("report", str(real_fixture("kraft37-cleaned-logdir")), "--now-ms", str(NOW), "--json",
               "--output", str(page))
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["totals"]["partitions"] == 52
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    row = next(line for line in (Path(__file__).parents[2] / "docs" / "commands.md").read_text().splitlines()
               if line.startswith("| `kcompact report PATH..."))
    assert "`--json` (the page's data on stdout, and with `--output` the page written too;" in row


def test_a_report_from_spark_rows_counts_empty_partitions_apart_too(tmp_path: Path) -> None:
    """``report --from PARQUET`` reads the offsets ``spark inspect dirty-ratio`` writes: the same 49 empty
    partitions, not blocked; rows written before those columns existed still read (as blocked, as then)."""
    from kcompact.inspect.dirty_ratio import dirty_ratio_report
    from tests.report.test_report import write_rows_parquet

    log_dir = real_fixture("kraft37-cleaned-logdir")
    rows = [row.as_dict() for row in dirty_ratio_report([log_dir], cli_overrides={}, now_ms=NOW)]
    write_rows_parquet(rows, tmp_path / "ratio.parquet")
    totals = run_json("report", "--from", str(tmp_path / "ratio.parquet"), "--json")["totals"]
    assert totals["empty"] == 49
    assert totals["blocked"] == {"active-segment": 2, "cleanup-policy": 1}

    old = [{k: v for k, v in row.items() if k not in ("log_start_offset", "log_end_offset")} for row in rows]
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "old.parquet").mkdir()
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in r.items() if k != "warnings"} for r in old]),
                   tmp_path / "old.parquet" / "part-00000.parquet")
    totals = run_json("report", "--from", str(tmp_path / "old.parquet"), "--json")["totals"]
    assert totals["partitions"] == len(rows) and totals["empty"] == 0
