"""What every read-only partition report starts from: the clock, the partition, its effective
configuration, its loaded state and its cleanable range.

Why: ``inspect keys`` and ``inspect last-clean`` judge a partition by the rules the cleaner would
apply now (first dirty offset, first uncleanable offset, delete horizons), so they load it exactly as
the cleaner does: the configuration from ``--config``, server.properties and the KRaft metadata log
(:class:`kcompact.cleaner.logdir.run.ConfigSources`), the state by
:func:`kcompact.log.state.log_state.load_log_state`, and the range by
:func:`kcompact.log.rules.ranges.compute_cleanable_range` at ``now_ms``.

The reports also share :class:`CrcTally`: a batch that fails its CRC does not stop a report (its
records may still parse, and the rest of the log is worth reporting), but it is counted and the
first one's error kept, so the command can exit 2 after printing (``clean`` refuses such a partition).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kcompact.clock import run_clock_ms
from kcompact.config.effective import EffectiveConfig
from kcompact.config.sources import ConfigSources
from kcompact.config.topic_config import TopicConfig
from kcompact.log.rules.high_watermark import SoleReplica, sole_replica_of
from kcompact.log.rules.ranges import (
    CleanableRange,
    checkpoint_reset_warning,
    compute_cleanable_range,
)
from kcompact.log.state.log_state import LogState, load_log_state
from kcompact.segment.log_dir_check import check_log_dir_checkpoints
from kcompact.segment.log_file import crc_error
from kcompact.segment.partition import open_partition
from kcompact.value import frozen, mutable


@mutable
class CrcTally:
    """The batches of a report's walk that fail their CRC: how many, and the first one's error."""

    corrupt_batches: int = 0
    first_error: str | None = None

    def check(self, path: Path, batch: Any) -> None:
        """Count ``batch`` (of the ``.log`` at ``path``) when it fails its CRC."""
        if not batch.crc_valid():
            self.corrupt_batches += 1
            if self.first_error is None:
                self.first_error = str(crc_error(path, batch))


@frozen
class InspectContext:
    """One partition loaded for a report, as the cleaner would see it at ``now_ms``."""

    now_ms: int
    effective: EffectiveConfig  # the configuration and the notes about how it was found
    state: LogState
    rng: CleanableRange
    sole_replica: SoleReplica | None = None  # its high watermark is its log end, as clean takes it

    @property
    def config(self) -> TopicConfig:
        """The partition's effective topic and cleaner settings."""
        return self.effective.config


def load_inspect_context(
    path: str | Path,
    *,
    cli_overrides: Mapping[str, str],
    now_ms: int | None,
    server_properties: str | Path | None,
    metadata_dir: str | Path | None,
    sole_replica: bool = False,
) -> InspectContext:
    """Open one partition directory and load it with its configuration and cleanable range.

    Args:
        path: the partition directory.
        cli_overrides: ``--config`` pairs (Kafka names, topic and cleaner settings).
        now_ms: the clock of the time rules (None: now).
        server_properties: the broker's server.properties (None: ``$KCOMPACT_SERVER_PROPERTIES``).
        metadata_dir: ``metadata.log.dir`` or its ``__cluster_metadata-0`` (None: as
            ``kcompact.config.effective.partition_config`` finds it).
        sole_replica: ``--sole-replica``: as ``clean`` (``log.rules.high_watermark.sole_replica_of``), a partition whose
            only replica is this broker has its log end as its high watermark (the state's note says why).

    Returns:
        The loaded partition.

    Raises:
        KcompactError: not a partition directory, a bad configuration source, or data that does not
            parse.
    """
    now = run_clock_ms(now_ms)
    partition = open_partition(path)
    check_log_dir_checkpoints(partition.path.parent)  # a damaged one: the error says what fixes it
    sources = ConfigSources(cli_overrides, server_properties, metadata_dir, sole_replica=sole_replica)
    effective = sources.for_partition(partition.path)
    sole, note = sole_replica_of(effective, sources)
    state = load_log_state(partition, effective.config, sole_replica=sole)
    state.warnings.extend([note] if note else [])
    rng = compute_cleanable_range(state.range_inputs(effective.config, now))
    reset = checkpoint_reset_warning(rng)
    if reset is not None:
        state.warnings.append(reset)
    return InspectContext(now, effective, state, rng, sole)
