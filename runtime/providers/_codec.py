"""The codec a provider's requests go through: its protocol's, with its quirks and parameters.

:func:`provider_codec` is what the runtime asks for when it starts a provider. A provider
without parameters gets its protocol's codec itself (with the provider's quirks), so the hot
path pays nothing for this layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._protocols import codec_for
from .._protocols.decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES
from ._params import apply_params

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._errors import CallError
    from .._messages import ChatRequest
    from .._protocols.base import AttemptOutput, Codec, HttpRequest, StreamDecoder
    from .._protocols.quirks import RequestQuirks
    from ._registry import ResolvedProvider

__all__ = ["ParamsCodec", "provider_codec"]


def provider_codec(spec: ResolvedProvider) -> Codec:
    """The codec for ``spec``: its protocol's, adapted by its quirks, applying its parameters
    (provider -> model -> call, see :func:`sluice.providers._params.apply_params`)."""
    quirks = None if spec.quirks.changes_nothing else spec.quirks
    codec = codec_for(spec.protocol, quirks=quirks)
    if spec.model_protocols:
        codec = _family_codec(codec, spec, quirks)
    if not spec.params and not spec.model_params and not spec.drop_params:
        return codec
    return ParamsCodec(
        codec,
        spec.protocol,
        spec.params,
        spec.model_params,
        spec.drop_params,
        spec.model_protocols,
    )


def _family_codec(default: Codec, spec: ResolvedProvider, quirks: RequestQuirks | None) -> Codec:
    """A codec that sends each model to the OpenAI API its config names (see
    :mod:`sluice._protocols.openai_family`)."""
    from .._protocols.openai_family import OpenAIFamilyCodec

    codecs = {spec.protocol: default}
    for protocol in set(spec.model_protocols.values()):
        codecs[protocol] = codec_for(protocol, quirks=quirks)
    by_model = {model: codecs[protocol] for model, protocol in spec.model_protocols.items()}
    return OpenAIFamilyCodec(
        default,
        by_model,
        chat=codecs.get("openai") or codec_for("openai", quirks=quirks),
        responses=codecs.get("openai-responses") or codec_for("openai-responses", quirks=quirks),
    )


class ParamsCodec:
    """A codec that lays a provider's and its models' parameters under each request."""

    __slots__ = ("_drop", "_inner", "_model_params", "_model_protocols", "_params", "_protocol")

    def __init__(
        self,
        inner: Codec,
        protocol: str,
        params: Mapping[str, Any],
        model_params: Mapping[str, Mapping[str, Any]],
        drop: frozenset[str],
        model_protocols: Mapping[str, str] | None = None,
    ) -> None:
        self._inner = inner
        self._protocol = protocol
        self._model_protocols = model_protocols or None
        self._params = params
        self._model_params = model_params
        self._drop = drop

    @property
    def inner(self) -> Codec:
        """The protocol's codec this one lays parameters under (embedding requests go to it
        directly: generation parameters mean nothing to an embedding model)."""
        return self._inner

    def build_request(
        self,
        request: ChatRequest,
        *,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpRequest:
        protocol = self._protocol
        if self._model_protocols is not None:
            protocol = self._model_protocols.get(request.model_name, protocol)
        request = apply_params(
            request,
            protocol,
            provider=self._params,
            model=self._model_params.get(request.model_name),
            drop=self._drop,
        )
        return self._inner.build_request(
            request, base_url=base_url, api_key=api_key, headers=headers
        )

    def stream_decoder(
        self, call_id: str, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES
    ) -> StreamDecoder:
        return self._inner.stream_decoder(call_id, max_line=max_line, max_event=max_event)

    def decode_body(self, body: bytes) -> AttemptOutput:
        return self._inner.decode_body(body)

    def decode_error(
        self, status: int, headers: Mapping[str, str], body: bytes, *, wall_now: float
    ) -> CallError:
        return self._inner.decode_error(status, headers, body, wall_now=wall_now)
