"""How a run of the quota script can fail, as the Redis quota store tells the cases apart: an
outage (Redis did not answer: :class:`~sluice._errors.StoreUnavailable`, the work stays
queued) or the script itself failing (:class:`ScriptFailed`: a bug, which asking again cannot
fix). ``coredis`` is imported on first use only."""

from __future__ import annotations

import logging
from typing import Any

from .._errors import InternalError

__all__ = ["ScriptFailed", "bug", "safe_url", "script_failed"]

log = logging.getLogger("sluice._limits")


class ScriptFailed(Exception):
    """The script ran and failed (its message says where)."""


def bug(request: dict[str, Any], failed: ScriptFailed) -> InternalError:
    """The error to raise for a script run that failed on ``request`` (logged here)."""
    log.error("quota script failed on %r: %s", request.get("op"), failed)
    return InternalError(f"the quota script failed: {failed}")


def script_failed(exc: Exception) -> bool:
    """Whether Redis ran the script and the script itself failed: a Lua error in its code
    (``user_script:<line>: ...``) or a command on a key of the wrong type. Anything else (no
    connection, loading, read-only replica, out of memory, cluster down) is an outage."""
    from coredis.exceptions import ResponseError, WrongTypeError

    if isinstance(exc, WrongTypeError):
        return True
    return isinstance(exc, ResponseError) and str(exc).startswith("user_script:")


def safe_url(url: str) -> str:
    """The URL without its password."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"
