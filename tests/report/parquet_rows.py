"""Rows as ``spark inspect dirty-ratio`` writes them, made at scale for the report's page (its tests and
``scripts/bench.py report``)."""

from __future__ import annotations

from pathlib import Path


def many_rows_parquet(path: Path, partitions: int, topics: int) -> None:
    """``partitions`` rows over ``topics`` topics, built column by column (what a cluster's Spark run writes)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    topic_of = rng.integers(0, topics, partitions)
    dirty = rng.integers(0, 1 << 30, partitions)
    clean = rng.integers(0, 1 << 30, partitions)
    eligible = rng.random(partitions) < 0.3
    rules = np.array(["below-dirty-ratio", "active-segment", "open-transaction", "cleanup-policy"])
    table = pa.table({
        "topic": [f"topic-{t:04d}" for t in topic_of],
        "partition": pa.array(np.arange(partitions) % 64, pa.int32()),
        "partition_dir": [f"/brokers/b{i % 12}/topic-{t:04d}-{i % 64}" for i, t in enumerate(topic_of)],
        "cleanup_policy": ["compact"] * partitions,
        "clean_bytes": clean, "dirty_bytes": dirty,
        "dirty_ratio": dirty / np.maximum(clean + dirty, 1),
        "min_cleanable_dirty_ratio": [0.5] * partitions,
        "eligible": eligible,
        "cleaner_rank": pa.array([None] * partitions, pa.int64()),
        "blocking_rule": [None if e else str(r) for e, r in zip(eligible, rules[topic_of % 4], strict=True)],
        "blocking_detail": pa.array([None] * partitions, pa.string()),
        "error": pa.array([None] * partitions, pa.string()),
    })
    path.mkdir()
    pq.write_table(table, path / "part-00000.parquet")
