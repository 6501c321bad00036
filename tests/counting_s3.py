"""An S3-protocol server on 127.0.0.1 that counts the bytes it serves: moto's S3 in this process, behind a
WSGI layer that records every object read (its key, the ``Range`` asked for, the body bytes sent).

A test reads what a command or a Spark task fetched from object storage: :meth:`CountingS3.reads` after
:meth:`CountingS3.clear`. Spark's Python workers (``local[…]``) reach the same server, so their reads are
counted too. Listings are not counted as object bytes (:attr:`Read.key` is ``None`` for them).
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


def upload_log_dir(endpoint: str, local: Path) -> tuple[str, dict[str, Any]]:
    """Every file of ``local`` put into a new bucket of the S3 server at ``endpoint``, under ``logs/``: the
    log dir's URL and the storage options that read it."""
    import uuid

    import s3fs

    options: dict[str, Any] = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**options)
    bucket = f"kcompact-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        fs.put_file(str(path), f"{bucket}/logs/{path.relative_to(local)}")
    return f"s3://{bucket}/logs", options


@dataclass(frozen=True, slots=True)
class Read:
    """One GET the server answered: the object's key (``bucket/path``; None for a listing), the ``Range``
    header asked (None: the whole object) and the body bytes it sent."""

    key: str | None
    range: str | None
    size: int


class CountingS3:
    """moto's S3 server on 127.0.0.1 (a free port) counting object bytes served; :meth:`stop` ends it."""

    def __init__(self) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app  # type: ignore[attr-defined]
        from werkzeug.serving import WSGIRequestHandler, make_server

        class Quiet(WSGIRequestHandler):
            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                pass

        self._lock = threading.Lock()
        self._reads: list[Read] = []
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(HOST, 0, self._counting(app), threaded=True, request_handler=Quiet)
        self.endpoint = f"http://{HOST}:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _counting(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterator[bytes]]:
        def counted(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterator[bytes]:
            body = b"".join(app(environ, start_response))  # counted before the client has it: no race
            if environ.get("REQUEST_METHOD") == "GET":
                path = urllib.parse.unquote(environ.get("PATH_INFO", "")).lstrip("/")
                listing = not path.count("/") or bool(environ.get("QUERY_STRING"))
                with self._lock:
                    self._reads.append(Read(None if listing else path, environ.get("HTTP_RANGE"), len(body)))
            return iter([body])

        return counted

    def clear(self) -> None:
        """Forget the reads counted so far."""
        with self._lock:
            self._reads.clear()

    def reads(self) -> list[Read]:
        """The object reads since the last :meth:`clear`, in the order they ended (listings left out)."""
        with self._lock:
            return [read for read in self._reads if read.key is not None]

    def listings(self) -> list[Read]:
        """The listing requests since the last :meth:`clear` (``key`` None, ``range`` None)."""
        with self._lock:
            return [read for read in self._reads if read.key is None]

    def bytes_by_key(self) -> dict[str, int]:
        """Object bytes served since the last :meth:`clear`, per key."""
        found: dict[str, int] = {}
        for read in self.reads():
            assert read.key is not None
            found[read.key] = found.get(read.key, 0) + read.size
        return found

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._thread.join(timeout=10)
