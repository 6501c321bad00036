"""How ``spark clean`` groups partitions into Spark tasks (driver side, no Spark needed).

A Spark task costs a fixed amount beyond its work: measured here on local mode, 17–25 ms between the
end of one Python task and the start of the next on the same core (scheduling, the task's
serialization, the Python worker's per-task protocol), ~0.3 s over 16 partitions of 30 MB — a seventh
of the job. A log dir of thousands of small partitions would spend more time between tasks than in
them. So, as Spark's own file sources pack small files into one input partition
(``spark.sql.files.maxPartitionBytes`` / ``openCostInBytes``), ``spark clean`` packs partitions into
tasks by bytes; inside a task each partition is still cleaned by its own ``clean_partition`` call,
with its own row and its own failure.

The rule, for partitions of ``size`` bytes of segments each:

* a partition costs ``size + OPEN_COST_BYTES`` (its fixed work: opening, planning, the swap and its
  fsyncs, the checkpoint lock — about what cleaning 4 MiB costs);
* the target cost of one task is ``task_bytes`` when the caller gives it, else
  ``TASKS_PER_CORE`` tasks per core of the cluster (Spark's ``defaultParallelism``), and never above
  ``MAX_AUTO_TASK_BYTES`` (so a big run keeps a moving progress bar and a retried task redoes little);
* the number of tasks is the total cost over that target, rounded up, but at least one a core and
  never more than the partitions (a ``task_bytes`` above the whole run still uses every core), and
  partitions are dealt largest first to the task with the least cost so far
  (longest-processing-time first), which balances the tasks of a core to within one partition;
* tasks are handed to Spark largest first (Spark starts them in that order as cores free up), and
  inside a task partitions keep the run's cleaning order.

``task_bytes=1`` gives every partition its own task. A partition bigger than the target is a task of
its own, bigger than the target.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Sequence
from pathlib import Path

OPEN_COST_BYTES = 4 * 1024 * 1024
TASKS_PER_CORE = 2  # as inspect's SLICES_PER_CORE: a slow task does not hold a whole core's share
MAX_AUTO_TASK_BYTES = 256 * 1024 * 1024
LOG_SUFFIX = ".log"


def pack_partitions(sizes_in_bytes: Sequence[int], cores: int, task_bytes: int | None = None) -> list[list[int]]:
    """Group partitions into Spark tasks of about equal cost.

    Args:
        sizes_in_bytes: each partition's segment bytes, in cleaning order.
        cores: the cores the tasks run on (``SparkContext.defaultParallelism``).
        task_bytes: the target cost of one task (segment bytes + ``OPEN_COST_BYTES`` a partition);
            None = automatic (see the module docstring).

    Returns:
        The tasks, largest first; each a list of indexes into ``sizes_in_bytes``, ascending.
    """
    if not sizes_in_bytes:
        return []
    costs = [max(0, size) + OPEN_COST_BYTES for size in sizes_in_bytes]
    total = sum(costs)
    target = task_bytes if task_bytes is not None else _auto_target(total, cores)
    count = min(len(costs), max(1, cores, -(-total // max(1, target))))
    heap = [(0, task) for task in range(count)]  # (cost so far, task): ties go to the lower task
    members: list[list[int]] = [[] for _ in range(count)]
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        cost, task = heapq.heappop(heap)
        members[task].append(index)
        heapq.heappush(heap, (cost + costs[index], task))
    loads = {task: cost for cost, task in heap}
    order = sorted(range(count), key=lambda task: (-loads[task], task))
    return [sorted(members[task]) for task in order]


def _auto_target(total_cost: int, cores: int) -> int:
    """``TASKS_PER_CORE`` tasks a core, each at least one partition's fixed cost, at most the cap."""
    per_task = -(-total_cost // (max(1, cores) * TASKS_PER_CORE))
    return min(MAX_AUTO_TASK_BYTES, max(OPEN_COST_BYTES, per_task))


def segment_bytes(partition_dir: str | Path) -> int:
    """The bytes of a partition directory's segment files (``*.log``); 0 if it cannot be listed.

    Args:
        partition_dir: the partition directory.

    Returns:
        The summed sizes (an unreadable directory counts as empty here: its task reports the error).
    """
    total = 0
    try:
        with os.scandir(partition_dir) as entries:
            for entry in entries:
                if entry.name.endswith(LOG_SUFFIX) and entry.is_file():
                    total += entry.stat().st_size
    except OSError:
        return 0
    return total
