"""Stand-ins for the parts of a SparkContext that driver-side rules read, for clusters we do not have."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from pyspark import SparkContext


class FakeConf:
    """A SparkConf's ``get``."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class FakeContext:
    """What cluster_cores and refuse_speculation read of a SparkContext (keys: dots as underscores)."""

    def __init__(self, default_parallelism: int, **conf: str) -> None:
        self.defaultParallelism = default_parallelism
        self.conf = FakeConf({key.replace("_", "."): value for key, value in conf.items()})

    def getConf(self) -> FakeConf:  # SparkContext's name
        return self.conf



def fake_context(default_parallelism: int, **conf: str) -> SparkContext:
    """A :class:`FakeContext` where a SparkContext is expected: it has only what those rules read."""
    return cast("SparkContext", FakeContext(default_parallelism, **conf))


class FakeSession:
    """A SparkSession whose context is a :class:`FakeContext`: for refusals that come before any job."""

    def __init__(self, context: FakeContext) -> None:
        self.sparkContext = context
