"""kcompact: offline compactor, inspector and repair tool for Apache Kafka partition logs.

Layers, lowest first (see ../shared/STYLE.md and the import-linter contract in pyproject.toml):
``records`` (bytes <-> values), ``segment`` (one partition directory on disk), ``config`` (topic
configuration), ``cleaner`` (Kafka's log cleaner), ``inspect`` / ``repair`` (reports and fixes),
``spark`` (distribution only) and ``cli`` (click + rich only).
"""

__version__ = "0.1.0"
