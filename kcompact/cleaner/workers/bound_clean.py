"""``clean_partition``: a partition's round with its passes run where they pay, the one binding every caller
uses (``kcompact clean``, ``inspect keys``' dry run, ``repair --clean``, Spark's tasks).

It binds ``round.partition_round.clean_partition`` to :func:`choose_runner`, which imports ``parallel`` (numpy,
the offset map, pass 2, the threads and worker processes) with the first round that has passes to run: a clean
with nothing to do never loads them.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from kcompact.cleaner.round.partition_round import clean_partition as round_clean_partition

if TYPE_CHECKING:
    from kcompact.cleaner.round.options import CleanOptions
    from kcompact.cleaner.round.plan import CleanPlan
    from kcompact.cleaner.round.steps import RoundRunner

__all__ = ["choose_runner", "clean_partition"]


def choose_runner(plan: CleanPlan, options: CleanOptions) -> RoundRunner | None:
    """``parallel.choose_runner``, imported on first use: who runs passes 1 and 2 of ``plan``."""
    from kcompact.cleaner.workers.parallel import choose_runner as parallel_choice

    return parallel_choice(plan, options)


clean_partition = partial(round_clean_partition, choose_runner=choose_runner)
"""``round.partition_round.clean_partition`` with passes 1 and 2 on threads or in ``options.jobs`` worker
processes where that pays (``parallel.choose_runner``). A bound function, not a wrapper: no frame of its own."""
