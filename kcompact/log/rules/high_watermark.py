"""The high watermark a starting broker gives a partition it alone holds: its log end.

A broker checkpoints each partition's high watermark in ``replication-offset-checkpoint`` now and then
(``ReplicaManager.checkpointHighWatermarks``); one that died (a full volume, ``kill -9``) leaves an entry far
behind the log end. For a partition with other replicas that entry is the right cap: what lies past it is not
known to be replicated, and the new leader may truncate it. For a partition whose only replica is this broker
nothing can truncate it, and Kafka does not wait: once started, the broker is the partition's leader
(``Partition.makeLeader``), which calls ``Partition.maybeIncrementLeaderHW``: the new high watermark is the
leader's log end, lowered only to the log end of a *remote* replica in the ISR (there is none), and held back
only while the ISR is smaller than the effective min ISR, ``min(min.insync.replicas, replicas)`` = 1 for one
replica (``Partition.isUnderMinIsr``, ``effectiveMinIsr``), which an ISR holding the leader never is.
``UnifiedLog.maybeIncrementHighWatermark`` then moves it up to that log end (it never exceeds the log end).
So for such a partition the cleaner's cap is the log end Kafka's recovery keeps, not the stale checkpoint.

Which partitions: those the KRaft metadata log assigns to this broker alone (its PartitionRecord and the
PartitionChangeRecords after it: replicas = [this node], and the node in the ISR), or every partition when
the user says so (``clean --sole-replica``) and the metadata log does not name other replicas. A partition whose
only replica is this node but whose last recorded ISR lacks it (a controller that fenced it: with eligible leader
replicas the ISR may be left empty) is taken so only with the flag: whether Kafka elects it again is the
controller's decision, not read here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kcompact.value import frozen

if TYPE_CHECKING:  # annotations only: a clean without a metadata log never imports the KRaft reader
    from kcompact.config.effective import EffectiveConfig
    from kcompact.config.kraft.metadata_state import PartitionAssignment
    from kcompact.config.sources import ConfigSources

SOURCE_KRAFT_METADATA = "KRaft metadata"
SOURCE_SOLE_REPLICA_FLAG = "--sole-replica"


@frozen
class SoleReplica:
    """Why a partition's only replica is this broker (its high watermark is then its log end).

    Attributes:
        source: :data:`SOURCE_KRAFT_METADATA` or :data:`SOURCE_SOLE_REPLICA_FLAG`.
        node_id: this broker's node id, when known.
        metadata_offset: the metadata record that last set the partition's replicas and ISR (KRaft only).
    """

    source: str
    node_id: int | None = None
    metadata_offset: int | None = None

    def reason(self) -> str:
        """Why, in words: ``this broker is the partition's only replica (KRaft metadata)``."""
        who = "this broker" if self.node_id is None else f"this broker (node {self.node_id})"
        return f"{who} is the partition's only replica ({self.source})"


def is_sole_replica(assignment: PartitionAssignment, node_id: int) -> bool:
    """Whether ``node_id`` is the partition's only replica, and in its ISR (then the leader Kafka elects).

    Args:
        assignment: the partition's replicas and ISR from the metadata log.
        node_id: this broker's node id.

    Returns:
        True when the replicas are exactly ``[node_id]`` and the ISR holds it.
    """
    return assignment.replicas == (node_id,) and node_id in assignment.isr


def sole_replica_from_metadata(assignment: PartitionAssignment | None, node_id: int | None, *,
                               flag: bool) -> tuple[SoleReplica | None, str | None]:
    """The sole-replica fact of one partition, from its KRaft assignment and ``--sole-replica``.

    The metadata log decides where it names the partition's replicas; the flag stands in only where it does
    not (no metadata log, a topic it does not know, an unknown node id).

    Args:
        assignment: the partition's assignment from the metadata log (None: unknown).
        node_id: this log dir's node id (None: unknown).
        flag: ``--sole-replica`` was given.

    Returns:
        (the fact or None, a note when the flag was given but the metadata log says otherwise).
    """
    if assignment is not None and node_id is not None:
        if is_sole_replica(assignment, node_id):
            return SoleReplica(SOURCE_KRAFT_METADATA, node_id, assignment.offset), None
        if not flag:
            return None, None
        if assignment.replicas == (node_id,):  # its only replica, out of the ISR as last recorded: the user's word
            return SoleReplica(SOURCE_SOLE_REPLICA_FLAG, node_id), None
        replicas = ", ".join(map(str, assignment.replicas))
        isr = ", ".join(map(str, assignment.isr))
        return None, (f"--sole-replica not applied: the KRaft metadata names replicas [{replicas}] (ISR [{isr}]) "
                      f"for node {node_id}'s partition; the replication-offset-checkpoint's high watermark caps "
                      f"cleaning")
    return (SoleReplica(SOURCE_SOLE_REPLICA_FLAG, node_id), None) if flag else (None, None)


def high_watermark_note(sole: SoleReplica, log_end_offset: int, checkpointed: int | None) -> str:
    """The sentence a clean says of a high watermark taken as the log end.

    Args:
        sole: why the partition's only replica is this broker.
        log_end_offset: the log end Kafka's recovery keeps.
        checkpointed: the partition's ``replication-offset-checkpoint`` entry, None if it has none.

    Returns:
        ``high watermark taken as the log end N: this broker is ...; the checkpoint's M is stale``.
    """
    if checkpointed is None:
        stale = "replication-offset-checkpoint has no entry for it"
    elif checkpointed < log_end_offset:
        stale = f"the replication-offset-checkpoint's {checkpointed} is stale"
    else:
        stale = f"the replication-offset-checkpoint's {checkpointed} agrees"
    return (f"high watermark taken as the log end {log_end_offset}: {sole.reason()}, and Kafka's leader sets "
            f"it there on start (Partition.maybeIncrementLeaderHW); {stale}")


def sole_replica_of(effective: EffectiveConfig, sources: ConfigSources) -> tuple[SoleReplica | None, str | None]:
    """Whether the partition's only replica is this broker (its high watermark: its log end), and a note
    where ``--sole-replica`` was not applied: the one rule every command that caps by the high watermark
    follows (``clean``, ``inspect dirty-ratio``, ``report``, ``inspect export``)."""
    return sole_replica_from_metadata(effective.assignment, effective.node_id, flag=sources.sole_replica)
