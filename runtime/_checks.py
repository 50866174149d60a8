"""attrs validators for values that must have a shape: URLs and environment variable names.

Pure and cheap: they run when a config, a provider definition or a request is built, so a wrong
value fails where it is written (with its path, through :mod:`sluice._serde`), not on the
first call.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

__all__ = ["check_env_name", "check_env_names", "check_http_url", "http_url_problem"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def http_url_problem(value: object) -> str | None:
    """Why ``value`` is not an absolute http(s) URL with a host, or None when it is one."""
    if not isinstance(value, str):
        return f"expected a URL string, got {type(value).__name__} {value!r}"
    try:
        parts = urlsplit(value)
        host = parts.hostname
        port = parts.port  # raises ValueError for a port past 65535
    except ValueError as exc:
        if "port" in str(exc).lower():
            return f"{value!r} is not a valid URL (its port is not in 1-65535)"
        return f"{value!r} is not a valid URL ({exc})"
    if port == 0:
        return f"{value!r} is not a valid URL (its port is not in 1-65535)"
    if parts.scheme not in ("http", "https") or not host:
        return (
            f"{value!r} is not an http:// or https:// URL with a host"
            " (for example http://127.0.0.1:8000/v1)"
        )
    return None


def check_http_url(_: Any, attribute: Any, value: Any) -> None:
    """Validator: None, or an absolute http(s) URL with a host."""
    if value is None:
        return
    problem = http_url_problem(value)
    if problem is not None:
        raise ValueError(f"{attribute.name}: {problem}")


def check_env_name(_: Any, attribute: Any, value: Any) -> None:
    """Validator: None, or a name an environment variable can have (``OPENAI_API_KEY``) and
    not the shell's ``_`` (the last command run: never a key)."""
    if value is None:
        return
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value) or value == "_":
        raise ValueError(
            f"{attribute.name}: {value!r} is not an environment variable name (letters,"
            " digits and '_', not starting with a digit, e.g. 'ACME_API_KEY')"
        )


def check_env_names(instance: Any, attribute: Any, value: Any) -> None:
    """Validator: a list of environment variable names (a string is refused)."""
    if isinstance(value, str):
        raise ValueError(
            f"{attribute.name}: expected a list of environment variable names, got the string"
            f" {value!r}"
        )
    for name in value:
        check_env_name(instance, attribute, name)
