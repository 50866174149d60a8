"""``multipart/form-data`` bodies, as ``POST /v1/files`` takes them. Pure.

Only what an upload needs: each part's ``name``, its ``filename`` if any, and its bytes. The
file part is sliced out of the body once, never copied line by line.
"""

from __future__ import annotations

import re

import attrs

__all__ = ["FormError", "FormPart", "parse_form"]

_BOUNDARY = re.compile(r'boundary="?([^";,]+)"?', re.IGNORECASE)
_PARAM = re.compile(rb'\b(name|filename)="([^"]*)"', re.IGNORECASE)


class FormError(ValueError):
    """The body is not the multipart form its content type says."""


@attrs.frozen
class FormPart:
    name: str
    filename: str | None
    content: bytes
    content_type: str | None = None


def parse_form(content_type: str | None, body: bytes) -> dict[str, FormPart]:
    """The parts of a ``multipart/form-data`` body by name (the last one wins).

    Raises:
        FormError: not multipart, no boundary, or a part without a name.
    """
    if content_type is None or not content_type.lower().startswith("multipart/form-data"):
        raise FormError("expected a multipart/form-data body")
    found = _BOUNDARY.search(content_type)
    if found is None:
        raise FormError("the multipart/form-data content type names no boundary")
    delimiter = b"--" + found.group(1).encode("latin-1")
    parts: dict[str, FormPart] = {}
    start = body.find(delimiter)
    if start < 0:
        raise FormError("the body does not contain its boundary")
    while True:
        start += len(delimiter)
        if body.startswith(b"--", start):
            return parts  # the closing delimiter
        end = body.find(b"\r\n" + delimiter, start)
        if end < 0:
            raise FormError("a part is not closed by the boundary")
        part = _part(body, start, end)
        parts[part.name] = part
        start = end + 2


def _part(body: bytes, start: int, end: int) -> FormPart:
    if body.startswith(b"\r\n", start):
        start += 2
    split = body.find(b"\r\n\r\n", start, end)
    if split < 0:
        raise FormError("a part has no header block")
    name = filename = content_type = None
    for line in body[start:split].split(b"\r\n"):
        key, _, value = line.partition(b":")
        key = key.strip().lower()
        if key == b"content-disposition":
            for param, text in _PARAM.findall(value):
                if param.lower() == b"name":
                    name = text.decode("utf-8", "replace")
                else:
                    filename = text.decode("utf-8", "replace")
        elif key == b"content-type":
            content_type = value.strip().decode("latin-1")
    if name is None:
        raise FormError("a part has no name in its Content-Disposition")
    return FormPart(name, filename, body[split + 4 : end], content_type)
