"""``GET /metrics`` of ``sluice.serve``: by default the runtime's own Prometheus registry with
the gateway's series in it, scraped over loopback after a known sequence of requests and
parsed with prometheus_client's parser; every counter equals what happened."""

from __future__ import annotations

import httpx
import orjson
import trio
from prometheus_client.parser import text_string_to_metric_families

import sluice
from sluice._gateway import KeyRing, issue_key

from .gateway_helpers import chat_body, messages_body

CONFIG = {"ledger": {"persist": False}}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def _total(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return sum(
        v
        for (n, ls), v in found.items()
        if n == name and all(dict(ls).get(k) == want for k, want in labels.items())
    )


def _sse_usage(text: str) -> int:
    """Output tokens an OpenAI stream (with ``include_usage``) reported."""
    for line in text.splitlines():
        if line.startswith("data: {") and '"usage":{' in line:
            return int(orjson.loads(line[6:])["usage"]["completion_tokens"])
    raise AssertionError(f"no usage in the stream: {text!r}")


async def _malformed(port: int) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET / HTTP/2.0\r\nhost: a\r\n\r\n")
        received = b""
        while data := await stream.receive_some(65536):
            received += data
    return received


async def test_scrape_after_known_requests_counts_each_route_status_and_call():
    keys: dict = {}
    alice, alice_token = issue_key(keys, "alice", now=0.0)
    bob, bob_token = issue_key(keys, "bob", rpm=1, now=0.0)
    ring = KeyRing(None, {"alice": alice, "bob": bob})
    output_tokens = 0
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                lambda task_status: sluice.serve(
                    sluice.load_config(CONFIG), port=0, keys=ring, task_status=task_status
                )
            )
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}",
                timeout=10,
                limits=httpx.Limits(max_connections=1),
            ) as client:
                alice_auth = {"authorization": f"Bearer {alice_token}"}
                for _ in range(2):
                    reply = await client.post(
                        "/v1/chat/completions", json=chat_body(), headers=alice_auth
                    )
                    assert reply.status_code == 200
                    output_tokens += reply.json()["usage"]["completion_tokens"]
                body = chat_body(stream=True, stream_options={"include_usage": True})
                reply = await client.post("/v1/chat/completions", json=body, headers=alice_auth)
                assert reply.status_code == 200
                output_tokens += _sse_usage(reply.text)
                reply = await client.post(
                    "/v1/messages",
                    json=messages_body(),
                    headers={"x-api-key": alice_token, "anthropic-version": "2023-06-01"},
                )
                assert reply.status_code == 200
                output_tokens += reply.json()["usage"]["output_tokens"]
                bob_auth = {"authorization": f"Bearer {bob_token}"}
                reply = await client.post(
                    "/v1/chat/completions", json=chat_body(), headers=bob_auth
                )
                assert reply.status_code == 200
                output_tokens += reply.json()["usage"]["completion_tokens"]
                reply = await client.post(
                    "/v1/chat/completions", json=chat_body(), headers=bob_auth
                )
                assert reply.status_code == 429  # bob's rpm is 1
                reply = await client.post(
                    "/v1/chat/completions",
                    json=chat_body(),
                    headers={"authorization": "Bearer sk-sluice-nope"},
                )
                assert reply.status_code == 401
                assert (await client.get("/health")).status_code == 200
                assert (await client.get("/nowhere")).status_code == 404
                assert (await _malformed(port)).startswith(b"HTTP/1.1 505 ")

                reply = await client.get("/metrics")
                assert reply.status_code == 200
                assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
                found = _samples(reply.text)
                requests = "sluice_gateway_requests_total"
                chat = "/v1/chat/completions"
                assert _total(found, requests, route=chat, status="200") == 4
                assert _total(found, requests, route=chat, status="429") == 1
                assert _total(found, requests, route=chat, status="401") == 1
                assert _total(found, requests, route="/v1/messages", status="200") == 1
                assert _total(found, requests, route="/health", status="200") == 1
                assert _total(found, requests, route="other", status="404") == 1
                assert _total(found, requests) == 9  # the scrape itself is counted after it
                assert _total(found, "sluice_gateway_refused_total") == 1
                assert _total(found, "sluice_gateway_refused_total", status="505") == 1
                # This scrape's connection, answering this scrape.
                assert _total(found, "sluice_gateway_open_connections") == 1
                assert _total(found, "sluice_gateway_active_requests") == 1
                # The runtime's own series, in the same registry: five calls reached the
                # simulator and succeeded; the 429 and 401 never became calls.
                assert _total(found, "sluice_calls_total", outcome="ok") == 5
                assert _total(found, "sluice_calls_total") == 5
                assert _total(found, "sluice_tokens_total", kind="output") == output_tokens

                again = _samples((await client.get("/metrics")).text)
                assert _total(again, requests, route="/metrics", status="200") == 1
            nursery.cancel_scope.cancel()


async def test_metrics_can_be_off_or_rendered_by_a_function_of_ones_own():
    config = sluice.load_config(CONFIG)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            off = await nursery.start(
                lambda task_status: sluice.serve(
                    config, port=0, metrics=False, task_status=task_status
                )
            )
            own = await nursery.start(
                lambda task_status: sluice.serve(
                    config, port=0, metrics=lambda: b"mine 1\n", task_status=task_status
                )
            )
            async with httpx.AsyncClient(timeout=10) as client:
                reply = await client.get(f"http://127.0.0.1:{off}/metrics")
                assert reply.status_code == 404
                reply = await client.get(f"http://127.0.0.1:{own}/metrics")
                assert reply.status_code == 200 and reply.text == "mine 1\n"
            nursery.cancel_scope.cancel()
