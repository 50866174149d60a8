"""One ``__repr__`` shared by sluice's attrs classes, instead of one compiled per class.

attrs writes and compiles a ``__repr__`` for every class it decorates. Across the hundred-odd
classes ``import sluice`` defines, that code generation is a noticeable part of the import
(``benchmarks/import_time.py`` measures it), and a repr is only ever needed when someone
prints a value. So our classes say ``repr=False`` and inherit :class:`Record`, whose
single ``__repr__`` reads the attrs fields at call time and prints what attrs would print:
``ClassName(field=value, ...)``. It honours every field's ``repr`` setting: ``repr=False``
hides the field, a callable formats it (that is how headers with API keys are masked).

The same holds for equality: a frozen class compared by value (a config, a request, an event)
would get a compiled ``__eq__`` and ``__hash__`` of its own, twice the code of its repr, though
most programs never compare one. Such classes say ``eq=False`` and inherit :class:`Value`
instead, whose one ``__eq__`` and ``__hash__`` read the fields at call time and answer what
attrs' would: equal when of the same class with equal fields (each field's ``eq`` setting
honoured), and a hash that agrees.

Some classes name in their annotations classes that load on first use (a config's groups, a
request's tools): their module serves those names through PEP 562 and binds them when first
asked. :func:`late_names` makes the annotations themselves ask first, so that
``typing.get_type_hints`` (cattrs, ``attrs.resolve_types``, ``inspect.get_annotations``) sees
the same names it saw when the classes loaded with the module.
"""

from __future__ import annotations

import inspect
import sys
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

if TYPE_CHECKING:
    from _collections_abc import dict_items, dict_keys, dict_values
    from collections.abc import Callable, Iterator

__all__ = ["Record", "Value", "late_names"]

_C = TypeVar("_C", bound=type)


class Record:
    """Base class of sluice's attrs classes (declared with ``repr=False``); adds no slots."""

    __slots__ = ()

    def __repr__(self) -> str:
        parts = []
        cls: Any = type(self)  # an attrs class: Record is only ever a base of one
        for field in attrs.fields(cls):
            shown: Any = field.repr
            if shown is False:
                continue
            value = getattr(self, field.name, attrs.NOTHING)  # NOTHING: a slot never set
            formatter = repr if shown is True else shown
            text = "NOTHING" if value is attrs.NOTHING else formatter(value)
            parts.append(f"{field.name}={text}")
        return f"{cls.__qualname__}({', '.join(parts)})"


class Value(Record):
    """Base class of sluice's frozen attrs classes compared by value (declared with
    ``eq=False, repr=False``: attrs then leaves ``__eq__`` and ``__hash__`` to this class).

    Two values are equal when they are of the same class (a subclass is not equal to its base,
    as with attrs) and their fields compare equal, leaving out fields declared ``eq=False`` and
    comparing a field with an ``eq`` key by that key; the hash is that of the same fields (those
    declared ``hash=False`` left out), so equal values hash alike. Only for frozen classes: a
    value that can change must not be hashed by its fields.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        key = _KEYS.get(self.__class__) or _keys(self.__class__)
        return bool(key[0](self) == key[0](other))

    def __hash__(self) -> int:
        key = _KEYS.get(self.__class__) or _keys(self.__class__)
        return hash((self.__class__, key[1](self)))


_KEYS: dict[type, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}
"""Per class, what its values are compared by and hashed by: made on first use."""


def _keys(cls: type) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    fields = attrs.fields(cls)
    compared = [f for f in fields if f.eq]
    hashed = [f for f in fields if (f.eq if f.hash is None else f.hash)]
    made = (_getter(compared), _getter(hashed))
    _KEYS[cls] = made
    return made


def _getter(fields: list[attrs.Attribute[Any]]) -> Callable[[Any], Any]:
    """A function of a value giving the tuple of ``fields`` (through their ``eq`` keys)."""
    pairs = [(f.name, getattr(f, "eq_key", None)) for f in fields]  # not in attrs' stubs
    if any(key is not None for _name, key in pairs):
        return lambda value: tuple(
            getattr(value, name) if key is None else key(getattr(value, name))
            for name, key in pairs
        )
    names = [f.name for f in fields]
    if not names:
        return lambda value: ()
    if len(names) == 1:  # attrgetter of one name gives the value itself, not a tuple
        name = names[0]
        return lambda value: (getattr(value, name),)
    return attrgetter(*names)


def late_names(*names: str) -> Callable[[_C], _C]:
    """Class decorator (outermost, over attrs'): when anything first reads the class's
    annotations, its module is asked for ``names`` first, so the classes that load on first use
    are names of the module by the time the annotation strings are evaluated. Reading costs
    nothing more after that, and a program that never reads them never loads those classes."""

    def decorate(cls: _C) -> _C:
        found = inspect.get_annotations(cls)  # the class's own, as strings
        cls.__annotations__ = _LateAnnotations(found, cls.__module__, names)
        return cls

    return decorate


class _LateAnnotations(dict[str, Any]):
    """A class's annotations that ask their module for some names before being read."""

    __slots__ = ("_module", "_names")

    def __init__(self, found: dict[str, Any], module: str, names: tuple[str, ...]) -> None:
        super().__init__(found)
        self._module = module
        self._names = names

    def _bind(self) -> None:
        # Cleared only once bound: a second thread reading meanwhile binds again (getattr is
        # idempotent) rather than going on to evaluate names that are not there yet.
        if self._names:
            module = sys.modules[self._module]
            for name in self._names:
                getattr(module, name)  # the module's __getattr__ binds it (and its kin) as a name
            self._names = ()

    def __iter__(self) -> Iterator[str]:
        self._bind()
        return super().__iter__()

    def __getitem__(self, key: str) -> Any:
        self._bind()
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._bind()
        return super().get(key, default)

    def keys(self) -> dict_keys[str, Any]:
        self._bind()
        return super().keys()

    def values(self) -> dict_values[str, Any]:
        self._bind()
        return super().values()

    def items(self) -> dict_items[str, Any]:
        self._bind()
        return super().items()
