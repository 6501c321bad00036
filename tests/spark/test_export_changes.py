"""``spark export`` of a segment that changes between its checking job and its reading job (a file on local disk,
an object behind ``s3://``): the read's tasks find it is not the file listed, and the export is the error naming
it, nothing left at ``--output``. Changed before the check, its partition is left out and the others exported.
Without the size and identity taken at the listing, the cut segment's 110 of 143 rows were written, exit 0.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kcompact.errors import KcompactError
from kcompact.spark import export
from kcompact.spark.export import spark_export
from tests.counting_s3 import upload_log_dir
from tests.inspect.test_export_changes import BATCHES, PER_BATCH, SEGMENT, build_batched, cut, cut_object

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def after(monkeypatch: pytest.MonkeyPatch, seam: str, change: Callable[[], None]) -> None:
    """``change`` runs on the driver right after ``kcompact.spark.export``'s ``seam`` returns
    (``list_segments``: the listing; ``check_partitions``: the checking job)."""
    real = getattr(export, seam)

    def changing(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        change()
        return found

    monkeypatch.setattr(export, seam, changing)


def test_a_local_segment_cut_after_the_check_fails_the_export_and_leaves_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment = build_batched(tmp_path / "logs")
    after(monkeypatch, "check_partitions", lambda: cut(segment))

    with pytest.raises(KcompactError, match=f"^{segment}: changed while it was read"):
        spark_export(spark, [segment.parent], tmp_path / "out")

    assert not (tmp_path / "out").exists()


def test_a_local_segment_cut_before_the_check_leaves_its_partition_out(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment = build_batched(tmp_path / "logs", "orders")
    build_batched(tmp_path / "logs", "users")
    after(monkeypatch, "list_segments", lambda: cut(segment))

    summary = spark_export(spark, [tmp_path / "logs"], tmp_path / "out")

    assert [f.partition_dir for f in summary.failures] == [str(segment.parent)]
    assert str(summary.failures[0].error).startswith(f"{segment}: changed while it was read")
    assert (summary.partitions, summary.records) == (1, BATCHES * PER_BATCH)


def test_an_object_cut_after_the_check_fails_the_export_and_leaves_nothing(
    spark: SparkSession, s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_batched(tmp_path / "src")
    url, options = upload_log_dir(s3_endpoint, tmp_path / "src")
    obj = f"{url}/orders-0/{SEGMENT}"
    after(monkeypatch, "check_partitions", lambda: cut_object(obj, options))

    with pytest.raises(KcompactError, match=f"^{obj}: changed while it was read"):
        spark_export(spark, [url], tmp_path / "out", storage_options=options)

    assert not (tmp_path / "out").exists()
