"""A partition directory's name goes into the page as table text (HTML-escaped) and as the charts' data (JSON
inside a ``<script>``): a name such as ``<!--<script>-0`` must neither end a script early nor make the parser
take the rest of the page as script (before, the page ended after its first chart, and the command said 0)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.partition_builder import PartitionBuilder
from tests.report.test_report import NOW, mixed_log_dir, run

HOSTILE_TOPICS = ("<!--<script>", "a&b>c", "x\u2028y")
FIGURE = re.compile(r'<script>\(function\(\)\{var a=(.*?);Plotly\.newPlot\("([\w-]+)"')


def hostile_log_dir(log_dir: Path) -> Path:
    """The report's mixed log dir, and partitions with hostile names holding what a clean removes."""
    mixed_log_dir(log_dir)
    for topic in HOSTILE_TOPICS:
        b = PartitionBuilder(topic, 0)
        for round_ in range(3):
            b.batch([(f"k{i}".encode(), f"v{round_}".encode() * 20) for i in range(10)]).roll()
        b.batch([(b"tail", b"1")]).write(log_dir)
    return log_dir


def hostile_page(tmp_path: Path) -> Path:
    log_dir = hostile_log_dir(tmp_path / "logs")
    page = tmp_path / "report.html"
    done = run("report", str(log_dir), "--now-ms", str(NOW), "--config", "cleanup.policy=compact",
               "--output", str(page))
    assert done.exit_code == 0, done.output
    return page


def test_the_charts_data_parses_back_with_every_name_whole(tmp_path: Path) -> None:
    text = hostile_page(tmp_path).read_text(encoding="utf-8")
    figures = {div_id: payload for payload, div_id in FIGURE.findall(text)}
    assert sorted(figures) == ["chart-disk", "chart-hanging", "chart-ratio", "chart-ratio-histogram",
                               "chart-status"]
    for payload in figures.values():
        assert not set("<>&\u2028\u2029") & set(payload)  # nothing a script element's parser acts on
    traces, _layout, _config = json.loads(figures["chart-disk"])
    assert set(HOSTILE_TOPICS) <= set(traces[0]["y"])  # the names, as they are, in the chart's data
    ratio_points = json.loads(figures["chart-ratio"])[0][0]["text"]
    assert all(any(point.startswith(f"{topic}-0 (") for point in ratio_points) for topic in HOSTILE_TOPICS)
