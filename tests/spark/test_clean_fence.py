"""``spark clean --replica-dirs``: the fence and the clean limit in its rows as in the serial clean's, and as
struct columns of its DataFrame and of the Parquet ``--output`` writes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.cleaner.round.options import CleanOptions
from kcompact.spark.clean_job import spark_clean
from tests.log.rules.test_fence_lineage import NOW, new_leader, old_leader
from tests.spark.logdirs import COMPACT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_the_fence_and_the_limit_are_struct_columns(spark: SparkSession, tmp_path: Path) -> None:
    new, old = new_leader(tmp_path / "b1"), old_leader(tmp_path / "b2")

    run = spark_clean(spark, [new], cli_overrides=COMPACT,
                      options=CleanOptions(now_ms=NOW, dry_run=True, replica_dirs=(str(old),)))

    (row,) = run.as_dicts()
    assert row["fence"] == {"offset": 4, "set_by": str(old), "why": "lineage",
                            "copies": [{"path": str(old), "log_end": 9, "lineage_parts_at": 4, "fence": 4}]}
    assert row["clean_limit"] == {"offset": 4, "copy": str(old), "why": "lineage"}
    (frame_row,) = run.frame.select("fence", "clean_limit").collect()
    assert frame_row["fence"].asDict(recursive=True) == row["fence"]
    assert frame_row["clean_limit"].asDict() == row["clean_limit"]
    assert run.write_rows(str(tmp_path / "rows.parquet")) is None  # --output
    (written,) = spark.read.parquet(str(tmp_path / "rows.parquet")).select("fence", "clean_limit").collect()
    assert written["fence"].asDict(recursive=True) == row["fence"]
