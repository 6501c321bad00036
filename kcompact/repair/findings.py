"""What ``kcompact repair`` reports: one :class:`Finding` per problem, with what Kafka makes of it.

Each finding names the file and byte position, says what is wrong ("…; expected X, found Y"), whether it
would make the broker's log cleaner mark the partition uncleanable and why (``LogCleaner.CleanerThread``,
``Cleaner.doClean``), what a broker does with it when it loads or recovers the partition (``LogLoader.load``), its
impact (it breaks the broker, its cleaner, both; Kafka settles it itself; or it is informational — a broker and its
cleaner accept it — and not repaired), and what repair does about it (None: reported only). The texts live here so
``verify`` stays about detection.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from kcompact.log.state.cleaner_throws import LegacyHazard
from kcompact.repair.salvage import (
    FIX_LENGTH,
    REGION_CORRUPT,
    REGION_OFFSET_ORDER,
    REGION_RECORDS,
    REGION_TORN_TAIL,
    REGION_ZERO_PADDING,
    DamagedRegion,
    KeptBatch,
)
from kcompact.text import plural
from kcompact.value import frozen

KIND_INDEX_CORRUPT = "index-corrupt"  # an index fails Kafka's checks or disagrees with the log
KIND_INDEX_MISSING = "index-missing"
KIND_INDEX_DIFFERS = "index-differs"  # valid, but not what Kafka 4.1 builds from this log
KIND_INDEX_PREALLOCATED = "index-preallocated"  # never trimmed; the broker rebuilds it as it starts
KIND_TXN_INDEX = "txn-index"  # aborted transactions missing from (or wrong in) the .txnindex
KIND_ORPHAN_INDEX = "orphan-index"
KIND_LEFTOVER = "leftover"  # .cleaned / .swap / .deleted of an interrupted clean
KIND_CHECKPOINT = "checkpoint"
KIND_LOG_START = "log-start"
KIND_STRAY = "stray"
KIND_UNCHECKED = "records-unchecked"
KIND_LEGACY_EMPTY = "legacy-empty-batch"  # a legacy entry Kafka's cleaner would have to keep empty

# What a finding does to a broker, one of these (``Finding.impact``). Repair acts only on the first four;
# an informational finding is reported and left as it is.
IMPACT_BROKER = "broker"  # breaks loading, reads, or the broker's idea of the data (retention)
IMPACT_CLEANER = "cleaner"  # the broker's cleaner fails on it or gets it wrong
IMPACT_BOTH = "broker+cleaner"
IMPACT_SETTLED = "settled-by-kafka"  # Kafka settles it itself (at load, or its cleaner); repair does now
IMPACT_NONE = "informational"  # a broker and its cleaner accept it: not repaired
IMPACT_TEXT = {
    IMPACT_BROKER: "breaks the broker",
    IMPACT_CLEANER: "breaks the broker's cleaner",
    IMPACT_BOTH: "breaks the broker and its cleaner",
    IMPACT_SETTLED: "Kafka settles it itself; repair does the same now",
    IMPACT_NONE: "informational: a broker and its cleaner accept it; not repaired",
}
SETTLED_UNREPAIRED = "Kafka settles it itself when the broker starts; not repaired"
"""The impact in words of a finding Kafka settles and repair leaves alone (no action)."""

# The cleaner thread catches the exception and marks the partition uncleanable (LogCleaner.CleanerThread,
# LogCleanerManager.markPartitionUncleanable).
UNCLEANABLE = "so the broker marks the partition uncleanable and never cleans it again until it restarts"
_CLEANER_FAILS = {
    REGION_CORRUPT: "the cleaner cannot step over a broken frame or header "
                    "(CorruptRecordException / InvalidRecordException)",
    REGION_RECORDS: "the cleaner parses every record and fails on these "
                    "(CorruptRecordException / InvalidRecordException)",
    REGION_OFFSET_ORDER: "offsets that do not increase make the cleaner's offset index append "
                         "fail (InvalidOffsetException)",
    REGION_TORN_TAIL: "the cleaner reads each segment to its end and cannot make a batch of a partial "
                      "entry (IllegalStateException / CorruptRecordException)",
    REGION_ZERO_PADDING: "the cleaner reads each segment to its end: zero bytes are an entry of size 0 "
                         "(CorruptRecordException) or too short to size (IllegalStateException)",
}
# What a broker's cleaner does with a batch that parses but fails its CRC. kcompact's own clean differs
# on purpose: it checks every batch it reads and refuses the partition (cleaner/filtering.py).
LAUNDERED = ("Kafka's cleaner does not check CRCs: it would drop, copy or rebuild this batch, and a rebuilt "
             "one gets a fresh CRC that makes the damage look valid (`kcompact clean` refuses the "
             "partition until it is repaired)")


@frozen
class Finding:
    """One problem found in a partition (see the module docstring)."""

    kind: str
    path: str
    position: int | None
    message: str
    offset: int | None = None
    size_in_bytes: int | None = None
    blocks_cleaning: bool = False
    cleaner_effect: str = ""
    broker_effect: str = ""
    action: str | None = None
    impact: str = ""  # one of IMPACT_TEXT's keys; derived from the fields above when not given

    def __post_init__(self) -> None:
        if not self.impact:
            derived = (IMPACT_CLEANER if self.blocks_cleaning
                       else IMPACT_NONE if self.action is None else IMPACT_BROKER)
            object.__setattr__(self, "impact", derived)

    @property
    def informational(self) -> bool:
        """Whether a broker and its cleaner accept it (reported, not repaired)."""
        return self.impact == IMPACT_NONE

    @property
    def settled_unrepaired(self) -> bool:
        """Whether Kafka settles it itself and repair leaves it to Kafka (reported, not repaired)."""
        return self.impact == IMPACT_SETTLED and self.action is None

    @property
    def settled(self) -> bool:
        """Whether a broker settles it itself (as it starts, or its cleaner), repaired or not."""
        return self.impact == IMPACT_SETTLED

    @property
    def problem(self) -> bool:
        """Whether it counts as a problem: something a broker or its cleaner does not settle itself (neither
        informational nor settled by Kafka; what decides a dry run's exit code)."""
        return not (self.informational or self.settled)

    def impact_text(self, *, repaired: bool = True) -> str:
        """The impact in words (``repair`` prints it per finding); ``repaired`` False: of a partition
        repair only reports on."""
        if self.settled_unrepaired or (self.impact == IMPACT_SETTLED and not repaired):
            return SETTLED_UNREPAIRED
        return IMPACT_TEXT.get(self.impact, self.impact)

    def where(self) -> str:
        """``<file>`` or ``<file> at position <p>``."""
        return self.path if self.position is None else f"{self.path} at position {self.position}"

    def located(self) -> str:
        """``<file> at position <p>: <message>``, the house's error shape."""
        return f"{self.where()}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``kcompact repair --json``)."""
        return asdict(self)


def region_finding(
    path: Path, region: DamagedRegion, *, active: bool, later_segments: int
) -> Finding:
    """The finding for one damaged region of a segment.

    Args:
        path: the segment's ``.log``.
        region: the region :func:`~kcompact.repair.salvage.scan_segment` isolated.
        active: whether the segment is the partition's last (active) one.
        later_segments: how many segments follow it.

    Returns:
        The finding, with the quarantine as its action.
    """
    blocks, why = cleaner_verdict(region.kind, readable=region.cleaner_reads_it, active=active)
    end = region.position + region.size_in_bytes
    tail = region.kind in (REGION_TORN_TAIL, REGION_ZERO_PADDING)
    return Finding(
        kind=region.kind,
        path=str(path),
        position=region.position,
        message=f"{region.reason} ({region.size_in_bytes} bytes, to position {end})",
        offset=region.offset,
        size_in_bytes=region.size_in_bytes,
        blocks_cleaning=blocks,
        cleaner_effect=why,
        broker_effect=recovery_effect(region.kind, region.position, later_segments),
        action=(f"move the {region.size_in_bytes} bytes at position {region.position} to the "
                "quarantine" + ("" if tail else " and keep the batches after them")),
        impact=IMPACT_BOTH if blocks else IMPACT_BROKER,
    )


def fix_finding(path: Path, kept: KeptBatch, *, active: bool, later_segments: int) -> Finding:
    """The finding for a batch whose length or base offset field is restored."""
    kind = REGION_CORRUPT if FIX_LENGTH in (kept.fix or "") else REGION_OFFSET_ORDER
    blocks, why = cleaner_verdict(kind, readable=False, active=active)
    return Finding(
        kind=kind,
        path=str(path),
        position=kept.position,
        message=f"wrong {kept.fix_detail} (a field outside the CRC; the batch is otherwise intact)",
        offset=kept.base_offset,
        size_in_bytes=kept.size_in_bytes,
        blocks_cleaning=blocks,
        cleaner_effect=why,
        broker_effect=recovery_effect(kind, kept.position, later_segments),
        action=f"restore the field: the batch passes its CRC and fits the offsets around it with "
               f"offsets {kept.base_offset}..{kept.last_offset}",
        impact=IMPACT_BOTH if blocks else IMPACT_BROKER,
    )


def cleaner_verdict(kind: str, *, readable: bool, active: bool) -> tuple[bool, str]:
    """Whether damage of ``kind`` makes the broker's cleaner give up on the partition, and why."""
    if readable:
        return False, LAUNDERED
    why = _CLEANER_FAILS.get(kind, _CLEANER_FAILS[REGION_CORRUPT])
    if active:
        return False, f"not yet: the cleaner never reads the active segment; once it rolls, {why}"
    return True, f"{why}, {UNCLEANABLE}"


def recovery_effect(kind: str, position: int, later_segments: int) -> str:
    """What Kafka's log recovery (after an unclean shutdown) does at damage at ``position``."""
    # LogSegment.recover and the loader's order of operations (LogLoader.load).
    if kind == REGION_RECORDS:
        return ("log recovery keeps it (it checks CRCs, not the records of data batches); "
                "consumers fail on it")
    if kind == REGION_OFFSET_ORDER:
        return ("log recovery does not check offset order: an index append may fail "
                "(InvalidOffsetException, the segment is truncated to empty) and fetches of these "
                "offsets find the wrong batch")
    later = f" and deletes the {plural(later_segments, 'later segment')}" if later_segments else ""
    return (f"log recovery stops at the first bad entry: it truncates this segment at or before "
            f"position {position}{later}")


def legacy_finding(hazard: LegacyHazard) -> Finding:
    """The finding for a segment whose last legacy entry makes Kafka's cleaner throw; repair converts it.

    The segment right below the active one ends every round that reaches the active segment: the
    cleaner fails there now. The active segment's own last entry ends the first round after it rolls (a
    broker's next roll, or ``kcompact clean --roll``), and any other one a round while
    ``min.compaction.lag.ms`` holds the next segment back: not a failure yet, but the one that stops a
    clean then (``kcompact clean`` refuses there too, pointing here), so repair converts them as well.
    """
    fails_now = hazard.next_to_active
    cleaner_effect = hazard.reason()
    if hazard.active:
        cleaner_effect = f"not yet (the cleaner never reads the active segment): {cleaner_effect}"
    elif not fails_now:
        cleaner_effect = f"not while no round ends here: {cleaner_effect}"
    return Finding(
        kind=KIND_LEGACY_EMPTY,
        path=str(hazard.log_path),
        position=hazard.position,
        offset=hazard.offset,
        message=(f"last entry is legacy (magic {hazard.magic}) and has no keyed value; expected a "
                 f"magic 2 batch or a kept record, found {plural(hazard.records, 'record')}, "
                 f"{hazard.keyless} keyless"),
        blocks_cleaning=fails_now,
        cleaner_effect=cleaner_effect,
        broker_effect="none: brokers serve legacy entries as they are",
        action=("rewrite the segment's legacy entries as magic 2 batches with the same records, "
                "offsets and timestamps (as Kafka's cleaner writes kept legacy data); indexes rebuilt"),
        impact=IMPACT_CLEANER,
    )
