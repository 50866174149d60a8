"""Small pieces every request builder needs: JSON encoding and tool-call arguments."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError

if TYPE_CHECKING:
    from .._messages import ToolCall

__all__ = ["arguments_object", "to_json"]


def to_json(value: object) -> object:
    """orjson's fallback: read-only mappings (schemas handed in by users) become dicts."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot send a {type(value).__name__} in a request body")


def arguments_object(call: ToolCall, provider: str) -> dict[str, Any]:
    """A tool call's arguments as the JSON object that ``provider``'s protocol carries.

    Raises:
        ConfigError: the arguments are not JSON, or not an object.
    """
    try:
        value = call.parsed_arguments()
    except ValueError:
        raise ConfigError(
            f"the arguments of tool call {call.id!r} are not JSON, and {provider} needs them "
            "as an object"
        ) from None
    if type(value) is not dict:
        raise ConfigError(f"the arguments of tool call {call.id!r} are not a JSON object")
    return value
