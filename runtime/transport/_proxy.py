"""Which HTTP proxy (if any) a request goes through: explicit, or from the environment.

Pure functions over an environment snapshot. The fast transport supports plain ``http://``
proxies only: a CONNECT tunnel for ``https`` targets, absolute-form requests for ``http``
targets, and Basic credentials from the proxy URL. Any other proxy scheme (``https://``,
``socks5://``...) raises :class:`ProxyError` when a request would use it, with a message that
names the supported scheme and the fallback (``transport = "httpx"``).

Environment rules (those of curl and httpx): ``https_proxy`` for https targets, ``http_proxy``
for http targets, ``all_proxy`` for both, the lower-case name winning over the upper-case one;
``no_proxy`` lists hosts that go direct: ``*`` for all, a name matching itself and its
subdomains (``example.com`` or ``.example.com``), an optional ``:port``, an IP address or an
IP network in CIDR form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._proxy_url import Proxy as Proxy
    from ._proxy_url import parse_proxy_url as parse_proxy_url

__all__ = ["Proxy", "environ_proxies", "no_proxy_matches", "parse_proxy_url", "select_proxy"]

_VARIABLES = ("https_proxy", "http_proxy", "all_proxy", "no_proxy")


def __getattr__(name: str) -> Any:
    # A proxy URL is read by code that loads with the first request that has a proxy
    # (sluice.transport._proxy_url).
    if name in ("Proxy", "parse_proxy_url"):
        from . import _proxy_url

        return getattr(_proxy_url, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def environ_proxies(environ: Mapping[str, str]) -> dict[str, str]:
    """The proxy settings in ``environ``: lower-case variable names, empty values dropped."""
    found: dict[str, str] = {}
    for name in _VARIABLES:
        value = environ.get(name) or environ.get(name.upper())
        if value and value.strip():
            found[name] = value.strip()
    return found


def no_proxy_matches(no_proxy: str, host: str, port: int) -> bool:
    """Whether ``host:port`` is exempt from proxying under a ``no_proxy`` value."""
    host = host.lower().strip("[]")
    for raw in no_proxy.replace(" ", ",").split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:
            if _in_network(host, entry):
                return True
            continue
        entry_port: int | None = None
        if entry.startswith("["):
            close = entry.find("]")
            rest = entry[close + 1 :] if close > 0 else ""
            entry = entry[1:close] if close > 0 else entry
            if rest.startswith(":") and rest[1:].isdigit():
                entry_port = int(rest[1:])
        elif entry.count(":") == 1:
            name, _, port_text = entry.partition(":")
            if port_text.isdigit():
                entry, entry_port = name, int(port_text)
        if entry_port is not None and entry_port != port:
            continue
        entry = entry.removeprefix("*").removeprefix(".")
        if host == entry or host.endswith("." + entry):
            return True
    return False


def _in_network(host: str, cidr: str) -> bool:
    import ipaddress  # only when no_proxy holds a network

    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False


def select_proxy(
    scheme: str, host: str, port: int, *, explicit: str | None, settings: Mapping[str, str]
) -> Proxy | None:
    """The proxy for a target origin, or None to connect directly.

    ``explicit`` (a proxy URL given to the transport) wins over the environment ``settings``
    (from :func:`environ_proxies`); ``no_proxy`` applies to both.

    Raises:
        ProxyError: the chosen proxy URL is unsupported or malformed.
    """
    no_proxy = settings.get("no_proxy")
    if no_proxy and no_proxy_matches(no_proxy, host, port):
        return None
    url = explicit
    if url is None:
        url = settings.get(f"{scheme}_proxy") or settings.get("all_proxy")
    if not url:
        return None
    from ._proxy_url import parse_proxy_url  # a request that goes through a proxy

    return parse_proxy_url(url)
