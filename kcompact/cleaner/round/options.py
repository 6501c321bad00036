"""How to clean one partition and what the clean did: the values around :func:`clean_partition`.

They live below the round (``round/partition_round.py``), the process pool (``cleaner/workers/``) and the
entry point (``round/partition_round.py``), beside the round's steps (``round/steps.py``), which all use them;
callers import them from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field, replace

from kcompact.cleaner.disk.retention import RetentionResult
from kcompact.cleaner.disk.space import SpaceNeed
from kcompact.cleaner.disk.swap import CrashHook
from kcompact.cleaner.round.stats import CleanStats
from kcompact.config.topic_config import TopicConfig
from kcompact.errors import RefusedError
from kcompact.log.rules.fence import CleanLimit, ReplicaFence
from kcompact.log.rules.high_watermark import SoleReplica
from kcompact.log.rules.ranges import CleanableRange
from kcompact.value import frozen, mutable

DEDUPE_BUFFER_KEY = "log.cleaner.dedupe.buffer.size"
MOSTLY_KEYLESS = 0.5  # a share of keyless records above this is "mostly keyless"

Progress = Callable[[int], None]  # called with bytes processed since the last call


class KeylessLossRefused(RefusedError):
    """A round would delete mostly keyless records that nothing acknowledged (:class:`KeylessGuard`)."""


@frozen
class KeylessGuard:
    """How a clean refuses to delete mostly keyless data, given by ``logdir.compaction_gate.keyless_guard``.

    The gate reads a sample before any work; the round counts every record it reads in pass 2, and
    those of its dirty section alone (the range the gate counts), and when most of either would go
    as keyless, raises :class:`KeylessLossRefused` before its first change.

    Attributes:
        policy: the policy and its source, ``"cleanup.policy=compact (a topic override)"``.
        advice: what follows the count: why it matters and the options that would compact it anyway.
    """

    policy: str
    advice: str

    def refuses(self, keyless: int, records: int) -> bool:
        """Whether more than half of ``records`` have no key (never when none were counted)."""
        return records > 0 and keyless > MOSTLY_KEYLESS * records

    def refusal(self, counted: str) -> str:
        """The reason, one sentence: ``counted`` says how many records have no key, out of how many."""
        return f"{self.policy}, but {counted}, and a clean deletes every keyless record it reaches{self.advice}"


@frozen
class CleanOptions:
    """How to clean (the ``kcompact clean`` options)."""

    now_ms: int | None = None  # the clock of the time rules; None = now
    from_start: bool = False  # first dirty offset = log start
    # emulate a broker's bounded map (each cleaner thread's share of it, ``mapping.new_offset_map``);
    # None = unbounded. ``with_cli_dedupe_buffer`` takes it from ``--config`` when unset
    dedupe_buffer_size: int | None = None
    dry_run: bool = False
    roll: bool = False
    apply_retention: bool = False  # retention.ms/retention.bytes (only from an explicit delete policy)
    crash_hook: CrashHook | None = None  # tests: called at each step of the swap protocol
    # None: a round that reads enough on a machine with two spare CPUs on two threads of this process, else
    # one (kcompact.cleaner.workers.parallel.choose_runner); a number: that many worker processes for both
    # passes, capped at the usable CPUs and the round's segment ranges (resolve_jobs), 1 this thread alone;
    # the output is the same bytes whatever the choice
    jobs: int | None = None
    # the replica fence (``rules.fence``): tombstones and markers at or above the lowest of
    # ``safe_offset`` and what Kafka leaves of each of the partition's copies in ``replica_dirs`` (its
    # recovered log end, or where its leader-epoch lineage parts from this copy's) outlive their delete
    # horizon, and the round cleans only below where a copy's lineage parts from this one; neither given:
    # Kafka's rules alone
    safe_offset: int | None = None
    replica_dirs: tuple[str, ...] = ()
    # refuse a round most of whose records would go as keyless (``clean``'s gate sets it unless
    # --allow-keyless-loss acknowledges it for an explicitly compacted topic); None: no such guard
    keyless_guard: KeylessGuard | None = None
    # a log dir's measure of this round (``logdir.free_first``, on the same files): while it fits the free
    # space with a block to spare, the round does not measure itself again (``disk.space``)
    measured_space: SpaceNeed | None = None
    # write every group's cleaned segment in ``<scratch_dir>/<partition dir name>/`` (another volume) and bring
    # each in from there (``disk.scratch``: a volume with no free byte); None: in the partition directory
    scratch_dir: str | None = None
    # this broker is the partition's only replica (``rules.high_watermark``; the log-dir run sets it per
    # partition from the KRaft metadata or --sole-replica): its high watermark is its log end; None: the
    # replication-offset-checkpoint's
    sole_replica: SoleReplica | None = None


@mutable
class CleanResult:
    """What a clean did (or, with ``dry_run``, would do)."""

    partition_dir: str
    topic: str
    partition: int
    now_ms: int
    dry_run: bool
    range: CleanableRange | None = None
    end_offset: int | None = None  # the new cleaner checkpoint
    checkpoint_before: int | None = None
    checkpoint_written: bool = False
    rolled: bool = False  # --roll kept a new empty active segment (a dry run: would keep)
    stats: CleanStats = field(default_factory=CleanStats)
    recovery_actions: list[str] = field(default_factory=list)
    # ``--scratch-dir``: what the settlement of an earlier run did, then each group brought in (``disk.scratch``)
    scratch_actions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped_reason: str | None = None
    retention: RetentionResult | None = None
    workers: int = 1  # processes or threads the round's passes ran on at once (1: this thread; ``CleanOptions.jobs``)
    space: SpaceNeed | None = None  # a dry run's, or a real run's when its free space was short (``disk.space``)
    free_bytes: int | None = None  # the volume's free space when ``space`` was measured (the broker's, f_bavail)
    reserved_bytes: int = 0  # and what it kept for root besides (``disk.space.Volume``)
    # a dry run's with ``--scratch-dir``: its output on the scratch dir's volume at peak, and that volume's free space
    scratch_peak_bytes: int | None = None
    scratch_free_bytes: int | None = None
    fence: ReplicaFence | None = None  # the replica fence the round used (``rules.fence``)
    clean_limit: CleanLimit | None = None  # where the round's cleanable range ends for another copy's lineage
    high_watermark_note: str | None = None  # why the high watermark is the log end (``rules.high_watermark``)


DEFAULT_OPTIONS = CleanOptions()
"""The options of a plain ``kcompact clean`` (the default argument of the entry points)."""


def with_cli_dedupe_buffer(options: CleanOptions, cli_overrides: Mapping[str, str]) -> CleanOptions:
    """``--config log.cleaner.dedupe.buffer.size=N`` bounds the map as ``dedupe_buffer_size=N`` does.

    ``dedupe_buffer_size`` (``--dedupe-buffer-size``), when set, wins. A value from the broker's own
    files (server.properties, a dynamic broker config) bounds nothing: it is the broker's memory budget,
    not a rule of the data, and an offline clean is not short of the broker's memory; a round without a
    bound cleans everything a broker would reach in as many rounds as its map needs.

    Args:
        options: the run's options.
        cli_overrides: the ``--config`` pairs (already validated).

    Returns:
        The options with ``dedupe_buffer_size`` taken from ``cli_overrides`` where it was unset.
    """
    if options.dedupe_buffer_size is not None or DEDUPE_BUFFER_KEY not in cli_overrides:
        return options
    parsed = TopicConfig.defaults().with_overrides({DEDUPE_BUFFER_KEY: cli_overrides[DEDUPE_BUFFER_KEY]})
    return replace(options, dedupe_buffer_size=parsed.dedupe_buffer_size)
