"""Absolute http(s) URLs split into what a connection pool needs: origin and request target."""

from __future__ import annotations

__all__ = ["DEFAULT_PORTS", "host_header", "split_url"]

DEFAULT_PORTS = {"http": 80, "https": 443}

# Characters left as they are when a non-ASCII request target is percent-encoded.
_TARGET_SAFE = "/?#[]@!$&'()*+,;=:-._~%"


def split_url(url: str) -> tuple[str, str, int, str]:
    """Split an absolute ``http``/``https`` URL into (scheme, host, port, request target).

    The host is lower-case, without brackets for IPv6; the target is the path and query
    (``/`` when empty), with non-ASCII characters percent-encoded as UTF-8; a fragment is
    dropped.

    Raises:
        ValueError: not an absolute http(s) URL, user info present, a bad port, or whitespace
            or control characters in the URL (they could smuggle lines into the request head).
    """
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in DEFAULT_PORTS:
        raise ValueError("only absolute http:// and https:// URLs are supported")
    end = len(rest)
    for delimiter in "/?#":
        i = rest.find(delimiter)
        if 0 <= i < end:
            end = i
    authority, target = rest[:end], rest[end:]
    hash_at = target.find("#")
    if hash_at >= 0:
        target = target[:hash_at]
    if not target.startswith("/"):
        target = "/" + target
    if not target.isascii():
        from urllib.parse import quote

        target = quote(target, safe=_TARGET_SAFE)
    if any(c <= " " or c == "\x7f" for c in target):
        raise ValueError("the URL holds whitespace or control characters")
    if "@" in authority:
        raise ValueError("credentials in the URL are not supported; send an auth header")
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise ValueError("unterminated IPv6 address in the URL")
        host, port_text = authority[1:close], authority[close + 1 :]
        if port_text and not port_text.startswith(":"):
            raise ValueError("malformed authority in the URL")
        port_text = port_text[1:]
    else:
        host, _, port_text = authority.partition(":")
    if not host:
        raise ValueError("the URL has no host")
    if port_text:
        if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
            raise ValueError("the URL has an invalid port")
        port = int(port_text)
    else:
        port = DEFAULT_PORTS[scheme]
    host = host.lower()
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    if any(c <= " " or c in "\x7f/\\" for c in host):
        raise ValueError("the URL has an invalid host")
    return scheme, host, port, target


def host_header(scheme: str, host: str, port: int) -> str:
    """The ``Host`` header value for an origin: the port only when it is not the default."""
    shown = f"[{host}]" if ":" in host else host
    return shown if DEFAULT_PORTS.get(scheme) == port else f"{shown}:{port}"
