"""Whether a path a command is given is a URL (``scheme://…``), and the refusal of one by a command that writes.

Why apart from :mod:`kcompact.segment.remote`: every command asks this of its paths, a clean too, while only a
URL needs the remote reading machinery; this module costs a clean's start nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from kcompact.errors import RefusedError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str | os.PathLike[str]) -> bool:
    """``path`` is a URL (``scheme://…``), not a local path."""
    return isinstance(path, str) and _URL.match(path) is not None


def refuse_urls(paths: Iterable[str], command: str) -> None:
    """Refuse a URL given to a command that writes partitions (renames, fsync and locks need POSIX).

    Raises:
        RefusedError: a path is a URL.
    """
    for path in paths:
        if is_url(path):
            raise RefusedError(f"{path}: {command} rewrites partitions in place (rename, fsync, fcntl locks); "
                               "expected a local POSIX path, found a URL (the read-only commands read "
                               "URLs: export, inspect dirty-ratio, keys, dump, transactions, spark export, "
                               "spark inspect dirty-ratio)")
