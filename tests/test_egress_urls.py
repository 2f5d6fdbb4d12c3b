"""The egress rule reads a URL's host the way every HTTP client would: a URL passes only when a
WHATWG parser (ada, the reading of browsers and many clients) and an RFC 3986 one
(``urllib.parse``, under ``requests``/``httpx``) agree on its host, it is http or https, and it
carries no userinfo. Checked directly (``_core.url_host``) and through ``egress(allow=...)`` on an
Invoker, on hand-picked tricky forms and on generated ones."""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import Any

import ada_url
import pytest
from hypothesis import given, settings, strategies as st

from agentkit_tools import Invoker, ToolRegistry, _core, middleware as mw, tool


def same_host(host: str) -> str:
    """One spelling per host: an IPv6 address in its compressed form (WHATWG rewrites it so)."""
    try:
        return str(ipaddress.IPv6Address(host))
    except ValueError:
        return host


def whatwg_host(url: str) -> "str | None":
    try:
        host = ada_url.URL(url).hostname.strip("[]").rstrip(".").lower()
    except ValueError:
        return None
    return same_host(host) if host else None


def rfc3986_host(url: str) -> "str | None":
    try:
        host = urllib.parse.urlsplit(url).hostname
    except ValueError:
        return None
    return same_host(host.rstrip(".").lower()) if host else None


def make_fetch(runs: list) -> Any:
    @tool(read_only=True, url_arg="url")
    def fetch(url: str) -> str:
        """Fetch a web page by its absolute URL and return its text."""
        runs.append(url)
        return "page"

    return fetch


TRICKY = [
    # (url, what we read, what WHATWG reads, what urllib reads)
    ("https://example.com\\@127.0.0.1/", None, "example.com", "127.0.0.1"),
    ("https://127.0.0.1\\@example.com/", None, "127.0.0.1", "example.com"),
    ("https://user:pw@example.com/", None, "example.com", "example.com"),
    ("https://example.com@127.0.0.1/", None, "127.0.0.1", "127.0.0.1"),
    ("https://example.com%2e.127.0.0.1.nip.io/", None, "example.com..127.0.0.1.nip.io", "example.com%2e.127.0.0.1.nip.io"),
    ("https://%65xample.com/", None, "example.com", "%65xample.com"),
    ("https://exa\tmple.com/", None, "example.com", "example.com"),
    ("https://example.com\n.evil.test/", None, "example.com.evil.test", "example.com.evil.test"),
    ("https://example.com /", None, None, "example.com "),
    (" https://example.com/", None, "example.com", "example.com"),
    ("http:example.com", None, "example.com", None),
    ("http:/example.com", None, "example.com", None),
    ("https:///example.com", None, "example.com", None),
    ("https:\\\\example.com", None, "example.com", None),
    ("ftp://example.com/", None, "example.com", "example.com"),
    ("HTTPS://EXAMPLE.COM:8443/x", "example.com", "example.com", "example.com"),
    ("https://example.com:443/", "example.com", "example.com", "example.com"),
    ("https://[::1]:8080/", "::1", "::1", "::1"),
    ("https://[::ffff:7f00:1]/", "::ffff:7f00:1", "::ffff:7f00:1", "::ffff:7f00:1"),
    ("https://example.com/a\\@127.0.0.1", "example.com", "example.com", "example.com"),
    ("https://example.com?@127.0.0.1", "example.com", "example.com", "example.com"),
    ("https://example.com#@127.0.0.1", "example.com", "example.com", "example.com"),
    ("http://0x7f.1/", None, "127.0.0.1", "0x7f.1"),
    ("http://2130706433/", None, "127.0.0.1", "2130706433"),
    ("http://127.0.0.01/", None, "127.0.0.1", "127.0.0.01"),
    ("http://127.0.0.1/", "127.0.0.1", "127.0.0.1", "127.0.0.1"),
]


@pytest.mark.parametrize(("url", "ours", "whatwg", "rfc3986"), TRICKY)
def test_tricky_urls_read_by_every_parser(url: str, ours: "str | None", whatwg: "str | None", rfc3986: "str | None"):
    assert (whatwg_host(url), rfc3986_host(url)) == (whatwg, rfc3986)  # the premise
    assert _core.url_host(url) == ours
    if ours is not None:
        assert same_host(ours) == whatwg == rfc3986


@pytest.mark.parametrize(("url", "ours", "whatwg", "rfc3986"), TRICKY)
async def test_tricky_urls_through_the_invoker(url: str, ours: "str | None", whatwg: "str | None", rfc3986: "str | None"):
    runs: list = []
    inv = Invoker(ToolRegistry([make_fetch(runs)]), middleware=[mw.egress(allow=["example.com", "[::1]", "127.0.0.1"])])
    env = await inv.invoke({"id": "c1", "name": "fetch", "input": {"url": url}})
    if ours in ("example.com", "::1", "127.0.0.1"):
        assert env["ok"] is True and runs == [url]
    else:
        assert env["ok"] is False and env["error"]["code"] == "egress_denied" and runs == []


async def test_refusals_tell_the_model_what_to_send_instead():
    inv = Invoker(ToolRegistry([make_fetch([])]), middleware=[mw.egress(allow=["example.com"])])

    async def message(url: str) -> str:
        env = await inv.invoke({"id": "c1", "name": "fetch", "input": {"url": url}})
        return env["error"]["message"]

    tail = " Call it again with a plain http or https URL such as https://host/path (allowed hosts: example.com)."
    assert await message("https://me:secret@example.com/") == (
        "fetch refused the URL in 'url': the URL carries a user name or password ('user@host'), which is not "
        "allowed." + tail
    )
    assert await message("file:///etc/passwd") == (
        "fetch refused the URL in 'url': only http and https URLs may be fetched, not 'file:' URLs." + tail
    )
    assert await message("https://example.com\\@127.0.0.1/") == (
        "fetch refused the URL in 'url': the URL has a backslash before its path, which some parsers read as '/' "
        "and others do not, so its host is ambiguous." + tail
    )


PIECES = st.sampled_from(
    ["http", "https", "HTTP", "ftp", ":", "/", "//", "\\", "@", "%2e", "%40", "?", "#", "[", "]", "::1", "127.0.0.1",
     "example.com", "evil.test", ".", ":80", ":8080", "\t", "\n", " ", "user", "0x7f.1", "ä", "_", "-"]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(PIECES, min_size=1, max_size=10).map("".join))
def test_every_url_let_through_has_one_host_for_every_parser(url: str):
    ours = _core.url_host(url)
    if ours is None:
        return
    assert urllib.parse.urlsplit(url).scheme.lower() in ("http", "https")
    assert same_host(ours) == whatwg_host(url) == rfc3986_host(url), url
    assert "@" not in urllib.parse.urlsplit(url).netloc
