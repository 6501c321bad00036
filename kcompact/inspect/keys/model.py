"""The ``inspect keys`` report as values: what :func:`kcompact.inspect.keys.keys_report` returns.

Why apart: the field names of :class:`KeysReport` and its parts are the ``--json`` interface
(tests/inspect/keys/test_keys.py fixes them) and the CLI's text form reads the same values, so they live
in one place with no reading or counting code; :mod:`kcompact.inspect.keys.census` and
:mod:`kcompact.inspect.keys.key_map` fill them in.
"""

from __future__ import annotations

from dataclasses import asdict, field
from typing import Any

from kcompact.value import frozen, mutable

KEY_DISPLAY_BYTES = 256  # a top key longer than this is shown cut


def printable(key: bytes) -> str:
    """A key as text: UTF-8, with undecodable bytes and unprintable characters as ``\\xNN`` escapes.

    Args:
        key: the key bytes.

    Returns:
        Text safe to print in a terminal (``key_hex`` keeps the exact bytes).
    """
    text = key.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


@frozen
class RecordCounts:
    """Exact record counts (``records`` counts every record of every batch, markers too)."""

    batches: int
    records: int
    data_records: int
    control_records: int
    keyless_records: int  # live data records without a key (a clean drops them)
    read_uncommitted: int  # data records a read_uncommitted consumer sees: [log start, HW)
    read_committed: int  # ... a read_committed one: [log start, LSO) without aborted data


@frozen
class KeyCounts:
    """Distinct keys and duplicates among live keyed records."""

    distinct_keys: int
    dirty_distinct_keys: int
    cleanable_distinct_keys: int
    keyed_records: int
    duplicate_records: int  # a later record has the same key
    duplicate_bytes: int  # their records' bytes as encoded inside their batches: uncompressed, not bytes on disk


@frozen
class TombstoneGroup:
    """Tombstones that become removable together.

    ``kind``: ``superseded`` (a later record has the key: the next clean covering them drops them),
    ``horizon`` (the latest for their key, batch delete horizon ``delete_horizon_ms``),
    ``no-horizon`` (the latest, never cleaned yet: the clean that first covers them stamps
    now + delete.retention.ms, so ``removable_at_ms`` is the earliest, for a clean now).
    """

    kind: str
    tombstones: int
    delete_horizon_ms: int | None
    removable_at_ms: int | None
    removable_now: bool


@frozen
class TombstoneReport:
    tombstones: int
    oldest_offset: int | None
    oldest_timestamp_ms: int | None
    with_delete_horizon: int
    groups: list[TombstoneGroup]


@frozen
class OpenTransaction:
    producer_id: int
    producer_epoch: int
    first_offset: int
    last_timestamp_ms: int


@frozen
class TransactionReport:
    commit_markers: int
    abort_markers: int
    other_control_records: int
    aborted_transactions: int
    aborted_records: int
    open_transactions: list[OpenTransaction]


@frozen
class Projection:
    """What one clean now would leave (the cleaner's dry run; the whole log, not just the range)."""

    cleanable: bool
    skipped_reason: str | None
    end_offset: int | None  # the cleaner checkpoint it would write
    records_before: int
    records_after: int
    size_in_bytes_before: int
    size_in_bytes_after: int
    superseded_removed: int
    tombstones_removed: int
    keyless_removed: int
    aborted_records_removed: int
    markers_removed: int


@frozen
class DedupePlan:
    """The broker's dedupe buffer against the keys of the cleanable range."""

    dedupe_buffer_size: int
    cleaner_threads: int
    load_factor: float
    keys_per_pass: int  # floor(floor(buffer / threads / 24) * load factor); 0 without threads
    keys_to_map: int
    passes: int | None  # None: no cleaner thread, or a buffer that holds no key
    # room for keys_to_map + 1 entries a thread (Kafka checks for room before every put, even of
    # a key it holds: one entry more than needed only when the range's last put is a new key);
    # None: beyond Kafka's 2 GiB per thread
    one_pass_dedupe_buffer_size: int | None


@frozen
class KeyCount:
    key: str  # printable(): UTF-8, other bytes as \xNN escapes; cut at KEY_DISPLAY_BYTES
    key_hex: str
    key_size_in_bytes: int
    records: int
    latest_offset: int
    # the key as ``inspect dump`` decodes it (__consumer_offsets, __transaction_state): compact JSON
    # ``{"version":…,"data":…}``; None for other topics or a key that does not decode
    decoded: str | None = None


@frozen
class PartitionerCheck:
    """Live keyed records the default partitioner would send to another of the partitions."""

    partitions: int
    partition: int
    misplaced_keys: int
    misplaced_records: int
    misplaced_bytes: int


@frozen
class GroupCount:
    """One consumer group's records in a ``__consumer_offsets`` partition (live keyed records)."""

    group: str
    offset_commit_keys: int  # committed offsets it holds: latest of their key and not a tombstone
    records: int  # offset commits and group metadata
    size_in_bytes: int
    duplicate_records: int
    duplicate_bytes: int


@frozen
class ConsumerGroups:
    """The groups of a ``__consumer_offsets`` partition, the top ones by bytes."""

    groups: int
    # keyed records whose key is neither an offset commit nor a group's metadata (the newer
    # coordinator's records, kept undecoded) or does not decode
    other_records: int
    other_bytes: int
    top: list[GroupCount]


@mutable
class KeysReport:
    """The ``inspect keys`` report (the ``--json`` object)."""

    topic: str
    partition: int
    partition_dir: str
    now_ms: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    size_in_bytes: int
    records: RecordCounts
    keys: KeyCounts
    tombstones: TombstoneReport
    transactions: TransactionReport
    projection: Projection
    dedupe: DedupePlan
    top_duplicated_keys: list[KeyCount]
    partitioner: PartitionerCheck | None
    consumer_groups: ConsumerGroups | None = None  # for __consumer_offsets only
    warnings: list[str] = field(default_factory=list)
    corrupt_batches: int = 0  # batches that fail their CRC (counted all the same; clean refuses)
    crc_error: str | None = None  # the first one's error: file, position, checksums

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` object (without ``consumer_groups`` for other topics than
        ``__consumer_offsets``)."""
        out = asdict(self)
        if out["consumer_groups"] is None:
            del out["consumer_groups"]
        return out
