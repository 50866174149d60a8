"""The control calls of a batch API: JSON requests and streamed downloads, retried.

A batch backend's calls are few (an upload, a create, a poll now and then, a download), so
they go through the provider's own transport (the one the realtime lane uses, a
:class:`~sluice.transport.HotTransport`) one at a time, with no actor in between. A call that
fails in a way that may pass (429, 5xx, 529, a broken or refused connection, a reply that
does not come) is tried again after the project's backoff (:func:`sluice._backoff.retry_delay`,
never sooner than the provider's ``Retry-After``), up to ``RetryConfig.max_attempts``
attempts; then, or at once for an error retrying cannot fix, the :class:`CallError` is
raised for the engine to decide (it waits out outages). Error replies are read by the
provider's codec, so they are the same errors the realtime lane raises.

A call that is not idempotent (a batch create) passes ``retry="connect"``: only a connection
that never opened is tried again (nothing was sent); any other failure is raised, since the
provider may have acted on it.

No key appears in an error, a log line or a repr here: headers are never printed, and the
provider's error messages are cleaned of the key (``secrets``) before they are raised.
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import TYPE_CHECKING, Any, Literal

import orjson
import trio

from ..._backoff import retry_delay
from ..._errors import CallError, CallTimeout, ConnectionFailed, ProtocolError, StreamBroken
from ..._redact import redact_error
from ...transport._errors import ConnectError, TransportError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from contextlib import AbstractAsyncContextManager

    from ..._config import RetryConfig
    from ..._protocols.base import Codec
    from ...transport._base import HotResponse, HotTransport

__all__ = ["Control", "MAX_LINE"]

MAX_LINE = 256 * 1024 * 1024
"""Longest results line read (one reply); longer is a :class:`ProtocolError`."""
STEP_TIMEOUT = 300.0
"""Seconds one step of a control call (the response head, one piece of a body) may take."""
SLOWEST_UPLOAD = 256 * 1024
"""Bytes per second an upload is allowed at the least: sending a request body gets
``STEP_TIMEOUT`` plus its size at this rate (a 200 MB file: about 13 minutes more)."""
_ERROR_BODY = 64 * 1024


class Control:
    """Control calls to one provider: ``base_url`` joined with each path, ``headers`` (the
    key among them) sent with each, errors decoded by ``codec``. ``transport`` gives the
    transport for one call (and closes it after, when it is the call's own)."""

    def __init__(
        self,
        *,
        base_url: str,
        headers: tuple[tuple[str, str], ...],
        transport: Callable[[], AbstractAsyncContextManager[HotTransport]],
        codec: Codec,
        retry: RetryConfig,
        secrets: tuple[str, ...] = (),
        rng: random.Random | None = None,
        wall_clock: Callable[[], float] = time.time,
        step_timeout: float = STEP_TIMEOUT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = headers
        self._transport = transport
        self._codec = codec
        self._retry = retry
        self._secrets = secrets
        self._rng = rng or random.Random()
        self._wall_clock = wall_clock
        self._step = step_timeout

    def __repr__(self) -> str:
        return f"Control({self.base_url!r})"

    async def json(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        content_type: str = "application/json",
        retry: Literal["all", "connect"] = "all",
    ) -> Any:
        """The JSON reply to one call (``body`` sent as JSON, or ``raw`` as it is).

        Raises:
            CallError: the provider refused, kept failing, or answered something not JSON.
        """
        data = raw if raw is not None else (b"" if body is None else orjson.dumps(body))
        headers = self._headers
        if data:
            headers = (*headers, ("content-type", content_type))
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._json_once(method, path, headers, data)
            except CallError as error:
                await self._backoff(error, attempt, retry)

    async def _json_once(
        self, method: str, path: str, headers: tuple[tuple[str, str], ...], data: bytes
    ) -> Any:
        async with self._open(method, path, headers, data) as response:
            content = bytearray()
            while piece := await self._read(response):
                content += piece
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError:
            raise ProtocolError(
                f"{method} {path}: the reply is not JSON ({bytes(content[:80])!r}...); is the "
                "base URL the provider's API?",
                should_retry=False,
            ) from None

    async def lines(self, path: str) -> AsyncIterator[bytes]:
        """The lines of a downloaded file, one at a time (never the whole file in memory).

        A download that breaks is started again and the lines already given are skipped
        (a provider's results file does not change once written), within the same attempt
        limit as any call.

        Raises:
            CallError: as :meth:`json`; ProtocolError for a line over :data:`MAX_LINE`.
        """
        given = 0
        attempt = 0
        while True:
            attempt += 1
            skip, seen = given, 0
            try:
                async with self._open("GET", path, self._headers, b"") as response:
                    pending = bytearray()
                    while piece := await self._read(response):
                        pending += piece
                        start = 0
                        while (end := pending.find(b"\n", start)) >= 0:
                            line = bytes(pending[start:end])
                            start = end + 1
                            if not line.strip():
                                continue
                            seen += 1
                            if seen > skip:
                                given += 1
                                yield line
                        del pending[:start]
                        if len(pending) > MAX_LINE:
                            raise ProtocolError(
                                f"GET {path}: a line is longer than {MAX_LINE} bytes",
                                should_retry=False,
                            )
                    if pending.strip():
                        seen += 1
                        if seen > skip:
                            given += 1
                            yield bytes(pending)
                return
            except CallError as error:
                await self._backoff(error, attempt, "all")

    async def _backoff(
        self, error: CallError, attempt: int, retry: Literal["all", "connect"]
    ) -> None:
        """Wait before attempt ``attempt + 1``; raise ``error`` when it is not to be retried."""
        if retry == "connect":
            # Only a refusal is safe to repeat: a connection never made, or a 429.
            if not (isinstance(error.__cause__, ConnectError) or error.status == 429):
                raise error
        elif not error.retryable:
            raise error
        if attempt >= self._retry.max_attempts:
            raise error
        wait = error.retry_after
        if wait is not None and wait > self._retry.max_retry_after:
            raise error
        await trio.sleep(retry_delay(attempt, self._retry, self._rng, wait))

    @contextlib.asynccontextmanager
    async def _open(
        self, method: str, path: str, headers: tuple[tuple[str, str], ...], data: bytes
    ) -> AsyncIterator[HotResponse]:
        """The response to one request, its head read; an error reply raised as the codec's
        :class:`CallError`; transport failures as ``ConnectionFailed``, ``StreamBroken`` or
        ``CallTimeout``."""
        async with (
            self._transport() as transport,
            self._exchange(transport, method, path, headers, data) as response,
        ):
            yield response

    @contextlib.asynccontextmanager
    async def _exchange(
        self,
        transport: HotTransport,
        method: str,
        path: str,
        headers: tuple[tuple[str, str], ...],
        data: bytes,
    ) -> AsyncIterator[HotResponse]:
        url = self.base_url + path
        limit = self._step + len(data) / SLOWEST_UPLOAD
        try:
            with trio.fail_after(limit):
                response = await transport.send(method, url, headers, data)
        except trio.TooSlowError:
            raise CallTimeout(
                f"{method} {path}: no reply in {limit:g} s", timeout_kind="first_token"
            ) from None
        except ConnectError as exc:
            raise ConnectionFailed(f"{method} {path}: could not connect: {exc}") from exc
        except TransportError as exc:
            raise ConnectionFailed(
                f"{method} {path}: the connection broke before a reply: {exc or type(exc).__name__}"
            ) from exc
        try:
            if response.status >= 400:
                body = bytearray()
                while len(body) < _ERROR_BODY and (piece := await self._read(response)):
                    body += piece
                error = self._codec.decode_error(
                    response.status, response.headers, bytes(body), wall_now=self._wall_clock()
                )
                raise redact_error(error, self._secrets)
            yield response
        finally:
            with trio.CancelScope(shield=True):
                await response.aclose()

    async def _read(self, response: HotResponse) -> bytes:
        try:
            with trio.fail_after(self._step):
                return await response.read_some()
        except trio.TooSlowError:
            raise CallTimeout(
                f"no data for {self._step:g} s in the middle of a reply", timeout_kind="idle"
            ) from None
        except TransportError as exc:
            raise StreamBroken(
                f"the connection broke mid-reply: {exc or type(exc).__name__}"
            ) from exc
