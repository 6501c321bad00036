"""The rows Spark jobs hand back, and their Spark schemas as DDL strings.

A Spark job of kcompact returns plain Python values from its tasks (picklable, no pyspark types),
and the driver turns them into a DataFrame with an explicit schema, so an empty run, a column that is
None everywhere, or a Parquet file written from either agree on the types. The schemas are derived
from the library's own row types (``DirtyRatioRow``, ``CleanStats``) so a field added there reaches
``--output`` without a second list to keep in step.

A ``spark clean`` row is one partition::

    partition_dir, topic, partition, status, error,          what happened ("cleaned", "failed", ...)
    now_ms, dry_run, first_dirty_offset, ... checkpoint_*     the CleanResult's range and checkpoint
    bytes_read, ..., elapsed_s, size_reduction                CleanStats, flattened
    retention_deleted_segments, retention_bytes_deleted      segment retention, when it ran
    distributed_map, executor, task_cpu_s                    how and where it ran, CPU it took
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kcompact.cleaner.cleaner import CleanResult
from kcompact.cleaner.stats import CleanStats
from kcompact.segment.names import parse_partition_dir_name

# Python annotation (as written, ``from __future__ import annotations``) -> Spark SQL type.
_SPARK_TYPES = {
    "str": "string",
    "int": "bigint",
    "float": "double",
    "bool": "boolean",
    "list[str]": "array<string>",
}
_NARROW = {"partition": "int"}  # Kafka's partition is an int32

STATUS_CLEANED = "cleaned"
STATUS_WOULD_CLEAN = "would clean"  # a dry run
STATUS_NOTHING = "nothing to clean"
STATUS_FAILED = "failed"  # a KcompactError: bad data or a refusal; the partition is untouched
STATUS_SKIPPED = "skipped"  # a log dir's partition not known to be compacted (skipped_reason says why)
STATUS_BUG = "bug"  # any other exception: a bug in kcompact (its traceback is the error)

_CLEAN_HEAD: tuple[tuple[str, str], ...] = (
    ("partition_dir", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("status", "string"),
    ("error", "string"),
    ("now_ms", "bigint"),
    ("dry_run", "boolean"),
    ("first_dirty_offset", "bigint"),
    ("first_uncleanable_offset", "bigint"),
    ("end_offset", "bigint"),
    ("checkpoint_before", "bigint"),
    ("checkpoint_written", "boolean"),
    ("dirty_ratio", "double"),
    ("blocking_rule", "string"),
    ("skipped_reason", "string"),
    ("recovery_actions", "array<string>"),
    ("warnings", "array<string>"),
)
_CLEAN_TAIL: tuple[tuple[str, str], ...] = (
    ("size_reduction", "double"),
    ("retention_deleted_segments", "int"),
    ("retention_bytes_deleted", "bigint"),
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
    _CLEAN_HEAD + dataclass_columns(CleanStats) + _CLEAN_TAIL
)


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
        result: what :func:`~kcompact.cleaner.cleaner.clean_partition` returned; None when it failed.
        error: the failure's one-line message (or a bug's traceback).
        bug: the failure was not a :class:`~kcompact.errors.KcompactError`.
        skipped: why a log dir's partition was left alone (``result`` is then None).
        distributed_map: the partition was cleaned with the distributed offset map on the driver.
        executor: the host that ran the task.
        task_cpu_s: CPU seconds (user + system) the task's process spent on it.

    Returns:
        The row's values.
    """
    values: dict[str, Any] = {name: None for name, _ in CLEAN_COLUMNS}
    values.update(partition_dir=partition_dir, error=error, distributed_map=distributed_map,
                  executor=executor, task_cpu_s=task_cpu_s, recovery_actions=[], warnings=[])
    if skipped is not None:
        name = parse_partition_dir_name(Path(partition_dir).name)
        values.update(status=STATUS_SKIPPED, skipped_reason=skipped, topic=name and name.topic,
                      partition=name and name.partition)
    elif result is None:
        values["status"] = STATUS_BUG if bug else STATUS_FAILED
    else:
        values.update(_result_values(result))
    return tuple(values[name] for name, _ in CLEAN_COLUMNS)


def _result_values(result: CleanResult) -> dict[str, Any]:
    rng = result.range
    if result.skipped_reason is not None:
        status = STATUS_NOTHING
    else:
        status = STATUS_WOULD_CLEAN if result.dry_run else STATUS_CLEANED
    values: dict[str, Any] = {
        "topic": result.topic, "partition": result.partition, "status": status,
        "now_ms": result.now_ms, "dry_run": result.dry_run,
        "first_dirty_offset": None if rng is None else rng.first_dirty_offset,
        "first_uncleanable_offset": None if rng is None else rng.first_uncleanable_offset,
        "end_offset": result.end_offset, "checkpoint_before": result.checkpoint_before,
        "checkpoint_written": result.checkpoint_written,
        "dirty_ratio": None if rng is None else rng.dirty_ratio,
        "blocking_rule": None if rng is None else (rng.blocking_rule or None),
        "skipped_reason": result.skipped_reason,
        "recovery_actions": list(result.recovery_actions), "warnings": list(result.warnings),
        "size_reduction": round(result.stats.size_reduction, 6),
    }
    values.update(dataclasses.asdict(result.stats))
    if result.retention is not None:
        values["retention_deleted_segments"] = len(result.retention.deleted_segments)
        values["retention_bytes_deleted"] = result.retention.bytes_deleted
    return values


def as_dicts(columns: tuple[tuple[str, str], ...], rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows as ``{column: value}`` (the ``--json`` form)."""
    names = [name for name, _ in columns]
    return [dict(zip(names, row, strict=True)) for row in rows]
