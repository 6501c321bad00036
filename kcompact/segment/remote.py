"""Log dirs behind an fsspec URL (``s3://``, ``gs://``, ``hdfs://``, ``file://``, …), for reading only.

Backups and archived copies of log dirs live in object stores and HDFS. A URL is listed once per log dir
(:func:`list_remote`: one recursive ``find``, several log dirs at once in threads), and the partition
directories and their segments are read from that listing (:func:`remote_partition_dirs`,
:func:`remote_segments`). Nothing is ever written to the store, and no whole log dir travels to the driver.

Two ways to read, by what the reader needs:

* **By byte range** (:class:`RemoteFile`): a segment whose every byte is read anyway (an export's CRC check
  and its records) is read where it lies, in one ranged request (``cat_file`` with ``start``/``end``), and
  handed to the format layer as a :class:`~kcompact.segment.source.ByteSource`: ``LogFile`` reads it as it
  reads a local file and names it by a stand-in path (:func:`stand_in`), which :func:`named_as_url` turns back
  into the URL. ``export`` and both ``spark export`` jobs read so: each task its split's segments, nothing else.
* **Mirrored** (:func:`mirrored`, :func:`local_inputs`): a report that needs a partition's every file — its
  whole log's batch headers, its indexes' tails, producer snapshots, the log dir's checkpoints — gets a local
  copy of them, read by the same code as a local path, whose results and errors then name the URL instead of
  the copy (:meth:`LocalInputs.named`): ``inspect dirty-ratio``, ``keys``, ``dump``, ``transactions``, their
  Spark forms, and a read_committed export's view of a partition (``inspect.export.CommittedView``). Those
  files are copied whole, not read header by header: headers read by range cost one request per batch — on a
  loopback S3 server, 120 s for the 12 105 headers of an 874 KB metadata segment that one GET brings in 0.07 s.

The storage is configured as fsspec and s3fs users already do: environment variables
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, …) or storage options (``--storage-option
endpoint_url=http://127.0.0.1:9000``), passed to ``fsspec.core.url_to_fs`` as keyword arguments. A
protocol's own package (``s3fs`` for ``s3://``, ``gcsfs``, …) is needed where it is used; fsspec
itself is imported only when a URL is given.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

from kcompact.errors import ConfigError, KcompactError, UnsupportedFormatError
from kcompact.segment.names import parse_partition_dir_name, parse_segment_file_name
from kcompact.segment.partition import (
    LOG_DIR_FILES,
    METADATA_TOPIC,
    is_log_dir_listing,
    is_set_aside,
)
from kcompact.segment.url import is_url
from kcompact.value import frozen

StorageOptions = Mapping[str, Any]
T = TypeVar("T")


HDFS_HINT = ("; expected pyarrow's HadoopFileSystem to load: libhdfs.so (Hadoop's native client, from a Hadoop "
             "distribution: ARROW_LIBHDFS_DIR), JAVA_HOME and Hadoop's jars on CLASSPATH; or read the same files "
             "over WebHDFS: webhdfs://NAMENODE:HTTP_PORT/…")

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


@frozen
class RemoteListing:
    """Every file under a URL, by its path relative to the URL, with its size: one recursive listing
    (``find``), from which the partition directories and their segments are read without listing again.

    Attributes:
        url: the URL listed (no trailing slash).
        sizes: relative path (``orders-0/00000000000000000000.log``) -> size in bytes.
        identities: relative path -> the object's version as listed (:func:`remote_identity`).
    """

    url: str
    sizes: Mapping[str, int]
    identities: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def files(self, under: str = "") -> dict[str, int]:
        """The files directly under ``under`` (a relative directory; "" the URL itself), name -> size."""
        prefix = f"{under}/" if under else ""
        return {rel[len(prefix):]: size for rel, size in self.sizes.items()
                if rel.startswith(prefix) and "/" not in rel[len(prefix):]}

    def directories(self, under: str = "") -> set[str]:
        """The names of the directories directly under ``under`` (those holding a file somewhere below)."""
        prefix = f"{under}/" if under else ""
        return {rel[len(prefix):].split("/", 1)[0] for rel in self.sizes
                if rel.startswith(prefix) and "/" in rel[len(prefix):]}


LIST_THREADS = 16  # log dirs listed at once (each listing is requests that wait on the store)


def list_remote(urls: Iterable[str], storage_options: StorageOptions) -> dict[str, RemoteListing]:
    """One recursive listing of each URL, several at a time (a thread per listing in flight).

    Raises:
        KcompactError: a URL cannot be listed, or nothing is there (one line naming it).
    """
    wanted = list(dict.fromkeys(url.rstrip("/") for url in urls))
    return dict(zip(wanted, map_threads(lambda url: _list_tree(url, storage_options), wanted), strict=True))


def map_threads(function: Callable[[str], T], urls: Sequence[str]) -> list[T]:
    """``function`` over ``urls`` in order, up to :data:`LIST_THREADS` at once (requests that wait on a
    store); the first error raised is raised."""
    if len(urls) <= 1:
        return [function(url) for url in urls]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(LIST_THREADS, len(urls))) as pool:
        return list(pool.map(function, urls))


def _list_tree(url: str, storage_options: StorageOptions) -> RemoteListing:
    fs, path = _filesystem(url, storage_options)
    root = path.rstrip("/") + "/"
    try:
        found = fs.find(path.rstrip("/"), detail=True)
        if not found and not fs.isdir(path):
            raise FileNotFoundError("no file there")
    except Exception as err:  # each file system raises its own: FileNotFoundError, botocore's, …
        raise KcompactError(f"{url}: cannot list it: {type(err).__name__}: {err}".splitlines()[0]) from err
    files = {str(name)[len(root):]: entry for name, entry in found.items()
             if entry.get("type") == "file" and str(name).startswith(root)}
    return RemoteListing(url, {rel: int(entry.get("size") or 0) for rel, entry in files.items()},
                         {rel: remote_identity(entry) for rel, entry in files.items()})


_VERSION_KEYS = ("ETag", "etag", "md5Hash", "generation", "VersionId", "version_id")


def remote_identity(entry: Mapping[str, Any]) -> str:
    """An object's version as its store lists or describes it (fsspec's ``find``/``info`` entries): its ETag
    (S3, Azure; GCS's ``etag`` or ``md5Hash``, ``generation``), else its modification time; "" when the store
    says neither. Not the modification time when there is an ETag: S3 lists it to the millisecond, and
    ``HeadObject``'s ``Last-Modified`` has whole seconds."""
    for key in _VERSION_KEYS:
        value = entry.get(key)
        if value not in (None, ""):
            return f"{key}={str(value).strip(chr(34))}"
    modified = _modified_s(entry)
    return "" if modified is None else f"mtime={modified!r}"


def remote_stamp(url: str, storage_options: StorageOptions) -> tuple[int, str]:
    """``(size in bytes, identity)`` of an object now: one ``info`` request, past the file system's
    cached listing (``invalidate_cache``: s3fs answers ``info`` from the listing it made).

    Raises:
        KcompactError: the object cannot be described (one line naming it).
    """
    fs, path = _filesystem(url, storage_options)
    try:
        fs.invalidate_cache(path)
        entry = fs.info(path)
    except Exception as err:  # each file system raises its own
        raise KcompactError(f"{url}: cannot read it: {type(err).__name__}: {err}".splitlines()[0]) from err
    return int(entry.get("size") or 0), remote_identity(entry)


def remote_partition_dirs(url: str, storage_options: StorageOptions,
                          listing: RemoteListing | None = None) -> list[str]:
    """The partition directories ``url`` names: itself, or a log dir's live partitions (sorted).

    Args:
        url: a log dir or partition directory URL.
        storage_options: fsspec options.
        listing: ``url``'s :func:`list_remote` listing, when the caller has it (else listed here).

    Raises:
        KcompactError: the URL cannot be listed, or holds no partition directory.
    """
    base = url.rstrip("/")
    name = base.rsplit("/", 1)[-1]
    if listing is None:
        children = _names(base, storage_options, directories=True)
        files: Iterable[str] = ()
        if parse_partition_dir_name(name) is not None:
            files = _names(base, storage_options, directories=False)
    else:
        children = dict.fromkeys(listing.directories(), 0)
        files = listing.files()
    if parse_partition_dir_name(name) is not None and not is_log_dir_listing(files, children):
        return [base]  # the rule of segment.partition
    found = []
    for child in sorted(children):
        parsed = parse_partition_dir_name(child)
        if parsed is not None and not is_set_aside(parsed) and parsed.topic != METADATA_TOPIC:
            found.append(f"{base}/{child}")
    if not found:
        raise KcompactError(f"{url}: not a log dir or partition directory (no partition directory found there)")
    return found


def partition_dir_names(url: str, storage_options: StorageOptions) -> list[str]:
    """The names of every partition directory ``url`` names (itself, or each of a log dir's, of any kind),
    as a filter counts them (``segment.partition_filter.count_matches``).

    Raises:
        KcompactError: the URL cannot be listed.
    """
    name = url.rstrip("/").rsplit("/", 1)[-1]
    if parse_partition_dir_name(name) is not None:
        return [name]
    return sorted(child for child in _names(url.rstrip("/"), storage_options, directories=True)
                  if parse_partition_dir_name(child) is not None)


def remote_segments(part_url: str, storage_options: StorageOptions,
                    listing: RemoteListing | None = None) -> list[tuple[int, int, str]]:
    """``(base offset, size in bytes, identity)`` of each ``.log`` segment of a partition directory, in offset
    order (the identity :func:`remote_identity`'s, "" when not ``listing``).

    Args:
        part_url: the partition directory.
        storage_options: fsspec options.
        listing: a :func:`list_remote` listing of it or of its log dir (else it is listed here).
    """
    under = ""
    if listing is None:
        sizes = _names(part_url, storage_options, directories=False)
    else:
        under = part_url.rstrip("/")[len(listing.url):].strip("/")
        sizes = listing.files(under)
    found = []
    for name, size in sizes.items():
        parsed = parse_segment_file_name(name)
        if parsed is not None and parsed.kind == "log" and parsed.temp_suffix is None:
            identity = "" if listing is None else listing.identities.get(f"{under}/{name}" if under else name, "")
            found.append((parsed.base_offset, size, identity))
    return sorted(found)


def stand_in(url: str) -> Path:
    """The local-looking path a :class:`RemoteFile` goes by inside the format layer (``/bucket/key``):
    what :func:`named_as_url` turns back into the URL."""
    return Path("/", url.split("://", 1)[-1])


def named_as_url(err: KcompactError, url: str) -> KcompactError:
    """``err`` raised while reading objects under ``url`` through :class:`RemoteFile`, naming the URL
    where it names the stand-in path (its message and fields)."""
    return LocalInputs((), ((str(stand_in(url.rstrip("/"))), url.rstrip("/")),)).named_error(err)


@frozen
class RemoteFile:
    """An object read by byte range (a :class:`~kcompact.segment.source.ByteSource`): each :meth:`read` is
    one ranged request (``cat_file`` with ``start``/``end``), nothing is copied to local disk.

    Attributes:
        url: the object.
        size_in_bytes: its size, as listed.
        storage_options: fsspec options.
    """

    url: str
    size_in_bytes: int
    storage_options: tuple[tuple[str, Any], ...] = ()

    @property
    def path(self) -> Path:
        return stand_in(self.url)

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object, in one request.

        Raises:
            KcompactError: the object cannot be read (one line naming it).
        """
        if end <= start:
            return b""
        fs, path = _filesystem(self.url, dict(self.storage_options))
        try:
            return bytes(fs.cat_file(path, start=start, end=end))
        except Exception as err:  # each file system raises its own
            raise KcompactError(f"{self.url}: cannot read bytes {start}-{end}: {type(err).__name__}: "
                                f"{err}".splitlines()[0]) from err


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
        import fsspec
    except ImportError as err:
        raise UnsupportedFormatError(f"{url}: reading URLs needs fsspec; expected it installed (pip install "
                                     f"'kcompact[remote]'), found ImportError: {err}") from err
    hdfs = url.lower().startswith("hdfs://")
    try:
        with _native_stderr_quiet() if hdfs else nullcontext():  # pyarrow's C++ prints each place it looked
            fs, path = fsspec.core.url_to_fs(url, **dict(storage_options))  # for libjvm (~90 lines)
    except ImportError as err:
        raise UnsupportedFormatError(f"{url}: no fsspec file system for this protocol; expected its package "
                                     f"installed (s3fs for s3://: pip install 'kcompact[remote]'), found "
                                     f"{err}") from err
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{url}: the storage options; fsspec refused them: {err}") from err
    except Exception as err:  # a file system's constructor raises its own (pyarrow's OSError without libhdfs)
        found = (str(err).strip().splitlines() or [""])[0]
        raise KcompactError(f"{url}: cannot open its file system: {type(err).__name__}: {found}"
                            f"{HDFS_HINT if hdfs else ''}") from err
    return fs, path


@contextmanager
def _native_stderr_quiet() -> Iterator[None]:
    """File descriptor 2 points at /dev/null in the block (native code's own prints)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


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
    """Copy a file, or a directory's files (``recursive``), keeping each file's modification time where
    the store says it (a segment's mtime is its ``lastModified`` to Kafka: the legacy delete horizon,
    time retention without timestamps, a segment without its time index)."""
    fs, path = _filesystem(url, storage_options)
    try:
        if recursive:
            local.mkdir(parents=True)
            found = fs.find(path.rstrip("/"), detail=True)
            root = path.rstrip("/") + "/"
            entries = {name: entry for name, entry in found.items()
                       if entry.get("type") == "file" and str(name).startswith(root)}
            if not entries and not fs.isdir(path):
                raise FileNotFoundError("no file there")
            targets = {name: local / str(name)[len(root):] for name in entries}
            for target in targets.values():
                target.parent.mkdir(parents=True, exist_ok=True)
            if entries:
                fs.get(list(targets), [str(t) for t in targets.values()])
        else:
            entries = {path: fs.info(path)}
            targets = {path: local}
            fs.get_file(path, str(local))
    except Exception as err:
        raise KcompactError(f"{url}: cannot read it: {type(err).__name__}: {err}".splitlines()[0]) from err
    for name, entry in entries.items():
        modified = _modified_s(entry)
        if modified is not None:
            os.utime(targets[name], (modified, modified))


def _modified_s(entry: Mapping[str, Any]) -> float | None:
    """A listing entry's modification time in seconds (each file system names it its own way)."""
    for key in ("mtime", "LastModified", "last_modified", "modified", "updated"):
        value = entry.get(key)
        if isinstance(value, (int, float)):
            return float(value)
        timestamp = getattr(value, "timestamp", None)  # a datetime
        if callable(timestamp):
            return float(timestamp())
    return None


@frozen
class LocalInputs:
    """A command's input paths as it reads them: local ones as given, URLs as local copies.

    Attributes:
        paths: the paths to read, in the order given.
        renames: ``(local prefix, URL prefix)`` of each copy, the longest local prefix first.
    """

    paths: tuple[str, ...]
    renames: tuple[tuple[str, str], ...] = ()

    def named(self, value: T) -> T:
        """``value`` (a result: strings, dataclasses, lists, dicts, …) naming the URLs, not the copies."""
        if not self.renames:
            return value
        return _renamed(value, self.renames)  # type: ignore[no-any-return]

    def named_error(self, err: KcompactError) -> KcompactError:
        """``err`` with the copies' paths in its message and fields replaced by the URLs."""
        out = copy.copy(err)
        out.args = tuple(_renamed(arg, self.renames) for arg in err.args)
        for name, value in vars(err).items():
            if isinstance(value, str):
                setattr(out, name, _renamed(value, self.renames))
        return out


@contextmanager
def local_inputs(paths: Iterable[str], storage_options: StorageOptions | None = None, *,
                 topic_configs: bool = True) -> Iterator[LocalInputs]:
    """The paths as a read-only command reads them, URLs copied into a local temporary directory.

    A log dir URL is copied whole; a partition directory's under a copy of its log dir's files
    (:data:`LOG_DIR_FILES`) and KRaft metadata log (the topic configs); a file's with the index files of
    its segment, and the other file names of its directory as empty stand-ins (what says whether its
    segment is the active one). The copy is deleted on exit; a :class:`KcompactError` raised inside
    names the URL.

    Args:
        paths: local paths and/or URLs, as given.
        storage_options: fsspec options for the URLs.
        topic_configs: copy a partition directory's KRaft metadata log (False for a command that resolves
            no topic config, ``inspect dump``: the metadata log can be far bigger than the partition).

    Yields:
        The :class:`LocalInputs`.

    Raises:
        KcompactError: a URL cannot be listed or read (one line naming it).
    """
    given = tuple(str(p) for p in paths)
    if not any(is_url(p) for p in given):
        yield LocalInputs(given)
        return
    root = Path(tempfile.mkdtemp(prefix="kcompact-mirror-"))
    try:
        local: list[str] = []
        renames: list[tuple[str, str]] = []
        for i, path in enumerate(given):
            if not is_url(path):
                local.append(path)
                continue
            here, prefix, url_prefix = _copy_input(path, root / str(i), dict(storage_options or {}), topic_configs)
            local.append(here)
            renames.append((prefix, url_prefix))
        inputs = LocalInputs(tuple(local), tuple(sorted(renames, key=lambda r: len(r[0]), reverse=True)))
        try:
            yield inputs
        except KcompactError as err:
            raise inputs.named_error(err) from err
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _copy_input(url: str, into: Path, storage_options: StorageOptions, topic_configs: bool = True
                ) -> tuple[str, str, str]:
    """Copy what ``url`` names under ``into``; returns the local path, and the local and URL prefixes
    that name each other (the log dir, or the directory holding the file)."""
    base = url.rstrip("/")
    parent, name = base.rsplit("/", 1)
    parent_name = parent.rsplit("/", 1)[-1] or "root"
    if parse_partition_dir_name(name) is not None:
        log_dir = into / parent_name
        _copy_log_dir_files(parent, log_dir, storage_options)
        _get(base, log_dir / name, storage_options, recursive=True)
        metadata = f"{METADATA_TOPIC}-0"  # the topic configs a report resolves (config.kraft)
        if topic_configs and name != metadata and metadata in _names(parent, storage_options, directories=True):
            _get(f"{parent}/{metadata}", log_dir / metadata, storage_options, recursive=True)
        return str(log_dir / name), str(log_dir), parent
    if _is_file(base, storage_options):
        directory = into / parent_name
        _copy_file_with_siblings(base, directory, storage_options)
        return str(directory / name), str(directory), parent
    _get(base, into / name, storage_options, recursive=True)
    return str(into / name), str(into / name), base


def _is_file(url: str, storage_options: StorageOptions) -> bool:
    fs, path = _filesystem(url, storage_options)
    try:
        return bool(fs.isfile(path))
    except Exception as err:  # each file system raises its own
        raise KcompactError(f"{url}: cannot read it: {type(err).__name__}: {err}".splitlines()[0]) from err


def _copy_file_with_siblings(url: str, directory: Path, storage_options: StorageOptions) -> None:
    """The file, the other files of its segment (same base name: its indexes), and empty stand-ins
    for the rest of its directory's names."""
    parent, name = url.rsplit("/", 1)
    directory.mkdir(parents=True)
    stem = name.split(".", 1)[0]
    for sibling in _names(parent, storage_options, directories=False):
        if sibling == name or (sibling.split(".", 1)[0] == stem and parse_segment_file_name(sibling)):
            _get(f"{parent}/{sibling}", directory / sibling, storage_options, recursive=False)
        else:
            (directory / sibling).touch()


_REPAIR_OF_URL = re.compile(r"`kcompact repair ([A-Za-z][A-Za-z0-9+.-]*://[^`]*)`")


def _renamed(value: Any, renames: Sequence[tuple[str, str]]) -> Any:
    """``value`` with every local prefix of ``renames`` replaced by its URL prefix, walked structurally."""
    if isinstance(value, str):
        for local, url in renames:
            value = value.replace(local, url)
        # `kcompact repair PATH` refuses URLs: the advice is a repair of a local copy
        return _REPAIR_OF_URL.sub(r"`kcompact repair` on a local copy of \1", value)
    if isinstance(value, Path):
        text = _renamed(str(value), renames)
        return value if text == str(value) else text
    if isinstance(value, list):
        return [_renamed(v, renames) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_renamed(v, renames) for v in value)
    if isinstance(value, dict):
        return {_renamed(k, renames): _renamed(v, renames) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _renamed(getattr(value, f.name), renames)
                   for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value
