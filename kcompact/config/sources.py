"""Where each partition's configuration comes from, as a command's options give it: ``--config`` pairs, the
broker's ``server.properties``, the KRaft metadata log, and the flags that change what an unknown or keyless
topic means (see :func:`kcompact.config.effective.partition_config`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kcompact.config.effective import EffectiveConfig, partition_config
from kcompact.value import frozen


@frozen
class ConfigSources:
    """Where each partition's configuration comes from (see ``partition_config``)."""

    cli_overrides: Mapping[str, str]
    server_properties: str | Path | None = None
    metadata_dir: str | Path | None = None
    assume_compact: bool = False  # --assume-compact: compact where cleanup.policy is unknown
    allow_keyless_loss: bool = False  # --allow-keyless-loss: compact although most records are keyless
    # the partition was named alone (False: a caller went through its log dir, as repair LOG_DIR --clean does,
    # where --config applies to every partition and changes no known or explicit policy: ``not_compacted``)
    named_alone: bool = True
    sole_replica: bool = False  # --sole-replica: each partition is this broker's alone (``rules.high_watermark``)

    def for_partition(self, part_dir: Path) -> EffectiveConfig:
        return partition_config(part_dir, cli_overrides=self.cli_overrides,
                                server_properties=self.server_properties, metadata_dir=self.metadata_dir,
                                assume_compact=self.assume_compact)
