"""``inspect dump``'s selection options: ``--from-offset``/``--to-offset``, ``--from-time``/``--to-time``,
``--key`` and ``--max-bytes`` (what kafka-dump-log users ask for), turned into one
:class:`kcompact.inspect.dump.window.DumpFilter`."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from kcompact.inspect.dump.window import DumpFilter

F = TypeVar("F", bound=Callable[..., Any])
BASE64_PREFIX = "base64:"


def dump_selection_options(command: F) -> F:
    """Add the selection options to ``command`` (they arrive as keyword arguments)."""
    options = (
        click.option("--from-offset", type=click.IntRange(min=0), default=None, metavar="OFFSET",
                     help="Start at this offset (found through the offset index)."),
        click.option("--to-offset", type=click.IntRange(min=0), default=None, metavar="OFFSET",
                     help="End at this offset (inclusive)."),
        click.option("--from-time", type=int, default=None, metavar="MS",
                     help="Start at the first batch whose max timestamp is at or after MS (ms since the "
                          "epoch), found through the time and offset indexes."),
        click.option("--to-time", type=int, default=None, metavar="MS",
                     help="Stop before the first batch after the start whose max timestamp is past MS."),
        click.option("--key", default=None, metavar="KEY",
                     help="Only records with this key (UTF-8, or base64:… for bytes); implies --records."),
        click.option("--max-bytes", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Read at most N bytes of each .log from where its dump starts, as "
                          "kafka-dump-log --max-bytes."),
    )
    for option in reversed(options):
        command = option(command)
    return command


def dump_filter(values: Mapping[str, Any]) -> DumpFilter:
    """The :class:`DumpFilter` of the options' values.

    Raises:
        click.BadParameter: a ``base64:`` key that does not decode.
    """
    from kcompact.inspect.dump.window import DumpFilter

    key_text = values.get("key")
    key = None if key_text is None else _key_bytes(key_text)
    return DumpFilter(from_offset=values.get("from_offset"), to_offset=values.get("to_offset"),
                      from_time=values.get("from_time"), to_time=values.get("to_time"), key=key,
                      max_bytes=values.get("max_bytes"))


def _key_bytes(text: str) -> bytes:
    if not text.startswith(BASE64_PREFIX):
        return text.encode("utf-8")
    try:
        return base64.b64decode(text.removeprefix(BASE64_PREFIX), validate=True)
    except binascii.Error:
        raise click.BadParameter(f"expected base64 after 'base64:', found {text!r}",
                                 param_hint="'--key'") from None
