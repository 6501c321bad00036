"""Building partition directories with kcompact's own encoders and writer (fixtures, benchmarks, tests).

``PartitionBuilder`` appends batches (plain, idempotent, transactional, markers, any codec) with consecutive
offsets, cuts segments with ``roll()``, and ``write()`` lays the partition out in a log dir with its indexes,
the ``.txnindex`` entries Kafka would have written for aborted transactions, and the log dir's checkpoint files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kcompact.records.batch_encoding import encode_batch
from kcompact.records.control import ControlRecordType
from kcompact.records.record import Header, Record
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.txn_index import AbortedTxn
from tests.encoders import encode_control_batch
from tests.segment_writer import write_segment

BASE_TS = 1_700_000_000_000
KV = tuple[bytes | None, bytes | None]


@dataclass
class _Segment:
    base_offset: int
    batches: list[bytes] = field(default_factory=list)
    aborted: list[AbortedTxn] = field(default_factory=list)


class PartitionBuilder:
    """A fluent builder of one partition's segments."""

    def __init__(
        self, topic: str = "orders", partition: int = 0, *, base_ts: int = BASE_TS
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.next_offset = 0
        self.ts = base_ts
        self.segments = [_Segment(0)]
        self._open_txns: dict[int, int] = {}
        self._sequences: dict[int, int] = {}
        self.all_records: list[tuple[int, bytes | None, bytes | None, dict[str, object]]] = []

    def batch(
        self,
        kvs: Sequence[KV],
        *,
        producer_id: int = -1,
        producer_epoch: int = 0,
        transactional: bool = False,
        compression: int = 0,
        headers: tuple[Header, ...] = (),
        timestamp_step: int = 1,
    ) -> PartitionBuilder:
        """Append one data batch holding ``kvs`` (key, value) pairs."""
        records = []
        for key, value in kvs:
            records.append(Record(self.next_offset, self.ts, key, value, headers))
            self.all_records.append(
                (
                    self.next_offset,
                    key,
                    value,
                    {"producer_id": producer_id, "transactional": transactional},
                )
            )
            self.next_offset += 1
            self.ts += timestamp_step
        seq = -1
        if producer_id >= 0:
            seq = self._sequences.get(producer_id, 0)
            self._sequences[producer_id] = seq + len(records)
            if transactional and producer_id not in self._open_txns:
                self._open_txns[producer_id] = records[0].offset
        self.segments[-1].batches.append(
            encode_batch(
                records,
                base_offset=records[0].offset,
                compression=compression,
                producer_id=producer_id,
                producer_epoch=producer_epoch if producer_id >= 0 else -1,
                base_sequence=seq,
                is_transactional=transactional,
            )
        )
        return self

    def marker(
        self, producer_id: int, *, commit: bool, producer_epoch: int = 0
    ) -> PartitionBuilder:
        """Append a COMMIT or ABORT marker for ``producer_id``."""
        offset = self.next_offset
        self.segments[-1].batches.append(
            encode_control_batch(
                offset=offset,
                timestamp=self.ts,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                control_type=ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
                coordinator_epoch=1,
            )
        )
        first = self._open_txns.pop(producer_id, None)
        if first is not None and not commit:
            others = list(self._open_txns.values())
            lso = min(others) if others else offset + 1
            self.segments[-1].aborted.append(AbortedTxn(producer_id, first, offset, lso))
        self.next_offset += 1
        self.ts += 1
        return self

    def roll(self) -> PartitionBuilder:
        """End the current segment; the next batch starts a new one at the next offset."""
        self.segments.append(_Segment(self.next_offset))
        return self

    def write(
        self,
        log_dir: Path,
        *,
        high_watermark: int | None | str = "log-end",
        cleaner_checkpoint: int | None = None,
        index_interval_bytes: int = 4096,
    ) -> Path:
        """Lay the partition out under ``log_dir``; return the partition directory."""
        part = log_dir / f"{self.topic}-{self.partition}"
        part.mkdir(parents=True, exist_ok=True)
        for seg in self.segments:
            write_segment(
                part,
                seg.base_offset,
                seg.batches,
                aborted=seg.aborted,
                index_interval_bytes=index_interval_bytes,
            )
        tp = (self.topic, self.partition)
        hw = self.next_offset if high_watermark == "log-end" else high_watermark
        if hw is not None:
            write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {tp: int(hw)})
        if cleaner_checkpoint is not None:
            write_offset_checkpoint(log_dir / "cleaner-offset-checkpoint", {tp: cleaner_checkpoint})
        return part
