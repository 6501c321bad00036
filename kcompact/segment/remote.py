"""Log dirs behind an fsspec URL (``s3://``, ``gs://``, ``hdfs://``, ``file://``, …), for reading only.

Backups and archived copies of log dirs live in object stores and HDFS. The read-only Spark commands
(``spark export``, ``spark inspect dirty-ratio``) list them here on the driver (partition directories
and their segments, by name and size) and each executor mirrors the partitions of its task, one task
at a time, into a local temporary directory (with the log dir's checkpoint files beside them), reads
them there with the same code as a local partition, and deletes the copy: nothing is written to the
store, and no whole log dir travels to the driver.

The storage is configured as fsspec and s3fs users already do: environment variables
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, …) or storage options (``--storage-option
endpoint_url=http://127.0.0.1:9000``), passed to ``fsspec.core.url_to_fs`` as keyword arguments. A
protocol's own package (``s3fs`` for ``s3://``, ``gcsfs``, …) is needed where it is used; fsspec
itself is imported only when a URL is given.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kcompact.errors import ConfigError, KcompactError, RefusedError, UnsupportedFormatError
from kcompact.segment.names import parse_partition_dir_name, parse_segment_file_name
from kcompact.segment.partition import (
    LOG_DIR_FILES,
    METADATA_TOPIC,
    is_log_dir_listing,
    is_set_aside,
)

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

StorageOptions = Mapping[str, Any]


def is_url(path: str | Path) -> bool:
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
                               "expected a local POSIX path, found a URL (only spark export and spark "
                               "inspect dirty-ratio read URLs)")


def parse_storage_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``key=value`` pairs as fsspec storage options (``true``/``false`` become booleans).

    Raises:
        ConfigError: a pair has no ``=``.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--storage-option: expected key=value, found {pair!r}")
        options[key] = {"true": True, "false": False}.get(value.lower(), value)
    return options


def remote_partition_dirs(url: str, storage_options: StorageOptions) -> list[str]:
    """The partition directories ``url`` names: itself, or a log dir's live partitions (sorted).

    Raises:
        KcompactError: the URL cannot be listed, or holds no partition directory.
    """
    base = url.rstrip("/")
    name = base.rsplit("/", 1)[-1]
    children = _names(base, storage_options, directories=True)
    if parse_partition_dir_name(name) is not None and not is_log_dir_listing(
            _names(base, storage_options, directories=False), children):  # the rule of segment.partition
        return [base]
    found = []
    for child in sorted(children):
        parsed = parse_partition_dir_name(child)
        if parsed is not None and not is_set_aside(parsed) and parsed.topic != METADATA_TOPIC:
            found.append(f"{base}/{child}")
    if not found:
        raise KcompactError(f"{url}: not a log dir or partition directory (no partition directory found there)")
    return found


def remote_segments(part_url: str, storage_options: StorageOptions) -> list[tuple[int, int]]:
    """``(base offset, size in bytes)`` of each ``.log`` segment of a partition directory, in offset order."""
    sizes = _names(part_url, storage_options, directories=False)
    found = []
    for name, size in sizes.items():
        parsed = parse_segment_file_name(name)
        if parsed is not None and parsed.kind == "log" and parsed.temp_suffix is None:
            found.append((parsed.base_offset, size))
    return sorted(found)


@contextmanager
def mirrored(part_urls: Sequence[str], storage_options: StorageOptions) -> Iterator[dict[str, Path]]:
    """Local read-only copies of partition directories behind URLs, deleted on exit.

    Each partition keeps its name, under a copy of its log dir's checkpoint files, so the code that
    reads a local partition (log start offset, cleaner checkpoint) reads the copy the same way.

    Yields:
        URL -> local partition directory.

    Raises:
        KcompactError: a file cannot be read.
    """
    root = Path(tempfile.mkdtemp(prefix="kcompact-mirror-"))
    try:
        log_dirs: dict[str, Path] = {}
        local: dict[str, Path] = {}
        for url in part_urls:
            parent, name = url.rstrip("/").rsplit("/", 1)
            if parent not in log_dirs:
                log_dirs[parent] = root / str(len(log_dirs))
                _copy_log_dir_files(parent, log_dirs[parent], storage_options)
            local[url] = log_dirs[parent] / name
            _get(url, local[url], storage_options, recursive=True)
        yield local
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _copy_log_dir_files(url: str, into: Path, storage_options: StorageOptions) -> None:
    into.mkdir(parents=True)
    present = _names(url, storage_options, directories=False)
    for name in LOG_DIR_FILES:
        if name in present:
            _get(f"{url}/{name}", into / name, storage_options, recursive=False)


def _filesystem(url: str, storage_options: StorageOptions) -> tuple[Any, str]:
    try:
        import fsspec  # type: ignore[import-untyped]
    except ImportError as err:
        raise UnsupportedFormatError(f"{url}: reading URLs needs fsspec; expected it installed (pip install "
                                     f"'kcompact[remote]'), found ImportError: {err}") from err
    try:
        fs, path = fsspec.core.url_to_fs(url, **dict(storage_options))
    except ImportError as err:
        raise UnsupportedFormatError(f"{url}: no fsspec file system for this protocol; expected its package "
                                     f"installed (s3fs for s3://: pip install 'kcompact[remote]'), found "
                                     f"{err}") from err
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{url}: the storage options; fsspec refused them: {err}") from err
    return fs, path


def _names(url: str, storage_options: StorageOptions, *, directories: bool) -> dict[str, int]:
    """Entry names directly under ``url`` (directories, or files with their sizes)."""
    fs, path = _filesystem(url, storage_options)
    try:
        entries = fs.ls(path, detail=True)
    except Exception as err:  # each file system raises its own: FileNotFoundError, botocore's, …
        raise KcompactError(f"{url}: cannot list it: {type(err).__name__}: {err}".splitlines()[0]) from err
    wanted = "directory" if directories else "file"
    return {str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
            for entry in entries if entry.get("type") == wanted}


def _get(url: str, local: Path, storage_options: StorageOptions, *, recursive: bool) -> None:
    fs, path = _filesystem(url, storage_options)
    try:
        if recursive:
            local.mkdir(parents=True)
            fs.get(path.rstrip("/") + "/", str(local) + "/", recursive=True)
        else:
            fs.get_file(path, str(local))
    except Exception as err:
        raise KcompactError(f"{url}: cannot read it: {type(err).__name__}: {err}".splitlines()[0]) from err
