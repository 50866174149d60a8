"""sluice's version, and the ``User-Agent`` it sends: a constant, so neither costs a metadata
lookup on import (``pyproject.toml`` reads the version from here)."""

from typing import Final

__all__ = ["USER_AGENT", "VERSION"]

VERSION: Final = "0.1.0"
USER_AGENT: Final = f"sluice/{VERSION}"
"""Sent on every request to a provider unless the caller names its own ``User-Agent`` (in
the provider's ``headers`` config or a request's ``extra_headers``)."""
