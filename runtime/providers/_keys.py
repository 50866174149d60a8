"""The key store: API keys kept encrypted on disk, for providers whose key is not in the
environment or the config.

* The keys live in ``keys.enc`` in the platform config directory (``~/.config/sluice``): a JSON
  object mapping each provider to a Fernet token (AES-128-CBC with HMAC-SHA256). The plaintext
  of a token is ``PROVIDER\\nKEY``, so a token copied to another provider's entry does not
  decrypt as that provider's key.
* The master key is ``SLUICE_MASTER_KEY`` when set (a Fernet key: 32 bytes, URL-safe base64,
  as ``sluice keys new-master-key`` prints), else the file ``master.key`` in the platform data
  directory (``~/.local/share/sluice``), created on first use.
* Files are written whole to a temporary file created with mode 0600 and renamed over the old
  one, in a directory of mode 0700. A file that group or others may read is refused, as ssh
  refuses a private key.
* A key that does not decrypt is an error (:class:`KeyStoreError`), never sent as a key.

A master key stored next to the keys only guards against casual disclosure (a backup, a shared
screen, a synced dotfiles folder holding only one of the two files); anyone who can run code as
the same user can read both.

``cryptography`` is imported only when a key is actually encrypted or decrypted.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from .._config import Secret
from .._errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cryptography.fernet import Fernet

__all__ = ["MASTER_KEY_ENV", "KeyStore", "KeyStoreError", "mask_key", "new_master_key"]

MASTER_KEY_ENV = "SLUICE_MASTER_KEY"
_VERSION = 1


class KeyStoreError(ConfigError):
    """The key store cannot be read or written, or a key in it does not decrypt."""


def mask_key(key: str) -> str:
    """A key shortened for display: ``sk-...wxyz`` for a long key, ``********`` otherwise."""
    if len(key) < 20:
        return "********"
    return f"{key[:3]}...{key[-4:]}"


def new_master_key() -> str:
    """A fresh random master key (a Fernet key)."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


class KeyStore:
    """The encrypted keys file and its master key.

    Args:
        path: the keys file.
        master_key_path: the master key file, used when ``environ`` has no
            :data:`MASTER_KEY_ENV`.
        environ: where :data:`MASTER_KEY_ENV` is looked up (default ``os.environ``).
    """

    def __init__(
        self,
        path: Path,
        master_key_path: Path,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.path = path
        self.master_key_path = master_key_path
        self._environ = os.environ if environ is None else environ
        self._fernet: Fernet | None = None

    def __repr__(self) -> str:
        return f"KeyStore({str(self.path)!r})"

    @classmethod
    def default(cls, environ: Mapping[str, str] | None = None) -> KeyStore:
        """The store in the platform directories (see the module docstring)."""
        import platformdirs

        return cls(
            Path(platformdirs.user_config_dir("sluice")) / "keys.enc",
            Path(platformdirs.user_data_dir("sluice")) / "master.key",
            environ,
        )

    # Reading.

    def exists(self) -> bool:
        return self.path.is_file()

    def names(self) -> list[str]:
        """The providers with a stored key, sorted. Nothing is decrypted."""
        return sorted(self._read())

    def get(self, provider: str) -> Secret | None:
        """The stored key of ``provider``, or None.

        Raises:
            KeyStoreError: the store is unreadable or the key does not decrypt.
        """
        if not self.exists():
            return None
        token = self._read().get(provider)
        if token is None:
            return None
        return Secret(self._decrypt(provider, token))

    def _read(self) -> dict[str, str]:
        try:
            raw = _read_private(self.path)
        except FileNotFoundError:
            return {}
        try:
            data = orjson.loads(raw)
            keys = data["keys"]
            if not isinstance(keys, dict) or not all(isinstance(v, str) for v in keys.values()):
                raise TypeError("keys must map provider names to tokens")
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise KeyStoreError(f"key store {self.path} is damaged ({exc})") from None
        return keys

    def _decrypt(self, provider: str, token: str) -> str:
        from cryptography.fernet import InvalidToken

        try:
            plain = self._cipher(create=False).decrypt(token.encode()).decode()
        except (InvalidToken, UnicodeDecodeError, ValueError):
            plain = ""
        name, sep, key = plain.partition("\n")
        if not sep or name != provider or not key:
            where = (
                MASTER_KEY_ENV
                if self._environ.get(MASTER_KEY_ENV)
                else f"the master key file {self.master_key_path}"
            )
            raise KeyStoreError(
                f"the stored key of provider {provider!r} does not decrypt with {where}: "
                f"it was stored with another master key or the store is damaged. Store it "
                f"again with `sluice keys set {provider}`, or delete it with "
                f"`sluice keys delete {provider}`"
            ) from None
        return key

    # Writing.

    def set(self, provider: str, key: str) -> None:
        """Store ``key`` for ``provider``, replacing any key it had."""
        if not key or "\n" in key:
            raise KeyStoreError("an API key must be one non-empty line")
        keys = self._read()
        token = self._cipher(create=True).encrypt(f"{provider}\n{key}".encode()).decode()
        keys[provider] = token
        self._write(keys)

    def delete(self, provider: str) -> bool:
        """Remove ``provider``'s key; False when it had none."""
        keys = self._read()
        if provider not in keys:
            return False
        del keys[provider]
        self._write(keys)
        return True

    def _write(self, keys: Mapping[str, str]) -> None:
        data = orjson.dumps({"version": _VERSION, "keys": dict(sorted(keys.items()))})
        _write_private(self.path, data + b"\n")

    # The master key.

    def _cipher(self, *, create: bool) -> Fernet:
        if self._fernet is None:
            from cryptography.fernet import Fernet

            self._fernet = Fernet(self._master_key(create=create))
        return self._fernet

    def _master_key(self, *, create: bool) -> bytes:
        from_env = self._environ.get(MASTER_KEY_ENV)
        if from_env:
            return _checked_master_key(from_env.strip().encode(), MASTER_KEY_ENV)
        try:
            raw = _read_private(self.master_key_path).strip()
        except FileNotFoundError:
            if not create:
                raise KeyStoreError(
                    f"no master key: {self.master_key_path} does not exist and "
                    f"{MASTER_KEY_ENV} is not set, so the stored keys cannot be decrypted"
                ) from None
            raw = new_master_key().encode()
            _write_private(self.master_key_path, raw + b"\n", exclusive=True)
        return _checked_master_key(raw, str(self.master_key_path))


def _checked_master_key(raw: bytes, where: str) -> bytes:
    import base64
    import binascii

    try:
        ok = len(base64.urlsafe_b64decode(raw)) == 32
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        raise KeyStoreError(
            f"the master key in {where} is not a Fernet key (32 bytes, URL-safe base64); "
            "make one with `sluice keys new-master-key`"
        )
    return raw


def _read_private(path: Path) -> bytes:
    """The file's bytes; refused when group or others have any access to it."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise KeyStoreError(
                f"{path} may be read by other users (mode {stat.S_IMODE(mode):04o}); "
                f"make it private with `chmod 600 {path}`"
            )
        return f.read()


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.name == "posix" and stat.S_IMODE(path.stat().st_mode) != 0o700:
        os.chmod(path, 0o700)


def _write_private(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    """Write ``data`` to ``path`` atomically: a 0600 temporary file renamed over ``path``.

    With ``exclusive``, an existing ``path`` is an error (two processes creating a master key
    at once must not both win).
    """
    _private_dir(path.parent)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(temp, flags, 0o600)
    except FileExistsError:
        temp.unlink()
        fd = os.open(temp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(temp, path)
            except FileExistsError:
                raise KeyStoreError(f"{path} was created by another process; try again") from None
        else:
            os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
