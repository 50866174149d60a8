"""What every command shares: exit codes, config assembly and error reporting.

User errors never print a traceback. Errors go to stderr as one line starting ``sluice:``;
with ``--json`` they go to stdout as ``{"error": {"type", "message", "status"}}``.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import orjson

from .._config import ProviderConfig, RuntimeConfig, Secret, config_from_env, load_config_file
from .._errors import CallError, ConfigError, SluiceError
from .._messages import split_model

if TYPE_CHECKING:
    from pathlib import Path

E = TypeVar("E", bound=BaseException)

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_STDOUT_CLOSED",
    "EXIT_USAGE",
    "build_config",
    "check_model",
    "error_json",
    "exit_code_for",
    "fail",
    "leaf",
    "report_error",
    "silence_stdout",
]

EXIT_OK = 0
EXIT_FAILED = 1
"""A call (or the job) failed."""
EXIT_USAGE = 2
"""Bad arguments, config, model string or input file: fix the command line and run again."""
EXIT_INTERRUPTED = 130
"""Stopped by Ctrl-C (128 + SIGINT), as a shell reports it."""
EXIT_STDOUT_CLOSED = 141
"""stdout was closed before everything was printed (128 + SIGPIPE, as ``yes | head`` ends)."""


def silence_stdout() -> None:
    """Point stdout at /dev/null once its reader has gone (``sluice ... | head``), so nothing
    more written to it, the interpreter's last flush at exit included, raises."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def fail(message: str) -> int:
    """Print a usage or config problem to stderr and return :data:`EXIT_USAGE`."""
    print(f"sluice: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def leaf(error: BaseException, kind: type[E]) -> E | None:
    """The first ``kind`` exception in ``error``, itself or inside (nested) exception groups
    (trio's nurseries group what their tasks raise); None when there is none."""
    if isinstance(error, kind):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = leaf(inner, kind)
            if found is not None:
                return found
    return None


def check_model(model: str) -> str:
    """Return ``model`` when it is written ``provider:model``.

    Raises:
        ConfigError: it is not.
    """
    try:
        split_model(model)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return model


def build_config(
    *,
    config_file: Path | None = None,
    provider: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    store: str | None = None,
    metrics_port: int | None = None,
) -> RuntimeConfig:
    """The config from ``config_file`` (TOML, or JSON for ``.json``; else ``SLUICE_CONFIG``,
    else the platform's ``config.toml``, else defaults) with environment overrides and the
    command line's ``--base-url`` and ``--api-key`` laid over ``provider``'s entry (and
    ``--store`` over ``store``, and ``--metrics-port``: serve Prometheus metrics on
    127.0.0.1, or the config's metrics host).

    Raises:
        ConfigError: the file cannot be read or is invalid, or an override has no provider.
    """
    config = load_config_file(config_file) if config_file is not None else config_from_env()
    if store is not None:
        config = attrs.evolve(config, store=store)
    if metrics_port is not None:
        if not 0 <= metrics_port <= 65535:
            raise ConfigError("--metrics-port must be between 0 and 65535")
        config = attrs.evolve(
            config, metrics=attrs.evolve(config.metrics, enabled=True, port=metrics_port)
        )
    if base_url is None and api_key is None:
        return config
    if provider is None:
        raise ConfigError("--base-url and --api-key need a provider:model to apply to")
    overrides: dict[str, Any] = {}
    if base_url is not None:
        overrides["base_url"] = base_url
    if api_key is not None:
        overrides["api_key"] = Secret(api_key)
    try:
        entry = attrs.evolve(config.providers.get(provider, ProviderConfig()), **overrides)
    except ValueError as exc:  # a validator: --base-url is not a URL
        raise ConfigError(f"--base-url: {exc}".replace("base_url: ", "")) from None
    return attrs.evolve(config, providers={**config.providers, provider: entry})


def exit_code_for(error: SluiceError) -> int:
    """:data:`EXIT_FAILED` for a failed call, :data:`EXIT_USAGE` for config problems."""
    return EXIT_USAGE if isinstance(error, ConfigError) else EXIT_FAILED


def error_json(error: SluiceError) -> dict[str, Any]:
    """``{"error": {"type", "message", "status"}}``: ``type`` is the provider's error type
    when it gave one, else the sluice error class name; ``status`` the HTTP status or null."""
    if isinstance(error, CallError):
        return {
            "error": {
                "type": error.error_type or error.kind,
                "message": error.message,
                "status": error.status,
            }
        }
    return {"error": {"type": type(error).__name__, "message": str(error), "status": None}}


def report_error(error: SluiceError, *, as_json: bool) -> int:
    """Print ``error`` the way the command's output mode asks and return its exit code."""
    if as_json:
        sys.stdout.write(orjson.dumps(error_json(error)).decode() + "\n")
        sys.stdout.flush()
    else:
        print(f"sluice: error: {error}", file=sys.stderr)
    return exit_code_for(error)
