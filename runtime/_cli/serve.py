"""``sluice serve``: the OpenAI- and Anthropic-compatible gateway (see :mod:`sluice._gateway`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import attrs
from cyclopts import Parameter

from .._errors import ConfigError
from ._common import EXIT_OK, build_config, fail, leaf, report_error

__all__ = ["ServeFlags", "serve"]

ADMIN_KEY_ENV = "SLUICE_ADMIN_KEY"


@attrs.frozen(kw_only=True)
class ServeFlags:
    """The flags of ``sluice serve`` (each attribute is one; its docstring is the help)."""

    host: str = "127.0.0.1"
    """address to listen on."""
    port: int = 8080
    """port to listen on (0 picks a free one)."""
    workers: int = 1
    """processes serving the port (SO_REUSEPORT); they share quotas and the keys' rpm/tpm and
    budgets through the config's store (redis://...), else each counts alone."""
    config: Path | None = None
    """the config file (default: SLUICE_CONFIG, else the platform's config.toml)."""
    keys_file: Path | None = None
    """the virtual key file (default: gateway-keys.json in the user data folder)."""
    no_auth: Annotated[bool, Parameter(name="--no-auth", negative=())] = False
    """serve without keys (for loopback only)."""
    no_metrics: Annotated[bool, Parameter(name="--no-metrics", negative=())] = False
    """keep the runtime's metrics off and serve no /metrics."""
    default_provider: str | None = None
    """provider for model names without a provider: prefix."""
    alias: tuple[str, ...] | None = None
    """NAME=provider:model, a client-facing model name (repeatable)."""
    models: str | None = None
    """the only models served, comma-separated (provider:model, alias or group names; aliases
    and groups are always served): any other gets 404. Default: the config's gateway.models,
    else any model."""
    max_body_mb: float = 16.0
    """largest request body, in MiB."""
    header_timeout: float = 10.0
    """seconds a client gets to send a request's head."""
    body_timeout: float = 30.0
    """seconds a client gets to send a request's body."""
    keepalive_timeout: float = 75.0
    """seconds an idle connection stays open."""
    write_timeout: float = 60.0
    """seconds a client that stops reading keeps its response."""
    max_connections: int = 10000
    """open connections at most (per worker)."""
    drain_timeout: float = 30.0
    """seconds requests in flight get to finish after SIGTERM."""

    def problem(self) -> str | None:
        """What is wrong with the port, workers, aliases or models given, or None."""
        if self.workers < 1:
            return f"--workers must be at least 1, got {self.workers}"
        if not 0 <= self.port <= 65535:
            return f"--port must be between 0 and 65535, got {self.port}"
        for item in self.alias or ():
            name, sep, target = item.partition("=")
            if not sep or ":" not in target or not name:
                return f"--alias {item!r}: write NAME=provider:model"
        if self.models is not None and not self.allowed():
            return "--models: name at least one model (a,b,...), or leave it out"
        return None

    def aliases(self) -> dict[str, str]:
        """``--alias`` as {client-facing name: provider:model}."""
        return {name: target for name, _, target in (i.partition("=") for i in self.alias or ())}

    def allowed(self) -> frozenset[str] | None:
        """``--models`` as a set (None: any model)."""
        if self.models is None:
            return None
        return frozenset(m.strip() for m in self.models.split(",") if m.strip())


def serve(flags: Annotated[ServeFlags, Parameter(name="*")] = ServeFlags()) -> int:
    """Serve an OpenAI- and Anthropic-compatible gateway in front of sluice.

    Point an SDK's base_url at http://HOST:PORT/v1 (OpenAI) or http://HOST:PORT (Anthropic)
    and use a virtual key (sluice keys issue NAME) as its API key. Models are named
    provider:model (sim:sim-small, anthropic:claude-sonnet-4-5), or by --alias. The admin API
    (/admin/keys) is on when SLUICE_ADMIN_KEY holds an admin token. GET /metrics serves the
    runtime's Prometheus metrics and the gateway's own (with --workers, each worker its own
    process's). SIGTERM drains: no new connections, requests in flight finish.
    """
    problem = flags.problem()
    if problem is not None:
        return fail(problem)
    try:
        settings, limits, run_config, ring = _setup(flags)
    except (ValueError, TypeError) as exc:
        return fail(f"bad server setting: {exc}")
    except ConfigError as exc:
        return report_error(exc, as_json=False)
    try:
        if flags.workers > 1:
            return _serve_workers(flags, settings, limits, ring)
        _serve_here(flags, settings, limits, run_config, ring)
    except KeyboardInterrupt:
        print("sluice: gateway stopped", file=sys.stderr)
    except (OSError, ConfigError, BaseExceptionGroup) as exc:
        # Binding the port or starting the runtime (its quota store) failed: what the
        # nursery grouped is said in one line.
        config_error = leaf(exc, ConfigError)
        if config_error is not None:
            return report_error(config_error, as_json=False)
        os_error = leaf(exc, OSError)
        if os_error is None:
            raise
        return fail(f"cannot listen on {flags.host}:{flags.port}: {os_error.strerror or os_error}")
    return EXIT_OK


def _setup(flags: ServeFlags) -> tuple[Any, Any, Any, Any]:
    """The gateway's settings and server limits, the runtime config and the key ring.

    Raises:
        ValueError, TypeError: a setting out of range.
        ConfigError: the config file or the key file is wrong.
    """
    from .._gateway import GatewaySettings, ServerLimits
    from .._gateway.vkeys import KeyRing, default_keys_path, hash_token

    admin = os.environ.get(ADMIN_KEY_ENV) or None
    settings = GatewaySettings(
        default_provider=flags.default_provider,
        aliases=flags.aliases(),
        require_key=not flags.no_auth,
        admin_token_hash=hash_token(admin) if admin else None,
        models=flags.allowed(),
    )
    limits = ServerLimits(
        max_body_bytes=int(flags.max_body_mb * 1024 * 1024),
        header_timeout=flags.header_timeout,
        body_timeout=flags.body_timeout,
        keepalive_timeout=flags.keepalive_timeout,
        write_timeout=flags.write_timeout,
        max_connections=flags.max_connections,
        drain_timeout=flags.drain_timeout,
    )
    run_config = build_config(config_file=flags.config)
    ring = KeyRing(flags.keys_file if flags.keys_file is not None else default_keys_path())
    return settings, limits, run_config, ring


def _banner(flags: ServeFlags, bound: int) -> None:
    shown = f"[{flags.host}]" if ":" in flags.host else flags.host
    workers = flags.workers
    print(
        f"sluice gateway listening on http://{shown}:{bound} "
        f"({workers} worker{'s' if workers > 1 else ''})",
        flush=True,
    )


def _serve_workers(flags: ServeFlags, settings: Any, limits: Any, ring: Any) -> int:
    """``--workers N``: N processes on the port, each with its own runtime."""
    from .._gateway.run import WorkerOptions, serve_workers

    config = flags.config
    options = WorkerOptions(
        config_file=str(config) if config is not None else os.environ.get("SLUICE_CONFIG"),
        host=flags.host,
        port=flags.port,
        keys_file=str(ring.path),
        settings=settings,
        limits=limits,
        metrics=not flags.no_metrics,
    )
    return serve_workers(options, flags.workers, on_ready=lambda bound: _banner(flags, bound))


def _serve_here(flags: ServeFlags, settings: Any, limits: Any, run_config: Any, ring: Any) -> None:
    """One process: the gateway in this one, until SIGTERM drains it."""
    import trio

    from .._gateway import serve as run_gateway

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(
                lambda task_status: run_gateway(
                    run_config,
                    host=flags.host,
                    port=flags.port,
                    keys=ring,
                    settings=settings,
                    limits=limits,
                    metrics=not flags.no_metrics,
                    handle_signals=True,
                    task_status=task_status,
                )
            )
            _banner(flags, bound)

    trio.run(main)
