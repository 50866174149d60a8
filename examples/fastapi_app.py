"""A FastAPI app that streams sluice calls to its own clients as server-sent events.

    pip install fastapi uvicorn
    uvicorn examples.fastapi_app:app            # then: curl -N 'localhost:8000/chat?prompt=hi'

The runtime opens with the app (its lifespan) inside uvicorn's asyncio loop, through
``sluice.aio``, and every request streams one call. A client that goes away mid-stream ends its
response; leaving ``rt.stream``'s block then abandons the call and cancels its upstream request.
Providers come from ``SLUICE_CONFIG`` (or the defaults); ``sim:`` models need no key.

``GET /chat?prompt=...&model=...&max_tokens=...`` sends one ``data: {"text": ...}`` event per
text delta, then ``event: end`` with ``{"finish_reason": ...}`` or ``{"error": ...}`` (also
when the call could not start: an unknown model or provider, a missing key).
``GET /stats`` shows what is in flight.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import orjson
from fastapi import FastAPI
from fastapi.responses import Response, StreamingResponse

import sluice
import sluice.aio
from sluice import ChatRequest, TextDelta

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


def create_app(config: sluice.RuntimeConfig | None = None) -> FastAPI:
    """The app; ``config`` is the runtime's (default: ``SLUICE_CONFIG`` or the defaults)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with sluice.aio.open_runtime(config) as rt:
            app.state.rt = rt
            yield
        # leaving: the calls still streaming are finished first

    app = FastAPI(lifespan=lifespan)

    @app.get("/chat")
    async def chat(
        prompt: str, model: str = "sim:sim-small", max_tokens: int | None = None
    ) -> StreamingResponse:
        rt: sluice.aio.Runtime = app.state.rt
        request = ChatRequest(model=model, messages=prompt, max_tokens=max_tokens)

        async def events() -> AsyncIterator[bytes]:
            try:
                async with rt.stream(request) as call:
                    async for event in call:
                        if isinstance(event, TextDelta):
                            yield b"data: " + orjson.dumps({"text": event.text}) + b"\n\n"
            except sluice.SluiceError as exc:  # refused before it started: an unknown model
                end: dict[str, str | None] = {"error": str(exc)}
            else:
                if call.result is not None:
                    end = {"finish_reason": call.result.finish_reason}
                else:
                    end = {"error": str(call.error)}
            yield b"event: end\ndata: " + orjson.dumps(end) + b"\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/stats")
    async def stats() -> Response:
        rt: sluice.aio.Runtime = app.state.rt
        now = await rt.statistics()
        body = {
            "calls_in_flight": now.calls_in_flight,
            "attempts_in_flight": now.attempts_in_flight,
            "open_streams": {key: q.open_streams for key, q in now.quotas.items()},
        }
        return Response(orjson.dumps(body), media_type="application/json")

    return app


app = create_app()
