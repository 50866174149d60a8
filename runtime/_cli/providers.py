"""``sluice providers list | check NAME | models NAME``: what providers there are and whether
they answer."""

from __future__ import annotations

import sys
from contextlib import asynccontextmanager
from pathlib import Path  # noqa: TC003 (cyclopts reads the annotations at runtime)
from typing import TYPE_CHECKING, Annotated, Any

import attrs
import orjson
from cyclopts import App, Parameter

from .._config import ProviderConfig, RuntimeConfig
from .._errors import ConfigError
from ..providers import _plugins as _plugins
from ..providers._builtins import BUILTIN_BY_ID
from ..providers._keys import KeyStore, KeyStoreError
from ..providers._registry import ResolvedProvider, known_providers, resolve_provider
from ._common import EXIT_FAILED, EXIT_OK, build_config, report_error

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from ..providers._definition import ProviderDefinition
    from ..transport._base import HotTransport

__all__ = ["providers_app"]

providers_app = App(
    name="providers",
    help="List the known providers, check that one answers, list its models.",
)

_Json = Annotated[bool, Parameter(name="--json", negative=())]


def _print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value).decode() + "\n")
    sys.stdout.flush()


def _key_status(
    name: str, definition: ProviderDefinition | None, user: ProviderConfig, store: KeyStore
) -> str:
    """Where a key would come from, without decrypting anything."""
    import os

    if (user.auth or (definition.auth_style if definition else None)) == "none":
        return "not sent"
    if user.api_key is not None:
        return "config"
    names = ((user.api_key_env,) if user.api_key_env else ()) + (
        definition.key_env if definition else ()
    )
    for var in names:
        if os.environ.get(var):
            return f"env {var}"
    try:
        stored = set(store.names())
    except KeyStoreError:
        stored = set()
    if name in stored or (definition is not None and definition.id in stored):
        return "store"
    needed = definition is not None and definition.needs_key and user.base_url is None
    return "missing" if needed else "not needed"


def _row(
    name: str,
    source: str,
    definition: ProviderDefinition | None,
    config: RuntimeConfig,
    store: KeyStore,
) -> dict[str, Any]:
    user = config.providers.get(name, ProviderConfig())
    row: dict[str, Any] = {
        "id": name,
        "name": user.display_name or (definition.display_name if definition else name),
        "source": source,
        "protocol": user.protocol or (definition.protocol if definition else "openai"),
        "base_url": user.base_url or (definition.base_url if definition else None),
        "regions": dict(definition.regions) if definition else {},
        "auth": user.auth or (definition.auth_style if definition else None),
        "key_env": list(definition.key_env if definition else ()),
        "key": _key_status(name, definition, user, store),
        "local": definition.local if definition else False,
        "lists_models": definition.lists_models if definition else True,
        "models": [m.id for m in definition.models] if definition else [],
    }
    row["models"] += [m for m in user.models if m not in row["models"]]
    if row["base_url"] is None and name == "sim":
        row["base_url"] = "(in-process simulator)"
    return row


def _group_rows(config: RuntimeConfig, providers: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each model group with its deployments and whether each can be used: its provider is
    known and has the key it needs (``ok``), or what is wrong."""
    out = []
    for name, group in sorted(config.groups.items()):
        deployments = []
        for d in group.deployments:
            provider = providers.get(d.model.partition(":")[0])
            if provider is None:
                status = "unknown provider"
            elif provider["key"] == "missing":
                status = "key missing"
            else:
                status = "ok"
            deployments.append({"model": d.model, "weight": d.weight, "status": status})
        out.append(
            {
                "name": name,
                "strategy": group.strategy,
                "affinity": group.affinity,
                "deployments": deployments,
            }
        )
    return out


@providers_app.command(name="list")
async def list_(*, as_json: _Json = False, config: Path | None = None) -> int:
    """List every provider: builtins, plugins and the config's custom ones.

    For each: id, protocol, base URL and where its key would come from (config, an environment
    variable, the key store), never the key itself.

    Args:
        as_json: print one JSON object {"providers": [...], "problems": [...]}.
        config: the config file (TOML, or JSON for .json; default: SLUICE_CONFIG, else the
            platform's config.toml).
    """
    try:
        run_config = build_config(config_file=config)
    except ConfigError as exc:
        return report_error(exc, as_json=as_json)
    plugins = _plugins.installed_plugins(frozenset(BUILTIN_BY_ID))
    store = KeyStore.default()
    rows = [
        _row(name, source, definition, run_config, store)
        for name, (source, definition) in known_providers(run_config, plugins).items()
    ]
    problems = [str(p) for p in plugins.problems]
    groups = _group_rows(run_config, {r["id"]: r for r in rows})
    if as_json:
        _print_json({"providers": rows, "groups": groups, "problems": problems})
        return EXIT_OK
    width = max(len(r["id"]) for r in rows)
    spoken = max(9, *(len(r["protocol"]) for r in rows))
    for r in rows:
        url = r["base_url"] or "(set base_url)"
        print(f"{r['id']:<{width}}  {r['protocol']:<{spoken}}  key: {r['key']:<22}  {url}")
    for g in groups:
        print(f"group {g['name']} ({g['strategy']}, affinity {g['affinity']}):")
        for d in g["deployments"]:
            print(f"  {d['model']}  weight {d['weight']:g}  {d['status']}")
    for problem in problems:
        print(f"sluice: warning: {problem}", file=sys.stderr)
    return EXIT_OK


@asynccontextmanager
async def _reachable(
    spec: ResolvedProvider,
) -> AsyncIterator[tuple[ResolvedProvider, HotTransport]]:
    """The transport ``spec``'s calls would use; for ``sim`` without a URL the simulator runs
    meanwhile, and the spec yielded has its address."""
    import trio

    from ..providers._operations import open_transport

    async with trio.open_nursery() as nursery:
        if spec.base_url is None:
            from ..simulator import SimulatorConfig, serve_simulator

            port = await nursery.start(serve_simulator, SimulatorConfig())
            spec = attrs.evolve(spec, base_url=f"http://127.0.0.1:{port}/v1")
        transport = open_transport(spec)
        try:
            yield spec, transport
        finally:
            with trio.CancelScope(shield=True):
                await transport.aclose()
        nursery.cancel_scope.cancel()


def _resolve(name: str, config: Path | None) -> ResolvedProvider:
    run_config = build_config(config_file=config)
    return resolve_provider(name, run_config)


@providers_app.command
async def check(
    name: str,
    /,
    *,
    model: str | None = None,
    wait: Annotated[float, Parameter(name="--timeout")] = 10.0,
    as_json: _Json = False,
    config: Path | None = None,
) -> int:
    """Check that a provider answers with the configured key.

    Lists its models (or, for a provider that cannot list them, makes a minimal call); with
    --model, also makes a minimal call to that model. Exit status: 0 when every check passed,
    1 when one failed, 2 for an unknown provider or a missing key.

    Args:
        name: the provider id, e.g. openai or a custom provider of the config.
        model: a model to check with a minimal call (a few output tokens).
        wait: seconds to wait for each answer.
        as_json: print one JSON object {"provider", "checks": [{"check", "ok", "message"}]}.
        config: the config file (default: SLUICE_CONFIG, else the platform's config.toml).
    """
    from ..providers._operations import check_connection, check_model

    try:
        spec = _resolve(name, config)
    except ConfigError as exc:
        return report_error(exc, as_json=as_json)
    results = []
    async with _reachable(spec) as (spec, transport):
        connection = await check_connection(spec, transport, model=model, answer_within=wait)
        results.append(("connection", connection))
        if model is not None and spec.lists_models:
            found = await check_model(spec, model, transport, answer_within=wait)
            results.append((f"model {model}", found))
    ok = all(r.ok for _, r in results)
    if as_json:
        checks = [
            {"check": c, "ok": r.ok, "message": r.message, "status": r.status} for c, r in results
        ]
        _print_json({"provider": name, "ok": ok, "checks": checks})
    else:
        for what, r in results:
            mark = "ok" if r.ok else "FAILED"
            print(f"{name} {what}: {mark}: {r.message} ({r.elapsed:.2f} s)")
    return EXIT_OK if ok else EXIT_FAILED


@providers_app.command
async def models(
    name: str,
    /,
    *,
    wait: Annotated[float, Parameter(name="--timeout")] = 10.0,
    as_json: _Json = False,
    config: Path | None = None,
) -> int:
    """List the models a provider's server offers (one id per line).

    Args:
        name: the provider id.
        wait: seconds to wait for the answer.
        as_json: print one JSON object {"provider", "models": [{"id", "name"}]}.
        config: the config file (default: SLUICE_CONFIG, else the platform's config.toml).
    """
    from ..providers._operations import OperationFailed, list_models

    try:
        spec = _resolve(name, config)
    except ConfigError as exc:
        return report_error(exc, as_json=as_json)
    if not spec.lists_models:
        known = [m.id for m in spec.models]
        message = f"provider {name!r} cannot list its models; its known models: {known}"
        return report_error(ConfigError(message), as_json=as_json)
    failure: OperationFailed | None = None
    async with _reachable(spec) as (spec, transport):
        try:
            found = await list_models(spec, transport, answer_within=wait)
        except OperationFailed as exc:
            failure = exc
    if failure is not None:
        if as_json:
            error = {
                "type": "OperationFailed",
                "message": failure.message,
                "status": failure.status,
            }
            _print_json({"error": error})
        else:
            print(f"sluice: error: {failure.message}", file=sys.stderr)
        return EXIT_FAILED
    if as_json:
        _print_json({"provider": name, "models": [{"id": m.id, "name": m.name} for m in found]})
    else:
        for m in found:
            print(m.id)
    return EXIT_OK
