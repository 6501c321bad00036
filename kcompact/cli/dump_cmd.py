"""``kcompact inspect dump``: the command, and the rendering of its items: kafka-dump-log's lines for
people, JSON lines for scripts.

Text mode prints what ``kafka-dump-log --deep-iteration --print-data-log`` prints (``Dumping <file>``,
``Log starting offset``, one ``baseOffset: … isvalid: …`` line per batch, ``| offset: …`` per record, the
index entry lines), so an operator can compare the two side by side. Keys and values that are not printable
UTF-8 are shown as ``base64:…`` instead of being written raw to the terminal. A record with a ``decoded``
object (``__cluster_metadata``, ``__consumer_offsets``) shows it as compact JSON in place of the raw key and
payload, like kafka-dump-log's ``--cluster-metadata-decoder`` / ``--offsets-decoder``: ``payload: {...}``
for a metadata record, ``key: {...} payload: {...}`` (``payload: <DELETE>`` for a tombstone) for an offsets
record; when it did not decode, the raw forms.

``--json`` prints every item as one JSON object per line on stdout, nothing else. In both modes warnings, and
one line per problem or CRC-invalid batch, go to stderr.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from kcompact.cli import render
from kcompact.cli.dump_options import dump_filter, dump_selection_options
from kcompact.cli.help_text import with_examples
from kcompact.cli.input_path import InputPath, storage_option
from kcompact.cli.options import EPILOG, EXIT_BAD_INPUT, json_option

Item = dict[str, Any]
_CHUNK_LINES = 256


def render_dump(items: Iterable[Item], *, as_json: bool) -> bool:
    """Print every item; return True when any problem or CRC-invalid batch was seen (exit code 2).

    Args:
        items: what :func:`kcompact.inspect.dump.dump_path` yields.
        as_json: one JSON object per line instead of kafka-dump-log's text.

    Returns:
        Whether the input had a problem.
    """
    problems = False
    batch: Item | None = None  # the batch the next record lines belong to
    pending: list[str] = []  # text lines, written in chunks: one echo per line costs a third
    table: list[Item] = []  # the entries of a checkpoint file, printed as one table
    transaction_log = False  # the file's records are __transaction_state's
    for item in items:
        kind = item["type"]
        if table and kind not in TABLE_COLUMNS:
            pending += _table_lines(table)
            table.clear()
        if kind == "warning":
            _flush(pending)
            render.warning_line(f"{item['file']}: {item['message']}")
            continue
        if kind == "problem" or (kind == "batch" and not item["crc_valid"]):
            problems = True
            _flush(pending)  # keeps stdout and stderr lines in order on a terminal
            render.error_line(_problem_text(item))
        if as_json:
            render.emit_json_line(item)
            continue
        if kind == "batch":
            batch = item
        if kind == "file":
            transaction_log = Path(item["file"]).parent.name.startswith(f"{TRANSACTION_STATE_TOPIC}-")
        if kind in TABLE_COLUMNS:
            table.append(item)
            continue
        if kind == "record" and transaction_log and item.get("decoded") is not None:
            item = {**item, "decoded_text": _transaction_log_text(item["decoded"])}
        pending += _lines(item, batch)
        if len(pending) >= _CHUNK_LINES:
            _flush(pending)
    pending += _table_lines(table)
    _flush(pending)
    return problems


TRANSACTION_STATE_TOPIC = "__transaction_state"
# item type -> (column header, item field) of the tables of checkpoint files and partition.metadata
TABLE_COLUMNS = {
    "leader_epoch_entry": (("epoch", "epoch"), ("startOffset", "start_offset")),
    "offset_checkpoint_entry": (("topic", "topic"), ("partition", "partition"), ("offset", "offset")),
    "partition_metadata": (("version", "version"), ("topic_id", "topic_id")),
    "property": (("key", "key"), ("value", "value")),
}


def _table_lines(rows: list[Item]) -> list[str]:
    """An aligned text table of one file's entries (numbers right-aligned), header first."""
    if not rows:
        return []
    columns = TABLE_COLUMNS[rows[0]["type"]]
    cells = [[header for header, _field in columns]]
    cells += [[render.printable(str(row[field])) for _header, field in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    numeric = [all(isinstance(row[field], int) for row in rows) for _header, field in columns]
    return ["  ".join(cell.rjust(width) if num else cell.ljust(width)
                      for cell, width, num in zip(line, widths, numeric, strict=True)).rstrip()
            for line in cells]


def _transaction_log_text(decoded: Item) -> str:
    """kafka-dump-log's ``--transaction-log-decoder`` text of a ``__transaction_state`` record."""
    from kcompact.records.messages.transaction_log import kafka_text

    key, payload = kafka_text(decoded["key"], decoded["value"])
    return f"key: {render.printable(key)}" + ("" if payload is None else f" payload: {render.printable(payload)}")


def _flush(pending: list[str]) -> None:
    if pending:
        render.plain("\n".join(pending))
        pending.clear()


def _problem_text(item: Item) -> str:
    where = item["file"] if item["position"] is None else f"{item['file']} at position {item['position']}"
    if item["type"] == "problem":
        return f"{where}: {item['message']}"
    return (f"{where}: batch {item['base_offset']}..{item['last_offset']} fails its CRC check; "
            f"expected a checksum matching its bytes, found crc {item['crc']}")


def _lines(item: Item, batch: Item | None) -> list[str]:
    kind = item["type"]
    if kind == "file":
        return _file_lines(item)
    if kind == "batch":
        return [_batch_line(item)]
    if kind == "record" and batch is not None:
        return [_record_line(item, batch)]
    if kind == "offset_index_entry":
        return [f"offset: {item['offset']} position: {item['position']}"]
    if kind == "time_index_entry":
        return [f"timestamp: {item['timestamp']} offset: {item['offset']}"]
    if kind == "aborted_txn":
        return [_aborted_txn_line(item)]
    if kind == "index_check":
        return [_index_check_line(item)]
    if kind == "producer_snapshot_entry":
        return [_snapshot_line(item)]
    return []  # problems were printed on stderr


def _aborted_txn_line(item: Item) -> str:
    return (f"version: {item['version']} producerId: {item['producer_id']} "
            f"firstOffset: {item['first_offset']} lastOffset: {item['last_offset']} "
            f"lastStableOffset: {item['last_stable_offset']}")


def _snapshot_line(item: Item) -> str:
    """``DumpLogSegments.dumpProducerIdSnapshot``'s line (its trailing space included)."""
    first = item["current_txn_first_offset"]
    line = (f"producerId: {item['producer_id']} producerEpoch: {item['producer_epoch']} "
            f"coordinatorEpoch: {item['coordinator_epoch']} currentTxnFirstOffset: "
            f"{'OptionalLong.empty' if first is None else f'OptionalLong[{first}]'} "
            f"lastTimestamp: {item['last_timestamp']} ")
    if item["last_offset"] is not None:
        line += (f"firstSequence: {item['first_sequence']} lastSequence: {item['last_sequence']} "
                 f"lastOffset: {item['last_offset']} offsetDelta: {item['offset_delta']} "
                 f"timestamp: {item['timestamp']}")
    return line


def _file_lines(item: Item) -> list[str]:
    lines = [f"Dumping {item['file']}"]
    if item["kind"] == "log":
        lines.append(f"Log starting offset: {item['base_offset']}")
    elif item["size_in_bytes"] == 0:
        lines.append(f"{item['file']} is empty.")
    return lines


def _index_check_line(item: Item) -> str:
    against = "its own rules only (no .log)" if item["log_file"] is None else item["log_file"]
    count = item["problems"]
    verdict = "ok" if count == 0 else f"{count} problem{'s' if count > 1 else ''}"
    return f"Verified {item['file']} against {against}: {verdict}"


def _batch_line(item: Item) -> str:
    if item["magic"] >= 2:
        last_sequence = _sequence(item["base_sequence"], item["last_offset"] - item["base_offset"])
        head = (
            f"baseOffset: {item['base_offset']} lastOffset: {item['last_offset']} "
            f"count: {item['count']} baseSequence: {item['base_sequence']} "
            f"lastSequence: {last_sequence} producerId: {item['producer_id']} "
            f"producerEpoch: {item['producer_epoch']} "
            f"partitionLeaderEpoch: {item['partition_leader_epoch']} "
            f"isTransactional: {_bool(item['is_transactional'])} "
            f"isControl: {_bool(item['is_control'])} "
            f"deleteHorizonMs: {_optional_long(item['delete_horizon_ms'])}"
        )
    else:
        head = f"offset: {item['last_offset']}"
    return (
        f"{head} position: {item['position']} {item['timestamp_type']}: {item['max_timestamp']} "
        f"size: {item['size_in_bytes']} magic: {item['magic']} "
        f"compresscodec: {item['compression']} crc: {item['crc']} isvalid: {_bool(item['crc_valid'])}"
    )


def _record_line(item: Item, batch: Item) -> str:
    key, value = _raw(item["key"]), _raw(item["value"])
    parts = [
        f"| offset: {item['offset']} {batch['timestamp_type']}: {item['timestamp']}",
        f"keySize: {-1 if key is None else len(key)} valueSize: {-1 if value is None else len(value)}",
    ]
    if batch["magic"] >= 2:
        sequence = _sequence(batch["base_sequence"], item["offset"] - batch["base_offset"])
        keys = ",".join(render.printable(header["key"]) for header in item["headers"])
        parts.append(f"sequence: {sequence} headerKeys: [{keys}]")
    if batch["is_control"]:
        if item["coordinator_epoch"] is not None:
            parts.append(f"endTxnMarker: {item['control']} "
                         f"coordinatorEpoch: {item['coordinator_epoch']}")
        elif item["control"] is not None:
            parts.append(f"controlType: {item['control']}")
        return " ".join(parts)
    if item.get("decoded_text") is not None:
        return " ".join([*parts, item["decoded_text"]])
    if item.get("decoded") is not None:
        return " ".join([*parts, _decoded_text(item["decoded"])])
    if key is not None:
        parts.append(f"key: {_text(key, item['key'])}")
    if value is not None:
        parts.append(f"payload: {_text(value, item['value'])}")
    return " ".join(parts)


def _decoded_text(decoded: Item) -> str:
    """``key: {...} payload: {...}`` of an offsets record, ``payload: {...}`` of a metadata record."""
    if decoded.keys() == {"key", "value"}:
        value = decoded["value"]
        payload = "<DELETE>" if value is None else _compact(value)
        return f"key: {_compact(decoded['key'])} payload: {payload}"
    return f"payload: {_compact(decoded)}"


def _compact(obj: object) -> str:
    # ensure_ascii: the JSON escapes every control or non-ASCII character, so data cannot drive the
    # terminal
    return json.dumps(obj, separators=(",", ":"))


def _sequence(base_sequence: int, offset_delta: int) -> int:
    """Kafka's per-record sequence: the base sequence plus the offset delta, wrapping at 2^31."""
    from kcompact.records.batch_header import NO_SEQUENCE, increment_sequence

    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return increment_sequence(base_sequence, offset_delta)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _optional_long(value: int | None) -> str:
    """How Java prints the OptionalLong kafka-dump-log shows for deleteHorizonMs."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _raw(b64: str | None) -> bytes | None:
    return None if b64 is None else base64.b64decode(b64)


def _text(raw: bytes, b64: str) -> str:
    """Printable UTF-8 as is (like kafka-dump-log's string decoder), anything else as base64:…"""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"base64:{b64}"
    return text if text.isprintable() else f"base64:{b64}"


@click.command("dump", short_help="Print segments and indexes, as kafka-dump-log does.", epilog=with_examples(
    EPILOG,
    "kcompact inspect dump /tmp/kafka-logs/orders-0/00000000000000000000.log",
    "kcompact inspect dump /tmp/kafka-logs/orders-0 --verify-index --json",
    "kcompact inspect dump /tmp/kafka-logs/orders-0 --from-offset 500 --key k1",
))
@click.argument("path", type=InputPath(file_okay=True))
@click.option("--records", is_flag=True, help="Also print every record of every batch.")
@click.option(
    "--verify-index", is_flag=True, help="Check .index/.timeindex/.txnindex files against the log."
)
@click.option("--all-files", is_flag=True,
              help="Of a partition directory: after its segments, also every other file in it (indexes, "
                   "producer snapshots, leader-epoch-checkpoint, partition.metadata, quorum-state).")
@dump_selection_options
@storage_option
@json_option("One JSON object per line (see docs/json.md).")
def dump_command(path: str, records: bool, verify_index: bool, all_files: bool, storage_pairs: tuple[str, ...],
                 as_json: bool, **selection: Any) -> None:
    """Print the batches of a .log file (or every segment of a partition directory; with --all-files
    its other files too), or the entries of a .index, .timeindex or .txnindex file, a producer
    .snapshot, a leader-epoch-checkpoint, an offset checkpoint file, partition.metadata, KRaft's
    quorum-state, KRaft's bootstrap.checkpoint (metadata record batches) or a log dir's meta.properties
    — what kafka-dump-log shows. Records of __cluster_metadata (and bootstrap.checkpoint), __consumer_offsets
    and __transaction_state are decoded. A --key no record
    has is said on stderr.

    Exits 2 after printing everything it could when a batch fails its CRC, a record does not parse,
    an index disagrees with the log, or the file's framing breaks off.
    """
    from kcompact.inspect.dump import dump_path
    from kcompact.segment.remote import local_inputs, parse_storage_options

    chosen = dump_filter(selection)
    with local_inputs([path], parse_storage_options(storage_pairs), topic_configs=False) as inputs:  # none read
        items = dump_path(inputs.paths[0], records=records or chosen.key is not None,
                          verify_index=verify_index, selection=chosen, all_files=all_files)
        problems = render_dump(map(inputs.named, items), as_json=as_json)
    if problems:
        raise click.exceptions.Exit(EXIT_BAD_INPUT)
