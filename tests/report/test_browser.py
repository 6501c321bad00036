"""The report's page in a real browser (headless chromium): it loads with no console error and no network
request, its charts are drawn, the totals it shows are the inspect commands' JSON, and its tables sort and
filter. A screenshot of the top of the page is saved for a person to look at (its path is printed at the
end of the run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcompact.text import size_text
from tests.report.browser import SCREENSHOTS, open_page, require_browser
from tests.report.parquet_rows import many_rows_parquet
from tests.report.test_report import NOW, mixed_log_dir, run, run_json


@pytest.fixture
def page_file(tmp_path: Path) -> tuple[Path, list[str]]:
    """The page of two log dirs (the mixed one and the project's sample: orders-0 is in both), made by the
    command, and the log dirs."""
    require_browser()
    paths = [str(mixed_log_dir(tmp_path / "broker1")), str(Path(__file__).parents[2] / "fixtures" / "sample-logdir")]
    page = tmp_path / "report.html"
    done = run("report", *paths, "--now-ms", str(NOW), "--config", "cleanup.policy=compact", "--output", str(page))
    assert done.exit_code == 3, done.output  # orders-0's copies diverge (the page's replica chart)
    return page, paths


def expected_totals(paths: list[str]) -> dict[str, int]:
    """The totals as the inspect commands' JSON gives them, added up."""
    common = ["--now-ms", str(NOW), "--config", "cleanup.policy=compact"]
    rows = run_json("inspect", "dirty-ratio", *paths, *common, "--json")
    size = after = 0
    for row in rows:
        projection = run_json("inspect", "keys", row["partition_dir"], *common, "--json")["projection"]
        size += projection["size_in_bytes_before"]
        after += projection["size_in_bytes_after"]
    hanging = sum(len(row["hanging"]) for row in run_json("inspect", "transactions", *paths, *common, "--json"))
    return {"partitions": len(rows), "size_in_bytes": size, "reclaimable_bytes": size - after,
            "dirty_bytes": sum(r["dirty_bytes"] for r in rows), "eligible": sum(r["eligible"] for r in rows),
            "blocked": sum(not r["eligible"] for r in rows), "hanging_transactions": hanging}


def test_the_page_loads_offline_draws_its_charts_and_shows_the_inspect_totals(
        page_file: tuple[Path, list[str]], tmp_path: Path) -> None:
    page_path, paths = page_file
    expected = expected_totals(paths)
    assert expected["reclaimable_bytes"] > 0 and expected["hanging_transactions"] == 1
    with open_page(page_path, tmp_path / "profile") as visit:
        page = visit.page
        shot = tmp_path / "report-top.png"
        page.screenshot(path=str(shot))  # the viewport: the top of the page
        SCREENSHOTS.append(shot)
        assert visit.console_errors == []
        assert visit.requests == [page_path.resolve().as_uri()]  # the file itself, nothing else
        for chart in ("chart-disk", "chart-status", "chart-ratio-histogram", "chart-ratio", "chart-hanging",
                      "chart-replicas"):
            assert page.locator(f"#{chart} svg.main-svg").count() > 0, chart
            assert page.locator(f"#{chart} .point, #{chart} .scatterpts, #{chart} g.points path").count() > 0, chart
        for key, value in expected.items():
            card = page.locator(f"#total-{key}")
            assert card.get_attribute("data-value") == str(value), key
            shown = card.locator(".value").inner_text()
            if key.endswith("bytes"):
                assert shown == size_text(value), key
            else:
                assert shown == f"{value:,}", key
        assert "--start-offset 7" in page.locator("#abort-lines").inner_text()


def test_the_tables_sort_and_filter_in_the_page(page_file: tuple[Path, list[str]], tmp_path: Path) -> None:
    page_path, _ = page_file
    with open_page(page_path, tmp_path / "profile") as visit:
        page = visit.page
        table = page.locator("#partitions-table")
        on_disk = table.locator("th", has_text="on disk")
        on_disk.click()
        on_disk.click()  # descending
        values = [int(v) for v in table.locator("tbody tr td:nth-child(4)").evaluate_all(
            "cells => cells.map(c => c.dataset.value)")]
        assert values == sorted(values, reverse=True) and len(values) > 3
        page.fill("input[data-table=partitions-table]", "prices")
        visible = table.locator("tbody tr:not([hidden])")
        assert visible.count() == 1 and "prices" in visible.inner_text()
        assert visit.console_errors == []


def test_a_missing_browser_skips_or_fails_under_kcompact_require_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.report import browser

    monkeypatch.setattr(browser, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.delenv(browser.REQUIRE_BROWSER, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no chromium at /nonexistent/chromium"):
        require_browser()
    monkeypatch.setenv(browser.REQUIRE_BROWSER, "1")
    with pytest.raises(pytest.fail.Exception, match="KCOMPACT_REQUIRE_BROWSER=1 but no chromium"):
        require_browser()


def test_the_page_of_100000_partitions_opens_quickly_and_whole(tmp_path: Path) -> None:
    require_browser()
    many_rows_parquet(tmp_path / "ratio.parquet", 100_000, 2_000)
    page_path = tmp_path / "cluster.html"
    assert run("report", "--from", str(tmp_path / "ratio.parquet"), "--output", str(page_path)).exit_code == 0
    with open_page(page_path, tmp_path / "profile") as visit:
        page = visit.page
        loaded_ms = page.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd")
        print(f"100 000 partitions: the page loaded in {loaded_ms:.0f} ms")
        assert loaded_ms < 30_000  # about 2 s on a quiet machine, most of it parsing plotly.min.js
        assert visit.console_errors == []
        assert visit.requests == [page_path.resolve().as_uri()]
        for chart in ("chart-disk", "chart-status", "chart-ratio-histogram"):
            assert page.locator(f"#{chart} svg.main-svg").count() > 0, chart
        assert page.locator("#total-partitions").get_attribute("data-value") == "100000"
        assert page.locator("#topics-table tbody tr").count() == 2_000
        assert page.locator("#partitions-table tbody tr").count() == 200


def test_the_harness_sees_a_request_and_a_console_error_a_page_would_make(tmp_path: Path) -> None:
    """What the page test asserts is absent is seen when present: a fetched script, an error in a script."""
    require_browser()
    page_path = tmp_path / "bad.html"
    page_path.write_text('<!DOCTYPE html><html><head><script src="http://127.0.0.1:9/plotly.min.js"></script>'
                         "</head><body><script>Plotly.newPlot('x', [], {});</script></body></html>")
    with open_page(page_path, tmp_path / "profile") as visit:
        assert "http://127.0.0.1:9/plotly.min.js" in visit.requests
        assert any("Plotly is not defined" in error for error in visit.console_errors)


def test_a_partition_named_to_end_a_script_ends_nothing(tmp_path: Path) -> None:
    """``<!--<script>-0`` in the charts' data: every chart is drawn, every table row is there, no error."""
    from tests.report.test_hostile_names import HOSTILE_TOPICS, hostile_page

    require_browser()
    page_path = hostile_page(tmp_path)
    with open_page(page_path, tmp_path / "profile") as visit:
        page = visit.page
        assert visit.console_errors == []
        assert visit.requests == [page_path.resolve().as_uri()]
        for chart in ("chart-disk", "chart-status", "chart-ratio-histogram", "chart-ratio", "chart-hanging"):
            assert page.locator(f"#{chart} svg.main-svg").count() > 0, chart
        topics = page.locator("#partitions-table tbody tr td:nth-child(1)").all_inner_texts()
        assert sorted(topics) == sorted(["orders", "orders", "prices", *HOSTILE_TOPICS])
        assert page.locator("script").count() == page_path.read_text(encoding="utf-8").count("<script>")
        page.fill("input[data-table=partitions-table]", "<!--")  # the page's own script runs after them
        assert page.locator("#partitions-table tbody tr:not([hidden])").all_inner_texts()[0].startswith(
            "<!--<script>")
