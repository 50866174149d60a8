"""Per-provider deviations from the OpenAI chat-completions request shape.

Servers that copy the OpenAI protocol do not copy all of it. The provider registry knows which
server is which and hands a :class:`RequestQuirks` to
:class:`~sluice._protocols.openai.OpenAICodec`;
:func:`apply_quirks` is the one place where a request body is changed for them. It runs after the
body is built and before ``extra_body`` is merged, so a caller can still force any field.

Every change is logged at debug level, so a parameter is never dropped silently for everyone.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from .._record import Value

__all__ = ["NO_QUIRKS", "RequestQuirks", "apply_quirks"]

_log = logging.getLogger("sluice._protocols.quirks")


def _modes(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        raise TypeError(f"a set of tool_choice modes is a list of names, not the string {value!r}")
    return frozenset(value)


@attrs.frozen(eq=False, kw_only=True, repr=False)
class RequestQuirks(Value):
    """How one provider's OpenAI-compatible server differs from OpenAI's.

    The defaults change nothing: a body built with them equals one built without quirks.
    """

    omit_tool_choice: frozenset[str] = attrs.field(default=frozenset(), converter=_modes)
    """``tool_choice`` values the server rejects, left out of the body (the server then applies
    its own default). vLLM rejects ``"auto"`` unless started with ``--enable-auto-tool-choice``;
    many servers at a custom base URL reject ``"required"``."""
    echo_reasoning_content: bool = True
    """Send an assistant message's reasoning back as ``reasoning_content``. DeepSeek, Moonshot
    and other thinking models require it on the next turn; OpenAI rejects the unknown field."""
    max_tokens_field: str = "max_tokens"
    """The name ``max_tokens`` is sent under (OpenAI's newer models want
    ``max_completion_tokens``)."""
    azure_api_version: str | None = None
    """Azure OpenAI's deployment API: requests go to
    ``{base_url}/openai/deployments/{model}/chat/completions?api-version={this}``, where the
    model name is the deployment's name. None: ``{base_url}/chat/completions``."""

    @property
    def changes_nothing(self) -> bool:
        return self == NO_QUIRKS


NO_QUIRKS = RequestQuirks()


def apply_quirks(body: dict[str, Any], quirks: RequestQuirks) -> None:
    """Change an OpenAI chat-completions ``body`` in place for ``quirks``."""
    choice = body.get("tool_choice")
    if isinstance(choice, str) and choice in quirks.omit_tool_choice:
        del body["tool_choice"]
        _log.debug("tool_choice %r left out: this provider rejects it", choice)
    if not quirks.echo_reasoning_content:
        dropped = 0
        for message in body.get("messages", ()):
            if message.get("role") == "assistant" and "reasoning_content" in message:
                del message["reasoning_content"]
                dropped += 1
        if dropped:
            _log.debug("reasoning_content left out of %d assistant message(s)", dropped)
    field = quirks.max_tokens_field
    if field != "max_tokens" and "max_tokens" in body:
        body[field] = body.pop("max_tokens")
        _log.debug("max_tokens sent as %s", field)
