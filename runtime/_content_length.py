"""The one reading of a ``content-length`` header, on h11's rules. Pure.

The gateway reads it from requests and the client transport from replies; both must agree with
what h11 (and so httpx, the other transport) accepts, or a message one side reads would be a
framing error on the other. The rules, as in ``h11._headers.normalize_and_validate``:

* the value is ASCII digits only (no sign, no spaces inside, no exponent): a negative or odd
  length is how a body is smuggled past a proxy;
* at most :data:`MAX_DIGITS` digits, leading zeros included: Python's ``int`` refuses strings
  of more than 4,300 digits with an exception, and no body is 10**20 bytes;
* a list (``5, 5``) or repeated header lines are allowed when every value is the same string;
  different values are refused (``5`` and ``05`` differ, as in h11).

Callers pass repeated header lines joined with commas (which is how a list is written anyway).
"""

from __future__ import annotations

__all__ = ["MAX_DIGITS", "BadContentLength", "ContentLengthTooLong", "parse_content_length"]

MAX_DIGITS = 20
"""Digits a ``content-length`` may have (h11's ``CONTENT_LENGTH_MAX_DIGITS``)."""


class BadContentLength(ValueError):
    """The value breaks the rules; the message says how (and quotes at most 24 characters)."""


class ContentLengthTooLong(BadContentLength):
    """More than :data:`MAX_DIGITS` digits: a length no body has."""


def parse_content_length(value: str | bytes) -> int:
    """The length that ``value`` (one header's value, or repeated lines joined by commas)
    gives, on h11's rules.

    Raises:
        BadContentLength: not digits, or differing values in a list.
        ContentLengthTooLong: well-formed, but longer than :data:`MAX_DIGITS` digits.
    """
    text = value if isinstance(value, str) else value.decode("latin-1")
    if not (text.isascii() and text.isdigit()):  # a list, or not a number at all
        values = {piece.strip(" \t") for piece in text.split(",")}
        if len(values) != 1:
            raise BadContentLength(f"conflicting content-length values {text[:24]!r}")
        text = values.pop()
        if not (text.isascii() and text.isdigit()):
            raise BadContentLength(f"invalid content-length {text[:24]!r}")
    if len(text) > MAX_DIGITS:
        raise ContentLengthTooLong(f"a content-length of {len(text)} digits (at most {MAX_DIGITS})")
    return int(text)
