"""What a dry run without ``--roll`` adds: what ``clean --roll`` would give back.

Why: the cleaner never touches the active segment (``LogCleanerManager.cleanableOffsets`` caps the range at
its base offset), and a broker stopped before ``segment.ms`` rolled it keeps most of its data there. A dry run
of such a log dir gives back (next to) nothing, and only a rehearsal with ``--roll`` says what the clean an
operator can actually run would free. So a dry run without ``--roll`` runs the partitions whose range stops at
an active segment holding records once more with ``--roll`` (still dry: nothing is written) and says both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kcompact.cleaner.logdir.run_summary import holds_no_records
from kcompact.cleaner.round.options import CleanResult
from kcompact.log.rules.ranges import RULE_ACTIVE_SEGMENT


def log_bytes_given_back(result: CleanResult) -> int:
    """The bytes of ``.log`` files a round gives back: what it read less what it wrote (0 for none)."""
    return result.stats.bytes_read - result.stats.bytes_written


def waits_in_active_segment(result: CleanResult) -> bool:
    """Whether the round stopped at an active segment that holds records (``--roll`` would clean them)."""
    rng = result.range
    return (rng is not None and rng.blocking_rule == RULE_ACTIVE_SEGMENT and not holds_no_records(rng)
            and not result.rolled)


def gives_back_with_roll(results: Sequence[CleanResult],
                         rerun: Callable[[CleanResult], CleanResult | None]) -> int | None:
    """What the same dry run with ``--roll`` gives back, in ``.log`` bytes.

    Args:
        results: the dry run's results (without ``--roll``).
        rerun: the dry run of one of them again with ``--roll`` (None: it failed or was skipped then).

    Returns:
        The total over ``results``, each partition that waits in its active segment counted as its rerun; None
        when none does (then ``--roll`` changes nothing).
    """
    waiting = [result for result in results if result.dry_run and waits_in_active_segment(result)]
    if not waiting:
        return None
    total = sum(log_bytes_given_back(result) for result in results if result not in waiting)
    for result in waiting:
        rolled = rerun(result)
        total += log_bytes_given_back(rolled if rolled is not None else result)
    return total
