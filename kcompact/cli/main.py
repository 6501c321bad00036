"""The ``kcompact`` command line: click commands that parse, call one library function, and render.

Exit codes (documented in ``kcompact --help`` and docs/safety.md, "Exit codes"):

* 0 — success (for ``inspect dump``: every batch was valid);
* 2 — bad input or a refusal: corrupt, truncated or unreadable data, a bad option value, a live broker
  holding the log dir, another kcompact on the same partition. One line on stderr names the file and byte
  position. With ``--json`` the command also prints, on stdout, one line holding a JSON error object::

      {"error": {"message": "<the stderr line without its 'kcompact: error: ' prefix>",
                 "kind": "<the KcompactError subclass, e.g. TruncatedDataError, FileAccessError;
                          UsageError for click's own refusal of an option value or path>",
                 "path": "<file>" | null, "position": <byte position> | null,
                 "offset": <Kafka offset> | null, "exit_code": 2}}

  A run over a log dir that fails for some partitions only is not this case: its normal JSON carries
  them (``clean``: ``failures``; ``inspect dirty-ratio``: each row's ``error``), and it exits 2 too.
* 1 — a bug in kcompact: a traceback is printed; please report it;
* 3 — ``inspect replicas``, ``report`` (and their ``spark`` forms): replica copies diverge.

2 and 1 are decided once, in :class:`KcompactGroup` (every command's ``--json`` is
``options.json_option``, which tells it ``--json`` was given).

Imports of the library happen inside the commands so that ``kcompact --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, NoReturn

import click

from kcompact import __version__
from kcompact.cli import render
from kcompact.cli.help_text import with_examples
from kcompact.cli.options import EXIT_BAD_INPUT, EXIT_BUG, EXIT_OK, GROUP_EPILOG, JSON_REQUESTED, ends_without_teardown

if TYPE_CHECKING:
    from kcompact.errors import KcompactError

class KcompactGroup(click.Group):
    """A click group that turns kcompact's deliberate errors into one line and exit code 2.

    The library turns the OS's refusals (an unreadable segment, a read-only directory) into a
    ``FileAccessError`` where it touches the files; an ``OSError`` that still escapes with a file name
    is the same bad input, and gets the same one line here. One without a file name is a bug.
    """

    def invoke(self, ctx: click.Context) -> Any:
        from kcompact.errors import FileAccessError, KcompactError

        json_asked = "--json" in ctx.args  # the subcommand's arguments (click empties ctx.args on invoke)
        try:
            return super().invoke(ctx)
        except KcompactError as err:
            _fail(ctx, err)
        except BrokenPipeError:  # `kcompact inspect dump … | head`
            sys.stderr.close()
            ctx.exit(EXIT_OK)
        except OSError as err:
            if err.filename is None:
                raise
            _fail(ctx, FileAccessError.from_os_error(err))
        except click.UsageError as err:  # click prints it (usage, one error line) and exits 2
            if json_asked and not ctx.meta.get(JSON_ERROR_SENT):
                _emit_json_error(ctx, err.format_message(), "UsageError")
            raise


JSON_ERROR_SENT = "kcompact.json-error-sent"  # ctx.meta: nested groups print one JSON error object


def _fail(ctx: click.Context, err: KcompactError) -> NoReturn:
    """Exit 2 with the error's one line on stderr, and its JSON object on stdout after ``--json``."""
    from kcompact.segment.lock import explain_vanished  # the CLI imports lazily

    err = explain_vanished(err)  # a file a running clean swapped out: say so
    render.error_line(str(err))
    if ctx.meta.get(JSON_REQUESTED):
        _emit_json_error(ctx, str(err), type(err).__name__, err.path, err.position, err.offset)
    ctx.exit(EXIT_BAD_INPUT)


def _emit_json_error(ctx: click.Context, message: str, kind: str, path: str | None = None,
                     position: int | None = None, offset: int | None = None) -> None:
    """The ``--json`` error object on stdout (once per command line; docs/safety.md, "Exit codes")."""
    ctx.meta[JSON_ERROR_SENT] = True
    render.emit_json_line({"error": {"message": message, "kind": kind, "path": path, "position": position,
                                     "offset": offset, "exit_code": EXIT_BAD_INPUT}})


@click.group(cls=KcompactGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=with_examples(
    GROUP_EPILOG,
    "kcompact inspect dirty-ratio /tmp/kafka-logs",
    "kcompact clean /tmp/kafka-logs/orders-0 --dry-run",
))
@click.version_option(__version__, prog_name="kcompact")
def cli() -> None:
    """Offline compactor, inspector and repair tool for Apache Kafka partition logs.

    Works on the files of a stopped broker (or a copy of them): reads and writes Kafka 4.1's on-disk
    format exactly, and refuses to write to a log dir a running broker holds.
    """


@cli.group(cls=KcompactGroup, short_help="dump, dirty-ratio, keys, last-clean, replicas, transactions.",
           epilog=with_examples(
               GROUP_EPILOG,
               "kcompact inspect dump /tmp/kafka-logs/orders-0 --records",
               "kcompact inspect keys /tmp/kafka-logs/orders-0",
           ))
def inspect() -> None:
    """Read-only reports: dump segments and indexes, dirty ratio, keys, last clean, whether replica copies
    agree, producers and transactions."""


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name, each command's module imported when the command is first looked up.

    Why: importing every command module builds every command's options and help (click's decorators,
    ``inspect.cleandoc`` hundreds of times), a cost each run paid before its own command started. Iterating
    gives the names of the commands this build has (``find_spec``, nothing imported); looking one up imports
    its module alone, so ``--help`` lists and shows exactly what the eager registration did.
    """

    def __init__(self, table: Mapping[str, tuple[str, str]], loaded: Mapping[str, click.Command]) -> None:
        self._table = dict(table)  # command name -> (module, attribute)
        self._loaded = dict(loaded)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            module, attribute = self._table[name]  # KeyError: no such command
            try:
                command = getattr(importlib.import_module(module), attribute)
            except ModuleNotFoundError as err:
                if err.name != module:
                    raise  # a real import bug inside the command module
                raise KeyError(name) from err  # that command is not part of this build
            if command.name != name:
                raise RuntimeError(f"{module}.{attribute} is named {command.name!r}, registered as {name!r}")
            self._loaded[name] = command
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self._table.pop(name, None)
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        for name in self._loaded:
            yield name
        for name, (module, _) in self._table.items():
            if name not in self._loaded and importlib.util.find_spec(module) is not None:
                yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)


# Every command group lives in its own module (each imports only click at import time).
inspect.commands = LazyCommands({
    "dump": ("kcompact.cli.dump_cmd", "dump_command"),
    "dirty-ratio": ("kcompact.cli.dirty_ratio_cmd", "dirty_ratio_command"),
    "keys": ("kcompact.cli.keys_cmd", "keys_command"),
    "last-clean": ("kcompact.cli.last_clean_cmd", "last_clean_command"),
    "replicas": ("kcompact.cli.replicas_cmd", "replicas_command"),
    "transactions": ("kcompact.cli.transactions_cmd", "transactions_command"),
}, {})  # fmt: skip
cli.commands = LazyCommands({
    "clean": ("kcompact.cli.clean_cmd", "clean_command"),
    "repair": ("kcompact.cli.repair_cmd", "repair_command"),
    "config": ("kcompact.cli.config_cmd", "config_group"),
    "spark": ("kcompact.cli.spark_cmds", "spark_group"),
    "export": ("kcompact.cli.export_cmd", "export_command"),
    "report": ("kcompact.cli.report_cmd", "report_command"),
}, cli.commands)  # fmt: skip


def main() -> None:
    """Console-script entry point."""
    # What is loaded by now lives for the whole run: out of the collector's way, a clean's full
    # collections stop re-walking it (about 3 % of a clean's CPU, scripts/bench.py ratio). What is
    # made later is mostly arrays and buffers, not cycles: the youngest generation is collected every
    # 50,000 allocations instead of 700 (the 72 collections of the benchmark's zstd clean, ~7 ms, become none).
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    # kcompact does no linear algebra: without this, numpy's OpenBLAS starts a thread per core on import
    # (~45 ms of CPU in each process, workers included, that imports numpy).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        cli(prog_name="kcompact")
    except SystemExit as done:
        if not ends_without_teardown() or "pyspark" in sys.modules:
            raise
        _end_now(done.code)


def _end_now(code: object) -> NoReturn:
    """End the process with ``code`` as ``SystemExit`` would, but without the interpreter's teardown
    (``options.end_without_teardown`` says when), stdout and stderr flushed first. A reader that closed the pipe
    early is ignored, as one during a command is (:class:`KcompactGroup`); a report that could not be written
    (a full disk under a redirected stdout) is a line on stderr and exit 2, not a success."""
    if code is None:
        status = EXIT_OK
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = EXIT_BUG
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):  # `kcompact clean … | head`; a stdout already closed
        pass
    except OSError as err:
        with contextlib.suppress(OSError, ValueError):
            print(f"kcompact: error: cannot write the output ({err.strerror or err})", file=sys.stderr)
        status = status or EXIT_BAD_INPUT
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":  # pragma: no cover
    main()
