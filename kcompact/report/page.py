"""The report as one self-contained HTML page: the totals, the charts, the tables.

Why one file: it is opened from disk, from an e-mail attachment or on a machine with no network, so the
styles, the scripts and the charts' library are all inside it and nothing is fetched from anywhere (no link
to a CDN, a font or an image). The charts are plotly's (pypi ``plotly``, the ``report`` extra): its
``plotly.min.js`` is written into the page once, each figure after it as its data and a ``Plotly.newPlot``
call. The tables are plain HTML sorted and filtered by :data:`TABLE_SCRIPT`, a few lines of the page's own.

Every number a person reads is in the element's text (for people, ``1.5 MiB``) and in its ``data-value``
(exact, for a test or a script): the same values :meth:`kcompact.report.model.Report.as_dict` holds.

At scale the figures stay small: at most :data:`CHART_TOPICS` topics are drawn, and the partitions listed
are those the report lists (the largest, from :mod:`kcompact.report.scale`).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kcompact.errors import UnsupportedFormatError
from kcompact.report.model import (
    ELIGIBLE,
    RATIO_BINS,
    SOURCE_PARQUET,
    SOURCE_SPARK,
    PartitionEntry,
    Report,
    TopicEntry,
)
from kcompact.segment.files import file_access, write_replacing
from kcompact.text import plural, size_text

CHART_TOPICS = 25  # topics drawn in a chart; the table lists them all
CHART_PARTITIONS = 2000  # partition points drawn in the dirty-ratio and last-clean charts
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
KEPT_COLOR, RECLAIM_COLOR, DIRTY_COLOR, BLOCKED_COLOR = "#4c78a8", "#f58518", "#e45756", "#9d9d9d"

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2430; margin: 0;
       background: #f6f7f9; }
main { max-width: 1200px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 2px; } h2 { font-size: 17px; margin: 28px 0 8px; }
h3 { font-size: 15px; margin: 16px 0 4px; }
.sub { color: #5a6372; margin: 0 0 12px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 10px; }
.card { background: #fff; border: 1px solid #dde1e7; border-radius: 8px; padding: 10px 12px; }
.card .label, .card .hint { color: #5a6372; font-size: 12px; } .card .value { font-size: 20px; font-weight: 600; }
.card.good .value { color: #2e7d32; } .card.warn .value { color: #b45309; }
.reasons { margin: 10px 0 0; padding: 0; list-style: none; display: flex; flex-wrap: wrap; gap: 6px; }
.reasons li { background: #fff; border: 1px solid #dde1e7; border-radius: 12px; padding: 2px 10px; }
.chart { background: #fff; border: 1px solid #dde1e7; border-radius: 8px; margin: 8px 0; padding: 4px; }
.note { color: #5a6372; } pre { white-space: pre-wrap; word-break: break-all; background: #fff;
       border: 1px solid #dde1e7; border-radius: 6px; padding: 8px; }
table { border-collapse: collapse; width: 100%; background: #fff; font-size: 13px; }
th, td { border-bottom: 1px solid #e6e9ee; padding: 4px 6px; text-align: right; white-space: nowrap; }
th { position: sticky; top: 0; background: #eef1f5; cursor: pointer; user-select: none; white-space: normal; }
td.t, th.t { text-align: left; } td.t { white-space: normal; overflow-wrap: anywhere; min-width: 8em; }
td.wrap { min-width: 10em; }
th[aria-sort=ascending]::after { content: " \\25B2"; } th[aria-sort=descending]::after { content: " \\25BC"; }
input.filter { margin: 4px 0 8px; padding: 4px 8px; width: 320px; max-width: 100%; }
.err { color: #b91c1c; }
@media print { body { background: #fff; } input.filter { display: none; } .chart, .card { break-inside: avoid; }
               th { position: static; } main { max-width: none; } }
"""

TABLE_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  var body = table.tBodies[0];
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var numeric = th.dataset.type === "num";
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.value, y = b.cells[col].dataset.value;
        var c = numeric ? (parseFloat(x === "" ? "-Infinity" : x) - parseFloat(y === "" ? "-Infinity" : y))
                        : x.localeCompare(y);
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
document.querySelectorAll("input.filter").forEach(function (input) {
  var table = document.getElementById(input.dataset.table);
  input.addEventListener("input", function () {
    var words = input.value.toLowerCase().split(/\\s+/).filter(Boolean);
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      var text = row.textContent.toLowerCase();
      row.hidden = !words.every(function (w) { return text.indexOf(w) >= 0; });
    });
  });
});
"""


def render_page(report: Report) -> str:
    """The page of ``report``: one HTML document, nothing outside it.

    Args:
        report: what :func:`kcompact.report.gather.log_dir_report` or
            :func:`kcompact.report.scale.parquet_report` made.

    Returns:
        The HTML text.

    Raises:
        UnsupportedFormatError: plotly is not installed (the ``report`` extra).
    """
    plotly_js = _plotly_js()
    body = [_header(report), _glance(report), _advice(report), *_charts(report), _topic_table(report.topics),
            _partition_table(report)]
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>kcompact report: {_e(_title(report))}</title>", f"<style>{STYLE}</style>",
        f"<script>{plotly_js}</script>", "</head><body><main>", *body,
        f"<script>{TABLE_SCRIPT}</script>", "</main></body></html>",
    ])


def write_page(report: Report, output: str | Path) -> int:
    """Write the page of ``report`` to ``output`` (created or replaced whole, never left half written).

    Args:
        report: the report.
        output: the HTML file.

    Returns:
        The bytes written.

    Raises:
        UnsupportedFormatError: plotly is not installed.
        FileAccessError: ``output`` cannot be written.
    """
    data = render_page(report).encode("utf-8")
    with file_access(output, "write"):
        write_replacing(output, data)
    return len(data)


def _plotly_js() -> str:
    try:
        from plotly.offline import get_plotlyjs  # type: ignore[import-untyped]
    except ImportError as err:
        raise UnsupportedFormatError("kcompact report draws its charts with plotly; expected it installed "
                                     "(pip install 'kcompact[report]'), found it missing") from err
    return str(get_plotlyjs())


def _title(report: Report) -> str:
    if report.log_dirs and report.source != SOURCE_PARQUET:
        return ", ".join(d["path"] or "" for d in report.log_dirs)
    return ", ".join(report.inputs)


def _header(report: Report) -> str:
    when = datetime.fromtimestamp(report.now_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    dirs = ", ".join(_e(d["path"] or "") + (f" (broker {_e(d['broker'])})" if d["broker"] else "")
                     for d in report.log_dirs)
    if report.source == SOURCE_PARQUET:
        sub = (f"From the Parquet rows of <code>kcompact spark inspect dirty-ratio</code> ({_e(report.inputs[0])}), "
               f"at {when}: every partition counted by topic, {_listed(report)} listed.")
    elif report.source == SOURCE_SPARK:
        sub = (f"{plural(len(report.log_dirs), 'log dir')} read by Spark tasks at {when}: {dirs}. Every partition "
               f"counted by topic, {_listed(report)} listed.")
    else:
        sub = f"{plural(len(report.log_dirs), 'log dir')} at {when}: {dirs}"
    return f"<h1>Where the disk went, what a clean gives back, what blocks it</h1><p class='sub'>{sub}</p>"


NOT_AT_SCALE = "n/a"
NOT_AT_SCALE_HINT = "not in spark inspect dirty-ratio's rows"


def _card(key: str, label: str, value: int | None, text: str, kind: str = "") -> str:
    data = "" if value is None else str(value)
    hint = f'<div class="hint">{NOT_AT_SCALE_HINT}</div>' if text == NOT_AT_SCALE else ""
    return (f'<div class="card {kind}" id="total-{key}" data-value="{data}"><div class="label">{_e(label)}</div>'
            f'<div class="value">{_e(text)}</div>{hint}</div>')


def _glance(report: Report) -> str:
    t = report.totals
    at_scale = report.source == SOURCE_PARQUET
    blocked = sum(t.blocked.values())
    cards = [
        _card("log_dirs", "log dirs", t.log_dirs, str(t.log_dirs)) if not at_scale else "",
        _card("partitions", "partitions", t.partitions, f"{t.partitions:,}"),
        _card("size_in_bytes", "bytes on disk", t.size_in_bytes,
              NOT_AT_SCALE if t.size_in_bytes is None else size_text(t.size_in_bytes)),
        _card("reclaimable_bytes", "a clean now gives back", t.reclaimable_bytes,
              NOT_AT_SCALE if t.reclaimable_bytes is None else size_text(t.reclaimable_bytes), "good"),
        _card("reclaimable_bytes_with_roll", "with --roll (active segments cleaned too)", t.reclaimable_bytes_with_roll,
              NOT_AT_SCALE if t.reclaimable_bytes_with_roll is None else size_text(t.reclaimable_bytes_with_roll),
              "good"),
        _card("dirty_bytes", "dirty bytes (cleaner's view)", t.dirty_bytes, size_text(t.dirty_bytes)),
        _card("eligible", "eligible for the broker's cleaner", t.eligible, f"{t.eligible:,}", "good"),
        _card("blocked", "blocked", blocked, f"{blocked:,}", "warn" if blocked else ""),
        _card("empty", "empty (nothing to clean)", t.empty, f"{t.empty:,}"),
        _card("hanging_transactions", "hanging transactions", t.hanging_transactions,
              NOT_AT_SCALE if at_scale else str(t.hanging_transactions),
              "warn" if t.hanging_transactions else ""),
        _card("errors", "partitions with errors", t.errors, f"{t.errors:,}", "warn" if t.errors else ""),
    ]
    reasons = "".join(f'<li class="reason" data-rule="{_e(rule)}" data-value="{count}">{_e(rule)}: '
                      f"<b>{count:,}</b></li>" for rule, count in t.blocked.items())
    reasons_list = f"<ul class='reasons' id='blocked-reasons'>{reasons}</ul>" if reasons else ""
    return f"<h2>At a glance</h2><div class='cards'>{''.join(cards)}</div>{reasons_list}"


def _charts(report: Report) -> list[str]:
    parts = [_disk_chart(report), _status_chart(report), _ratio_histogram(report)]
    if report.source != SOURCE_PARQUET:
        parts += [_ratio_chart(report), _last_clean_chart(report), _hanging_section(report)]
    if report.replicas:
        parts.append(_replicas_section(report))
    return parts


# What JSON may hold and a <script> element may not: "<" ("</script>" ends it, "<!--" then "<script>" makes
# the parser take the "</script>" after them as data, so the rest of the page is script), ">" and "&" for
# good measure, and U+2028/U+2029, line ends to JavaScript before ES2019. Their \\u escapes are the same
# string to JSON.parse and to a script.
SCRIPT_UNSAFE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028",
                 0x2029: "\\u2029"}


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element, whatever strings it holds (a partition
    directory named ``<!--<script>-0``): see :data:`SCRIPT_UNSAFE`."""
    return json.dumps(value, separators=(",", ":")).translate(SCRIPT_UNSAFE)


def _figure(div_id: str, traces: list[dict[str, Any]], layout: dict[str, Any]) -> str:
    """One chart: its div and the ``Plotly.newPlot`` call, with the data inline as JSON."""
    base: dict[str, Any] = {"margin": {"l": 10, "r": 10, "t": 30, "b": 40}, "paper_bgcolor": "#fff",
                            "plot_bgcolor": "#fff", "font": {"family": "system-ui, sans-serif", "size": 12},
                            "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"}}
    base.update(layout)
    for axis in ("xaxis", "yaxis"):
        base[axis] = {"automargin": True, **base.get(axis, {})}
    payload = script_json([traces, base, PLOT_CONFIG])
    return (f'<div class="chart" id="{div_id}"></div><script>(function(){{var a={payload};'
            f'Plotly.newPlot("{div_id}",a[0],a[1],a[2]);}})();</script>')


def _disk_chart(report: Report) -> str:
    topics = report.topics[:CHART_TOPICS][::-1]  # plotly draws the first category at the bottom
    names = [t.topic for t in topics]
    if report.source == SOURCE_PARQUET:
        traces = [_hbar(names, [t.clean_bytes for t in topics], "clean bytes", KEPT_COLOR),
                  _hbar(names, [t.dirty_bytes for t in topics], "dirty bytes", DIRTY_COLOR)]
        title = ("Topics by clean + dirty bytes (the cleaner's view, without the active segment; a clean's "
                 "exact gain needs the partitions: <code>kcompact report</code> or <code>kcompact spark report</code>)")
    else:
        traces = [_hbar(names, [_kept(t) for t in topics], "kept by a clean now", KEPT_COLOR),
                  _hbar(names, [t.reclaimable_bytes or 0 for t in topics], "a clean now gives back", RECLAIM_COLOR)]
        title = "Topics by bytes on disk, and the part a clean now gives back (the cleaner's dry run)"
    more = f" The {CHART_TOPICS} largest of {len(report.topics)}." if len(report.topics) > CHART_TOPICS else ""
    unit = in_binary_unit(traces, "x")
    layout = {"barmode": "stack", "height": 120 + 22 * len(topics),
              "xaxis": {"title": {"text": unit}}, "yaxis": {"automargin": True}}
    return f"<h2>Where the disk went</h2><p class='note'>{title}.{more}</p>" + _figure("chart-disk", traces, layout)


def _kept(topic: TopicEntry) -> int:
    if topic.size_in_bytes is None:
        return 0
    return topic.size_in_bytes - (topic.reclaimable_bytes or 0)


def _hbar(names: list[str], values: list[int], label: str, color: str) -> dict[str, Any]:
    return {"type": "bar", "orientation": "h", "y": names, "x": values, "name": label,
            "marker": {"color": color}, "hovertemplate": "%{y}: %{customdata:,} bytes<extra>" + label + "</extra>"}


BINARY_UNITS = (("B", 1), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40), ("PiB", 1 << 50))


def in_binary_unit(traces: list[dict[str, Any]], axis: str) -> str:
    """Scale the byte values on ``axis`` of ``traces`` to the binary unit of the largest (the page's cards and
    tables say ``MiB``, never plotly's decimal ``2.5M``); each exact value stays in ``customdata`` for the hover.

    Returns:
        The unit, the axis title.
    """
    largest = max((abs(v) for trace in traces for v in trace[axis]), default=0)
    unit, divisor = next(((u, d) for u, d in reversed(BINARY_UNITS) if largest >= d), BINARY_UNITS[0])
    for trace in traces:
        trace["customdata"] = list(trace[axis])
        trace[axis] = [v / divisor for v in trace[axis]]
    return unit


def _status_chart(report: Report) -> str:
    t = report.totals
    labels = [ELIGIBLE, *t.blocked]
    values = [t.eligible, *t.blocked.values()]
    colors = [KEPT_COLOR if label == ELIGIBLE else BLOCKED_COLOR for label in labels]
    trace = {"type": "bar", "x": labels, "y": values, "marker": {"color": colors},
             "text": [f"{v:,}" for v in values], "textposition": "auto",
             "hovertemplate": "%{x}: %{y:,} partitions<extra></extra>"}
    layout = {"height": 300, "yaxis": {"title": {"text": "partitions"}}, "showlegend": False}
    return ("<h2>Eligible and blocked partitions</h2><p class='note'>The broker's cleaner picks only eligible "
            "partitions; the others by the rule that stops it (<code>inspect dirty-ratio</code>).</p>"
            + _figure("chart-status", [trace], layout))


def _ratio_histogram(report: Report) -> str:
    """Every partition's dirty ratio (the totals' bins), eligible ones apart, and the thresholds as lines."""
    t = report.totals
    centers = [(i + 0.5) / RATIO_BINS for i in range(RATIO_BINS)]
    traces = [{"type": "bar", "x": centers, "y": bins, "width": 1 / RATIO_BINS, "name": label,
               "marker": {"color": color, "line": {"color": "#fff", "width": 1}},
               "hovertemplate": "dirty ratio %{x:.3f} ± 0.025: %{y:,} partitions<extra>" + label + "</extra>"}
              for bins, label, color in ((t.ratio_bins_eligible, "eligible", KEPT_COLOR),
                                         (t.ratio_bins_not_eligible, "not eligible", BLOCKED_COLOR))]
    shapes = [{"type": "line", "xref": "x", "yref": "paper", "x0": r, "x1": r, "y0": 0, "y1": 1,
               "line": {"color": DIRTY_COLOR, "width": 2, "dash": "dash"}} for r in t.min_cleanable_dirty_ratios[:10]]
    thresholds = ", ".join(f"{r:g}" for r in t.min_cleanable_dirty_ratios[:10])
    layout = {"barmode": "stack", "height": 300, "shapes": shapes, "xaxis": {"range": [0, 1],
              "title": {"text": "dirty ratio"}}, "yaxis": {"title": {"text": "partitions"}}}
    return ("<h2>Dirty ratios against min.cleanable.dirty.ratio</h2><p class='note'>Every partition's dirty ratio "
            f"(dirty bytes over clean + dirty); dashed: min.cleanable.dirty.ratio ({_e(thresholds)}). A partition "
            "is cleaned once its ratio passes its topic's (or max.compaction.lag.ms forces it).</p>"
            + _figure("chart-ratio-histogram", traces, layout))


def _ratio_chart(report: Report) -> str:
    chosen = {t.topic for t in report.topics[:CHART_TOPICS]}
    points = [p for p in report.partitions if p.topic in chosen][:CHART_PARTITIONS]
    order = [t.topic for t in report.topics[:CHART_TOPICS] if any(p.topic == t.topic for p in points)][::-1]
    traces = []
    for eligible, label, color in ((True, "eligible", KEPT_COLOR), (False, "not eligible", BLOCKED_COLOR)):
        group = [p for p in points if p.eligible == eligible]
        traces.append({"type": "scatter", "mode": "markers", "name": label, "x": [p.dirty_ratio for p in group],
                       "y": [p.topic for p in group], "text": [_pname(p) for p in group],
                       "marker": {"color": color, "size": 9, "opacity": 0.8},
                       "hovertemplate": "%{text}: dirty ratio %{x:.3f}<extra>" + label + "</extra>"})
    thresholds = [t for t in report.topics if t.topic in order and t.min_cleanable_dirty_ratio is not None]
    traces.append({"type": "scatter", "mode": "markers", "name": "min.cleanable.dirty.ratio",
                   "x": [t.min_cleanable_dirty_ratio for t in thresholds], "y": [t.topic for t in thresholds],
                   "marker": {"symbol": "line-ns-open", "size": 18, "color": DIRTY_COLOR,
                              "line": {"width": 3, "color": DIRTY_COLOR}},
                   "hovertemplate": "%{y}: min.cleanable.dirty.ratio %{x}<extra></extra>"})
    layout = {"height": 120 + 24 * max(len(order), 1), "xaxis": {"range": [-0.02, 1.02],
              "title": {"text": "dirty ratio"}}, "yaxis": {"automargin": True, "categoryorder": "array",
              "categoryarray": order}}
    return ("<h3>Per topic</h3><p class='note'>The largest topics, each point a partition; the red mark is the "
            "topic's min.cleanable.dirty.ratio.</p>" + _figure("chart-ratio", traces, layout))


def _pname(p: PartitionEntry) -> str:
    return f"{p.topic}-{p.partition} ({p.log_dir})"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _last_clean_chart(report: Report) -> str:
    dated = [p for p in report.partitions if p.last_clean_after_ms is not None][:CHART_PARTITIONS]
    undated = sum(1 for p in report.partitions if p.compacted and p.last_clean_after_ms is None)
    never = report.totals.never_cleaned or 0
    note = (f"{plural(len(dated), 'partition')} with a dated clean; {plural(undated, 'partition')} cleaned at a "
            f"time nothing dates; {plural(never, 'partition')} with no sign of a clean "
            "(<code>inspect last-clean</code>).")
    if not dated:
        return f"<h2>When each partition was last cleaned</h2><p class='note' id='last-clean-note'>{note}</p>"
    trace = {"type": "scatter", "mode": "markers", "x": [_iso(p.last_clean_after_ms or 0) for p in dated],
             "y": [p.size_in_bytes or 0 for p in dated], "text": [_pname(p) for p in dated],
             "marker": {"size": 10, "color": KEPT_COLOR},
             "hovertemplate": "%{text}: cleaned after %{x}, %{customdata:,} bytes<extra></extra>"}
    unit = in_binary_unit([trace], "y")
    layout = {"height": 320, "xaxis": {"type": "date", "title": {"text": "a clean provably ran after"}},
              "yaxis": {"title": {"text": f"on disk ({unit})"}}, "showlegend": False}
    return (f"<h2>When each partition was last cleaned</h2><p class='note' id='last-clean-note'>{note}</p>"
            + _figure("chart-last-clean", [trace], layout))


def _hanging_section(report: Report) -> str:
    hanging = [(p, h) for p in report.partitions for h in p.hanging]
    if not hanging:
        return ("<h2>Hanging transactions</h2><p class='note' id='hanging-note'>None: no open transaction "
                "older than transaction.max.timeout.ms pins a last stable offset "
                "(<code>inspect transactions</code>).</p>")
    labels = [f"{p.topic}-{p.partition} producer {h.producer_id} ({p.log_dir})" for p, h in hanging]
    trace = {"type": "bar", "orientation": "h", "y": labels, "x": [h.dirty_bytes_held_back for _, h in hanging],
             "marker": {"color": DIRTY_COLOR},
             "hovertemplate": "%{y}: holds back %{customdata:,} dirty bytes<extra></extra>"}
    unit = in_binary_unit([trace], "x")
    layout = {"height": 120 + 26 * len(hanging), "yaxis": {"automargin": True},
              "xaxis": {"title": {"text": f"dirty bytes held back from the cleaner ({unit})"}},
              "showlegend": False}
    lines = "\n".join(h.abort_command for _, h in hanging)
    return ("<h2>Hanging transactions</h2><p class='note'>Each pins the last stable offset: the cleaner stops "
            "there. The bytes are what its dirty section would gain were it aborted; the lines abort them on "
            "the live cluster.</p>" + _figure("chart-hanging", [trace], layout)
            + f"<pre id='abort-lines'>{_e(lines)}</pre>")


def _replicas_section(report: Report) -> str:
    counts = {"agree": 0, "log diverged": 0, "state diverged": 0, "error": 0}
    for r in report.replicas:
        if r.error is not None:
            counts["error"] += 1
        elif r.agree:
            counts["agree"] += 1
        else:
            counts["log diverged"] += bool(r.log_diverged)
            counts["state diverged"] += bool(r.state_diverged)
    trace = {"type": "bar", "x": list(counts), "y": list(counts.values()),
             "marker": {"color": [KEPT_COLOR, DIRTY_COLOR, RECLAIM_COLOR, BLOCKED_COLOR]},
             "hovertemplate": "%{x}: %{y} partitions<extra></extra>"}
    layout = {"height": 280, "showlegend": False, "yaxis": {"title": {"text": "partitions"}}}
    rows = [[_cell(f"{r.topic}-{r.partition}", text=True), _cell(r.copies), _cell(_yes(r.agree), text=True),
             _cell(_yes(r.log_diverged), text=True), _cell(_yes(r.state_diverged), text=True),
             _cell(r.divergent_keys), _cell(r.divergent_transactions), _cell(r.error or "", text=True)]
            for r in report.replicas if not r.agree]
    table = _table("replicas-table", [("partition", False), ("copies", True), ("agree", False),
                                      ("log diverged", False), ("state diverged", False), ("divergent keys", True),
                                      ("divergent transactions", True), ("error", False)], rows)
    return ("<h2>Replica divergence</h2><p class='note'>Partitions held by more than one log dir, their copies "
            "compared (<code>inspect replicas</code>; the first log dir is the reference).</p>"
            + _figure("chart-replicas", [trace], layout) + (table if rows else ""))


def _yes(value: bool | None) -> str:
    return "" if value is None else "yes" if value else "no"


def _cell(value: object, *, text: bool = False, shown: str | None = None, css: str = "",
          title: str | None = None) -> str:
    """A table cell: ``shown`` (default: the value) for people, the exact value in ``data-value``."""
    data = "" if value is None else str(value)
    cls = " ".join(c for c in ("t" if text else "", css) if c)
    attrs = (f' class="{cls}"' if cls else "") + (f' title="{_e(title)}"' if title else "")
    return f'<td{attrs} data-value="{_e(data)}">{_e(shown if shown is not None else data)}</td>'


def _table(table_id: str, headers: Sequence[tuple[str, bool]], rows: Iterable[Sequence[str]]) -> str:
    head = "".join(f'<th data-type="{"num" if numeric else "text"}"{"" if numeric else " class=t"}>{_e(name)}</th>'
                   for name, numeric in headers)
    body = "\n".join(f"<tr>{''.join(row)}</tr>" for row in rows)
    return (f'<input class="filter" type="search" placeholder="filter rows…" data-table="{table_id}" '
            f'aria-label="filter {table_id}"><div style="overflow-x:auto"><table id="{table_id}" class="sortable">'
            f"<thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table></div>")


def _size_cell(value: int | None) -> str:
    return _cell(value, shown="-" if value is None else size_text(value))


def _topic_table(topics: list[TopicEntry]) -> str:
    rows = [[_cell(t.topic, text=True), _cell(t.partitions), _size_cell(t.size_in_bytes),
             _size_cell(t.reclaimable_bytes), _size_cell(t.reclaimable_bytes_with_roll), _size_cell(t.clean_bytes),
             _size_cell(t.dirty_bytes),
             _cell(round(t.max_dirty_ratio, 4)), _cell(t.min_cleanable_dirty_ratio), _cell(t.eligible),
             _cell(", ".join(f"{rule}: {n}" for rule, n in sorted(t.blocked.items())), text=True),
             _cell(t.hanging_transactions), _cell(t.errors, css="err" if t.errors else "")] for t in topics]
    return "<h2>Topics</h2>" + _table("topics-table", [
        ("topic", False), ("partitions", True), ("on disk", True), ("a clean gives back", True),
        ("with --roll", True), ("clean", True), ("dirty", True), ("max dirty ratio", True),
        ("min.cleanable.dirty.ratio", True), ("eligible", True), ("blocked by", False), ("hanging txns", True),
        ("errors", True)], rows)


def _partition_table(report: Report) -> str:
    brokers = {d["path"]: d["broker"] for d in report.log_dirs}
    rows = [[_cell(p.topic, text=True), _cell(p.partition), _log_dir_cell(p.log_dir, brokers.get(p.log_dir)),
             _size_cell(p.size_in_bytes), _size_cell(p.reclaimable_bytes),
             _size_cell(p.reclaimable_bytes_with_roll), _size_cell(p.clean_bytes),
             _size_cell(p.dirty_bytes), _cell(p.dirty_ratio, shown=f"{p.dirty_ratio:.3f}"),
             _cell(p.min_cleanable_dirty_ratio), _cell(p.cleaner_rank), _cell(p.status, text=True,
                                                                                title=p.blocking_detail),
             _cell(None if p.last_clean_after_ms is None else p.last_clean_after_ms,
                   shown="-" if p.last_clean_after_ms is None else _iso(p.last_clean_after_ms) + "Z"),
             _cell(len(p.hanging)), _cell("; ".join(p.errors), text=True, css="err wrap")]
            for p in sorted(report.partitions, key=_giving_back_first)]
    title = "Partitions"
    if report.partitions_listed < report.totals.partitions:
        title += f" ({_listed(report)} of {report.totals.partitions:,})"
    return f"<h2>{title}</h2>" + _table("partitions-table", [
        ("topic", False), ("partition", True), ("log dir", False), ("on disk", True), ("a clean gives back", True),
        ("with --roll", True), ("clean", True), ("dirty", True), ("dirty ratio", True), ("min ratio", True),
        ("cleaner rank", True), ("status", False), ("last clean after", True), ("hanging txns", True),
        ("errors", False)], rows)


def _giving_back_first(p: PartitionEntry) -> tuple[int, int, int, str, int]:
    """The partitions table's order: what a clean gives back (with --roll, then now), then size, largest first."""
    size = p.size_in_bytes if p.size_in_bytes is not None else p.clean_bytes + p.dirty_bytes
    return (-(p.reclaimable_bytes_with_roll or 0), -(p.reclaimable_bytes or 0), -size, p.topic, p.partition)


def _listed(report: Report) -> str:
    """Which partitions the page lists one by one (at scale, not all: :func:`kcompact.report.scale.aggregate`)."""
    return f"{report.partitions_listed:,} (the largest, and any with an error or a hanging transaction)"


def _log_dir_cell(log_dir: str, broker: str | None) -> str:
    """The log dir by its last name (and broker), the whole path on hover and in ``data-value``."""
    name = log_dir.rstrip("/").rsplit("/", 1)[-1] or log_dir
    return _cell(log_dir, text=True, shown=name + (f" (broker {broker})" if broker else ""), title=log_dir)


def _advice(report: Report) -> str:
    if not report.advice:
        return ""
    items = "".join(f"<li><b>{_e(rule)}</b>: {_e(text)}</li>" for rule, text in report.advice.items())
    return f"<h2>What unblocks the cleaner</h2><ul>{items}</ul>"


def _e(text: str) -> str:
    return html.escape(text, quote=True)
