"""Helpers shared by the tests."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

P = ParamSpec("P")
T = TypeVar("T")


def virtual_deadline(
    seconds: float,
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
    """Fail the test if it runs longer than ``seconds`` of trio time."""

    def decorate(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            with trio.fail_after(seconds):
                return await fn(*args, **kwargs)

        return wrapper

    return decorate
