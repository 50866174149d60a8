"""A proxy URL read: :class:`Proxy` and :func:`parse_proxy_url`.

:mod:`sluice.transport._proxy` decides whether a request goes through a proxy and serves these
names (PEP 562); they live apart so that a transport whose requests go direct (no proxy given
or in the environment) does not build the class.
"""

from __future__ import annotations

import attrs

from .._record import Value
from ._errors import ProxyError

__all__ = ["Proxy", "parse_proxy_url"]


@attrs.frozen(eq=False, repr=False)
class Proxy(Value):
    """An ``http://`` proxy to send requests through."""

    host: str
    port: int
    authorization: str | None = attrs.field(default=None, repr=False)
    """The ``Proxy-Authorization`` header value, from credentials in the proxy URL."""


def parse_proxy_url(url: str) -> Proxy:
    """Parse ``http://[user:password@]host[:port]`` (a missing scheme means ``http``).

    Raises:
        ProxyError: another scheme, or a malformed URL. The message never repeats credentials.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "http", url
    scheme = scheme.lower()
    if scheme != "http":
        raise ProxyError(
            f"proxy scheme {scheme + '://'!r} is not supported by the fast transport (it "
            'supports http:// proxies); set transport = "httpx" for this provider instead'
        )
    authority = rest.split("/", 1)[0]
    userinfo, at, hostport = authority.rpartition("@")
    authorization = None
    if at:
        import base64
        from urllib.parse import unquote

        user, _, password = userinfo.partition(":")
        token = f"{unquote(user)}:{unquote(password)}".encode()
        authorization = "Basic " + base64.b64encode(token).decode("ascii")
    if hostport.startswith("["):
        close = hostport.find("]")
        tail = hostport[close + 1 :] if close > 0 else "?"
        host, port_text = hostport[1:close], tail[1:]
        if tail and not tail.startswith(":"):
            host = ""
    else:
        host, _, port_text = hostport.partition(":")
    if not host or (port_text and not (port_text.isascii() and port_text.isdigit())):
        raise ProxyError("the proxy URL is malformed (expected http://host:port)")
    port = int(port_text) if port_text else 80
    if not 0 < port < 65536:
        raise ProxyError("the proxy URL has an invalid port")
    return Proxy(host.lower(), port, authorization)
