"""What ``inspect export``'s Spark data source and its driver agree on: the format's name, its schema, and
how a task's error travels in a row (JSON text the driver turns back into the error it was)."""

from __future__ import annotations

import json

from kcompact import errors
from kcompact.errors import CorruptDataError, KcompactError
from kcompact.inspect.export import EXPORT_COLUMNS
from kcompact.spark.rows import ddl

FORMAT_NAME = "kcompact"
EXPORT_SCHEMA = ddl(EXPORT_COLUMNS)
ERROR_COLUMN = "_kcompact_error"  # the data source's ``error_rows``: a split's error, as :func:`error_payload`


def error_payload(err: KcompactError) -> str:
    """A task's error as text a row can carry (JSON: its class, message and location)."""
    message = err.message if isinstance(err, CorruptDataError) else None
    return json.dumps({"kind": type(err).__name__, "text": str(err), "message": message, "path": err.path,
                       "position": err.position, "offset": err.offset})


def error_from_payload(payload: str) -> KcompactError:
    """The error :func:`error_payload` wrote, rebuilt on the driver (its class when it names where).

    Args:
        payload: the row's error text.

    Returns:
        A :class:`~kcompact.errors.CorruptDataError` subclass with its path and position, else a
        :class:`~kcompact.errors.KcompactError` with the message.
    """
    found = json.loads(payload)
    kind = getattr(errors, str(found.get("kind")), None)
    if isinstance(kind, type) and issubclass(kind, CorruptDataError) and found.get("message") is not None:
        return kind(found["message"], path=found["path"], position=found["position"], offset=found["offset"])
    return KcompactError(found["text"])
