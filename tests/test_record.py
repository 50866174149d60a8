"""The shared ``Record.__repr__`` prints what attrs' generated repr would, and is used widely."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import attrs

from sluice._config import ProviderConfig
from sluice._messages import ChatRequest, Message, Usage
from sluice._record import Record, Value


def attrs_repr(value: Any) -> str:
    """The repr attrs itself generates for a class with the same fields and repr settings."""
    fields = attrs.fields(type(value))
    twin = attrs.make_class(
        type(value).__qualname__,
        {f.name: attrs.field(repr=f.repr, default=None) for f in fields},
        slots=True,
    )
    return repr(twin(**{f.name: getattr(value, f.name) for f in fields}))


def test_repr_matches_attrs_for_nested_values() -> None:
    request = ChatRequest(
        model="sim:echo",
        messages=(Message.user("hi"),),
        max_tokens=5,
    )
    assert repr(request) == attrs_repr(request)
    assert repr(request).startswith("ChatRequest(model='sim:echo', messages=(Message(")
    usage = Usage(input_tokens=3, output_tokens=4)
    assert repr(usage) == attrs_repr(usage)


def test_repr_honours_field_formatters_so_keys_stay_masked() -> None:
    config = ProviderConfig(headers={"Authorization": "Bearer sk-secret-123456"})
    text = repr(config)
    assert "sk-secret-123456" not in text
    assert text == attrs_repr(config)


_COMPILED_ON_THE_CHAT_PATH = """
import inspect, sys
import attrs
from benchmarks.import_time import CHAT
exec(CHAT)
for name, module in sorted(sys.modules.items()):
    if not name.startswith("sluice"):
        continue
    for value in vars(module).values():
        if not (inspect.isclass(value) and value.__module__ == name and attrs.has(value)):
            continue
        own = getattr(value.__dict__.get(sys.argv[1]), "__code__", None)
        if own is not None and own.co_filename.startswith("<attrs generated"):
            print(f"{name}.{value.__qualname__}")
"""
"""Run with a method's name: every attrs class the chat path loads whose own such method attrs
generated and compiled (``import sluice`` alone loads almost nothing: names load on use)."""


def _compiled_on_the_chat_path(method: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _COMPILED_ON_THE_CHAT_PATH, method],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_every_attrs_class_loaded_by_import_sluice_shares_the_repr() -> None:
    """A class whose repr attrs compiles costs ~0.13 ms of ``import sluice``; none may."""
    assert _compiled_on_the_chat_path("__repr__") == []


@attrs.frozen(eq=False, repr=False)
class _Point(Value):
    x: int
    y: int
    label: str = attrs.field(default="", eq=False)
    tag: str = attrs.field(default="", eq=str.lower)
    note: str = attrs.field(default="", hash=False)


@attrs.frozen(repr=False)
class _AttrsPoint(Record):
    """The same fields with attrs' own generated ``__eq__`` and ``__hash__``."""

    x: int
    y: int
    label: str = attrs.field(default="", eq=False)
    tag: str = attrs.field(default="", eq=str.lower)
    note: str = attrs.field(default="", hash=False)


@attrs.frozen(eq=False, repr=False)
class _SubPoint(_Point):
    pass


@attrs.frozen(eq=False, repr=False)
class _One(Value):
    only: tuple[int, ...]


@attrs.frozen(eq=False, repr=False)
class _Empty(Value):
    pass


_PAIRS: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = [
    ((1, 2), (1, 2)),
    ((1, 2), (1, 3)),
    ((1, 2, "a"), (1, 2, "b")),  # label: eq=False
    ((1, 2, "", "X"), (1, 2, "", "x")),  # tag: compared lowered
    ((1, 2, "", "X"), (1, 2, "", "y")),
    ((1, 2, "", "", "n"), (1, 2, "", "", "m")),  # note: compared, not hashed
]


def test_value_compares_and_hashes_as_attrs_generated_methods_do() -> None:
    for left, right in _PAIRS:
        ours = (_Point(*left), _Point(*right))
        theirs = (_AttrsPoint(*left), _AttrsPoint(*right))
        assert (ours[0] == ours[1]) is (theirs[0] == theirs[1]), (left, right)
        assert (ours[0] != ours[1]) is (theirs[0] != theirs[1]), (left, right)
        if ours[0] == ours[1]:
            assert hash(ours[0]) == hash(ours[1])
    assert _Point(1, 2, "", "", "n") != _Point(1, 2, "", "", "m")
    assert hash(_Point(1, 2, "", "", "n")) == hash(_Point(1, 2, "", "", "m"))


def test_value_is_equal_only_to_its_own_class() -> None:
    assert _Point(1, 2) != _SubPoint(1, 2)
    assert _SubPoint(1, 2) == _SubPoint(1, 2)
    assert _Point(1, 2) != (1, 2)
    assert _Point(1, 2).__eq__((1, 2)) is NotImplemented
    assert len({_Point(1, 2), _SubPoint(1, 2), _Point(1, 2)}) == 2


def test_value_with_one_field_or_none() -> None:
    assert _One((1,)) == _One((1,))
    assert _One((1,)) != _One((2,))
    assert hash(_One((1,))) == hash(_One((1,)))
    assert _Empty() == _Empty()
    assert hash(_Empty()) == hash(_Empty())


def test_sluice_values_compare_by_their_fields() -> None:
    assert ProviderConfig(api_key=None) == ProviderConfig(api_key=None)
    assert ProviderConfig(base_url="http://a.test") != ProviderConfig(base_url="http://b.test")
    first = ChatRequest(model="sim:echo", messages=(Message.user("hi"),), max_tokens=5)
    again = ChatRequest(model="sim:echo", messages=(Message.user("hi"),), max_tokens=5)
    assert first == again
    assert first != attrs.evolve(first, max_tokens=6)
    assert Usage(input_tokens=3, output_tokens=4) == Usage(input_tokens=3, output_tokens=4)
    assert len({Usage(1, 2), Usage(1, 2), Usage(2, 1)}) == 2


def test_the_chat_path_compiles_no_eq_outside_the_call_layer() -> None:
    """Every value class on the chat path shares :class:`Value`'s ``__eq__``/``__hash__``,
    except those of the call layer's and the codecs' modules (listed here as they are)."""
    compiled = _compiled_on_the_chat_path("__eq__")
    assert {line.rsplit(".", 1)[0] for line in compiled} <= {
        "sluice._ledger.book",
        "sluice._limits.admission",
        "sluice._limits.cost",
        "sluice._limits.headers",
        "sluice._limits.store",
        "sluice._mail",
        "sluice._protocols.base",
        "sluice._protocols.quirks",
        "sluice._serde",
        "sluice._streams",
    }
