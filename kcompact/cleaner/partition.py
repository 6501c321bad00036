"""``clean_partition``: one round of Kafka's log cleaner on one partition, the one entry point every caller
uses (the CLI through ``logdir``, ``inspect keys``' dry run, ``repair --clean``, Spark's tasks).

The round is ``round.partition_round``'s, serial and top-down; this module only chooses who runs its
passes 1 and 2: this process or its worker processes (``workers.parallel.run_round``, by
``CleanOptions.jobs``), or a caller's runner (``kcompact.spark.distributed_map`` builds the offset map as a
Spark shuffle).
"""

from __future__ import annotations

from pathlib import Path

from kcompact.cleaner.round.options import DEFAULT_OPTIONS, CleanOptions, CleanResult, Progress
from kcompact.cleaner.round.partition_round import RoundRunner, clean_partition_round
from kcompact.cleaner.workers.parallel import run_round
from kcompact.config.topic_config import TopicConfig


def clean_partition(
    path: str | Path,
    config: TopicConfig,
    options: CleanOptions = DEFAULT_OPTIONS,
    progress: Progress | None = None,
    *,
    round_runner: RoundRunner | None = None,
) -> CleanResult:
    """Clean one partition directory exactly as one round of Kafka 4.1's log cleaner.

    Args:
        path: the partition directory.
        config: the topic's effective configuration.
        options: clock, dry run, bounded map, worker processes, …
        progress: called with byte counts as segments are read (for a progress bar).
        round_runner: runs passes 1 and 2 elsewhere (the distributed offset map); None runs them in
            this process or its workers. With a runner, leftovers of an interrupted clean are settled
            without first rehearsing the clean on a staged copy (that rehearsal is a local dry run:
            the very map a runner exists to avoid), so a round that then fails leaves the settled
            partition, as a broker's loader would make it.

    Returns:
        The :class:`~kcompact.cleaner.round.options.CleanResult`.

    Raises:
        RefusedError: a broker holds the log dir, another kcompact works on the partition, or the
            topic may not be cleaned offline (``__cluster_metadata``, tiered storage).
        FileAccessError: the log dir or the partition directory cannot be written (checked first),
            or a file cannot be read (nothing is changed).
        CorruptDataError: the partition's data does not parse (nothing is changed).
    """
    if round_runner is None:
        return clean_partition_round(path, config, options, progress, run_round, runs_here=True)
    return clean_partition_round(path, config, options, progress, round_runner, runs_here=False)
