"""Helpers for comparing the compiled kernels with the pure-Python reference (test_accel*.py).

``both(fn)`` runs ``fn`` with ``accel.enabled`` off, then on, and asserts that the two outcomes
are equal: the values with their types spelled out (array typecodes, dataclass fields, what a
memoryview shows), or the exception's class, message, position and offset.
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from kcompact.records import compression
from kcompact.records.scan import accel

Outcome = tuple[object, ...]

needs_c = pytest.mark.skipif(
    accel.kernels is None,
    reason=f"the C extension kcompact.records.scan._accel is not built ({accel.import_error}); "
    "build it with `python setup.py build_ext --inplace`",
)


@contextmanager
def accel_switched(on: bool) -> Iterator[None]:
    """``accel.enabled`` set to ``on`` for the block."""
    saved = accel.enabled
    accel.enabled = on
    try:
        yield
    finally:
        accel.enabled = saved


def typed(value: object) -> object:
    """``value`` with the types that matter to a caller spelled out, for ``==``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [typed(getattr(value, field.name)) for field in dataclasses.fields(value)]
        return ("dataclass", type(value), parts)
    if isinstance(value, array):
        return ("array", value.typecode, value.tolist())
    if isinstance(value, memoryview):
        return ("memoryview", value.tobytes(), value.format, value.readonly, type(value.obj))
    if isinstance(value, (tuple, list)):
        return (type(value), [typed(item) for item in value])
    return (type(value), value)


def raised(err: Exception) -> Outcome:
    """An exception as a user sees it."""
    where = (getattr(err, "position", None), getattr(err, "offset", None))
    return ("raised", type(err), str(err), where)


def outcome(fn: Callable[[], object]) -> Outcome:
    """What ``fn()`` returned (see :func:`typed`), or what it raised."""
    try:
        result = fn()
    except Exception as err:  # noqa: BLE001 - any class: comparing them is the point
        return raised(err)
    return ("returned", typed(result))


def walked(items: Callable[[], Iterable[object]]) -> Outcome:
    """Everything an iterator yields, then what it raised if it did."""
    seen: list[object] = []
    try:
        for item in items():
            seen.append(typed(item))
    except Exception as err:  # noqa: BLE001 - as in outcome()
        return ("yielded", seen, raised(err))
    return ("yielded", seen, None)


def both(fn: Callable[[], Any], run: Callable[[Callable[[], Any]], Outcome] = outcome) -> Outcome:
    """Run ``fn`` with the reference and with the kernels; they must agree. Returns the outcome."""
    with accel_switched(False):
        reference = run(fn)
    with accel_switched(True):
        compiled = run(fn)
    assert compiled == reference
    return reference


def counted_zstd_one_call(seen: list[str], loaded: bool) -> Callable[[], object]:
    """A stand-in for ``compression.zstd_one_call`` that notes each call of the method it returns
    (None, as before zstandard is imported, when not ``loaded``)."""
    def one_call(data: object, max_output_size: int) -> bytes:
        seen.append("zstd one call")
        assert max_output_size == compression._zstd_one_block_bound(memoryview(data), 2**31)  # type: ignore[arg-type]
        out: bytes = compression._zstd_context("decompressor").decompress(data, max_output_size=max_output_size)
        return out

    return lambda: one_call if loaded else None
