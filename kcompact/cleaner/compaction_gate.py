"""Whether ``clean`` may compact a partition: only one known to be compacted, and why not otherwise.

Why: compacting a topic that is not compacted deletes every keyless record and every superseded value
its consumers read in full — data loss no later step can undo. A broker compacts a partition only when
its ``cleanup.policy`` includes ``compact``; offline, kcompact knows that policy only as well as the
files it could read (``kcompact.config.effective``). So :func:`not_compacted` lets a partition through
only when ``compact`` comes from a source that says so: ``--config``, a topic override, a broker config,
or the broker's own creation of ``__consumer_offsets`` / ``__transaction_state``. Where no source sets
the policy, a broker uses Kafka's default ``delete``; ``--assume-compact`` treats such partitions as
compacted. Two guards use a sample of the partition's records (``keyless.py``), since no compacted
topic holds mostly keyless records:

* a partition only *assumed* compact (``--assume-compact``) whose sample is mostly keyless is refused;
* so is one given ``--config cleanup.policy=compact`` through its log dir (that ``--config`` covers
  every partition of it): naming the partition alone is what compacts it anyway.

A policy without ``compact`` but with ``delete`` from an explicit source gets retention only
(:func:`retention_allowed`); Kafka's default ``delete`` never deletes anything offline.
"""

from __future__ import annotations

from kcompact.cleaner.keyless import KeylessSample, sample_keyless
from kcompact.config.effective import SOURCE_ASSUME_COMPACT, EffectiveConfig, describe_source
from kcompact.config.topic_config import format_value
from kcompact.segment.partition import Partition, open_partition

KEYS_EXPECTED = "a compacted topic's records carry keys, and compaction would delete these"


def retention_allowed(effective: EffectiveConfig) -> bool:
    """Retention deletes data: it runs only when a policy with ``delete`` comes from an explicit source."""
    policy = effective.value("cleanup.policy")
    return effective.config.has_delete and policy.source not in ("default", "assumed")


def not_compacted(
    effective: EffectiveConfig, *, named_alone: bool = True, partition: Partition | None = None
) -> str | None:
    """Why ``clean`` leaves this partition alone; None when compaction or retention runs on it.

    Args:
        effective: the partition's configuration.
        named_alone: the partition was named on its own (False: reached through its log dir, where a
            ``--config`` applies to every partition).
        partition: the opened partition, when the caller has it (its records may be sampled).

    Returns:
        The reason, one sentence saying what the policy is, how that is known, and what would make
        kcompact compact it; None when the policy includes ``compact`` from a source that says so (or
        ``delete`` from an explicit source: retention only).
    """
    policy = effective.value("cleanup.policy")
    force = _force_hint(effective, named_alone)
    if effective.config.is_compacted:
        guarded = policy.source == SOURCE_ASSUME_COMPACT or (policy.source == "cli" and not named_alone)
        if guarded and (sample := _sample(effective, partition)).mostly_keyless:
            given = ("only assumed (--assume-compact)" if policy.source == SOURCE_ASSUME_COMPACT
                     else "given with --config for the whole log dir")
            return f"cleanup.policy=compact is {given}, but {sample.describe()}: {KEYS_EXPECTED}; {force}"
        return None
    if retention_allowed(effective):
        return None
    if policy.source != "default":
        return (f"cleanup.policy={format_value(policy.value)} ({describe_source(policy)}); the broker's "
                f"cleaner never compacts it; {force}")
    why = _default_policy(effective)
    sample = _sample(effective, partition)
    if sample.mostly_keyless:
        return (f"{why}; {sample.describe()}, as in a topic that is not compacted (compaction would "
                f"delete them); {force}")
    if sample.records:
        why += f"; {sample.describe()}"
    if named_alone:
        return f"{why}; give --config cleanup.policy=compact or --assume-compact to compact it"
    return f"{why}; clean it alone with --config cleanup.policy=compact, or give --assume-compact, to compact it"


def _sample(effective: EffectiveConfig, partition: Partition | None) -> KeylessSample:
    return sample_keyless(partition or open_partition(effective.partition_dir))


def _default_policy(effective: EffectiveConfig) -> str:
    """What Kafka's default policy means here: known (the topic's overrides were read) or unknown."""
    if effective.topic_config_unknown is not None:
        return (f"cleanup.policy is not known ({effective.topic_config_unknown}); Kafka's default is "
                "'delete', and kcompact compacts only a partition known to be compacted")
    known = ("cleanup.policy=delete (Kafka's default: no topic override in the metadata log, "
             "no dynamic config, no --config")
    known += "" if effective.server_properties else ", server.properties not given"
    return f"{known}); a broker never compacts this topic"


def _force_hint(effective: EffectiveConfig, named_alone: bool) -> str:
    """How to compact it anyway: always by naming this one partition (a log dir's --config covers all)."""
    if named_alone:
        return "give --config cleanup.policy=compact if it really is compacted"
    return (f"clean it alone (kcompact clean {effective.partition_dir} --config cleanup.policy=compact) "
            "if it really is compacted")
