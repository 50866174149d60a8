"""examples/fastapi_app.py under uvicorn, over loopback: 200 clients stream at once.

uvicorn serves the example app from a thread of its own (its own asyncio loop, uvloop when
installed), the simulator from another (tests/sim_thread.py), and the clients are httpx on this
test's asyncio loop. Some clients go away mid-stream: their upstream calls must be cut off,
the others must all complete, and the runtime must end with nothing in flight.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest

from sluice import ProviderConfig, RuntimeConfig
from sluice.simulator import SimulatorConfig

from .sim_thread import WatchedSimulator, simulator_thread

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fastapi_app.py"
CLIENTS = 200
LEAVERS = 40
"""Clients that disconnect after their first text event."""


def _load_example() -> Any:
    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        if os.environ.get("CI"):
            raise AssertionError("fastapi and uvicorn are dev dependencies: install .[dev]")
        pytest.skip("fastapi or uvicorn is not installed")
    spec = importlib.util.spec_from_file_location("fastapi_app_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sim() -> Iterator[WatchedSimulator]:
    # 100 tokens/s: a whole reply (1000 tokens) takes 10 s; finishers ask for 20 tokens.
    config = SimulatorConfig(tokens_per_second=100, output_tokens=1000)
    with simulator_thread(config) as sim:
        yield sim


@pytest.fixture
def server(sim: WatchedSimulator) -> Iterator[str]:
    """The example app under uvicorn on 127.0.0.1; yields its base URL."""
    import uvicorn

    example = _load_example()
    app = example.create_app(RuntimeConfig(providers={"sim": ProviderConfig(base_url=sim.url)}))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn")
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
    assert not thread.is_alive()


async def _client(http: httpx.AsyncClient, base: str, i: int) -> dict[str, Any] | None:
    """One streaming client: the end event's data, or None for a client that left early."""
    leaver = i < LEAVERS
    params: dict[str, Any] = {"prompt": f"client {i}"}
    if not leaver:
        params["max_tokens"] = 20
    texts: list[str] = []
    async with http.stream("GET", f"{base}/chat", params=params) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event = "message"
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = orjson.loads(line[6:])
                if event == "end":
                    assert "".join(texts), "the end came without any text"
                    end: dict[str, Any] = data
                    return end
                texts.append(data["text"])
                if leaver:
                    return None  # leaving the block closes the connection mid-stream
    raise AssertionError(f"client {i}: the stream ended without an end event")


def test_200_streaming_clients_through_the_fastapi_example(
    server: str, sim: WatchedSimulator
) -> None:
    async def main() -> tuple[list[Any], dict[str, Any]]:
        limits = httpx.Limits(max_connections=CLIENTS + 10)
        async with httpx.AsyncClient(limits=limits, timeout=30) as http:
            async with asyncio.timeout(60):
                ends = await asyncio.gather(*(_client(http, server, i) for i in range(CLIENTS)))
                await asyncio.to_thread(sim.wait_for, cut=LEAVERS, timeout=20)
                for _ in range(200):
                    stats = (await http.get(f"{server}/stats")).json()
                    if stats["calls_in_flight"] == 0:
                        break
                    await asyncio.sleep(0.05)
        return ends, stats

    ends, stats = asyncio.run(main())
    assert ends[:LEAVERS] == [None] * LEAVERS
    assert ends[LEAVERS:] == [{"finish_reason": "length"}] * (CLIENTS - LEAVERS)
    assert sim.cut == LEAVERS  # every client that left cut its upstream request off
    assert stats == {
        "calls_in_flight": 0,
        "attempts_in_flight": {"sim": 0},
        "open_streams": {"sim": 0},
    }


@pytest.mark.parametrize("model", ["nowhere:m", "no-provider"])
def test_an_unknown_model_ends_the_stream_with_an_error_event(server: str, model: str) -> None:
    with httpx.Client(timeout=30) as http:
        response = http.get(f"{server}/chat", params={"prompt": "hi", "model": model})
    assert response.status_code == 200
    assert response.text.startswith("event: end\ndata: "), response.text
    end = orjson.loads(response.text.split("data: ", 1)[1])
    assert model.partition(":")[0] in end["error"]
