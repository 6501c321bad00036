"""What Spark's scheduler sees of an RDD kcompact makes: each partition's preferred hosts (``spark.locality``'s
located RDDs), read from the JVM RDD behind PySpark's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import RDD


def preferred_hosts(rdd: RDD[Any]) -> list[list[str]]:
    """Each Spark partition's preferred hosts, as the scheduler sees them.

    Args:
        rdd: a PySpark RDD.

    Returns:
        One list of host names per partition.
    """
    jrdd: Any = rdd._jrdd.rdd()  # the JVM RDD behind PySpark's
    return [list(_iterate(jrdd.preferredLocations(p))) for p in jrdd.partitions()]


def _iterate(scala_seq: Any) -> list[str]:
    iterator = scala_seq.iterator()
    found = []
    while iterator.hasNext():
        found.append(str(iterator.next()))
    return found
