"""A ZooKeeper-era ``__consumer_offsets`` (no metadata log: its topic configs are unknown) is cleaned with the
segment size the broker created it with: ``offsets.topic.segment.bytes`` (100 MiB by default), a topic config
that beats ``log.segment.bytes``, not that broker default's 1 GiB. The segment size decides how a clean
groups segments (``Cleaner.groupSegmentsBySize``), so it shows in the files a clean leaves."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kcompact.cli.main import cli
from tests.builders import BASE_TS, PartitionBuilder

NOW = BASE_TS + 10_000_000
SEGMENT_LOG_BYTES = 600 * 1024  # about: two of them exceed 1 MiB, all three fit in 100 MiB


def consumer_offsets(root: Path) -> Path:
    """Three closed segments of about 600 KiB of distinct keys (a clean keeps every record) and an active one."""
    b = PartitionBuilder("__consumer_offsets", 3)
    key = 0
    for _segment in range(3):
        for _batch in range(6):
            b.batch([(f"group-{key + j}".encode(), b"v" * 1000) for j in range(100)])
            key += 100
        b.roll()
    b.batch([(b"group-last", b"x")])
    return b.write(root / "logdir", cleaner_checkpoint=0)


def clean(part: Path, server_properties: Path) -> tuple[int, list[str]]:
    """``kcompact clean`` of the partition: its output groups, and the .log files left."""
    result = CliRunner().invoke(cli, ["clean", str(part), "--json", "--now-ms", str(NOW),
                                      "--server-properties", str(server_properties)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["results"]
    return row["groups"], sorted(p.name for p in part.glob("*.log"))


def test_offsets_topic_segment_bytes_groups_a_zookeeper_consumer_offsets_clean(tmp_path: Path) -> None:
    part = consumer_offsets(tmp_path / "small")
    assert all(p.stat().st_size > SEGMENT_LOG_BYTES * 0.95 for p in sorted(part.glob("*.log"))[:3])
    props = tmp_path / "server.properties"
    props.write_text("offsets.topic.segment.bytes=1048576\n")  # 1 MiB: no two segments fit together
    groups, logs = clean(part, props)
    assert groups == 3 and len(logs) == 4


def test_log_segment_bytes_does_not_decide_an_internal_topics_segment_size(tmp_path: Path) -> None:
    """The broker gave the topic its own segment.bytes (100 MiB here), which log.segment.bytes never beats."""
    part = consumer_offsets(tmp_path / "default")
    props = tmp_path / "server.properties"
    props.write_text("log.segment.bytes=1048576\n")
    groups, logs = clean(part, props)
    assert groups == 1 and logs == ["00000000000000000000.log", "00000000000000001800.log"]
