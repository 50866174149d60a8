"""A window of any length in a quota key's limits: :class:`WindowLimit`.

Loaded with the first window a config sets or a per-minute limit asks for (or the first time
the name is asked for): a runtime without request or token limits never builds one, so
:mod:`.quota` and the package serve it (PEP 562) instead of importing it.
"""

from __future__ import annotations

from typing import Literal

import attrs
from attrs.validators import ge, gt

from .._record import Value

__all__ = ["WindowLimit"]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class WindowLimit(Value):
    """At most ``limit`` units of ``dimension`` admitted in any ``per`` seconds."""

    dimension: Literal["requests", "input_tokens", "output_tokens", "total_tokens"]
    limit: int = attrs.field(validator=ge(1))
    per: float = attrs.field(default=60.0, validator=gt(0))
    """Length of the window in seconds: 1, 60, 86400..."""
    counted_from: Literal["reply", "send"] = "reply"
    """When an admission starts to count. ``reply`` (a provider's limit): from its first chunk
    or reply, since the provider counts a request from when it arrived, and counting later
    keeps our window behind the provider's at every boundary. ``send``: from the admission,
    for a spread of one's own (``sluice batch --rpm``), whose rate then holds whatever the
    time to first token. A window the provider reports limits for (60 s) always counts from
    the reply, as does one a ``reply`` window of the same dimension and length shares."""
