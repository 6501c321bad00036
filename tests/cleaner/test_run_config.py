"""``clean`` and ``inspect dirty-ratio`` take each partition's own configuration (partition_config):
topic overrides from the metadata log, server.properties, and the skip/refusal of non-compacted topics."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcompact.cleaner.cleaner import CleanOptions
from kcompact.cleaner.run import clean_path
from kcompact.config.effective import ASSUMED_COMPACT, SERVER_PROPERTIES_ENV
from kcompact.inspect.dirty_ratio import dirty_ratio_report
from tests.builders import BASE_TS, PartitionBuilder
from tests.config.test_kraft_records import encode_config, encode_topic, uuid_bytes
from tests.config.test_metadata_state import write_log

NOW = BASE_TS + 10_000_000
TOPIC = 2


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SERVER_PROPERTIES_ENV, raising=False)


def log_dir_with_overrides(tmp_path: Path) -> Path:
    """orders (compact, ratio 0.9), events (delete) and plain (no override) in one KRaft log dir."""
    log_dir = tmp_path / "logs"
    for topic in ("orders", "events", "plain"):
        builder = PartitionBuilder(topic, 0)
        for _ in range(2):
            builder.batch([(f"k{i}".encode(), b"v" * 30) for i in range(5)]).roll()
        builder.batch([(b"k0", b"active")]).write(log_dir)
    write_log(log_dir / "__cluster_metadata-0", 0, [[
        encode_topic("orders", uuid_bytes(1)), encode_topic("events", uuid_bytes(2)),
        encode_topic("plain", uuid_bytes(3)),
        encode_config(TOPIC, "orders", "cleanup.policy", "compact"),
        encode_config(TOPIC, "orders", "min.cleanable.dirty.ratio", "0.9"),
        encode_config(TOPIC, "events", "cleanup.policy", "delete")]])  # fmt: skip
    return log_dir


def test_dirty_ratio_uses_each_topics_config(tmp_path: Path) -> None:
    log_dir = log_dir_with_overrides(tmp_path)
    rows = {r.topic: r for r in dirty_ratio_report([log_dir], cli_overrides={}, now_ms=NOW)}
    assert (rows["orders"].cleanup_policy, rows["orders"].min_cleanable_dirty_ratio) == ("compact", 0.9)
    assert ASSUMED_COMPACT not in rows["orders"].warnings and rows["orders"].eligible
    assert (rows["events"].cleanup_policy, rows["events"].blocking_rule) == ("delete", "cleanup-policy")
    assert ASSUMED_COMPACT in rows["plain"].warnings and rows["plain"].cleanup_policy == "compact"


def test_clean_log_dir_applies_retention_only_to_an_explicit_delete_topic(tmp_path: Path) -> None:
    log_dir = log_dir_with_overrides(tmp_path)
    run = clean_path(log_dir, cli_overrides={}, options=CleanOptions(now_ms=NOW, dry_run=True))
    by_topic = {r.topic: r for r in run.results}
    assert sorted(by_topic) == ["events", "orders", "plain"] and not run.failures
    events = by_topic["events"]
    assert events.range is None and events.end_offset is None  # never compacted
    assert events.skipped_reason == "cleanup.policy=delete has no 'compact': retention only"
    assert events.retention is not None
    assert run.notes == [f"plain-0: {ASSUMED_COMPACT}"]


def test_clean_partition_with_a_delete_policy_from_server_properties_runs_retention_only(
    tmp_path: Path,
) -> None:
    log_dir = log_dir_with_overrides(tmp_path)
    props = tmp_path / "server.properties"
    props.write_text("log.cleanup.policy=delete\n")
    run = clean_path(log_dir / "plain-0", cli_overrides={}, server_properties=props,
                     options=CleanOptions(now_ms=NOW, dry_run=True))
    [result] = run.results
    assert result.range is None and result.stats.records_read == 0
    assert result.skipped_reason == "cleanup.policy=delete has no 'compact': retention only"
    run = clean_path(log_dir / "orders-0", cli_overrides={}, server_properties=props,
                     options=CleanOptions(now_ms=NOW, dry_run=True))
    assert run.notes == [] and len(run.results) == 1
