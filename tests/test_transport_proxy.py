"""Proxy selection: environment variables, NO_PROXY matching and proxy URL parsing (pure)."""

from __future__ import annotations

import pytest

from sluice.transport._errors import ProxyError
from sluice.transport._proxy import (
    Proxy,
    environ_proxies,
    no_proxy_matches,
    parse_proxy_url,
    select_proxy,
)


def test_environment_lower_case_wins_and_blanks_are_ignored() -> None:
    environ = {
        "HTTPS_PROXY": "http://upper:1",
        "https_proxy": "http://lower:2",
        "HTTP_PROXY": "http://plain:3",
        "ALL_PROXY": "  ",
        "NO_PROXY": "localhost",
        "unrelated": "x",
    }
    assert environ_proxies(environ) == {
        "https_proxy": "http://lower:2",
        "http_proxy": "http://plain:3",
        "no_proxy": "localhost",
    }


@pytest.mark.parametrize(
    ("scheme", "settings", "expected"),
    [
        ("https", {"https_proxy": "http://p:1"}, Proxy("p", 1)),
        ("http", {"https_proxy": "http://p:1"}, None),
        ("http", {"all_proxy": "http://a:2"}, Proxy("a", 2)),
        ("https", {"https_proxy": "http://p:1", "all_proxy": "http://a:2"}, Proxy("p", 1)),
        ("https", {"https_proxy": "http://p:1", "no_proxy": "api.test"}, None),
        ("https", {}, None),
    ],
)
def test_select_proxy(scheme: str, settings: dict[str, str], expected: Proxy | None) -> None:
    assert select_proxy(scheme, "api.test", 443, explicit=None, settings=settings) == expected


def test_explicit_proxy_wins_but_no_proxy_still_applies() -> None:
    settings = {"https_proxy": "http://env:1", "no_proxy": ".internal"}
    assert select_proxy("https", "api.test", 443, explicit="http://x:9", settings=settings) == (
        Proxy("x", 9)
    )
    assert (
        select_proxy("https", "a.internal", 443, explicit="http://x:9", settings=settings) is None
    )


@pytest.mark.parametrize(
    ("no_proxy", "host", "port", "matches"),
    [
        ("*", "anything", 443, True),
        ("example.com", "example.com", 443, True),
        ("example.com", "api.example.com", 443, True),
        (".example.com", "api.example.com", 443, True),
        ("*.example.com", "api.example.com", 443, True),
        ("example.com", "badexample.com", 443, False),
        ("a.test, b.test", "b.test", 80, True),
        ("a.test b.test", "b.test", 80, True),
        ("b.test:8080", "b.test", 8080, True),
        ("b.test:8080", "b.test", 443, False),
        ("10.0.0.0/8", "10.1.2.3", 443, True),
        ("10.0.0.0/8", "11.1.2.3", 443, False),
        ("10.0.0.0/8", "ten.test", 443, False),
        ("::1", "::1", 443, True),
        ("[::1]:8080", "::1", 8080, True),
        ("[::1]:8080", "::1", 80, False),
        ("", "api.test", 443, False),
    ],
)
def test_no_proxy_matching(no_proxy: str, host: str, port: int, matches: bool) -> None:
    assert no_proxy_matches(no_proxy, host, port) is matches


def test_parse_proxy_url() -> None:
    assert parse_proxy_url("http://proxy.test:3128") == Proxy("proxy.test", 3128)
    assert parse_proxy_url("PROXY.test") == Proxy("proxy.test", 80)
    assert parse_proxy_url("http://[::1]:8080/") == Proxy("::1", 8080)
    with_auth = parse_proxy_url("http://us%3Aer:pa%20ss@p:1")
    assert with_auth.authorization == "Basic dXM6ZXI6cGEgc3M="  # "us:er:pa ss"
    assert "pa" not in repr(with_auth)


@pytest.mark.parametrize("url", ["https://p:1", "socks5://u:secret@p:1", "socks5h://p"])
def test_unsupported_proxy_schemes_name_the_fallback(url: str) -> None:
    with pytest.raises(ProxyError, match=r'supports http:// proxies.*transport = "httpx"') as info:
        parse_proxy_url(url)
    assert "secret" not in str(info.value)


@pytest.mark.parametrize("url", ["http://", "http://p:x", "http://p:0", "http://[::1", "http://:8"])
def test_malformed_proxy_urls(url: str) -> None:
    with pytest.raises(ProxyError, match="proxy URL"):
        parse_proxy_url(url)
