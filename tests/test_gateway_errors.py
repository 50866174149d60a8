"""Every error of the error tree goes out with the status the gateway documents for it.

The table of statuses in ``sluice._gateway.errors``' docstring is checked against
``answer_for``/``response_for`` for every ``SluiceError`` subclass sluice defines (so a new
error class needs a documented row), in both wire formats, with and without an upstream
status. Pure: no server, no clock.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import orjson
import pytest

import sluice
import sluice._gateway.errors as gateway_errors
from sluice._errors import CallError, SluiceError
from sluice._gateway.errors import ANSWERS, answer_for, response_for

_ROW = re.compile(r"^    ([A-Z]\w+) +(\d{3})(.*)$", re.MULTILINE)
_WHEN = re.compile(r"(\d{3}) when (?:the upstream|it) said (\d{3}|4xx)")
_ANTHROPIC = re.compile(r"Anthropic clients: (\d{3})")


def _documented() -> dict[str, tuple[int, dict[int | None, int], int | None]]:
    """``{class: (status, {upstream status: status}, Anthropic status)}`` from the docstring."""
    doc = gateway_errors.__doc__ or ""
    found = {}
    for name, status, rest in _ROW.findall(doc):
        upstream: dict[int | None, int] = {}
        for answer, said in _WHEN.findall(rest):
            said_codes = (400, 404, 408, 409, 422, 499) if said == "4xx" else (int(said),)
            upstream.update(dict.fromkeys(said_codes, int(answer)))
        anthropic = _ANTHROPIC.search(rest)
        found[name] = (int(status), upstream, int(anthropic.group(1)) if anthropic else None)
    return found


def _classes() -> dict[str, type[SluiceError]]:
    """Every subclass of SluiceError sluice defines, in any module (those that need an optional
    package not installed aside)."""
    for module in pkgutil.walk_packages(sluice.__path__, "sluice."):
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.startswith("sluice"):
                raise
    found: dict[str, type[SluiceError]] = {"SluiceError": SluiceError}
    todo: list[type[SluiceError]] = [SluiceError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("sluice."):
                found[sub.__name__] = sub
                todo.append(sub)
    return found


def _error(cls: type[SluiceError], upstream: int | None) -> SluiceError:
    if issubclass(cls, CallError):
        return cls("it went wrong", status=upstream, retry_after=2.5)
    return cls("it went wrong")


def test_every_error_class_has_a_documented_row():
    assert sorted(_documented()) == sorted(_classes())


@pytest.mark.parametrize("name", sorted(_classes()))
def test_every_error_maps_to_its_documented_status(name):
    cls = _classes()[name]
    status, by_upstream, anthropic = _documented()[name]
    cases: dict[int | None, int] = {None: status, 200: status}
    cases.update(by_upstream)
    if issubclass(cls, CallError):
        # An upstream status the row does not name leaves the class's own answer.
        cases.setdefault(404, status)
        cases.setdefault(500, status)
    for upstream, expected in cases.items():
        if upstream is not None and not issubclass(cls, CallError):
            continue
        exc = _error(cls, upstream)
        assert answer_for(exc).status == expected, (name, upstream)
        openai_status, headers, body = response_for("openai", exc)
        assert openai_status == expected
        assert orjson.loads(body)["error"]["message"] == "it went wrong"
        claude_status, _, claude_body = response_for("anthropic", exc)
        wanted = anthropic if anthropic is not None else expected
        assert claude_status == wanted
        assert orjson.loads(claude_body)["type"] == "error"
        if isinstance(exc, CallError):  # the wait the provider asked for reaches the client
            assert (b"retry-after", b"3") in headers
            assert (b"retry-after-ms", b"2500") in headers


def test_only_a_spent_budget_and_a_key_too_large_say_do_not_retry():
    refusing = {n for n, c in _classes().items() if not answer_for(_error(c, None)).retry}
    assert refusing == {"BudgetExceeded"}
    too_large = gateway_errors.KeyTooLarge("needs 9000 tokens")
    assert (b"x-should-retry", b"false") in response_for("openai", too_large)[1]


def test_every_row_is_reachable():
    """No row hides behind an earlier, wider one (the first match wins)."""
    for number, row in enumerate(ANSWERS):
        for earlier in ANSWERS[:number]:
            covers = issubclass(row.kind, earlier.kind) and earlier.upstream is None
            assert not covers, f"{row.kind.__name__} is hidden by {earlier.kind.__name__}"
