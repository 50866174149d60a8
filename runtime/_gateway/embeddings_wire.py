"""OpenAI's embeddings wire format as the gateway serves it: the one reading and writing of it
that every door shares, :mod:`sluice._embeddings_format` (``sluice batch`` reads the same
bodies)."""

from __future__ import annotations

from .._embeddings_format import float32_base64, parse_embeddings_body, render_embeddings

__all__ = ["float32_base64", "parse_embeddings_body", "render_embeddings"]
