"""A secret a call sends in its own headers never shows in its error.

The ProviderActor masks server text in a failed attempt's error with the provider's key and
configured headers, and also with the secret-looking values of the call's own
``extra_headers`` (``ChatRequest.extra_headers``, ``EmbedRequest.extra_headers``): a proxy
that quotes such a header back in its 401 gets ``********`` into the error, its ``str`` and
``repr``, and the observer's log line. A header whose name holds nothing secret-looking
(``x-team``) is left as the server quoted it. The load tester's result files are checked in
``tests/test_loadtest_completions.py`` (``--header`` on chat and completions).
"""

from __future__ import annotations

import logging

import httpx
import orjson
import pytest

import sluice
from sluice import ChatRequest, EmbedRequest, RetryConfig, RuntimeConfig, Secret
from sluice._config import ProviderConfig
from sluice._errors import CallError
from sluice._redact import MASK, secrets_of, with_headers

from .helpers import virtual_deadline

KEY = "sk-provider-0a1b2c3d"
SECRET = "sk-percall-9f8e7d6c5b"
HEADERS = {"x-upstream-key": f"Bearer {SECRET}", "x-team": "search-team"}


def quoting_server(request: httpx.Request) -> httpx.Response:
    """A proxy refusing every request with a 401 that quotes the request's headers back in
    every field of its error, as some do."""
    key, team = request.headers.get("x-upstream-key"), request.headers.get("x-team")
    error = {
        "message": f"upstream refused key {key!r} for team {team}",
        "type": f"invalid_key {key}",
        "code": key,
    }
    body = orjson.dumps({"error": error})
    return httpx.Response(401, content=body, headers={"content-type": "application/json"})


def config() -> RuntimeConfig:
    provider = ProviderConfig(base_url="https://proxy.example.test/v1", api_key=Secret(KEY))
    return RuntimeConfig(providers={"t": provider}, retry=RetryConfig(max_attempts=1))


@pytest.mark.parametrize(
    "request_",
    [
        ChatRequest(model="t:m", messages="hi", extra_headers=HEADERS),
        EmbedRequest(model="t:e", input="hi", extra_headers=HEADERS),
    ],
    ids=["chat", "embed"],
)
@virtual_deadline(60)
async def test_a_quoted_per_call_header_secret_is_masked_in_the_error_and_the_log(
    autojump_clock, caplog, request_
):
    caplog.set_level(logging.INFO, logger="sluice")
    transport = httpx.MockTransport(quoting_server)
    async with sluice.open_runtime(config(), transport=transport, environ={}) as rt:
        send = rt.embed if isinstance(request_, EmbedRequest) else rt.chat
        with pytest.raises(CallError) as raised:
            await send(request_)
    error = raised.value
    assert error.status == 401
    assert error.message == f"upstream refused key '{MASK}' for team search-team"
    # The attempt's line and the call's, each with the masked error.
    logged = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert len(logged) == 2
    assert all(line.endswith(f"key '{MASK}' for team search-team") for line in logged)
    everything = (str(error), repr(error), repr(vars(error)), caplog.text, *logged)
    for text in everything:
        assert SECRET not in text and KEY not in text


def test_a_calls_secrets_join_the_providers_longest_first():
    provider = secrets_of(Secret(KEY), {"x-key": "abcd"})
    # A per-call value that holds the provider's key: masked whole, not around the key.
    joined = with_headers(provider, {"x-upstream-key": f"{KEY}-and-more", "x-team": "search"})
    assert joined == (f"{KEY}-and-more", KEY, "abcd")
    assert with_headers(provider, {}) is provider
