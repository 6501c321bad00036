"""Decode ``__transaction_state`` keys and values, as ``kafka-dump-log --transaction-log-decoder`` shows them.

Why: ``__transaction_state`` is the compacted topic where the transaction coordinator keeps each
transactional id's state (``TransactionLog.readTxnRecordKey`` / ``readTxnRecordValue``); ``inspect dump``
decodes it so an operator can see which transactions a coordinator thinks are open. Kafka writes them
with its generated classes ``TransactionLogKey`` and ``TransactionLogValue``, each prefixed by an int16
version (``MessageUtil.toVersionPrefixedBytes``):

Key, version 0 (classic)::

    TransactionalId   string (int16 length + UTF-8)

Value, version 0 (classic) or 1 (flexible: compact strings and arrays, tagged fields)::

    ProducerId                         int64
    ProducerEpoch                      int16
    TransactionTimeoutMs               int32
    TransactionStatus                  int8    0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort,
                                               4 CompleteCommit, 5 CompleteAbort, 6 Dead, 7 PrepareEpochFence
    TransactionPartitions              []{Topic string, PartitionIds []int32}, nullable
    TransactionLastUpdateTimestampMs   int64
    TransactionStartTimestampMs        int64
    tagged (v1+): 0 PreviousProducerId int64 (-1), 1 NextProducerId int64 (-1),
                  2 ClientTransactionVersion int16 (0)

A key of another version is Kafka's ``UnknownKey`` (:class:`UnknownTxnKey`); a value of an unknown
version, or an unknown status, is an error, as in Kafka (``IllegalStateException``).
"""

from __future__ import annotations

from typing import Any

from kcompact.errors import CorruptRecordError
from kcompact.records.messages.reader import INT8, INT16, INT32, INT64, MessageReader
from kcompact.records.varint import Buffer
from kcompact.value import frozen

KEY_VERSION = 0
MAX_VALUE_VERSION = 1
FIRST_FLEXIBLE_VALUE_VERSION = 1
TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                      "CompleteAbort", "Dead", "PrepareEpochFence")
TAG_PREVIOUS_PRODUCER_ID, TAG_NEXT_PRODUCER_ID, TAG_CLIENT_TRANSACTION_VERSION = 0, 1, 2


@frozen
class TxnKey:
    """A transactional id's key (version 0)."""

    version: int
    transactional_id: str


@frozen
class UnknownTxnKey:
    """A key of a version Kafka does not know (``UnknownKey``)."""

    version: int


@frozen
class TxnPartitions:
    """One topic's partitions in a transaction."""

    topic: str
    partition_ids: tuple[int, ...]


@frozen
class TxnValue:
    """A transactional id's state (``TransactionLogValue``)."""

    version: int
    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    transaction_partitions: tuple[TxnPartitions, ...] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    client_transaction_version: int

    @property
    def state(self) -> str:
        """The status's name, as Kafka's ``TransactionState`` prints it."""
        return TRANSACTION_STATES[self.transaction_status]


def _version(buf: Buffer, what: str) -> tuple[int, MessageReader]:
    if len(buf) < INT16.size:
        raise CorruptRecordError(f"{what} too short; expected a 2-byte version, found {len(buf)} bytes",
                                 position=0)
    reader = MessageReader(buf, 0, len(buf), flexible=False)
    return reader.fixed(INT16, f"{what} version"), reader


def _end(reader: MessageReader, what: str) -> None:
    if reader.position != reader.end:
        raise CorruptRecordError(
            f"{what} has trailing bytes; expected it to end, found {reader.end - reader.position} more bytes",
            position=reader.position)


def decode_txn_key(key: Buffer | None) -> TxnKey | UnknownTxnKey:
    """Decode a ``__transaction_state`` key (``TransactionLog.readTxnRecordKey``).

    Args:
        key: the record's key bytes.

    Returns:
        A :class:`TxnKey`, or an :class:`UnknownTxnKey` for another version.

    Raises:
        CorruptRecordError: a null or short key, or a version-0 key that does not parse.
    """
    if key is None:
        raise CorruptRecordError("transaction log key is null; expected a 2-byte version", position=0)
    version, r = _version(key, "transaction log key")
    if version != KEY_VERSION:
        return UnknownTxnKey(version)
    item = TxnKey(version, r.string("TransactionLogKey.TransactionalId"))
    _end(r, "TransactionLogKey")
    return item


def decode_txn_value(value: Buffer | None) -> TxnValue | None:
    """Decode a ``__transaction_state`` value (``TransactionLog.readTxnRecordValue``).

    Args:
        value: the record's value bytes; None for a tombstone.

    Returns:
        None for a tombstone, else the :class:`TxnValue`.

    Raises:
        CorruptRecordError: a short value, an unknown version or status, or a body that does not parse.
    """
    if value is None:
        return None
    version, r = _version(value, "transaction log value")
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise CorruptRecordError(
            f"unknown TransactionLogValue version; expected 0..{MAX_VALUE_VERSION}, found {version}",
            position=0)
    r.flexible = version >= FIRST_FLEXIBLE_VALUE_VERSION
    what = "TransactionLogValue"
    producer_id = r.fixed(INT64, f"{what}.ProducerId")
    epoch = r.fixed(INT16, f"{what}.ProducerEpoch")
    timeout = r.fixed(INT32, f"{what}.TransactionTimeoutMs")
    status_at = r.position
    status = r.fixed(INT8, f"{what}.TransactionStatus")
    if not 0 <= status < len(TRANSACTION_STATES):
        raise CorruptRecordError(
            f"unknown transaction state id; expected 0..{len(TRANSACTION_STATES) - 1}, found {status}",
            position=status_at)
    partitions = r.nullable_array(_partitions, f"{what}.TransactionPartitions")
    last_update = r.fixed(INT64, f"{what}.TransactionLastUpdateTimestampMs")
    start = r.fixed(INT64, f"{what}.TransactionStartTimestampMs")
    tags = r.tagged_fields() if r.flexible else {}
    _end(r, what)
    return TxnValue(
        version, producer_id, _tag(tags, TAG_PREVIOUS_PRODUCER_ID, INT64, -1),
        _tag(tags, TAG_NEXT_PRODUCER_ID, INT64, -1), epoch, timeout, status, partitions, last_update, start,
        _tag(tags, TAG_CLIENT_TRANSACTION_VERSION, INT16, 0))


def _partitions(r: MessageReader) -> TxnPartitions:
    topic = r.string("PartitionsSchema.Topic")
    ids = r.array(lambda e: e.fixed(INT32, "PartitionsSchema.PartitionIds"), "PartitionsSchema.PartitionIds")
    if r.flexible:
        r.tagged_fields()
    return TxnPartitions(topic, ids)


def _tag(tags: dict[int, MessageReader], tag: int, fmt: Any, default: int) -> int:
    reader = tags.get(tag)
    return default if reader is None else reader.fixed(fmt, f"tagged field {tag}")


def as_json_dict(item: TxnKey | UnknownTxnKey | TxnValue | None) -> dict[str, Any] | None:
    """``{"version": n, "data": {...}}`` with Kafka's field names in camelCase (None for a tombstone)."""
    if item is None:
        return None
    if isinstance(item, UnknownTxnKey):
        return {"version": item.version, "data": None}
    if isinstance(item, TxnKey):
        return {"version": item.version, "data": {"transactionalId": item.transactional_id}}
    partitions = None if item.transaction_partitions is None else [
        {"topic": p.topic, "partitionIds": list(p.partition_ids)} for p in item.transaction_partitions]
    return {"version": item.version, "data": {
        "producerId": item.producer_id, "previousProducerId": item.previous_producer_id,
        "nextProducerId": item.next_producer_id, "producerEpoch": item.producer_epoch,
        "transactionTimeoutMs": item.transaction_timeout_ms,
        "transactionStatus": item.transaction_status, "transactionState": item.state,
        "transactionPartitions": partitions,
        "transactionLastUpdateTimestampMs": item.transaction_last_update_timestamp_ms,
        "transactionStartTimestampMs": item.transaction_start_timestamp_ms,
        "clientTransactionVersion": item.client_transaction_version}}


def kafka_text(key: dict[str, Any], value: dict[str, Any] | None) -> tuple[str, str | None]:
    """``TransactionLog.formatRecordKeyAndValue``: kafka-dump-log's key and payload text.

    Args:
        key: the key's :func:`as_json_dict`.
        value: the value's :func:`as_json_dict` (None: a tombstone).

    Returns:
        The key text and the payload text (None after an unknown key, as Kafka prints none).
    """
    if key["data"] is None:
        return f"unknown::version={key['version']}", None
    key_text = f"transaction_metadata::transactionalId={key['data']['transactionalId']}"
    if value is None:
        return key_text, "<DELETE>"
    v = value["data"]
    empty = v["transactionState"] == "Empty" or v["transactionPartitions"] is None
    partitions = [] if empty else [f"{p['topic']}-{i}" for p in v["transactionPartitions"]
                                   for i in p["partitionIds"]]
    return key_text, (
        f"producerId:{v['producerId']},producerEpoch:{v['producerEpoch']},state={v['transactionState']},"
        f"partitions=[{','.join(partitions)}],txnLastUpdateTimestamp={v['transactionLastUpdateTimestampMs']},"
        f"txnTimeoutMs={v['transactionTimeoutMs']}")
