"""``sluice keys set | list | delete``: the encrypted key store
(see :mod:`sluice.providers._keys`)."""

from __future__ import annotations

import getpass
import os
import re
import sys
from typing import Annotated, Any

import orjson
from cyclopts import App, Parameter

from .._errors import ConfigError
from ..providers._builtins import BUILTINS
from ..providers._keys import MASTER_KEY_ENV, KeyStore, KeyStoreError, mask_key, new_master_key
from ._common import EXIT_FAILED, EXIT_OK, fail, report_error

__all__ = ["keys_app"]

keys_app = App(
    name="keys",
    help="Store API keys encrypted on disk, list them masked, delete them.",
)

_Json = Annotated[bool, Parameter(name="--json", negative=())]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _read_key(provider: str) -> str:
    """The key from a no-echo prompt on a terminal, else the first line of stdin."""
    if sys.stdin.isatty():
        return getpass.getpass(f"API key for {provider} (not shown): ")
    return sys.stdin.readline()


@keys_app.command(name="set")
async def set_(provider: str, /) -> int:
    """Store the API key of PROVIDER, read from a prompt that does not echo (or from stdin
    when it is not a terminal: echo "$KEY" | sluice keys set openai).

    The key is encrypted with the master key (SLUICE_MASTER_KEY, else a key file created on
    first use) and used when neither the config nor the environment has one.

    Args:
        provider: the provider id, e.g. openai.
    """
    if not _NAME.match(provider):
        return fail(f"{provider!r} is not a provider id")
    known = {d.id for d in BUILTINS}
    if provider not in known:
        print(
            f"sluice: note: {provider!r} is not a builtin provider; the key is used for a "
            "custom or plugin provider of that name",
            file=sys.stderr,
        )
    try:
        key = _read_key(provider).strip()
    except (EOFError, KeyboardInterrupt):
        return fail("no key given")
    if not key:
        return fail("no key given (an empty line)")
    try:
        KeyStore.default().set(provider, key)
    except KeyStoreError as exc:
        return report_error(exc, as_json=False)
    print(f"stored the key of {provider} ({mask_key(key)})")
    return EXIT_OK


@keys_app.command(name="list")
async def list_(*, as_json: _Json = False) -> int:
    """List the stored keys, masked (sk-...wxyz), and provider keys set in the environment.

    Exit status 1 when a stored key does not decrypt.

    Args:
        as_json: print one JSON object {"keys": [{"provider", "source", "masked", "error"}]}.
    """
    store = KeyStore.default()
    rows: list[dict[str, Any]] = []
    try:
        names = store.names()
    except KeyStoreError as exc:
        return report_error(exc, as_json=as_json)
    for name in names:
        try:
            secret = store.get(name)
            masked = mask_key(secret.reveal()) if secret is not None else None
            error = None
        except KeyStoreError as exc:
            masked, error = None, str(exc)
        rows.append({"provider": name, "source": "store", "masked": masked, "error": error})
    for definition in BUILTINS:
        for var in definition.key_env:
            value = os.environ.get(var)
            if value:
                rows.append(
                    {
                        "provider": definition.id,
                        "source": f"env {var}",
                        "masked": mask_key(value),
                        "error": None,
                    }
                )
                break
    if as_json:
        sys.stdout.write(orjson.dumps({"keys": rows}).decode() + "\n")
    else:
        if not rows:
            print(f"no keys stored in {store.path} and none set in the environment")
        for row in rows:
            shown = row["masked"] if row["error"] is None else f"ERROR: {row['error']}"
            print(f"{row['provider']:<24} {row['source']:<28} {shown}")
    return EXIT_FAILED if any(r["error"] for r in rows) else EXIT_OK


@keys_app.command
async def delete(provider: str, /) -> int:
    """Delete the stored key of PROVIDER (exit status 1 when it had none).

    Args:
        provider: the provider id.
    """
    store = KeyStore.default()
    try:
        deleted = store.delete(provider)
    except KeyStoreError as exc:
        return report_error(exc, as_json=False)
    if not deleted:
        print(f"sluice: error: no key of {provider} is stored in {store.path}", file=sys.stderr)
        return EXIT_FAILED
    print(f"deleted the key of {provider}")
    return EXIT_OK


@keys_app.command(name="new-master-key")
async def new_master_key_() -> int:
    """Print a fresh random master key, for SLUICE_MASTER_KEY.

    Keys stored under another master key do not decrypt with it: store them again.
    """
    try:
        print(new_master_key())
    except ImportError as exc:  # pragma: no cover (cryptography is a dependency)
        return report_error(ConfigError(f"cryptography is not installed: {exc}"), as_json=False)
    print(f"(set it as {MASTER_KEY_ENV}; keep it secret)", file=sys.stderr)
    return EXIT_OK
