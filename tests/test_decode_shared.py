"""What the decoders share: how a reply's content type decides how it is read, and the limits'
config."""

from __future__ import annotations

import pytest

from sluice._config import ReplyLimits, load_config
from sluice._errors import ConfigError
from sluice._protocols.decode_shared import (
    FOREIGN,
    STREAM,
    WHOLE,
    foreign_reply,
    reply_form,
    too_large,
)


@pytest.mark.parametrize(
    ("content_type", "form"),
    [
        ("text/event-stream", STREAM),
        ("text/event-stream; charset=utf-8", STREAM),
        ("Text/Event-Stream", STREAM),
        ("application/x-ndjson", STREAM),
        ("application/json", WHOLE),
        ("application/json; charset=UTF-8", WHOLE),
        ("application/problem+json", WHOLE),
        ("text/html; charset=utf-8", FOREIGN),
        ("application/xml", FOREIGN),
        ("image/png", FOREIGN),
        (None, None),
        ("", None),
        ("text/plain; charset=utf-8", None),
        ("application/octet-stream", None),
    ],
)
def test_the_content_type_decides_how_a_reply_is_read(content_type, form) -> None:
    assert reply_form(content_type) == form


def test_a_foreign_reply_names_status_type_and_a_snippet() -> None:
    error = foreign_reply(200, "text/html; charset=utf-8", b"<html>\n  <body>Sign in</body>")
    assert error.message == (
        "HTTP 200 with content type text/html, not a reply of the API (is base_url right?): "
        "<html> <body>Sign in</body>"
    )
    assert error.status == 200 and not error.retryable
    assert "an empty body" in foreign_reply(202, "image/gif", b"").message


def test_size_errors_name_the_limit_and_its_setting() -> None:
    assert too_large("an SSE line", 32 * 1024 * 1024, "max_line_bytes").message == (
        "an SSE line is larger than the 32 MiB limit (reply_limits.max_line_bytes)"
    )
    assert "1500 bytes limit" in too_large("x", 1500, "y").message


def test_reply_limits_have_working_defaults_and_load_from_config() -> None:
    assert load_config({}).reply_limits == ReplyLimits()
    loaded = load_config(
        {"reply_limits": {"max_line_bytes": 1 << 20, "head_timeout": None}}
    ).reply_limits
    assert loaded.max_line_bytes == 1 << 20 and loaded.head_timeout is None
    assert loaded.read_idle_timeout == 300.0


def test_reply_limits_refuse_nonsense() -> None:
    with pytest.raises(ConfigError, match="reply_limits"):
        load_config({"reply_limits": {"max_body_bytes": 0}})
    with pytest.raises(ConfigError, match="reply_limits"):
        load_config({"reply_limits": {"head_timeout": -1}})
