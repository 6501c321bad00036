"""Rendering of ``inspect dump`` items: kafka-dump-log's lines for people, JSON lines for scripts."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from kcompact.cli import render

_BATCH_FIELDS = (
    ("baseOffset", "base_offset"),
    ("lastOffset", "last_offset"),
    ("count", "count"),
    ("baseSequence", "base_sequence"),
    ("producerId", "producer_id"),
    ("producerEpoch", "producer_epoch"),
    ("partitionLeaderEpoch", "partition_leader_epoch"),
    ("isTransactional", "is_transactional"),
    ("isControl", "is_control"),
    ("deleteHorizonMs", "delete_horizon_ms"),
    ("position", "position"),
)


def render_dump(items: Iterable[dict[str, Any]], *, as_json: bool) -> bool:
    """Print every item; return True when any problem or invalid batch was seen (exit code 2)."""
    problems = False
    current_file: str | None = None
    for item in items:
        kind = item["type"]
        if kind == "problem" or (kind == "batch" and not item["crc_valid"]):
            problems = True
        if as_json:
            render.emit_json_line(item)
            continue
        if kind == "problem":
            where = "" if item["position"] is None else f" at position {item['position']}"
            render.error_line(f"{item['file']}{where}: {item['message']}")
            continue
        file = item.get("file")
        if file is not None and file != current_file:
            current_file = file
            render.plain(f"Dumping {file}")
        render.plain(_line(item))
    return problems


def _line(item: dict[str, Any]) -> str:
    kind = item["type"]
    if kind == "batch":
        return _batch_line(item)
    if kind == "record":
        return _record_line(item)
    if kind == "offset_index_entry":
        return f"offset: {item['offset']} position: {item['position']}"
    if kind == "time_index_entry":
        return f"timestamp: {item['timestamp']} offset: {item['offset']}"
    if kind == "aborted_txn":
        return (
            f"producerId: {item['producer_id']} firstOffset: {item['first_offset']} "
            f"lastOffset: {item['last_offset']} lastStableOffset: {item['last_stable_offset']}"
        )
    return " ".join(f"{k}: {v}" for k, v in item.items() if k != "type")


def _batch_line(item: dict[str, Any]) -> str:
    parts = [f"{label}: {_fmt(item[key])}" for label, key in _BATCH_FIELDS]
    parts.append(f"{item['timestamp_type']}: {item['max_timestamp']}")
    parts.append(f"size: {item['size_in_bytes']}")
    parts.append(f"magic: {item['magic']}")
    parts.append(f"compresscodec: {item['compression']}")
    parts.append(f"crc: {item['crc']}")
    parts.append(f"isvalid: {_fmt(item['crc_valid'])}")
    return " ".join(parts)


def _record_line(item: dict[str, Any]) -> str:
    parts = [f"| offset: {item['offset']}", f"timestamp: {item['timestamp']}"]
    if item["control"] is not None:
        parts.append(f"endTxnMarker: {item['control']}")
        if item["coordinator_epoch"] is not None:
            parts.append(f"coordinatorEpoch: {item['coordinator_epoch']}")
        return " ".join(parts)
    key, value = _text(item["key"]), _text(item["value"])
    parts.append(f"keySize: {_size(item['key'])} valueSize: {_size(item['value'])}")
    parts.append(f"headerKeys: [{','.join(h['key'] for h in item['headers'])}]")
    parts.append(f"key: {key} payload: {value}")
    return " ".join(parts)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


def _size(b64: str | None) -> int:
    return -1 if b64 is None else len(base64.b64decode(b64))


def _text(b64: str | None) -> str:
    """Printable UTF-8 as is (like kafka-dump-log --print-data-log), anything else as base64:…"""
    if b64 is None:
        return "null"
    raw = base64.b64decode(b64)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"base64:{b64}"
    return text if text.isprintable() else f"base64:{b64}"
