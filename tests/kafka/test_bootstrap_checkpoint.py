"""KRaft's ``bootstrap.checkpoint``, as ``kafka-storage format`` of Kafka 4.1 writes it into a new log dir
(``BootstrapDirectory`` with ``BatchFileWriter``): ``inspect dump`` reads it as the record batches it is, every
batch's CRC checked and every record decoded as metadata, instead of refusing it as no segment file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kafka.conftest import Kafka
from tests.kafka.scenario import kcompact_json

pytestmark = pytest.mark.broker


def test_inspect_dump_reads_the_bootstrap_checkpoint_kafka_formats(kafka: Kafka, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    kafka.single(log_dir, start=False)  # formatted by Kafka's StorageTool, never started
    bootstrap = log_dir / "bootstrap.checkpoint"
    assert bootstrap.is_file()
    items = kcompact_json("inspect", "dump", bootstrap, "--records")
    assert [item["type"] for item in items if item["type"] in ("problem", "warning")] == []
    (file_item,) = [item for item in items if item["type"] == "file"]
    assert (file_item["kind"], file_item["size_in_bytes"]) == ("checkpoint", bootstrap.stat().st_size)
    batches = [item for item in items if item["type"] == "batch"]
    assert batches and all(batch["crc_valid"] for batch in batches)
    assert sum(batch["size_in_bytes"] for batch in batches) == bootstrap.stat().st_size  # every byte read
    decoded = [item["decoded"] for item in items if item["type"] == "record" and item.get("decoded")]
    assert any(record["type"] == "FEATURE_LEVEL_RECORD" and record["data"]["name"] == "metadata.version"
               for record in decoded), decoded
