"""The driver file to hand ``spark-submit``: runs the ``kcompact`` command line inside the submitted job.

::

    spark-submit --master spark://host:7077 "$(python -m kcompact.spark.submit --path)" \\
        spark clean /shared/kafka-logs

``spark-submit`` runs a *file*, and puts that file's directory first on ``sys.path``; this file takes
it off again before importing kcompact (``kcompact/__main__.py`` cannot serve: its directory would put
``kcompact/inspect`` in the place of the standard library's ``inspect``). The session then keeps the
master ``spark-submit`` chose (see ``kcompact.spark.session``).
"""

from __future__ import annotations

import os
import sys


def _drop_own_directory() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        del sys.path[0]


def main() -> None:
    """Run ``kcompact`` with this process's arguments (``--path`` alone: print this file's path)."""
    if sys.argv[1:] == ["--path"]:
        print(os.path.abspath(__file__))
        return
    _drop_own_directory()
    from kcompact.cli.main import main as kcompact_main

    sys.argv[0] = "kcompact"
    kcompact_main()


if __name__ == "__main__":
    main()
