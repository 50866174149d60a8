"""Which providers exist, and how a ``provider:model`` string becomes a backend to call.

A name is looked up among the builtins (:mod:`.builtins`), then the plugins (:mod:`.plugins`);
a name that is neither is a custom provider, which the config must give a ``base_url``. The
config's entry for the name is laid over the definition (:func:`resolve_provider`); the key
comes from the config, else the environment, else the key store (:mod:`.keys`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from .._config import (
    BreakerConfig,
    ProviderConfig,
    RateLimitConfig,
    RuntimeConfig,
    Secret,
    masked_headers,
)
from .._errors import ConfigError
from .._messages import Deadlines
from .._protocols.quirks import NO_QUIRKS, RequestQuirks
from .._record import Value, late_names
from .._tool_capabilities import OPENAI_COMPATIBLE_CUSTOM, ToolCapabilities
from . import _builtins
from ._builtins import BUILTIN_BY_ID
from ._definition import (
    DEFAULT_AUTH,
    OPENAI_FAMILY,
    AuthStyle,
    ModelInfo,
    ProviderDefinition,
    auth_header,
    protocol_capabilities,
    same_server_protocol,
    suffix_capabilities,
)
from ._params import merge_params

if TYPE_CHECKING:
    from .._capabilities import CapabilityOverride as CapabilityOverride  # noqa: TC004
    from . import _plugins as _plugins
    from ._keys import KeyStore

__all__ = [
    "BUILTIN_PROVIDERS",
    "ProviderDefinition",
    "ResolvedProvider",
    "definition_for",
    "known_providers",
    "resolve_provider",
]

BUILTIN_PROVIDERS: Mapping[str, ProviderDefinition] = BUILTIN_BY_ID
"""Every builtin provider by id (and by its older aliases)."""

KeySource = Literal["config", "env", "store", "none"]


def __getattr__(name: str) -> Any:
    # A model's capability override loads with the first one a config sets (a plain config
    # sets none) and stays a name here, so ResolvedProvider's annotations resolve.
    if name == "CapabilityOverride":
        from .._capabilities import CapabilityOverride

        globals()[name] = CapabilityOverride
        return CapabilityOverride
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_log = logging.getLogger("sluice.providers._registry")


@late_names("CapabilityOverride")
@attrs.frozen(eq=False, kw_only=True, repr=False)
class ResolvedProvider(Value):
    """Everything a ProviderActor needs to reach one backend. No key shows in its repr."""

    name: str
    protocol: str
    base_url: str | None
    """None only for an in-process provider (``sim``) without a URL: the runtime serves it."""
    api_key: Secret | None
    """The key as the codec sends it, in its protocol's own header. None when there is no key,
    or when ``auth`` puts it in another header; it is then in ``headers``."""
    headers: Mapping[str, str] = attrs.field(repr=masked_headers)
    rate_limit: RateLimitConfig
    breaker: BreakerConfig | None
    deadlines: Deadlines
    connect_timeout: float
    max_connections: int
    transport: str = "fast"
    display_name: str = ""
    auth: AuthStyle = "bearer"
    key_source: KeySource = "none"
    """Where the key came from (``store``: the encrypted key store)."""
    custom_base_url: bool = False
    """The base URL is the config's, not the builtin's (or the provider is a custom one)."""
    capabilities: ToolCapabilities = OPENAI_COMPATIBLE_CUSTOM
    """What the backend can do with tools: the known defaults with the config's
    ``providers.NAME.tools`` applied (before per-model overrides)."""
    model_capabilities: Mapping[str, ToolCapabilities] = attrs.field(factory=dict, repr=False)
    """The definition's rules by model-name suffix (:attr:`ProviderDefinition.model_capabilities`),
    when its capabilities hold here."""
    model_tools: Mapping[str, CapabilityOverride] = attrs.field(factory=dict, repr=False)
    """Per model (name without provider prefix): the config's ``models.NAME.tools``, laid
    over everything else."""
    quirks: RequestQuirks = NO_QUIRKS
    params: Mapping[str, Any] = attrs.field(factory=dict)
    """Generation parameters for every call (the definition's, then the config's)."""
    model_params: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    """Per model (name without provider prefix): the config's ``models.NAME.params``."""
    model_protocols: Mapping[str, str] = attrs.field(factory=dict)
    """Per model (name without provider prefix): the config's ``models.NAME.protocol``, where
    it differs from :attr:`protocol` (OpenAI's other API for that model)."""
    drop_params: frozenset[str] = frozenset()
    models: tuple[ModelInfo, ...] = attrs.field(default=(), repr=False)
    lists_models: bool = True
    definition: ProviderDefinition | None = attrs.field(default=None, repr=False)
    """The builtin or plugin definition; None for a custom provider."""

    def quota_key(self, model: str) -> str:
        """The RateLimiter key: the provider account, or account and model (``rate_limit.key``)."""
        return f"{self.name}:{model}" if self.rate_limit.key == "model" else self.name

    def tool_capabilities(self, model: str) -> ToolCapabilities:
        """What ``model`` (no provider prefix) can do with tools here: its suffix rule, else
        :attr:`capabilities`; then the config's entry for the model
        (``providers.NAME.models.MODEL.tools``). A call's own ``ToolOptions.capabilities``
        goes over this when its tools are prepared."""
        found = suffix_capabilities(self.model_capabilities, model) or self.capabilities
        entry = self.model_tools.get(model)
        return found if entry is None else found.merged(entry)


def _merge_deadlines(base: Deadlines, override: Deadlines | None) -> Deadlines:
    if override is None:
        return base
    return Deadlines(
        total=override.total if override.total is not None else base.total,
        first_token=override.first_token if override.first_token is not None else base.first_token,
        idle=override.idle if override.idle is not None else base.idle,
    )


def definition_for(
    name: str, plugins: _plugins.PluginProviders | None = None
) -> ProviderDefinition | None:
    """The builtin or plugin definition named ``name`` (plugins are loaded on first need)."""
    found = BUILTIN_BY_ID.get(name)
    if found is not None:
        return found
    if plugins is None:
        plugins = _installed_plugins(frozenset(BUILTIN_BY_ID))
    return plugins.definitions.get(name)


def known_providers(
    config: RuntimeConfig, plugins: _plugins.PluginProviders | None = None
) -> dict[str, tuple[str, ProviderDefinition | None]]:
    """Every provider name known here, in listing order: builtins, plugins, then the config's
    custom ones; each with its source (``builtin``, ``plugin``, ``custom``) and definition."""
    if plugins is None:
        plugins = _installed_plugins(frozenset(BUILTIN_BY_ID))
    found: dict[str, tuple[str, ProviderDefinition | None]] = {
        d.id: ("builtin", d) for d in _builtins.BUILTINS
    }
    for name, definition in plugins.definitions.items():
        found.setdefault(name, ("plugin", definition))
    for name in config.providers:
        if name not in found and name not in BUILTIN_BY_ID:
            found[name] = ("custom", None)
    return found


def resolve_provider(
    name: str,
    config: RuntimeConfig,
    environ: Mapping[str, str] | None = None,
    *,
    plugins: _plugins.PluginProviders | None = None,
    key_store: KeyStore | None = None,
) -> ResolvedProvider:
    """Combine the definition (builtin or plugin, if any) with the config's entry for ``name``.

    Args:
        environ: where keys and ``OLLAMA_HOST``-style variables are read (default
            ``os.environ``).
        plugins: the plugin providers (default: those of the installed packages).
        key_store: consulted when neither the config nor the environment has a key (default:
            the store in the platform directories, :meth:`KeyStore.default`).

    Raises:
        ConfigError: the provider is unknown and has no ``base_url`` in the config; it has no
            base URL at all; its ``region`` is unknown; it needs a key and none is configured,
            set in its environment variable or stored; or a stored key does not decrypt.
    """
    env = os.environ if environ is None else environ
    user = config.providers.get(name)
    definition = BUILTIN_BY_ID.get(name)
    if definition is None and (user is None or user.base_url is None):
        definition = definition_for(name, plugins)
    if user is None and definition is not None:
        user = config.providers.get(definition.id)
    user = user or ProviderConfig()
    if definition is None and user.base_url is None:
        raise ConfigError(_unknown(name, plugins))
    protocol = _protocol(name, definition, user)
    base_url = _base_url(name, definition, user, env, protocol)
    custom_url = definition is None or user.base_url is not None
    auth = _auth_style(definition, user, protocol)
    key, source = _key(name, definition, user, env, key_store, auth, custom_url)
    headers, codec_key = _headers_and_key(definition, user, auth, protocol, key)
    _log.debug(
        "provider %s: %s protocol at %s, auth %s, key from %s",
        *(name, protocol, base_url or "(simulator)", auth, source),
    )
    capabilities, model_capabilities = _capabilities(definition, protocol, custom_url)
    if user.tools is not None:
        capabilities = capabilities.merged(user.tools)
        model_capabilities = {k: v.merged(user.tools) for k, v in model_capabilities.items()}
    model_list = definition.models if definition else ()
    known = {m.id for m in model_list}
    model_list += tuple(ModelInfo(m) for m in user.models if m not in known)
    return ResolvedProvider(
        name=name,
        protocol=protocol,
        base_url=base_url.rstrip("/") if base_url else None,
        api_key=codec_key,
        headers=headers,
        rate_limit=user.rate_limit,
        breaker=user.breaker,
        deadlines=_merge_deadlines(config.deadlines, user.deadlines),
        connect_timeout=user.connect_timeout,
        max_connections=user.max_connections,
        transport=user.transport,
        display_name=user.display_name or (definition.display_name if definition else name),
        auth=auth,
        key_source=source,
        custom_base_url=custom_url,
        capabilities=capabilities,
        model_capabilities=model_capabilities,
        quirks=_quirks(definition, protocol, user),
        params=merge_params(definition.params if definition else None, user.params),
        model_params={m: dict(c.params) for m, c in user.models.items() if c.params},
        model_protocols=_model_protocols(name, protocol, user),
        model_tools={m: c.tools for m, c in user.models.items() if c.tools is not None},
        drop_params=(definition.drop_params if definition else frozenset()) | user.drop_params,
        models=model_list,
        lists_models=definition.lists_models if definition and not custom_url else True,
        definition=definition,
    )


def _protocol(name: str, definition: ProviderDefinition | None, user: ProviderConfig) -> str:
    """The protocol the provider speaks: the config's, else the definition's, else OpenAI's.

    Raises:
        ConfigError: an Azure ``api_version`` with another protocol than OpenAI's.
    """
    protocol = user.protocol or (definition.protocol if definition else "openai")
    if user.api_version is not None and protocol not in OPENAI_FAMILY:
        raise ConfigError(
            f"providers.{name}.api_version is Azure OpenAI's deployment API, which speaks the "
            f'openai protocols, not {protocol!r}: drop api_version or set protocol = "openai"'
        )
    return protocol


def _model_protocols(name: str, protocol: str, user: ProviderConfig) -> dict[str, str]:
    """The models of ``user`` configured to speak another protocol than the provider's.

    Raises:
        ConfigError: a model's protocol on a provider outside OpenAI's family (one server
            speaks both OpenAI APIs; no server speaks another protocol for one model).
    """
    found: dict[str, str] = {}
    for model, config in user.models.items():
        if config.protocol is None or config.protocol == protocol:
            continue
        if protocol not in OPENAI_FAMILY:
            raise ConfigError(
                f"providers.{name}.models.{model}.protocol: a model can choose between OpenAI's "
                f"two APIs (openai, openai-responses), and provider {name!r} speaks {protocol!r}"
            )
        found[model] = config.protocol
    return found


def _key(
    name: str,
    definition: ProviderDefinition | None,
    user: ProviderConfig,
    env: Mapping[str, str],
    key_store: KeyStore | None,
    auth: AuthStyle,
    custom_url: bool,
) -> tuple[Secret | None, KeySource]:
    """The provider's key and where it came from (``none`` when it takes no key).

    Raises:
        ConfigError: a builtin provider at its own URL needs a key and none is found.
    """
    if auth == "none":
        return None, "none"
    key, source = _find_key(name, definition, user, env, key_store)
    needs_key = definition is not None and definition.needs_key and not custom_url
    if key is None and needs_key:
        raise ConfigError(_missing_key(name, definition, user))
    return key, source


def _auth_style(
    definition: ProviderDefinition | None, user: ProviderConfig, protocol: str
) -> AuthStyle:
    """How the key is sent: the config's choice, else the definition's (for its own
    protocol), else Azure's ``api-key`` with an ``api_version``, else the protocol's way."""
    return (
        user.auth
        or (
            definition.auth_style
            if definition and same_server_protocol(definition.protocol, protocol)
            else None
        )
        or ("api-key" if user.api_version is not None else None)
        or DEFAULT_AUTH[protocol]
    )


def _headers_and_key(
    definition: ProviderDefinition | None,
    user: ProviderConfig,
    auth: AuthStyle,
    protocol: str,
    key: Secret | None,
) -> tuple[dict[str, str], Secret | None]:
    """The provider's extra headers (the definition's, then the config's, names lowercased)
    and the key its codec sends: None when the key goes in a header of another auth style,
    which is then among the headers."""
    headers: dict[str, str] = {}
    for header, value in [
        *(definition.headers if definition else {}).items(),
        *user.headers.items(),
    ]:
        headers[header.lower()] = value
    if key is None or auth == DEFAULT_AUTH[protocol]:
        return headers, key
    extra = auth_header(auth, key.reveal())
    if extra is not None:
        headers[extra[0]] = extra[1]
    return headers, None


def _unknown(name: str, plugins: _plugins.PluginProviders | None) -> str:
    known = ", ".join(d.id for d in _builtins.BUILTINS)
    message = (
        f"unknown provider {name!r}: builtin providers are {known}; for any other server "
        f"give providers.{name}.base_url (and protocol, unless it is OpenAI-compatible) in the "
        "config (or --base-url on the command line)"
    )
    loaded = plugins or _installed_plugins(frozenset(BUILTIN_BY_ID))
    if loaded.problems:
        message += "; " + "; ".join(str(p) for p in loaded.problems)
    return message


def _base_url(
    name: str,
    definition: ProviderDefinition | None,
    user: ProviderConfig,
    env: Mapping[str, str],
    protocol: str,
) -> str | None:
    if user.base_url is not None:
        url: str | None = user.base_url
    elif user.region is not None:
        regions = dict(definition.regions) if definition else {}
        if definition is not None and definition.base_url is not None:
            regions.setdefault("default", definition.base_url)
        if user.region not in regions:
            choices = ", ".join(sorted(regions)) or "none"
            raise ConfigError(
                f"providers.{name}.region: unknown region {user.region!r}; "
                f"{name} has the regions: {choices}"
            )
        url = regions[user.region]
    elif definition is not None and definition.base_url_env and env.get(definition.base_url_env):
        url = _host_url(env[definition.base_url_env])
    else:
        url = definition.base_url if definition else None
    if url is None and (definition is None or not definition.in_process):
        raise ConfigError(
            f"provider {name!r} has no base URL: give providers.{name}.base_url in the config "
            "(or --base-url on the command line)"
        )
    if url is not None and protocol == "ollama":
        url = url.rstrip("/").removesuffix("/v1")
    return url


def _host_url(value: str) -> str:
    """An ``OLLAMA_HOST`` style value as a URL: ``host[:port]`` gets ``http://`` and port
    11434 (a URL with a scheme keeps its own default port); ``0.0.0.0`` means this machine."""
    value = value.strip().rstrip("/")
    scheme, sep, rest = value.partition("://")
    if not sep:
        scheme, rest = "http", value
    host, _, path = rest.partition("/")
    if host.startswith("0.0.0.0"):
        host = "127.0.0.1" + host.removeprefix("0.0.0.0")
    if not sep and ":" not in host.rsplit("]", 1)[-1]:
        host += ":11434"
    return f"{scheme}://{host}" + (f"/{path}" if path else "")


def _find_key(
    name: str,
    definition: ProviderDefinition | None,
    user: ProviderConfig,
    env: Mapping[str, str],
    key_store: KeyStore | None,
) -> tuple[Secret | None, KeySource]:
    if user.api_key is not None:
        return user.api_key, "config"
    names = ((user.api_key_env,) if user.api_key_env else ()) + (
        definition.key_env if definition else ()
    )
    for var in names:
        if env.get(var):
            return Secret(env[var]), "env"
    if key_store is None:
        from ._keys import KeyStore  # only a provider without a key in config or environment

        key_store = KeyStore.default(env)
    if key_store.exists():
        for entry in dict.fromkeys((name, *((definition.id,) if definition else ()))):
            key = key_store.get(entry)
            if key is not None:
                return key, "store"
    return None, "none"


def _missing_key(name: str, definition: ProviderDefinition | None, user: ProviderConfig) -> str:
    names = ((user.api_key_env,) if user.api_key_env else ()) + (
        definition.key_env if definition else ()
    )
    where = " or ".join(names) if names else "an environment variable"
    return (
        f"provider {name!r} needs an API key: set {where}, store one with "
        f"`sluice keys set {name}`, or give providers.{name}.api_key in the config "
        "(or --api-key on the command line)"
    )


def _capabilities(
    definition: ProviderDefinition | None, protocol: str, custom_url: bool
) -> tuple[ToolCapabilities, Mapping[str, ToolCapabilities]]:
    """The provider's tool capabilities and its per-model rules: the definition's, unless
    another protocol or (for OpenAI-compatible ones) another server is configured."""
    if definition is not None and definition.in_process:
        return definition.tool_capabilities, definition.model_capabilities
    if definition is None or not same_server_protocol(definition.protocol, protocol):
        return protocol_capabilities(protocol), {}
    if custom_url and protocol in OPENAI_FAMILY:
        return OPENAI_COMPATIBLE_CUSTOM, {}
    return definition.tool_capabilities, definition.model_capabilities


def _quirks(
    definition: ProviderDefinition | None, protocol: str, user: ProviderConfig
) -> RequestQuirks:
    same = definition is not None and same_server_protocol(definition.protocol, protocol)
    quirks = definition.quirks if definition is not None and same else NO_QUIRKS
    if definition is not None and user.base_url is not None:
        # Another server at the builtin's name: keep what describes the models (reasoning
        # echo), not what describes the builtin's own server.
        quirks = attrs.evolve(quirks, max_tokens_field="max_tokens")
    override = user.quirks
    if override is not None:
        changes = {
            a.name: getattr(override, a.name)
            for a in attrs.fields(type(override))
            if getattr(override, a.name) is not None
        }
        quirks = attrs.evolve(quirks, **changes)
    if user.api_version is not None:
        quirks = attrs.evolve(quirks, azure_api_version=user.api_version)
    return quirks


def _installed_plugins(builtin_ids: frozenset[str]) -> _plugins.PluginProviders:
    """The plugin providers; the entry-point machinery is imported only when asked."""
    from . import _plugins as plugins

    return plugins.installed_plugins(builtin_ids)
