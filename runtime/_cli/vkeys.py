"""``sluice keys issue | revoke | issued``: the gateway's virtual keys
(see :mod:`sluice._gateway.vkeys`).

They sit in the ``keys`` group next to the provider keys (``set | list | delete``) because a
user looks for keys there; the verbs differ (a virtual key is issued, not set, and its token is
shown once), so neither set's commands shadow the other's. ``sluice keys list`` stays the
provider keys; ``sluice keys issued`` lists the virtual ones.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path  # noqa: TC003 (cyclopts reads the annotations at runtime)
from typing import Annotated

import orjson
from cyclopts import Parameter

from .._errors import ConfigError
from ._common import EXIT_OK, report_error

__all__ = ["issue", "issued", "revoke"]

_Json = Annotated[bool, Parameter(name="--json", negative=())]


def _path(keys_file: Path | None) -> Path:
    from .._gateway.vkeys import default_keys_path

    return keys_file if keys_file is not None else default_keys_path()


async def issue(
    name: str,
    /,
    *,
    rpm: int | None = None,
    tpm: int | None = None,
    budget: float | None = None,
    models: list[str] | None = None,
    keys_file: Path | None = None,
    as_json: _Json = False,
) -> int:
    """Issue a virtual key for `sluice serve` clients and print its token (shown only now).

    Calls made with it are tagged NAME in the ledger.

    Args:
        name: the key's name (letters, digits, . _ @ -).
        rpm: requests per minute this key may make (default: no limit).
        tpm: tokens (input + output) per minute (default: no limit).
        budget: dollars this key may spend in all (default: no limit).
        models: provider:model names it may call (provider:* for all of one provider;
            default: any model).
        keys_file: the key file (default: gateway-keys.json in the user data folder).
        as_json: print {"name", "key", ...} as JSON.
    """
    from .._gateway.vkeys import issue_key, load_keys, save_keys

    path = _path(keys_file)
    try:
        keys = load_keys(path)
        key, token = issue_key(
            keys, name, rpm=rpm, tpm=tpm, budget_usd=budget, models=models or (), now=time.time()
        )
        keys[name] = key
        save_keys(path, keys.values())
    except ConfigError as exc:
        return report_error(exc, as_json=as_json)
    except OSError as exc:
        return report_error(ConfigError(f"cannot write {path}: {exc.strerror}"), as_json=as_json)
    if as_json:
        sys.stdout.write(orjson.dumps({**key.public(), "key": token}).decode() + "\n")
    else:
        print(token)
        print(f"(the key {name!r}; this is the only time it is shown)", file=sys.stderr)
    return EXIT_OK


async def revoke(name: str, /, *, keys_file: Path | None = None) -> int:
    """Revoke the virtual key NAME: a running gateway refuses it within a second.

    Args:
        name: the key's name.
        keys_file: the key file (default: gateway-keys.json in the user data folder).
    """
    from .._gateway.vkeys import load_keys, revoke_key, save_keys

    path = _path(keys_file)
    try:
        keys = load_keys(path)
        keys[name] = revoke_key(keys, name)
        save_keys(path, keys.values())
    except ConfigError as exc:
        return report_error(exc, as_json=False)
    except OSError as exc:
        return report_error(ConfigError(f"cannot write {path}: {exc.strerror}"), as_json=False)
    print(f"revoked the key {name!r}")
    return EXIT_OK


async def issued(*, keys_file: Path | None = None, as_json: _Json = False) -> int:
    """List the virtual keys (names, limits, revoked or not; never the tokens).

    Args:
        keys_file: the key file (default: gateway-keys.json in the user data folder).
        as_json: print {"keys": [...]} as JSON.
    """
    from .._gateway.vkeys import load_keys

    path = _path(keys_file)
    try:
        keys = load_keys(path)
    except ConfigError as exc:
        return report_error(exc, as_json=as_json)
    rows = [k.public() for k in keys.values()]
    if as_json:
        sys.stdout.write(orjson.dumps({"keys": rows}).decode() + "\n")
        return EXIT_OK
    if not rows:
        print(f"no virtual keys in {path}")
    for row in rows:
        limits = ", ".join(
            f"{label} {row[field]}"
            for label, field in (("rpm", "rpm"), ("tpm", "tpm"), ("budget $", "budget_usd"))
            if row[field] is not None
        )
        models = ",".join(row["models"]) or "any model"
        state = "REVOKED" if row["revoked"] else "live"
        print(f"{row['name']:<24} {state:<8} {limits or 'no limits':<32} {models}")
    return EXIT_OK
