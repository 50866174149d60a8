"""Running the gateway: a runtime, a :class:`Gateway` on it, listeners, signals, workers.

:func:`open_gateway` opens the runtime and yields the gateway (tests drive it over memory
streams); :func:`serve` is what ``sluice serve`` and ``sluice.serve(...)`` run: it listens,
and on SIGTERM (or SIGINT) drains -- stops accepting, closes idle connections, lets requests
in flight finish -- before the runtime shuts down.

``workers > 1`` (:func:`serve_workers`) starts that many processes, each with its own runtime
and its own socket on the same port (``SO_REUSEPORT``: the kernel spreads connections over
them). Virtual keys are shared through the key file (each worker reloads it when it changes).
With a shared store in the config (``store = "redis://..."`` or ``$SLUICE_STORE``) the
providers' quotas, every key's own rpm/tpm windows and every key's budget are counted in
Redis, across workers and hosts; without one each worker counts alone, so with N workers a key
may get up to N times its limits and its budget. A key's budget is an account ``tag:NAME`` of
each runtime's budget book (charged at start with what the ledger holds for its tag); with a
shared store the runtime's rate limiter also reserves every call's worst case from the same
account in the store, in the same atomic step as the quota (see :mod:`sluice._ledger.budget`),
so what one worker spends counts against the key in all of them.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import signal
import socket
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._config import BudgetConfig, RuntimeConfig, config_from_env
from .app import Gateway, GatewaySettings
from .http import Server, ServerLimits
from .vkeys import KeyRing

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
    from pathlib import Path

    from .._limits.store import QuotaStore

__all__ = ["open_gateway", "serve", "serve_workers"]

_BOOK_TAG = "(sluice gateway)"
"""The tag of the placeholder budget that makes the runtime keep a budget book, so virtual
keys' budgets can be opened in it while the gateway runs; no key can have this name."""


def _with_budget_book(config: RuntimeConfig) -> RuntimeConfig:
    if config.ledger.budgets:
        return config
    placeholder = BudgetConfig(scope="tag", tag=_BOOK_TAG, max_tokens=2**62)
    return attrs.evolve(config, ledger=attrs.evolve(config.ledger, budgets=(placeholder,)))


@asynccontextmanager
async def open_gateway(
    config: RuntimeConfig | None = None,
    *,
    keys: KeyRing | None = None,
    settings: GatewaySettings | None = None,
    metrics: Callable[[], bytes | Awaitable[bytes]] | bool = True,
    quota_store: QuotaStore | None = None,
    **runtime_options: Any,
) -> AsyncIterator[Gateway]:
    """Open a runtime (``runtime_options`` go to :func:`sluice.open_runtime`) and yield a
    gateway on it, with every budgeted key's account open and charged with what the ledger
    already holds for its tag.

    ``metrics``: True (the default) turns the runtime's metrics on and serves its registry at
    ``GET /metrics``; False serves no ``/metrics``; a callable renders it instead.
    """
    from .._limits.shared import open_quota_store, store_url
    from .._runtime import open_runtime

    config = _with_budget_book(config if config is not None else config_from_env())
    if config.gateway.models is not None and (settings is None or settings.models is None):
        # The config's allow-list, unless the caller gave one (``sluice serve --models``).
        settings = attrs.evolve(settings or GatewaySettings(), models=config.gateway.models)
    if metrics is True and not config.metrics.active:
        config = attrs.evolve(config, metrics=attrs.evolve(config.metrics, enabled=True))
    environ = runtime_options.get("environ")
    async with contextlib.AsyncExitStack() as stack:
        if quota_store is None and store_url(config, environ) is not None:
            # One shared store for the providers' quotas and the keys' own windows, so every
            # worker (and host) with this store and prefix counts each key's calls together.
            quota_store = await stack.enter_async_context(open_quota_store(config, environ))
        rt = await stack.enter_async_context(
            open_runtime(config, quota_store=quota_store, **runtime_options)
        )
        gateway = Gateway(
            rt, keys=keys, settings=settings, quota_store=quota_store, metrics=metrics
        )
        if any(k.budget_usd is not None for k in gateway.keys.by_name.values()):
            gateway.charge_spent(await _spent_by_tag(rt))
        yield gateway


async def _spent_by_tag(rt: Any) -> Mapping[str, tuple[int, int]]:
    # One sum per tag, computed by the ledger's store: its rows never reach Python.
    return {
        row.tag: (row.totals.cost_micros, row.totals.input_tokens + row.totals.output_tokens)
        for row in await rt.ledger.snapshot(by=("tag",))
        if row.tag
    }


def _listen_socket(
    host: str, port: int, *, reuse_port: bool, backlog: int | None = 4096
) -> socket.socket:
    """A TCP socket bound to ``host:port``, listening unless ``backlog`` is None."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        if backlog is not None:
            sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve(
    config: RuntimeConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    keys: KeyRing | Path | None = None,
    settings: GatewaySettings | None = None,
    limits: ServerLimits | None = None,
    metrics: Callable[[], bytes | Awaitable[bytes]] | bool = True,
    quota_store: QuotaStore | None = None,
    reuse_port: bool = False,
    handle_signals: bool = False,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    **runtime_options: Any,
) -> None:
    """Serve the gateway on ``host:port`` until cancelled (or, with ``handle_signals``,
    until SIGTERM/SIGINT, after a graceful drain).

    Reports the bound port through ``task_status`` (``port=0`` picks one), so
    ``port = await nursery.start(sluice.serve, config)`` returns once connections are taken.
    ``keys``: a :class:`KeyRing`, or the key file's path (reloaded when it changes).
    ``metrics``: as :func:`open_gateway` (by default ``GET /metrics`` serves the runtime's
    registry, gateway series included; with several workers, each its own process's).
    ``runtime_options`` go to :func:`sluice.open_runtime` (``transport``, ``simulator``...).
    """
    ring = keys if isinstance(keys, KeyRing) or keys is None else KeyRing(keys)
    sock = _listen_socket(host, port, reuse_port=reuse_port)
    listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    bound = sock.getsockname()[1]
    async with open_gateway(
        config,
        keys=ring,
        settings=settings,
        metrics=metrics,
        quota_store=quota_store,
        **runtime_options,
    ) as gateway:
        server = Server(gateway.handle, limits, reject=_reject_json, vet=gateway.vet)
        gateway.server = server
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve_listener, listener)
            if handle_signals:
                nursery.start_soon(_drain_on_signal, gateway, server, listener, nursery)
            task_status.started(bound)


async def _drain_on_signal(
    gateway: Gateway, server: Server, listener: trio.SocketListener, nursery: trio.Nursery
) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            break
    gateway.draining = True
    await listener.aclose()
    await server.drain()
    nursery.cancel_scope.cancel(reason="the gateway drained after a signal")


def _reject_json(status: int, message: str) -> tuple[list[tuple[bytes, bytes]], bytes]:
    from .openai_wire import error_body

    kind = "server_error" if status >= 500 else "invalid_request_error"
    return [(b"content-type", b"application/json")], error_body(message, kind)


@attrs.frozen(kw_only=True)
class WorkerOptions:
    """Everything a worker process needs, picklable (the config travels as its file path)."""

    config_file: str | None
    host: str
    port: int
    keys_file: str | None
    settings: GatewaySettings
    limits: ServerLimits
    metrics: bool = True


def _worker_main(options: WorkerOptions, ready: Any) -> None:
    from pathlib import Path

    from .._config import load_config_file

    config = load_config_file(Path(options.config_file)) if options.config_file else None
    keys = Path(options.keys_file) if options.keys_file else None
    kwargs = {
        "host": options.host,
        "port": options.port,
        "keys": keys,
        "settings": options.settings,
        "limits": options.limits,
        "metrics": options.metrics,
        "reuse_port": True,
        "handle_signals": True,
    }
    from .._gc import tune_for_service

    tune_for_service()  # a worker is a process sluice owns, like the sluice command's
    try:
        trio.run(_serve_and_report, config, kwargs, ready)
    except KeyboardInterrupt:
        pass


async def _serve_and_report(
    config: RuntimeConfig | None, kwargs: dict[str, Any], ready: Any
) -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(functools.partial(serve, config, **kwargs))
        ready.put(port)


def serve_workers(
    options: WorkerOptions, workers: int, *, on_ready: Callable[[int], None] | None = None
) -> int:
    """Run ``workers`` gateway processes on one port; return when they have all exited.

    The port is reserved here first (bound, not listening, so ``port=0`` picks one for all
    and no connection waits on this process), then each worker binds it with
    ``SO_REUSEPORT`` and listens. ``on_ready(port)`` runs once every worker listens.
    SIGTERM or SIGINT here is passed on to every worker, which drains. Returns 0 after a
    signal, else the highest exit code of the workers.
    """
    import multiprocessing

    probe = _listen_socket(options.host, options.port, reuse_port=True, backlog=None)
    port = probe.getsockname()[1]
    options = attrs.evolve(options, port=port)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    procs = [ctx.Process(target=_worker_main, args=(options, ready)) for _ in range(workers)]
    stop = False

    def forward(signum: int, _frame: Any) -> None:
        nonlocal stop
        stop = True
        for proc in procs:
            if proc.pid is not None and proc.is_alive():
                proc.terminate()

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for proc in procs:
            proc.start()
        started = 0
        while started < workers and not stop:
            try:
                ready.get(timeout=0.2)
                started += 1
            except queue.Empty:
                if not all(p.is_alive() for p in procs):
                    forward(signal.SIGTERM, None)
                    stop = False  # a worker failed: report its exit code
                    break
        probe.close()
        if started == workers and on_ready is not None:
            on_ready(port)
        for proc in procs:
            proc.join()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    codes = [abs(proc.exitcode or 0) for proc in procs]
    return 0 if stop else max(codes, default=0)
