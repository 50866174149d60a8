"""A built request's body holds no more memory than its length.

orjson hands back its write buffer as the bytes object, several times larger than what it
wrote (4 KiB for a short chat, ten times a long prompt's text), and a body lives as long as its
attempt waits for the reply: with ten thousand calls open, that was tens of megabytes of empty
buffer. Every request builder encodes its body with :func:`sluice._protocols.wire.json_body`,
which keeps exactly the bytes written. Measured with ``tracemalloc``: the memory still
allocated, once only the body is kept, against the body's length.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from typing import TYPE_CHECKING

import orjson
import pytest

from sluice._embeddings import EmbedRequest
from sluice._messages import ChatRequest
from sluice._protocols import (
    anthropic_request,
    gemini_embed,
    gemini_request,
    ollama_embed,
    ollama_request,
    openai_embed,
    openai_request,
    responses_request,
)
from sluice._protocols.wire import json_body

if TYPE_CHECKING:
    from collections.abc import Callable

SLACK = 200
"""Bytes a body may hold beyond its length (the bytes object's own header)."""


def _held(make: Callable[[], bytes]) -> tuple[int, int]:
    """The memory still allocated by ``make()`` once only its result is kept, and its length.
    Only allocations made under the ``make()`` call count: another thread's (the test
    runner's) in the same moment do not."""
    gc.collect()
    tracemalloc.start(32)
    try:
        line = sys._getframe().f_lineno + 1
        body = make()
        gc.collect()
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    mine = snapshot.filter_traces([tracemalloc.Filter(True, __file__, line, all_frames=True)])
    return sum(stat.size for stat in mine.statistics("filename")), len(body)


def test_orjson_alone_holds_far_more_than_it_writes() -> None:
    # The reason for json_body: if orjson ever shrinks its buffer, this fails and the copy
    # can go.
    held, length = _held(lambda: orjson.dumps({"content": "hi"}))
    assert held > 10 * length


@pytest.mark.parametrize(("char", "count"), [("hi", 1), ("x", 5_000), ("é", 20_000)])
def test_json_body_holds_its_length(char: str, count: int) -> None:
    # The text is made inside: a str keeps its UTF-8 form once encoded, which is its own.
    held, length = _held(lambda: json_body({"messages": [{"content": char * count}]}))
    assert held <= length + SLACK, (held, length)
    assert orjson.loads(json_body({"t": char * count})) == {"t": char * count}


CHAT = ChatRequest(model="p:m", messages="x" * 3_000, stream=True)
EMBED = EmbedRequest(model="p:m", input=["x" * 3_000])
BUILDERS: dict[str, Callable[[], bytes]] = {
    "openai": lambda: openai_request.build_request(CHAT, base_url="http://h/v1", api_key=None).body,
    "responses": lambda: (
        responses_request.build_request(CHAT, base_url="http://h/v1", api_key=None).body
    ),
    "anthropic": lambda: (
        anthropic_request.build_request(CHAT, base_url="http://h/v1", api_key=None).body
    ),
    "gemini": lambda: gemini_request.build_request(CHAT, base_url="http://h", api_key=None).body,
    "ollama": lambda: ollama_request.build_request(CHAT, base_url="http://h", api_key=None).body,
    "openai embed": lambda: (
        openai_embed.build_embed_request(EMBED, base_url="http://h/v1", api_key=None).body
    ),
    "gemini embed": lambda: (
        gemini_embed.build_embed_request(EMBED, base_url="http://h", api_key=None).body
    ),
    "ollama embed": lambda: (
        ollama_embed.build_embed_request(EMBED, base_url="http://h", api_key=None).body
    ),
}


@pytest.mark.parametrize("builder", BUILDERS)
def test_every_request_builder_keeps_a_body_of_its_length(builder: str) -> None:
    BUILDERS[builder]()  # anything loaded or cached on first use is not the body's
    held, length = _held(BUILDERS[builder])
    assert length > 3_000 and held <= length + SLACK, (held, length)
