"""Loading a :class:`~sluice._config.runtime.RuntimeConfig`: from text or a mapping
(:func:`load_config`), from a file (:func:`load_config_file`), and from the environment
(:func:`config_from_env`, :func:`env_overrides`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from .._errors import ConfigError
from .._serde import EnvText, format_validation_error, get_converter
from .groups import Deployment, ModelGroup
from .runtime import RuntimeConfig

if TYPE_CHECKING:
    from cattrs.preconf.orjson import OrjsonConverter

__all__ = [
    "config_from_env",
    "default_config_path",
    "env_overrides",
    "load_config",
    "load_config_file",
]


def load_config(
    raw: bytes | str | Mapping[str, Any], *, format: Literal["json", "toml"] = "json"
) -> RuntimeConfig:
    """Load a config from JSON (or TOML) text or an already parsed mapping.

    Raises:
        ConfigError: the text does not parse, or a key or value is wrong (the message names the
            path of each problem, and for an unknown key the valid keys).
    """
    return _structure(_parse(raw, format) if isinstance(raw, bytes | str) else raw)


def _parse(raw: bytes | str, format: Literal["json", "toml"]) -> Any:
    if format == "toml":
        import tomllib  # only config files use it: not loaded by ``import sluice``

        try:
            return tomllib.loads(raw.decode() if isinstance(raw, bytes) else raw)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config is not valid TOML: {exc}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"config is not valid JSON: {exc}") from None


def _structure(data: Any, note: str = "") -> RuntimeConfig:
    import cattrs  # on first use: `import sluice` does not load it

    try:
        return _config_converter().structure(data, RuntimeConfig)
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        raise ConfigError(f"invalid config: {format_validation_error(exc)}{note}") from None


_shorthands_added = False


def _config_converter() -> OrjsonConverter:
    """The converter, taught the config's shorthands before it first builds a config's hooks.

    A config file may name a deployment by its ``"provider:model"`` string and a group by the
    list of its deployments (``fast = ["openai:gpt-4o-mini", "groq:llama-3.1-8b"]``), as the
    classes themselves accept; cattrs would otherwise ask every entry for mapping keys.
    """
    global _shorthands_added
    converter = get_converter()
    if not _shorthands_added:
        deployment = converter.get_structure_hook(Deployment)
        converter.register_structure_hook(
            Deployment, lambda v, t: Deployment(model=v) if isinstance(v, str) else deployment(v, t)
        )
        group = converter.get_structure_hook(ModelGroup)  # built after, so it uses the above
        converter.register_structure_hook(
            ModelGroup,
            lambda v, t: ModelGroup(deployments=v) if isinstance(v, list) else group(v, t),
        )
        _shorthands_added = True
    return converter


def default_config_path() -> Path:
    """``config.toml`` in the platform's config directory (``~/.config/sluice`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_config_dir("sluice")) / "config.toml"


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The config entries set by environment variables, as a nested mapping.

    ``SLUICE_`` followed by a path whose parts are joined by ``__`` sets that entry:
    ``SLUICE_PROVIDERS__OPENAI__BASE_URL=http://...`` sets ``providers.openai.base_url`` and
    ``SLUICE_RETRY__MAX_ATTEMPTS=2`` sets ``retry.max_attempts``. Parts are lower-cased, and in
    a provider's name ``_`` stands for ``-`` (``SLUICE_PROVIDERS__KIMI_CN__REGION``). A value
    that parses as JSON (a number, ``true``, a list, an object) is that value, anything else
    the string itself; where the entry is a list, such a string is split at commas
    (``SLUICE_PROVIDERS__VLLM__DROP_PARAMS=seed,top_p``). Variables without ``__``
    (``SLUICE_CONFIG``, ``SLUICE_MASTER_KEY``) are not overrides.
    """
    env = os.environ if environ is None else environ
    found: dict[str, Any] = {}
    for name in sorted(env):
        if not name.startswith("SLUICE_") or "__" not in name:
            continue
        path = [part.lower() for part in name.removeprefix("SLUICE_").split("__")]
        if not all(path):
            raise ConfigError(f"environment variable {name}: empty part in the config path")
        if path[0] == "providers" and len(path) > 1:
            path[1] = path[1].replace("_", "-")
        try:
            value: Any = orjson.loads(env[name])
        except orjson.JSONDecodeError:
            value = EnvText(env[name])  # split at commas where a list is expected
        node = found
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"environment variable {name} conflicts with another override")
            node = child
        node[path[-1]] = value
    return found


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = _deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def load_config_file(
    path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> RuntimeConfig:
    """Load the TOML file ``path`` (JSON when its name ends in ``.json``), with the environment
    overrides of ``environ`` (default ``os.environ``; see :func:`env_overrides`) laid over it.

    Raises:
        ConfigError: the file cannot be read, does not parse, or holds a wrong key or value;
            the message starts with the file's path.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    fmt: Literal["json", "toml"] = "json" if path.suffix.lower() == ".json" else "toml"
    try:
        data = _parse(raw, fmt)
        overrides = env_overrides(environ)
        note = " (environment overrides: SLUICE_*__*)" if overrides else ""
        return _structure(_deep_merge(data, overrides) if overrides else data, note)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def config_from_env(environ: Mapping[str, str] | None = None) -> RuntimeConfig:
    """The config file named by ``SLUICE_CONFIG``, else :func:`default_config_path` if it
    exists, else the defaults; with the environment overrides laid over it.

    Raises:
        ConfigError: see :func:`load_config_file`.
    """
    env = os.environ if environ is None else environ
    named = env.get("SLUICE_CONFIG")
    if named:
        try:
            return load_config_file(named, env)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (from SLUICE_CONFIG)") from None
    path = default_config_path()
    if path.is_file():
        return load_config_file(path, env)
    overrides = env_overrides(env)
    if not overrides:
        return RuntimeConfig()
    return _structure(overrides, " (environment overrides: SLUICE_*__*)")
