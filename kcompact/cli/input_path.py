"""The PATH arguments: a local directory that exists, or a URL (``s3://…``) where the command reads URLs.

A command that rewrites partitions (``clean``, ``repair``, ``spark clean``) refuses a URL with one line
(:func:`kcompact.segment.url.refuse_urls`, exit 2) instead of click's "does not exist" usage text; the
read-only commands take it as given, with ``--storage-option`` (:data:`storage_option`), and read it
through :func:`kcompact.segment.remote.local_inputs` (serial) or on Spark's executors. A local path that
does not exist stays click's usage error, unless the command takes ``host:/path`` (``spark clean``, ``spark
inspect dirty-ratio``, ``spark export``: a broker host's own disk, see :mod:`kcompact.spark.locality`), which is
passed on when no such local path exists, or refuses it with one line saying why (``host_paths_refused``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # generic since click 8.4 (what mypy checks against); not subscriptable in 8.1-8.3
    _ParamType = click.ParamType[str]
else:
    _ParamType = click.ParamType


class InputPath(_ParamType):
    """A directory that exists, or a URL: passed on (``refuse_as`` None) or refused by that command's name."""

    name = "path"

    def __init__(self, refuse_as: str | None = None, *, file_okay: bool = False, host_paths: bool = False,
                 host_paths_refused: str | None = None, urls: bool = True) -> None:
        self.refuse_as = refuse_as
        self.urls = urls  # False: a URL is a local path like any other (click's "does not exist")
        self.host_paths = host_paths
        self.host_paths_refused = host_paths_refused  # why this command refuses a ``host:/path`` (None: no line)
        self._local = click.Path(exists=True, file_okay=file_okay, path_type=str)

    def convert(self, value: str, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from kcompact.segment.url import is_url, refuse_urls  # kept off the --help path

        if self.urls and is_url(value):
            if self.refuse_as is not None:
                refuse_urls([value], self.refuse_as)
            return value
        if self.host_paths or self.host_paths_refused is not None:
            from kcompact.spark.locality import is_host_path

            if is_host_path(value) and self.host_paths_refused is not None:
                from kcompact.errors import RefusedError

                raise RefusedError(f"{value}: {self.host_paths_refused}")
            if is_host_path(value):
                return value
        return str(self._local.convert(value, param, ctx))


storage_option = click.option(
    "--storage-option", "storage_pairs", multiple=True, metavar="KEY=VALUE",
    help="An fsspec storage option for URL inputs (s3://, gs://, hdfs://…), e.g. "
         "endpoint_url=http://127.0.0.1:9000; or the usual environment (AWS_ENDPOINT_URL…). Repeatable.")
"""``--storage-option`` of every command that reads URLs (``storage_pairs``: parse them with
``kcompact.segment.remote.parse_storage_options``)."""
