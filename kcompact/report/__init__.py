"""``kcompact report``: one self-contained HTML page (or its data as JSON) over log dirs or partitions.

Where a broker's disk went, what a clean now would give back and what blocks the broker's cleaner, with
every number taken from the inspect command that owns it: :mod:`kcompact.report.model` (the data),
:mod:`kcompact.report.gather` (from log dirs), :mod:`kcompact.report.scale` (from the Parquet rows of
``spark inspect dirty-ratio``, aggregated by topic), :mod:`kcompact.report.page` (the HTML, charts by
plotly embedded in the file so it opens offline).
"""
