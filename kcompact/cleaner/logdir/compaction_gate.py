"""Whether ``clean`` may compact a partition: only one known to be compacted, and why not otherwise.

Why: compacting a topic that is not compacted deletes every keyless record and every superseded value
its consumers read in full — data loss no later step can undo. A broker compacts a partition only when
its ``cleanup.policy`` includes ``compact``; offline, kcompact knows that policy only as well as the
files it could read (``kcompact.config.effective``). So :func:`not_compacted` lets a partition through
only when ``compact`` comes from a source that says so: ``--config``, a topic override, a broker config,
or the broker's own creation of ``__consumer_offsets`` / ``__transaction_state``. Where no source sets
the policy a broker uses Kafka's default ``delete``, and two cases differ:

* the policy is *known* (the topic's overrides were read from a complete metadata log, or a source
  sets it without ``compact``): only ``--config cleanup.policy=compact`` given with this partition
  named alone changes it — not ``--assume-compact``, not a ``--config`` given for a whole log dir;
* the policy is *unknown* (no metadata log, an incomplete history, a topic id it does not know):
  ``--assume-compact`` treats the partition as compacted, as does a log dir's ``--config``. So is a
  policy an incomplete history gives (``effective.is_last_known``: a snapshot's, say, with the log
  after it gone): it is the policy as of that metadata offset, which a record missing from disk may
  have changed, so it neither compacts (``compact``) nor deletes by retention (``delete``) on its own.
  But a last known policy without ``compact`` (an explicit ``delete``: ksqlDB's command topic has one,
  and compaction loses its commands) is explicit all the same: as for a known one, only
  ``--config cleanup.policy=compact`` with the partition named alone compacts it.

Keyless records are the other guard, whatever the policy's source, since a compacted topic holds none
(a broker refuses them on produce, and its cleaner deletes any it meets: a topic made compacted
after the fact). Early, before any work: a partition whose sample (``keyless.py``) is mostly keyless
is counted in full from the cleaner checkpoint to the log end. Then, whatever the sample said, the
round itself counts every record it reads (:func:`keyless_guard`, ``CleanOptions.keyless_guard``) and
refuses before its first change when most of them would go as keyless. Either way, mostly keyless
data is compacted only

* with ``--allow-keyless-loss`` (the acknowledgement that they go) and a policy with ``compact`` from
  an explicit source for this partition: a topic override, a broker config, or ``--config`` with the
  partition named alone;
* never where ``compact`` is only assumed (``--assume-compact``) or comes from a log dir's ``--config``:
  mostly keyless data is evidence against that assumption.

No reason holds a command line to copy: each names the options that would change the decision.
A policy without ``compact`` but with ``delete`` from an explicit source gets retention only
(:func:`retention_allowed`); Kafka's default ``delete`` never deletes anything offline.
"""

from __future__ import annotations

from kcompact.cleaner.logdir.keyless import KeylessSample, count_keyless, sample_keyless
from kcompact.cleaner.round.options import KeylessGuard
from kcompact.config.config_keys import format_value
from kcompact.config.effective import (
    SOURCE_ASSUME_COMPACT,
    EffectiveConfig,
    describe_source,
    has_compact,
    is_last_known,
)
from kcompact.config.topic_config import ConfigValue
from kcompact.segment.log_reads import LogReads
from kcompact.segment.partition import Partition, open_partition

ALLOW_KEYLESS_LOSS = "--allow-keyless-loss"
KEYS_EXPECTED = "a compacted topic's records carry keys, and compaction would delete these"


def retention_allowed(effective: EffectiveConfig) -> bool:
    """Retention deletes data: it runs only when a policy with ``delete`` comes from an explicit source
    (not one only last known from an incomplete metadata history)."""
    policy = effective.value("cleanup.policy")
    return (effective.config.has_delete and policy.source not in ("default", "assumed")
            and not is_last_known(policy))


def not_compacted(
    effective: EffectiveConfig, *, named_alone: bool = True, partition: Partition | None = None,
    allow_keyless_loss: bool = False, reads: LogReads | None = None,
) -> str | None:
    """Why ``clean`` leaves this partition alone; None when compaction or retention runs on it.

    Args:
        effective: the partition's configuration.
        named_alone: the partition was named on its own (False: reached through its log dir, where a
            ``--config`` applies to every partition).
        partition: the opened partition, when the caller has it (its records may be sampled).
        allow_keyless_loss: ``--allow-keyless-loss``: compact an explicitly compacted partition
            although most of its records have no key (they are deleted).
        reads: the caller's shared reads of the partition's ``.log`` files, for its sample (None: opened for it).

    Returns:
        The reason, one sentence saying what the policy is, how that is known, and what would make
        kcompact compact it (options, never a command line); None when the policy includes
        ``compact`` from a source that says so (or ``delete`` from an explicit source: retention only).
    """
    policy = effective.value("cleanup.policy")
    alone = _alone(named_alone)
    if is_last_known(policy):
        why = (f"cleanup.policy is not known: {format_value(policy.value)} ({describe_source(policy)}) "
               f"is where what was read of the metadata log ends, and a later record, missing from disk "
               f"(or unread), may have changed it; kcompact compacts only a partition known to be compacted")
        if not has_compact(policy):
            why += (", and never on an assumption where the last known policy is explicit and has no compact "
                    "(--assume-compact does not apply)")
        return _with_hint(why, _sample(effective, partition, reads), named_alone,
                          known=not has_compact(policy), empty=_holds_nothing(effective, partition))
    if effective.config.is_compacted:
        known = effective.known_policy if effective.known_policy is not None else effective.last_known_policy
        if policy.source == "cli" and not named_alone and known is not None and not has_compact(known):
            kind = "a known" if known is effective.known_policy else "an explicit"
            return (f"{_known_without_compact(effective, known)}; a --config for a whole log dir does "
                    f"not change {kind} policy: {alone} if it really is compacted")
        return _keyless_refusal(effective, named_alone, partition, allow_keyless_loss, reads)
    if retention_allowed(effective):
        return None
    sample = _sample(effective, partition, reads)
    if policy.source != "default":
        why = (f"cleanup.policy={format_value(policy.value)} ({describe_source(policy)}); the broker's "
               f"cleaner never compacts it")
        return _with_hint(why, sample, named_alone, known=True, empty=_holds_nothing(effective, partition))
    known_default = effective.topic_config_unknown is None
    return _with_hint(_default_policy(effective), sample, named_alone, known=known_default,
                      empty=_holds_nothing(effective, partition))


def _alone(named_alone: bool) -> str:
    """The one override of a policy for one partition (no command line: the user writes it)."""
    if named_alone:
        return "give --config cleanup.policy=compact"
    return "clean this partition alone with --config cleanup.policy=compact"


def _known_without_compact(effective: EffectiveConfig, known: ConfigValue) -> str:
    if known.source == "default":
        return _default_policy(effective)
    return (f"cleanup.policy={format_value(known.value)} ({describe_source(known)}); the broker's "
            f"cleaner never compacts it")


EMPTY_PARTITION = "no records: nothing to clean, whatever the policy"
"""What a skip says of a partition whose segments hold no byte, instead of options that would change nothing."""


def _with_hint(why: str, sample: KeylessSample, named_alone: bool, *, known: bool, empty: bool = False) -> str:
    """A skip reason with what would compact the partition: ``--assume-compact`` only where the policy
    is unknown, and the acknowledgement flag where the data is mostly keyless; for an empty partition,
    that there is nothing to clean (no option would change what a clean does to it)."""
    if empty:
        return f"{why}; {EMPTY_PARTITION}"
    alone = _alone(named_alone)
    if sample.mostly_keyless:
        return (f"{why}; {sample.describe()}, as in a topic that is not compacted (compaction would "
                f"delete them); {alone} and {ALLOW_KEYLESS_LOSS} to compact it anyway")
    if sample.records:
        why += f"; {sample.describe()}"
    if known:
        return f"{why}; {alone} if it really is compacted"
    if named_alone:
        return (f"{why}; if the topic is compacted, give --config cleanup.policy=compact or "
                "--assume-compact to compact it")
    return (f"{why}; if the topic is compacted, clean it alone with --config cleanup.policy=compact, or give "
            "--assume-compact, to compact it")


def keyless_guard(effective: EffectiveConfig, *, named_alone: bool = True,
                  allow_keyless_loss: bool = False) -> KeylessGuard | None:
    """How a clean of this partition refuses to delete mostly keyless records; None when it may.

    Args:
        effective: the partition's configuration.
        named_alone: the partition was named on its own (False: reached through its log dir).
        allow_keyless_loss: ``--allow-keyless-loss`` was given.

    Returns:
        None when the policy has no ``compact`` (nothing is compacted) or includes it from an explicit
        source and the loss is acknowledged; else the guard (``CleanOptions.keyless_guard``): never
        acknowledged where ``compact`` is only assumed or comes from a log dir's ``--config``.
    """
    if not effective.config.is_compacted:
        return None
    policy = effective.value("cleanup.policy")
    if policy.source == SOURCE_ASSUME_COMPACT or (policy.source == "cli" and not named_alone):
        given = ("only assumed (--assume-compact)" if policy.source == SOURCE_ASSUME_COMPACT
                 else "given with --config for the whole log dir")
        return KeylessGuard(f"cleanup.policy=compact is {given}",
                            f": {KEYS_EXPECTED}; {_alone(named_alone)} and {ALLOW_KEYLESS_LOSS} to "
                            "compact it anyway")
    if allow_keyless_loss:
        return None
    return KeylessGuard(f"cleanup.policy={format_value(policy.value)} ({describe_source(policy)})",
                        f" (a topic made compacted after they were written); give {ALLOW_KEYLESS_LOSS} "
                        "to compact it anyway, deleting them")


def _keyless_refusal(effective: EffectiveConfig, named_alone: bool, partition: Partition | None,
                     allow_keyless_loss: bool, reads: LogReads | None = None) -> str | None:
    """Why a partition whose policy includes ``compact`` is not compacted: its sample is mostly keyless,
    and so is the exact count from the cleaner checkpoint, and nothing explicit says to delete them.
    The early word only: the round applies the same :func:`keyless_guard` to every record it reads."""
    guard = keyless_guard(effective, named_alone=named_alone, allow_keyless_loss=allow_keyless_loss)
    if guard is None or not _sample(effective, partition, reads).mostly_keyless:
        return None
    count = count_keyless(partition or open_partition(effective.partition_dir))
    if not count.mostly_keyless:
        return None
    return guard.refusal(count.describe())


def _holds_nothing(effective: EffectiveConfig, partition: Partition | None) -> bool:
    """Whether the partition's segments hold not one byte (no record, no marker: a clean writes nothing)."""
    return (partition or open_partition(effective.partition_dir)).size_in_bytes == 0


def _sample(effective: EffectiveConfig, partition: Partition | None, reads: LogReads | None) -> KeylessSample:
    return sample_keyless(partition or open_partition(effective.partition_dir), reads=reads)


def _default_policy(effective: EffectiveConfig) -> str:
    """What Kafka's default policy means here: known (the topic's overrides were read) or unknown."""
    if effective.topic_config_unknown is not None:
        return (f"cleanup.policy is not known ({effective.topic_config_unknown}); Kafka's default is "
                "'delete', and kcompact compacts only a partition known to be compacted")
    known = ("cleanup.policy=delete (Kafka's default: no topic override in the metadata log, "
             "no dynamic config, no --config")
    known += "" if effective.server_properties else ", server.properties not given"
    return f"{known}); a broker never compacts this topic"
