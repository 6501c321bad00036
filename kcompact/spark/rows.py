"""The rows Spark jobs hand back, and their Spark schemas as DDL strings.

A Spark job of kcompact returns plain Python values from its tasks (picklable, no pyspark types),
and the driver turns them into a DataFrame with an explicit schema, so an empty run, a column that is
None everywhere, or a Parquet file written from either agree on the types. The schemas are derived
from the library's own row types (``DirtyRatioRow``, ``report_row.ROW_COLUMNS``) so a field added there reaches
``--output`` without a second list to keep in step.

A ``spark clean`` row is one partition's row of every clean report
(:func:`kcompact.cleaner.logdir.report_row.partition_row`: the keys ``kcompact clean --json`` prints), plus
how and where it ran::

    partition_dir, topic, ..., retention_rolled               kcompact.cleaner.logdir.report_row.ROW_COLUMNS
    distributed_map, executor, task_cpu_s                    how and where it ran, CPU it took
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kcompact.cleaner.logdir.report_row import ROW_COLUMNS, STATUS_BUG, partition_row
from kcompact.cleaner.round.options import CleanResult

__all__ = [  # a row's statuses are kcompact.cleaner.logdir.report_row's (STATUS_*), shared with the serial clean
    "CLEAN_COLUMNS",
    "as_dicts",
    "clean_row",
    "dataclass_columns",
    "ddl",
    "spark_type",
]

# Python annotation (as written, ``from __future__ import annotations``) -> Spark SQL type.
_SPARK_TYPES = {
    "str": "string",
    "int": "bigint",
    "float": "double",
    "bool": "boolean",
    "list[str]": "array<string>",
    "list[int]": "array<bigint>",
    # the replica fence's objects (kcompact.log.rules.fence: ReplicaFence.as_dict, CleanLimit.as_dict)
    "ReplicaFence": "struct<offset:bigint,set_by:string,why:string,copies:array<struct<path:string,"
                    "log_end:bigint,lineage_parts_at:bigint,fence:bigint>>>",
    "CleanLimit": "struct<offset:bigint,copy:string,why:string>",
}
_NARROW = {"partition": "int"}  # Kafka's partition is an int32

_CLEAN_TAIL: tuple[tuple[str, str], ...] = (
    ("distributed_map", "boolean"),
    ("executor", "string"),
    ("task_cpu_s", "double"),  # CPU seconds of the task's process (None on the driver's path)
)


def spark_type(annotation: str) -> str:
    """The Spark SQL type of a row field's annotation (``int | None`` -> ``bigint``).

    Args:
        annotation: the annotation text, as ``dataclasses.fields`` gives it under postponed evaluation.

    Returns:
        The Spark SQL type name.

    Raises:
        TypeError: an annotation with no Spark counterpart here (a new kind of field).
    """
    base = annotation.replace(" ", "").removesuffix("|None")
    found = _SPARK_TYPES.get(base)
    if found is None:
        raise TypeError(f"no Spark type for a row field; expected one of {sorted(_SPARK_TYPES)}, "
                        f"found {annotation!r}")
    return found


def dataclass_columns(cls: type[Any]) -> tuple[tuple[str, str], ...]:
    """(name, Spark type) of every field of a row dataclass, in declaration order."""
    return tuple((f.name, _NARROW.get(f.name) or spark_type(str(f.type)))
                 for f in dataclasses.fields(cls))


def ddl(columns: tuple[tuple[str, str], ...]) -> str:
    """A schema as Spark's DDL string (``a string, b bigint``)."""
    return ", ".join(f"`{name}` {kind}" for name, kind in columns)


CLEAN_COLUMNS: tuple[tuple[str, str], ...] = (
    tuple((name, _NARROW.get(name) or spark_type(annotation)) for name, annotation in ROW_COLUMNS)
    + _CLEAN_TAIL
)
"""A ``spark clean`` row's columns: the clean report's row, then how and where it ran."""


def clean_row(
    partition_dir: str,
    result: CleanResult | None,
    *,
    error: str | None = None,
    bug: bool = False,
    skipped: str | None = None,
    distributed_map: bool = False,
    executor: str | None = None,
    task_cpu_s: float | None = None,
) -> tuple[Any, ...]:
    """One partition's ``spark clean`` row, in :data:`CLEAN_COLUMNS` order.

    Args:
        partition_dir: the partition directory.
        result: what :func:`~kcompact.cleaner.workers.bound_clean.clean_partition` returned; None when it failed.
        error: the failure's one-line message (or a bug's traceback).
        bug: the failure was not a :class:`~kcompact.errors.KcompactError`.
        skipped: why a log dir's partition was left alone (``result`` is then None).
        distributed_map: the partition was cleaned with the distributed offset map on the driver.
        executor: the host that ran the task.
        task_cpu_s: CPU seconds (user + system) the task's process spent on it.

    Returns:
        The row's values.
    """
    values = partition_row(partition_dir, result, error=error, status=STATUS_BUG if bug else None,
                           skipped=skipped)
    values.update(distributed_map=distributed_map, executor=executor, task_cpu_s=task_cpu_s)
    return tuple(values[name] for name, _ in CLEAN_COLUMNS)


def as_dicts(columns: tuple[tuple[str, str], ...], rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows as ``{column: value}`` (the ``--json`` form)."""
    names = [name for name, _ in columns]
    return [dict(zip(names, row, strict=True)) for row in rows]
