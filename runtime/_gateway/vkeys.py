"""Virtual keys: the bearer tokens gateway clients present, each with its own quotas.

A key has a name (the tag its calls carry in the ledger), optional requests and tokens per
minute, an optional budget in dollars, and the models it may call. The token is shown once,
when the key is issued; the file keeps only its SHA-256 (the tokens are 256 random bits, so a
plain hash is as good as a slow one: there is nothing to guess). The file is JSON, written
atomically with mode 0600; a running gateway reloads it when it changes, so ``sluice keys
revoke`` takes effect there within :data:`RELOAD_INTERVAL` seconds.

A budget belongs to the key's name, like its ledger tag: a revoked name issued again continues
both (its spending so far counts, and a running gateway keeps the budget it first saw for the
name until it restarts).

Provider keys are a different thing (``sluice keys set``) and never leave the gateway.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from .._errors import ConfigError
from .._record import Record

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "RELOAD_INTERVAL",
    "TOKEN_PREFIX",
    "KeyRing",
    "VirtualKey",
    "default_keys_path",
    "hash_token",
    "issue_key",
    "load_keys",
    "revoke_key",
    "save_keys",
]

TOKEN_PREFIX = "sk-sluice-"
RELOAD_INTERVAL = 1.0
"""Seconds between checks of the key file for changes, at most."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


@attrs.frozen(kw_only=True, repr=False)
class VirtualKey(Record):
    """One issued key. ``token_hash`` is the SHA-256 of the token, in hex."""

    name: str
    token_hash: str
    rpm: int | None = None
    tpm: int | None = None
    budget_usd: float | None = None
    models: tuple[str, ...] = ()
    """``provider:model`` names (``provider:*`` for all of a provider's); empty: any model."""
    created: float = 0.0
    revoked: bool = False

    def allows(self, model: str) -> bool:
        if not self.models:
            return True
        provider = model.partition(":")[0]
        return model in self.models or f"{provider}:*" in self.models

    def public(self) -> dict[str, Any]:
        """What listings show: everything but the hash."""
        return {
            "name": self.name,
            "rpm": self.rpm,
            "tpm": self.tpm,
            "budget_usd": self.budget_usd,
            "models": list(self.models),
            "created": self.created,
            "revoked": self.revoked,
        }


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def default_keys_path() -> Path:
    """``gateway-keys.json`` in the platform's user data folder (``~/.local/share/sluice``)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("sluice")) / "gateway-keys.json"


def load_keys(path: Path) -> dict[str, VirtualKey]:
    """The keys in ``path`` by name; an absent file holds none.

    Raises:
        ConfigError: the file cannot be read or is not a key file.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read the key file {path}: {exc.strerror}") from None
    try:
        data = orjson.loads(raw)
        keys = {
            entry["name"]: VirtualKey(
                name=entry["name"],
                token_hash=entry["token_hash"],
                rpm=entry.get("rpm"),
                tpm=entry.get("tpm"),
                budget_usd=entry.get("budget_usd"),
                models=tuple(entry.get("models") or ()),
                created=float(entry.get("created", 0.0)),
                revoked=bool(entry.get("revoked", False)),
            )
            for entry in data["keys"]
        }
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path} is not a sluice key file ({exc}); fix or remove it") from None
    return keys


def save_keys(path: Path, keys: Iterable[VirtualKey]) -> None:
    """Write ``keys`` to ``path`` atomically, readable by the owner only."""
    entries = [{**k.public(), "token_hash": k.token_hash} for k in keys]
    data = orjson.dumps({"keys": entries}, option=orjson.OPT_INDENT_2)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".keys-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_limits(rpm: int | None, tpm: int | None, budget_usd: float | None) -> None:
    for label, value in (("--rpm", rpm), ("--tpm", tpm)):
        if value is not None and value < 1:
            raise ConfigError(f"{label} must be at least 1, got {value}")
    if budget_usd is not None and budget_usd < 0:
        raise ConfigError(f"--budget must not be negative, got {budget_usd}")


def issue_key(
    keys: Mapping[str, VirtualKey],
    name: str,
    *,
    rpm: int | None = None,
    tpm: int | None = None,
    budget_usd: float | None = None,
    models: Iterable[str] = (),
    now: float,
) -> tuple[VirtualKey, str]:
    """A new key named ``name`` and its token (the only time the token exists in clear).

    A revoked key's name can be issued again (a new token; the ledger keeps the old calls
    under the same tag).

    Raises:
        ConfigError: the name is malformed or taken by a live key, or a limit is out of range.
    """
    if not _NAME.match(name):
        raise ConfigError(
            f"{name!r} is not a key name: use letters, digits and . _ @ - (64 at most)"
        )
    old = keys.get(name)
    if old is not None and not old.revoked:
        raise ConfigError(f"a key named {name!r} exists; revoke it first or pick another name")
    _check_limits(rpm, tpm, budget_usd)
    model_list = tuple(models)
    for model in model_list:
        if ":" not in model:
            raise ConfigError(f"--models: {model!r} must be written provider:model")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    key = VirtualKey(
        name=name,
        token_hash=hash_token(token),
        rpm=rpm,
        tpm=tpm,
        budget_usd=budget_usd,
        models=model_list,
        created=now,
    )
    return key, token


def revoke_key(keys: Mapping[str, VirtualKey], name: str) -> VirtualKey:
    """``name``'s key, revoked.

    Raises:
        ConfigError: no key has that name.
    """
    key = keys.get(name)
    if key is None:
        raise ConfigError(f"no key named {name!r}; `sluice keys issued` lists them")
    return attrs.evolve(key, revoked=True)


class KeyRing:
    """The live keys by token hash, reloaded from the file when it changes.

    ``path`` None keeps keys in memory only (tests, embedding); keys issued over the admin
    API are then lost on exit.
    """

    def __init__(self, path: Path | None, keys: Mapping[str, VirtualKey] | None = None) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._next_check = -1.0
        self.by_name: dict[str, VirtualKey] = dict(keys or {})
        if path is not None and keys is None:
            self._stamp = self._file_stamp()
            self.by_name = load_keys(path)
        self._by_hash = self._index()

    def _index(self) -> dict[str, VirtualKey]:
        return {k.token_hash: k for k in self.by_name.values() if not k.revoked}

    def _file_stamp(self) -> tuple[int, int] | None:
        assert self.path is not None
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def refresh(self, now: float) -> bool:
        """Reload the file if it changed (looked at once per :data:`RELOAD_INTERVAL`);
        True when the keys changed. A file that became unreadable keeps the old keys."""
        if self.path is None or now < self._next_check:
            return False
        self._next_check = now + RELOAD_INTERVAL
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return False
        try:
            keys = load_keys(self.path)
        except ConfigError:
            return False
        self._stamp = stamp
        self.by_name = keys
        self._by_hash = self._index()
        return True

    def lookup(self, token: str) -> VirtualKey | None:
        """The live key whose token this is, if any."""
        return self._by_hash.get(hash_token(token))

    def put(self, key: VirtualKey) -> None:
        """Add or replace ``key`` (and write the file, if there is one, over what it holds
        now: a key issued meanwhile by ``sluice keys issue`` is kept)."""
        if self.path is not None:
            try:
                self.by_name = load_keys(self.path)
            except ConfigError:
                pass  # unreadable now: write what we know
        self.by_name[key.name] = key
        self._by_hash = self._index()
        if self.path is not None:
            save_keys(self.path, self.by_name.values())
            self._stamp = self._file_stamp()
