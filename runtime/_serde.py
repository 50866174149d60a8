"""One cattrs converter on orjson for everything that enters or leaves the process as JSON.

Configs, results written by the CLI and batch jobs, and round-trip tests all go through
:data:`converter`; the runtime never serializes messages it passes between actors.
Unknown keys are errors (``forbid_extra_keys``), so a typo in a config file is reported
instead of ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from ._record import Value

if TYPE_CHECKING:
    from collections.abc import Iterable

    from cattrs.preconf.orjson import OrjsonConverter

    from ._messages import ContentPart

__all__ = [
    "EnvText",
    "Secret",
    "format_validation_error",
    "get_converter",
    "unknown_keys_message",
]
# ``converter`` is served lazily by __getattr__ below (kept for ``from sluice._serde import
# converter``).

_converter: OrjsonConverter | None = None


@attrs.frozen(eq=False, repr=False)
class Secret(Value):
    """An API key. Its repr and str never show the value; only :meth:`reveal` does (equal
    and hashed by the value, as :class:`~sluice._record.Value` compares)."""

    _value: str

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__


def get_converter() -> OrjsonConverter:
    """The converter, built on first use: ``import sluice`` does not pay for cattrs."""
    global _converter
    if _converter is None:
        _converter = _build()
    return _converter


def __getattr__(name: str) -> Any:
    if name == "converter":
        return get_converter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_PART_TYPES: dict[str, type[Any]] = {}
"""Each content part's class by its ``type``: filled when the converter is built."""


def _structure_part(value: Any, _: Any) -> ContentPart:
    if not isinstance(value, dict) or value.get("type") not in _PART_TYPES:
        raise ValueError(f"a content part needs a 'type' of {sorted(_PART_TYPES)}")
    part: ContentPart = get_converter().structure(value, _PART_TYPES[value["type"]])
    return part


def _structure_tool_choice(value: Any, _: Any) -> Any:
    from ._messages import SpecificTool

    if value is None or value in ("auto", "required", "none"):
        return value
    if isinstance(value, str):
        return SpecificTool(value)
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return SpecificTool(value["name"])
    raise ValueError("tool_choice must be 'auto', 'required', 'none' or a tool name")


def _build() -> OrjsonConverter:
    from cattrs.preconf.orjson import make_converter
    from cattrs.strategies import configure_union_passthrough

    from ._messages import (
        ContentPart,
        FilePart,
        ImagePart,
        ReasoningPart,
        SpecificTool,
        TextPart,
        ToolCall,
        ToolChoice,
        ToolResultPart,
    )

    _PART_TYPES.update(
        text=TextPart,
        image=ImagePart,
        file=FilePart,
        tool_call=ToolCall,
        tool_result=ToolResultPart,
        reasoning=ReasoningPart,
    )
    converter = make_converter(forbid_extra_keys=True, omit_if_default=False)
    converter.register_structure_hook(ContentPart, _structure_part)
    converter.register_unstructure_hook(SpecificTool, lambda t: {"name": t.name})
    configure_union_passthrough(str | int | float | bool | None, converter)
    converter.register_structure_hook(ToolChoice | None, _structure_tool_choice)
    converter.register_structure_hook(ToolChoice, _structure_tool_choice)
    converter.register_structure_hook(Secret, _structure_secret)
    converter.register_unstructure_hook(Secret, lambda s: "********")
    converter.register_structure_hook_factory(_is_collection, _no_string_for_a_list)
    return converter


class StringForList(TypeError):
    """A string was given where a list is expected."""


def _list_of(type_: Any) -> str:
    args = [a for a in getattr(type_, "__args__", ()) if a is not Ellipsis]
    if len(args) == 1:
        name = getattr(args[0], "__name__", None) or str(args[0])
        return f"a list of {'strings' if args[0] is str else name}"
    return "a list"


class EnvText(str):
    """A value read from an environment variable (see :func:`sluice._config.env_overrides`):
    where a list is expected, it is split at commas, since a shell has no lists."""

    __slots__ = ()


def _is_collection(type_: Any) -> bool:
    from cattrs._compat import is_frozenset, is_mutable_set, is_sequence

    return bool(is_sequence(type_) or is_frozenset(type_) or is_mutable_set(type_))


def _no_string_for_a_list(type_: Any, converter: Any) -> Any:
    """The usual hook for a list, set or homogeneous tuple, refusing a string: iterating one
    would give its characters (``drop_params = "temperature"`` would drop ``t``, ``e``...).
    An :class:`EnvText` is split at commas instead."""
    from cattrs.cols import homogenous_tuple_structure_factory, list_structure_factory

    origin = getattr(type_, "__origin__", type_)
    if origin is tuple:
        inner = homogenous_tuple_structure_factory(type_, converter)
    elif origin is list:
        inner = list_structure_factory(type_, converter)
    elif origin is frozenset:
        inner = converter._structure_frozenset
    else:
        inner = converter._structure_set

    def structure(value: Any, cl: Any) -> Any:
        if isinstance(value, EnvText):
            value = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, str | bytes):
            raise StringForList(
                f"expected {_list_of(type_)}, got the string {value!r}"
                f" (write [{value!r}] for one item)"
            )
        return inner(value, cl)

    return structure


def _structure_secret(value: Any, _: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError("an API key must be a string")
    return Secret(str(value))


def format_validation_error(exc: Exception) -> str:
    """Turn a cattrs validation error into one line per problem, each with its path."""
    import cattrs

    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc, format_exception=_format))
    return str(exc)


def unknown_keys_message(cls: type[Any], extra: Iterable[str]) -> str:
    """``unknown key 'brust' (did you mean 'burst'?); valid keys: burst, ...`` for the keys
    ``extra`` of a mapping structured into the attrs class ``cls``."""
    import difflib  # only a bad config key needs it: not loaded by ``import sluice``

    valid = sorted(a.alias or a.name for a in attrs.fields(cls)) if attrs.has(cls) else []
    parts = []
    for key in sorted(extra):
        close = difflib.get_close_matches(key, valid, n=1)
        parts.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    noun = "key" if len(parts) == 1 else "keys"
    return f"unknown {noun} {', '.join(parts)}; valid keys: {', '.join(valid) or 'none'}"


def _format(exc: BaseException, type_: Any) -> str:
    import cattrs

    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return unknown_keys_message(exc.cl, exc.extra_fields)
    if isinstance(exc, StringForList):
        return str(exc)
    base = cattrs.v.format_exception(exc, type_)
    if isinstance(exc, ValueError | TypeError) and str(exc) and str(exc) not in base:
        return f"{base} ({exc})"
    return base
