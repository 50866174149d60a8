"""What a provider is: :class:`ProviderDefinition`, the shape of builtin and plugin providers.

A definition is a value with everything sluice knows about a backend before the user's config
and keys are applied: its wire protocol, where it lives, how it wants the key, its models, what
it can do with tools, and how its server deviates from its protocol (:class:`RequestQuirks`).
:func:`sluice.providers._registry.resolve_provider` turns one, plus the config, into a
:class:`~sluice.providers._registry.ResolvedProvider`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from .._checks import check_env_name, check_env_names, check_http_url
from .._protocols.quirks import NO_QUIRKS, RequestQuirks
from .._record import Value, late_names
from .._tool_capabilities import (
    ANTHROPIC,
    GEMINI,
    OLLAMA,
    OPENAI_COMPATIBLE_CUSTOM,
    ToolCapabilities,
)

if TYPE_CHECKING:
    from .._config.embed_limits import EmbedLimits  # noqa: TC004 (served below, PEP 562)

__all__ = [
    "AUTH_STYLES",
    "DEFAULT_AUTH",
    "OPENAI_FAMILY",
    "PROTOCOLS",
    "AuthStyle",
    "ModelInfo",
    "Protocol",
    "ProviderDefinition",
    "auth_header",
    "models",
    "protocol_capabilities",
    "same_server_protocol",
    "suffix_capabilities",
]


def __getattr__(name: str) -> Any:
    # EmbedLimits loads with the first definition that sets them (or the first embedding call)
    # and stays a name here, so the annotation of ``embed_limits`` resolves for cattrs.
    if name == "EmbedLimits":
        from .._config.embed_limits import EmbedLimits

        globals()[name] = EmbedLimits
        return EmbedLimits
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


Protocol = Literal["openai", "openai-responses", "anthropic", "gemini", "ollama"]
AuthStyle = Literal["bearer", "x-api-key", "x-goog-api-key", "api-key", "none"]
"""Where the key goes: ``Authorization: Bearer``, one of three key headers, or nowhere."""

PROTOCOLS: Final[tuple[Protocol, ...]] = (
    "openai",
    "openai-responses",
    "anthropic",
    "gemini",
    "ollama",
)
OPENAI_FAMILY: Final = frozenset({"openai", "openai-responses"})
"""OpenAI's two APIs, chat completions and Responses: one server, one key, one set of models,
so a builtin OpenAI-compatible provider switched to the other keeps what describes it."""
AUTH_STYLES: Final[tuple[AuthStyle, ...]] = (
    "bearer",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "none",
)
DEFAULT_AUTH: Final[Mapping[str, AuthStyle]] = {
    "openai": "bearer",
    "openai-responses": "bearer",
    "anthropic": "x-api-key",
    "gemini": "x-goog-api-key",
    "ollama": "bearer",
}
"""The header each protocol's codec puts the key in."""

_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def auth_header(style: AuthStyle, key: str) -> tuple[str, str] | None:
    """The header that carries ``key`` for ``style`` (None for ``none``)."""
    if style == "none":
        return None
    if style == "bearer":
        return ("authorization", f"Bearer {key}")
    return (style, key)


def protocol_capabilities(protocol: str) -> ToolCapabilities:
    """The tool capabilities assumed for an unknown server speaking ``protocol``."""
    return {"anthropic": ANTHROPIC, "gemini": GEMINI, "ollama": OLLAMA}.get(
        protocol, OPENAI_COMPATIBLE_CUSTOM
    )


def same_server_protocol(defined: str, configured: str) -> bool:
    """Whether a provider defined with protocol ``defined`` and configured to speak
    ``configured`` still talks to the server its definition describes (the same protocol, or
    OpenAI's other API): then its auth, quirks and capabilities hold."""
    return defined == configured or (defined in OPENAI_FAMILY and configured in OPENAI_FAMILY)


def suffix_capabilities(
    rules: Mapping[str, ToolCapabilities], model: str
) -> ToolCapabilities | None:
    """The entry of ``rules`` whose key ``model`` ends in (the longest such key); None when no
    key matches, so the provider's own capabilities hold."""
    best: str | None = None
    for suffix in rules:
        if model.endswith(suffix) and (best is None or len(suffix) > len(best)):
            best = suffix
    return None if best is None else rules[best]


@attrs.frozen(eq=False, repr=False)
class ModelInfo(Value):
    """One model a provider is known to serve. None means unknown."""

    id: str
    vision: bool | None = None
    """Accepts images."""
    reasoning: bool | None = None
    """Thinks before answering (reasoning text, or hidden reasoning tokens)."""


def models(
    *ids: str, vision: Iterable[str] | bool = (), reasoning: Iterable[str] | bool = ()
) -> tuple[ModelInfo, ...]:
    """Model entries for ``ids``; ``vision`` and ``reasoning`` name the ids that have the
    feature (True: all of them)."""
    seeing = set(ids) if vision is True else set(vision or ())
    thinking = set(ids) if reasoning is True else set(reasoning or ())
    unknown = (seeing | thinking) - set(ids)
    if unknown:
        raise ValueError(f"features given for models not listed: {sorted(unknown)}")
    return tuple(ModelInfo(i, i in seeing, i in thinking) for i in ids)


def _check_id(_: Any, attribute: attrs.Attribute[str], value: str) -> None:
    if not _ID.match(value):
        raise ValueError(
            f"provider id {value!r} must be lower case letters, digits, '.', '_' or '-'"
        )


def _check_protocol(_: Any, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in PROTOCOLS:
        raise ValueError(f"protocol {value!r} is not one of {', '.join(PROTOCOLS)}")


def _check_auth(_: Any, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and value not in AUTH_STYLES:
        raise ValueError(f"auth {value!r} is not one of {', '.join(AUTH_STYLES)}")


@late_names("EmbedLimits")
@attrs.frozen(eq=False, kw_only=True, repr=False)
class ProviderDefinition(Value):
    """Everything known about one provider before config and keys are applied.

    Plugins return these (see :mod:`sluice.providers._plugins`); the builtin table is a tuple of
    them (:mod:`sluice.providers._builtins`).
    """

    id: str = attrs.field(validator=_check_id)
    display_name: str
    protocol: Protocol = attrs.field(default="openai", validator=_check_protocol)
    base_url: str | None = attrs.field(validator=check_http_url)
    """With the protocol's version prefix (``.../v1``, Gemini's ``.../v1beta``; Ollama's has
    none). None: the user must give one, unless the provider is :attr:`in_process`."""
    base_url_env: str | None = attrs.field(default=None, validator=check_env_name)
    """An environment variable whose value, when set, replaces ``base_url`` (``OLLAMA_HOST``)."""
    regions: Mapping[str, str] = attrs.field(factory=dict)
    """Other base URLs by region name (``intl``, ``us``); the config picks one with
    ``region``."""
    auth: AuthStyle | None = attrs.field(default=None, validator=_check_auth)
    """None: the protocol's own (:data:`DEFAULT_AUTH`)."""
    key_env: tuple[str, ...] = attrs.field(default=(), validator=check_env_names)
    """Environment variables that may hold the key, tried in order."""
    needs_key: bool = True
    """False for local servers (a key is still sent if one is found)."""
    key_prefix: str = ""
    """How its keys start (``sk-``), shown in masked listings."""
    local: bool = False
    in_process: bool = False
    """Served by the runtime itself when no base URL is configured (the simulator): its
    capabilities describe its software, so they also hold at any configured base URL."""
    headers: Mapping[str, str] = attrs.field(factory=dict)
    """Sent with every request (attribution headers); the config's win."""
    models: tuple[ModelInfo, ...] = ()
    """Known models; the first is the one ``sluice providers check`` tries."""
    lists_models: bool = True
    """The server answers the protocol's list-models request (coding plans do not)."""
    capabilities: ToolCapabilities | None = None
    """None: the protocol's assumption (:func:`protocol_capabilities`)."""
    model_capabilities: Mapping[str, ToolCapabilities] = attrs.field(factory=dict)
    """Capabilities by model-name suffix: a model whose name ends in a key can do what that
    key's entry says instead of ``capabilities`` (the longest matching key wins). The
    simulator's ``...notools`` models are one such rule."""
    quirks: RequestQuirks = NO_QUIRKS
    params: Mapping[str, Any] = attrs.field(factory=dict)
    """Generation parameters for every call (under the config's and the call's)."""
    drop_params: frozenset[str] = frozenset()
    """Parameters the server rejects."""
    aliases: tuple[str, ...] = ()
    """Older ids that name this provider too."""
    embed_limits: EmbedLimits | None = None
    """How much one embedding request may hold, where the provider differs from its
    protocol's usual limits (see :func:`sluice.providers._embedding.embed_limits`)."""
    batch_api: Literal["openai", "anthropic"] | None = None
    """The provider's batch API, if it has one: ``openai`` (Files + Batches, at
    ``{base_url}/files`` and ``{base_url}/batches``) or ``anthropic`` (Message Batches).
    ``sluice batch --via provider`` runs the lines of a provider without one on the realtime
    lane."""

    @property
    def auth_style(self) -> AuthStyle:
        return self.auth or DEFAULT_AUTH[self.protocol]

    @property
    def tool_capabilities(self) -> ToolCapabilities:
        return self.capabilities or protocol_capabilities(self.protocol)

    def capabilities_for(self, model: str) -> ToolCapabilities:
        """What ``model`` (no provider prefix) can do with tools at this provider's own server:
        its rule in :attr:`model_capabilities`, else :attr:`tool_capabilities`."""
        return suffix_capabilities(self.model_capabilities, model) or self.tool_capabilities
