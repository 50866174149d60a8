"""``sluice serve``: the OpenAI- and Anthropic-compatible gateway (see :mod:`sluice._gateway`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path  # noqa: TC003 (cyclopts reads the annotations at runtime)
from typing import Annotated

from cyclopts import Parameter

from .._errors import ConfigError
from ._common import EXIT_OK, build_config, fail, leaf, report_error

__all__ = ["serve"]

ADMIN_KEY_ENV = "SLUICE_ADMIN_KEY"


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    workers: int = 1,
    config: Path | None = None,
    keys_file: Path | None = None,
    no_auth: Annotated[bool, Parameter(name="--no-auth", negative=())] = False,
    no_metrics: Annotated[bool, Parameter(name="--no-metrics", negative=())] = False,
    default_provider: str | None = None,
    alias: list[str] | None = None,
    models: str | None = None,
    max_body_mb: float = 16.0,
    header_timeout: float = 10.0,
    body_timeout: float = 30.0,
    keepalive_timeout: float = 75.0,
    write_timeout: float = 60.0,
    max_connections: int = 10000,
    drain_timeout: float = 30.0,
) -> int:
    """Serve an OpenAI- and Anthropic-compatible gateway in front of sluice.

    Point an SDK's base_url at http://HOST:PORT/v1 (OpenAI) or http://HOST:PORT (Anthropic)
    and use a virtual key (sluice keys issue NAME) as its API key. Models are named
    provider:model (sim:sim-small, anthropic:claude-sonnet-4-5), or by --alias. The admin API
    (/admin/keys) is on when SLUICE_ADMIN_KEY holds an admin token. GET /metrics serves the
    runtime's Prometheus metrics and the gateway's own (with --workers, each worker its own
    process's). SIGTERM drains: no new connections, requests in flight finish.

    Args:
        host: address to listen on.
        port: port to listen on (0 picks a free one).
        workers: processes serving the port (SO_REUSEPORT); they share quotas and the
            keys' rpm/tpm and budgets through the config's store (redis://...), else each
            counts alone.
        config: the config file (default: SLUICE_CONFIG, else the platform's config.toml).
        keys_file: the virtual key file (default: gateway-keys.json in the user data folder).
        no_auth: serve without keys (for loopback only).
        no_metrics: keep the runtime's metrics off and serve no /metrics.
        default_provider: provider for model names without a provider: prefix.
        alias: NAME=provider:model, a client-facing model name (repeatable).
        models: the only models served, comma-separated (provider:model, alias or group
            names; aliases and groups are always served): any other gets 404. Default: the
            config's gateway.models, else any model.
        max_body_mb: largest request body, in MiB.
        header_timeout: seconds a client gets to send a request's head.
        body_timeout: seconds a client gets to send a request's body.
        keepalive_timeout: seconds an idle connection stays open.
        write_timeout: seconds a client that stops reading keeps its response.
        max_connections: open connections at most (per worker).
        drain_timeout: seconds requests in flight get to finish after SIGTERM.
    """
    import trio

    from .._gateway import GatewaySettings, ServerLimits
    from .._gateway import serve as run_gateway
    from .._gateway.run import WorkerOptions, serve_workers
    from .._gateway.vkeys import KeyRing, default_keys_path, hash_token

    if workers < 1:
        return fail(f"--workers must be at least 1, got {workers}")
    if not 0 <= port <= 65535:
        return fail(f"--port must be between 0 and 65535, got {port}")
    aliases: dict[str, str] = {}
    for item in alias or ():
        name, sep, target = item.partition("=")
        if not sep or ":" not in target or not name:
            return fail(f"--alias {item!r}: write NAME=provider:model")
        aliases[name] = target
    allowed = None
    if models is not None:
        allowed = frozenset(m.strip() for m in models.split(",") if m.strip())
        if not allowed:
            return fail("--models: name at least one model (a,b,...), or leave it out")
    admin = os.environ.get(ADMIN_KEY_ENV) or None
    try:
        settings = GatewaySettings(
            default_provider=default_provider,
            aliases=aliases,
            require_key=not no_auth,
            admin_token_hash=hash_token(admin) if admin else None,
            models=allowed,
        )
        limits = ServerLimits(
            max_body_bytes=int(max_body_mb * 1024 * 1024),
            header_timeout=header_timeout,
            body_timeout=body_timeout,
            keepalive_timeout=keepalive_timeout,
            write_timeout=write_timeout,
            max_connections=max_connections,
            drain_timeout=drain_timeout,
        )
        run_config = build_config(config_file=config)
        keys_path = keys_file if keys_file is not None else default_keys_path()
        ring = KeyRing(keys_path)
    except (ValueError, TypeError) as exc:
        return fail(f"bad server setting: {exc}")
    except ConfigError as exc:
        return report_error(exc, as_json=False)
    shown = f"[{host}]" if ":" in host else host

    def banner(bound: int) -> None:
        print(
            f"sluice gateway listening on http://{shown}:{bound} "
            f"({workers} worker{'s' if workers > 1 else ''})",
            flush=True,
        )

    try:
        if workers > 1:
            options = WorkerOptions(
                config_file=str(config) if config is not None else os.environ.get("SLUICE_CONFIG"),
                host=host,
                port=port,
                keys_file=str(keys_path),
                settings=settings,
                limits=limits,
                metrics=not no_metrics,
            )
            return serve_workers(options, workers, on_ready=banner)

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                bound = await nursery.start(
                    lambda task_status: run_gateway(
                        run_config,
                        host=host,
                        port=port,
                        keys=ring,
                        settings=settings,
                        limits=limits,
                        metrics=not no_metrics,
                        handle_signals=True,
                        task_status=task_status,
                    )
                )
                banner(bound)

        trio.run(main)
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
        return fail(f"cannot listen on {host}:{port}: {os_error.strerror or os_error}")
    return EXIT_OK
