"""Pass 1 of ``inspect keys``: key digest -> latest offset over the whole log, the broker's dedupe
buffer against the keys of the cleanable range, and the top keys' bytes read back.

Why: whether a record is superseded depends on the latest offset of its key anywhere in the log,
so pass 2 (:mod:`kcompact.inspect.keys.census`) needs this map complete before it counts. The map is
the cleaner's own :class:`OffsetMap` (about 16 bytes a key, no Python object per key).

The broker's passes: each cleaner thread gets ``log.cleaner.dedupe.buffer.size /
log.cleaner.threads`` bytes (at most Kafka's 2 GiB), a SkimpyOffsetMap of 24 bytes an entry that
takes ``floor(slots * load factor)`` keys and checks for room before every put. When the keys of the
cleanable range may not fit one such map, :class:`DedupePasses` replays the puts into maps sized
exactly like that, starting a new pass where a full map refused a record.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
from array import array
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from kcompact.config.topic_config import TopicConfig
from kcompact.errors import KcompactError
from kcompact.inspect.dump.log import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from kcompact.inspect.keys.batches import CHUNK_RECORDS, DATA, batch_records, iter_batches
from kcompact.inspect.keys.model import KEY_DISPLAY_BYTES, DedupePlan, KeyCount, printable
from kcompact.log.offset_map import (
    KAFKA_BYTES_PER_ENTRY,
    KAFKA_MAX_MAP_MEMORY,
    OffsetMap,
    key_digests,
)
from kcompact.log.rules.ranges import CleanableRange
from kcompact.log.state.log_state import LogState
from kcompact.records.messages import consumer_offsets as offsets_records
from kcompact.records.messages import transaction_log as txn_log_records
from kcompact.segment.progress import ReadProgress

U64 = npt.NDArray[np.uint64]


class DedupePasses:
    """The broker's cleaning passes over the cleanable range: a bounded map, renewed when full.

    Args:
        buffer_per_thread: one cleaner thread's dedupe buffer in bytes.
        load_factor: ``log.cleaner.io.buffer.load.factor``.
    """

    def __init__(self, buffer_per_thread: int, load_factor: float) -> None:
        self.passes = 0
        self._buffer, self._load_factor = buffer_per_thread, load_factor
        self._map: OffsetMap | None = None

    def put(self, hi: U64, lo: U64, offsets: npt.NDArray[np.int64]) -> None:
        while len(offsets):
            if self._map is None:
                self._map = OffsetMap.for_dedupe_buffer(self._buffer, self._load_factor)
                self.passes += 1
            accepted = self._map.put_batch(hi, lo, offsets)
            if accepted == len(offsets):
                return
            self._map = None  # full: the round ends here, the next starts at the refused record
            hi, lo, offsets = hi[accepted:], lo[accepted:], offsets[accepted:]


def dedupe_plan(
    config: TopicConfig, keys: int, warnings: list[str]
) -> tuple[DedupePlan, DedupePasses | None]:
    """The broker's dedupe buffer against ``keys`` keys to map.

    Args:
        config: the partition's effective settings (buffer size, threads, load factor).
        keys: the keys of the cleanable range (the dry run's map entries).
        warnings: the report's warnings, appended to when the broker would not clean.

    Returns:
        The plan (``passes`` still None when it must be counted), and a :class:`DedupePasses` to
        feed with the range's keys when they may not fit one map (None when the count is known).
    """
    threads, load_factor = config.cleaner_threads, config.dedupe_load_factor
    per_thread = min(config.dedupe_buffer_size // threads, KAFKA_MAX_MAP_MEMORY) if threads else 0
    capacity = int(per_thread // KAFKA_BYTES_PER_ENTRY * load_factor)
    plan = DedupePlan(config.dedupe_buffer_size, threads, load_factor, capacity, keys, None,
                      _one_pass_buffer(keys + 1, threads, load_factor))
    if threads < 1:
        warnings.append("log.cleaner.threads is 0: the broker runs no cleaner")
        return plan, None
    if keys < capacity:  # every put finds room: at most `keys` entries before any put
        return dataclasses.replace(plan, passes=1 if keys else 0), None
    if capacity < 1:
        warnings.append(f"a cleaner thread's dedupe buffer ({per_thread} bytes) holds no key: "
                        "the broker's cleaner would never get past the first dirty offset")
        return plan, None
    return plan, DedupePasses(per_thread, load_factor)


def _one_pass_buffer(entries: int, threads: int, load_factor: float) -> int | None:
    """The smallest dedupe buffer (all threads) whose per-thread map takes ``entries`` keys."""
    if threads < 1 or not 0 < load_factor <= 1:
        return None
    slots = max(math.ceil(entries / load_factor) - 1, 1)
    while int(slots * load_factor) < entries:
        slots += 1
    per_thread = slots * KAFKA_BYTES_PER_ENTRY
    return per_thread * threads if per_thread <= KAFKA_MAX_MAP_MEMORY else None


def map_keys(state: LogState, rng: CleanableRange, passes: DedupePasses | None,
             progress: ReadProgress | None = None) -> OffsetMap:
    """Pass 1: the latest offset of every live key, and the broker's passes when asked.

    Args:
        state: the loaded partition.
        rng: its cleanable range (the broker's passes map its keys only).
        passes: the broker's passes to feed, or None.
        progress: told the bytes read.

    Returns:
        The frozen map of key digest -> latest offset over live data records.

    Raises:
        KcompactError: data that does not parse.
    """
    log_map = OffsetMap()
    offsets: array[int] = array("q")
    keys: list[bytes] = []
    for batch, path, kind, _type in iter_batches(state, progress):
        if kind != DATA:
            continue
        recs = batch_records(batch, path, full=False)
        for offset, key in zip(recs.offsets, recs.keys, strict=True):
            if key is not None:
                offsets.append(offset)
                keys.append(key)
        if len(keys) >= CHUNK_RECORDS:
            _put_keys(log_map, passes, rng, offsets, keys)
            offsets, keys = array("q"), []
    _put_keys(log_map, passes, rng, offsets, keys)
    log_map.freeze()
    return log_map


def _put_keys(log_map: OffsetMap, passes: DedupePasses | None, rng: CleanableRange,
              offsets: array[int], keys: list[bytes]) -> None:
    if not keys:
        return
    hi, lo = key_digests(keys)
    offs = np.frombuffer(offsets, dtype=np.int64)
    log_map.put_batch(hi, lo, offs)
    if passes is not None:
        mask = (offs >= rng.first_dirty_offset) & (offs < rng.first_uncleanable_offset)
        passes.put(hi[mask], lo[mask], offs[mask])


def top_keys(
    state: LogState, log_map: OffsetMap, top: list[tuple[int, int, int]]
) -> list[KeyCount]:
    """The top keys' bytes, read back from the few batches holding their latest offsets.

    Args:
        state: the loaded partition.
        log_map: pass 1's map (gives each top key's latest offset).
        top: the most duplicated digests as ``(hi, lo, duplicates)``.

    Returns:
        The keys, most records first, then by latest offset.

    Raises:
        KcompactError: data that does not parse.
    """
    if not top:
        return []
    hi = np.array([t[0] for t in top], dtype=np.uint64)
    lo = np.array([t[1] for t in top], dtype=np.uint64)
    latest = log_map.get_batch(hi, lo).tolist()
    latest_set = set(latest)
    wanted = sorted(latest_set)
    bases = [s.base_offset for s in state.segments]
    found: dict[int, bytes | None] = {}
    for index in sorted({bisect.bisect_right(bases, o) - 1 for o in wanted}):
        with state.segments[index].files.open() as log:
            for batch in log.iter_batches():
                at = bisect.bisect_left(wanted, batch.base_offset if batch.magic >= 2 else 0)
                if not batch.is_control and at < len(wanted) and wanted[at] <= batch.last_offset:
                    recs = batch_records(batch, log.path, full=False)
                    found.update((o, k) for o, k in zip(recs.offsets, recs.keys, strict=True) if o in latest_set)
    out = []
    decode = _key_decoder(state.partition.topic)
    for (_hi, _lo, duplicates), offset in zip(top, latest, strict=True):
        key = found.get(offset) or b""
        shown = key[:KEY_DISPLAY_BYTES]
        out.append(KeyCount(printable(shown), shown.hex(), len(key), duplicates + 1, offset,
                            None if decode is None else decode(key)))
    return sorted(out, key=lambda k: (-k.records, k.latest_offset))


def _key_decoder(topic: str) -> Callable[[bytes], str | None] | None:
    """How ``inspect dump`` decodes the keys of ``topic`` (compact JSON), for the internal topics it knows."""
    if topic == OFFSETS_TOPIC:
        def offsets_key(key: bytes) -> Any:
            return offsets_records.as_json_dict(offsets_records.decode_offsets_key(key))
        return partial(_decoded_key, offsets_key)
    if topic == TRANSACTION_STATE_TOPIC:
        def txn_key(key: bytes) -> Any:
            return txn_log_records.as_json_dict(txn_log_records.decode_txn_key(key))
        return partial(_decoded_key, txn_key)
    return None


def _decoded_key(decode: Callable[[bytes], Any], key: bytes) -> str | None:
    try:
        return json.dumps(decode(key), separators=(",", ":"))
    except KcompactError:  # shown as bytes, as dump shows a record that does not decode
        return None
