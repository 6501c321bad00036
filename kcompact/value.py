"""The house's dataclasses: slotted, frozen (``@frozen``) or assignable (``@mutable``), ``__init__`` compiled late.

``@frozen`` makes what ``@dataclass(frozen=True, slots=True)`` makes, and ``@mutable`` what ``@dataclass(slots=True)``
makes: ``dataclasses.fields``, ``replace`` and ``asdict`` work on them, ``__match_args__`` is set, equality goes by
the fields (``field(compare=False)``, ``field(hash=...)`` and ``field(repr=False)`` are honoured), a class that
writes its own ``__eq__``, ``__hash__`` or ``__repr__`` keeps it, and instances pickle. A ``@frozen`` instance
refuses assignment with ``dataclasses.FrozenInstanceError`` and hashes by its fields; a ``@mutable`` one is
unhashable unless its class writes ``__hash__``.

What differs is when the work is done. ``dataclasses`` writes each class's ``__init__``, ``__repr__``, ``__eq__``
(and, frozen, ``__hash__``, ``__setattr__`` and ``__delattr__``) as source and compiles it while the module is
imported: about 0.6 ms a class, 0.06 s of the 0.12 s that a ``clean``'s imports cost, for classes most runs never
build. Here the comparison, hashing, representation and freezing methods are closures over the class's field names
(nothing compiled), and ``__init__``, the one a hot loop calls, is compiled as ``dataclasses`` writes it, on its
first call. After that call an instance costs what a ``dataclasses`` one does.

Not supported (a ``TypeError`` when the class is made): ``InitVar`` fields, and the decorator's arguments (``order``,
``weakref_slot``, ...). No class in kcompact uses them."""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, cast, dataclass_transform

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen(cls: type[_T]) -> type[_T]:
    """Make ``cls`` what ``@dataclass(frozen=True, slots=True)`` makes, its ``__init__`` compiled on first call.

    Args:
        cls: The class body, annotated as a dataclass's is.

    Returns:
        The new (slotted) class; like ``dataclass(slots=True)``, a different object from ``cls``.

    Raises:
        TypeError: ``cls`` has an ``InitVar`` field, or ``dataclasses`` refuses it (a field without a default after
            one with a default, a non-frozen base, ...).
    """
    return _make(cls, is_frozen=True)


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def mutable(cls: type[_T]) -> type[_T]:
    """Make ``cls`` what ``@dataclass(slots=True)`` makes (fields assignable, so unhashable unless it writes its own
    ``__hash__``), its ``__init__`` compiled on first call.

    Args:
        cls: The class body, annotated as a dataclass's is.

    Returns:
        The new (slotted) class; like ``dataclass(slots=True)``, a different object from ``cls``.

    Raises:
        TypeError: As :func:`frozen`'s.
    """
    return _make(cls, is_frozen=False)


def _make(cls: type[_T], *, is_frozen: bool) -> type[_T]:
    own = cls.__dict__
    if not own.get("__doc__"):
        # dataclasses would write one from inspect.signature (a tokenizer's regexes compiled: about 4 ms)
        cls.__doc__ = f"{cls.__name__}({', '.join(own.get('__annotations__', ()))})"
    made: Any = dataclasses.dataclass(init=False, repr=False, eq=False, slots=True)(cls)
    fields = dataclasses.fields(made)
    init_vars = [name for name, f in made.__dataclass_fields__.items() if f not in fields and _is_init_var(f)]
    if init_vars:
        raise TypeError(f"{made.__qualname__}: InitVar fields ({', '.join(init_vars)}) are not supported here")
    made.__value_frozen__ = is_frozen
    _check_bases(made, is_frozen)
    made.__value_init_fields__ = tuple(fields)
    if "__init__" not in own:
        made.__init__ = _init_on_first_call(made)
    if "__repr__" not in own:
        made.__repr__ = _repr_method(made, tuple(f.name for f in fields if f.repr))
    if "__eq__" not in own:
        made.__eq__ = _eq_method(tuple(f.name for f in fields if f.compare))
    explicit_hash = own.get("__hash__", dataclasses.MISSING)
    if explicit_hash is dataclasses.MISSING or (explicit_hash is None and "__eq__" in own):
        # dataclasses' table for eq=True: a frozen class hashes its fields, an assignable one is unhashable.
        hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        made.__hash__ = _hash_method(hashed) if is_frozen else None
    if is_frozen:
        names = tuple(f.name for f in fields)
        made.__setattr__, made.__delattr__ = _frozen_methods(made, frozenset(names))
        if "__getstate__" not in own:
            made.__getstate__ = _getstate_method(names)
        if "__setstate__" not in own:
            made.__setstate__ = _setstate_method(names)
    return cast("type[_T]", made)


def _is_init_var(f: dataclasses.Field[Any]) -> bool:
    """Whether the pseudo-field ``f`` (not a ``fields()`` one) is an ``InitVar`` rather than a ``ClassVar``: its
    annotation is a string under ``from __future__ import annotations``, else the ``InitVar`` itself."""
    kind = f.type
    if isinstance(kind, str):
        return kind.startswith(("InitVar", "dataclasses.InitVar"))
    return isinstance(kind, dataclasses.InitVar) or kind is dataclasses.InitVar


def _check_bases(made: type[Any], is_frozen: bool) -> None:
    """Refuse to mix frozen and assignable dataclasses in one line of bases, as ``dataclasses`` refuses it (a
    frozen base's fields would be assignable through the subclass's instances, or the other way round)."""
    for base in made.__mro__[1:-1]:
        params = base.__dict__.get("__dataclass_params__")
        if params is None:
            continue
        base_frozen = params.frozen or base.__dict__.get("__value_frozen__", False)
        if base_frozen != is_frozen:
            raise TypeError(f"{made.__qualname__}: cannot inherit a {'frozen' if is_frozen else 'mutable'} "
                            f"dataclass from the {'frozen' if base_frozen else 'mutable'} {base.__qualname__}")


def _init_on_first_call(cls: type[Any]) -> Callable[..., None]:
    """A stand-in ``__init__`` that compiles the real one, puts it on ``cls`` and runs it."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        real = _compile_init(cls)
        cls.__init__ = real
        real(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _compile_init(cls: type[Any]) -> Callable[..., None]:
    """``cls``'s ``__init__``, written as ``dataclasses`` writes a frozen one: positional fields first, then
    keyword-only ones; a default factory called when its argument is left out; ``__post_init__`` last."""
    namespace: dict[str, Any] = {"__object_setattr": object.__setattr__, "__factory_marker": _FACTORY_MARKER}

    def assign(name: str, expression: str) -> str:
        if cls.__value_frozen__:
            return f"__object_setattr(self, {name!r}, {expression})"
        return f"self.{name} = {expression}"

    positional: list[str] = []
    keyword_only: list[str] = []
    body: list[str] = []
    for f in cls.__value_init_fields__:
        default_name = f"__default_{f.name}"
        if f.default_factory is not dataclasses.MISSING:
            namespace[default_name] = f.default_factory
            if f.init:
                parameter = f"{f.name}=__factory_marker"
                body.append(assign(f.name, f"{default_name}() if {f.name} is __factory_marker else {f.name}"))
            else:
                parameter = ""
                body.append(assign(f.name, f"{default_name}()"))
        elif f.default is not dataclasses.MISSING:
            namespace[default_name] = f.default
            parameter = f"{f.name}={default_name}" if f.init else ""
            body.append(assign(f.name, f.name if f.init else default_name))
        else:
            parameter = f.name if f.init else ""
            if f.init:
                body.append(assign(f.name, f.name))
        if parameter:
            (keyword_only if f.kw_only is True else positional).append(parameter)
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    parameters = ["self", *positional, *(["*", *keyword_only] if keyword_only else [])]
    source = f"def __init__({', '.join(parameters)}):\n    " + ("\n    ".join(body) or "pass") + "\n"
    exec(compile(source, f"<@frozen {cls.__module__}.{cls.__qualname__}>", "exec"), namespace)  # noqa: S102
    init: Callable[..., None] = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {f.name: f.type for f in cls.__value_init_fields__ if f.init} | {"return": None}
    return init


class _FactoryMarker:
    """The default of an argument whose field has a default factory (``dataclasses``' ``_HAS_DEFAULT_FACTORY``)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY_MARKER = _FactoryMarker()


def _repr_method(cls: type[Any], names: tuple[str, ...]) -> Callable[[Any], str]:
    """``Name(a=1, b='x')`` over ``names``, guarded against a value that contains itself, as ``dataclasses``'."""

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    __repr__.__qualname__ = f"{cls.__qualname__}.__repr__"
    return __repr__


def _field_tuple(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A C getter of ``names``' values as a tuple (``attrgetter`` of one name returns the bare value)."""
    if not names:
        return lambda _: ()
    getter = attrgetter(*names)
    if len(names) == 1:
        return lambda obj: (getter(obj),)
    return getter


def _eq_method(names: tuple[str, ...]) -> Callable[[Any, object], Any]:
    """Equal when of the very same class and equal in the compared fields, in order; else ``NotImplemented``."""
    values = _field_tuple(names)

    def __eq__(self: Any, other: object) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hash_method(names: tuple[str, ...]) -> Callable[[Any], int]:
    """The hash of the hashed fields' values, as a tuple."""
    values = _field_tuple(names)

    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __hash__


def _frozen_methods(cls: type[Any], names: frozenset[str]) -> tuple[Callable[..., None], Callable[..., None]]:
    """``__setattr__`` and ``__delattr__`` that refuse the fields (and anything on ``cls`` itself), as a frozen
    dataclass's do."""

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


def _getstate_method(names: tuple[str, ...]) -> Callable[[Any], list[Any]]:
    """Pickling's state: the fields' values in order (a frozen class's slots cannot be set the default way)."""

    def __getstate__(self: Any) -> list[Any]:
        return [getattr(self, name) for name in names]

    return __getstate__


def _setstate_method(names: tuple[str, ...]) -> Callable[[Any, list[Any]], None]:
    """Unpickling: set each field past the frozen ``__setattr__``."""

    def __setstate__(self: Any, state: list[Any]) -> None:
        for name, field_value in zip(names, state, strict=True):
            object.__setattr__(self, name, field_value)

    return __setstate__
