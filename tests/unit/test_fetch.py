"""The SSRF guard of URL fetching, against real HTTP servers on 127.0.0.1 / 127.0.0.2: refused with
the guard on, fetched with an explicit allowance, every redirect checked again."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ragline.ingest import fetch
from ragline.ingest.fetch import FetchPolicy, FetchRefused, address_problem, check_url, request
from ragline.ingest.parse import ParseError
from ragline.ingest.sources import SourceSpec, UrlListSource, fetch_url
from tests.loopback import send_canned

GUARD_ON = FetchPolicy(timeout_s=5)
LOOPBACK_ALLOWED = FetchPolicy(allow_private=True, timeout_s=5)


class Server:
    """An HTTP server on ``host`` answering ``routes``: path -> (status, headers, body), or a
    callable(handler) for special behaviour. Every request is logged with its headers."""

    def __init__(self, host: str, routes: dict) -> None:
        self.routes = routes
        self.requests: list[tuple[str, str, dict]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _any(self, body: bool) -> None:
                server.requests.append((self.command, self.path, dict(self.headers)))
                route = server.routes.get(self.path, (404, {}, b"missing"))
                if callable(route):
                    route(self)
                    return
                send_canned(self, *route, body=body)

            def do_GET(self):  # noqa: N802
                self._any(True)

            def do_HEAD(self):  # noqa: N802
                self._any(False)

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"

    def __enter__(self) -> Server:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def serving(routes: dict, host: str = "127.0.0.1") -> Iterator[Server]:
    with Server(host, routes) as srv:
        yield srv


DOC = {"/doc.md": (200, {"Content-Type": "text/markdown"}, b"# Internal\n\nsecret runbook\n")}


@pytest.mark.parametrize(
    ("ip", "problem"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("100.64.0.1", "not public"),  # carrier-grade NAT
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("::1", "loopback"),
        ("fc00::1", "private"),  # unique-local
        ("fe80::1", "link-local"),
        ("::ffff:127.0.0.1", "loopback, embedded in IPv6"),
        ("::ffff:169.254.169.254", "link-local, embedded in IPv6"),
        ("2002:7f00:1::", "loopback, embedded in IPv6"),  # 6to4 of 127.0.0.1
        ("64:ff9b::a00:1", "private, embedded in IPv6"),  # NAT64 of 10.0.0.1
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_non_public_addresses_are_named(ip, problem):
    assert address_problem(ipaddress.ip_address(ip)) == problem


def test_urls_are_checked_and_userinfo_dropped():
    assert (
        str(check_url("https://user:pa55@example.org/a.md?x=1", GUARD_ON)) == "https://example.org/a.md?x=1"
    )
    for bad in ("file:///etc/passwd", "ftp://example.org/a", "gopher://x/", "http:///nohost", "javascript:x"):
        with pytest.raises(FetchRefused):
            check_url(bad, GUARD_ON)
    only = GUARD_ON.with_hosts(["docs.example.org", "*.corp.example"])
    assert check_url("https://DOCS.example.org./a", only).host.rstrip(".") == "docs.example.org"
    assert check_url("https://wiki.corp.example/a", only).host == "wiki.corp.example"
    for off in ("https://example.org/a", "https://corp.example.evil.org/a", "https://xcorp.example/a"):
        with pytest.raises(FetchRefused, match="allowed_hosts"):
            check_url(off, only)


def test_loopback_is_refused_with_the_guard_on_and_fetched_with_an_allowance():
    with serving(DOC) as srv:
        for url in (f"{srv.url}/doc.md", srv.url.replace("127.0.0.1", "localhost") + "/doc.md"):
            with pytest.raises(FetchRefused, match="loopback"):
                request("GET", url, GUARD_ON)
        assert srv.requests == []  # refused before connecting
        url = srv.url.replace("http://", "http://admin:hunter2@") + "/doc.md"
        got = request("GET", url, LOOPBACK_ALLOWED)
    assert got.status == 200 and got.body.startswith(b"# Internal")
    assert "hunter2" not in got.url and "authorization" not in {k.lower() for k in srv.requests[0][2]}


def test_a_redirect_to_loopback_is_refused_at_the_hop():
    """127.0.0.2 stands for an allowed intranet server; it redirects to 127.0.0.1, which is not allowed."""
    intranet = FetchPolicy(allowed_networks=(ipaddress.ip_network("127.0.0.2/32"),), timeout_s=5)
    with serving(DOC) as internal:
        routes = {
            "/page.md": (200, {}, b"# Page\n"),
            "/go": (302, {"Location": f"{internal.url}/doc.md"}, b""),
            "/relative": (301, {"Location": "/page.md"}, b""),
        }
        with serving(routes, host="127.0.0.2") as allowed:
            assert request("GET", f"{allowed.url}/page.md", intranet).body == b"# Page\n"
            followed = request("GET", f"{allowed.url}/relative", intranet)
            assert followed.body == b"# Page\n" and followed.redirects == [f"{allowed.url}/relative"]
            with pytest.raises(FetchRefused, match="127.0.0.1: loopback"):
                request("GET", f"{allowed.url}/go", intranet)
            # with every private address allowed, a source's host list still holds at every hop
            with pytest.raises(FetchRefused, match="allowed_hosts"):
                request("GET", f"{allowed.url}/go", LOOPBACK_ALLOWED.with_hosts(["127.0.0.2"]))
        assert internal.requests == []


def test_redirect_loops_and_schemes_are_refused():
    with serving({}) as srv:
        srv.routes["/loop"] = (302, {"Location": "/loop"}, b"")
        srv.routes["/file"] = (302, {"Location": "file:///etc/passwd"}, b"")
        with pytest.raises(FetchRefused, match="more than 2 redirects"):
            request("GET", f"{srv.url}/loop", FetchPolicy(allow_private=True, max_redirects=2, timeout_s=5))
        with pytest.raises(FetchRefused, match="only http and https"):
            request("GET", f"{srv.url}/file", LOOPBACK_ALLOWED)


def _drip(handler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    try:
        for _ in range(100):
            handler.wfile.write(b"x" * 10)
            handler.wfile.flush()
            time.sleep(0.2)
    except OSError:
        pass


def test_one_deadline_for_the_whole_fetch_and_a_bounded_body():
    routes = {
        "/drip": _drip,
        "/big": (200, {}, b"y" * 5000),
        "/br": (200, {"Content-Encoding": "br"}, b"\x00" * 10),
    }
    with serving(routes) as srv:
        t0 = time.monotonic()
        with pytest.raises(ParseError, match="took longer than 1 s"):
            request("GET", f"{srv.url}/drip", FetchPolicy(allow_private=True, timeout_s=1))
        assert time.monotonic() - t0 < 3  # a server that keeps sending cannot hold the worker
        with pytest.raises(ParseError, match="too large: more than 4096 bytes"):
            request("GET", f"{srv.url}/big", FetchPolicy(allow_private=True, max_bytes=4096))
        with pytest.raises(FetchRefused, match="content encoding 'br'"):
            request("GET", f"{srv.url}/br", LOOPBACK_ALLOWED)


def test_the_connection_goes_to_the_address_that_was_checked(monkeypatch):
    """The guard resolves the name itself and connects to that address: no second lookup that a
    rebinding DNS server could answer differently."""
    lookups: list[str] = []
    real = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        lookups.append(host)
        return real("127.0.0.1" if host == "docs.rebind.test" else host, port, *args, **kwargs)

    monkeypatch.setattr(fetch.socket, "getaddrinfo", rebinding)
    with serving(DOC) as srv:
        port = srv.url.rsplit(":", 1)[1]
        with pytest.raises(FetchRefused, match="127.0.0.1: loopback"):
            request("GET", f"http://docs.rebind.test:{port}/doc.md", GUARD_ON)
        got = request("GET", f"http://docs.rebind.test:{port}/doc.md", LOOPBACK_ALLOWED)
    names = [h for h in lookups if h != "127.0.0.1"]  # the connect itself passes the address, no name
    assert got.body.startswith(b"# Internal") and names == ["docs.rebind.test", "docs.rebind.test"]
    assert srv.requests[0][2]["Host"] == f"docs.rebind.test:{port}"  # the name, not the address


def test_sources_list_and_fetch_through_the_guard():
    with serving(DOC) as srv:
        url = f"{srv.url}/doc.md"
        listing = UrlListSource(
            SourceSpec(name="w", kind="urls", tenant="t", urls=[url]), policy=GUARD_ON
        ).list()
        assert listing.items == [] and listing.unavailable == {url}  # refused: kept, never pruned
        assert "loopback" in listing.errors[0]
        with pytest.raises(FetchRefused, match="loopback"):
            fetch_url(url, GUARD_ON)
        assert srv.requests == []
        assert fetch_url(url, LOOPBACK_ALLOWED) == (b"# Internal\n\nsecret runbook\n", "md")
    with pytest.raises(ValueError, match="outside allowed_hosts"):
        SourceSpec(name="w", kind="urls", tenant="t", urls=["https://evil.org/a"], allowed_hosts=["docs.org"])


def test_an_ingest_request_drops_credentials_in_its_url_where_it_enters():
    """Stored rows, error records and logs never see ``user:pass@`` a producer put in a URL."""
    from ragline.shared.sdk.contracts.ingest import IngestRequest

    req = IngestRequest(tenant="t", doc_id="d", uri="https://alice:s3cret@docs.example.com/a.md?v=1")
    assert req.uri == "https://docs.example.com/a.md?v=1"
    assert "s3cret" not in req.model_dump_json()
    # local paths and URLs with '@' outside the authority are left alone
    assert IngestRequest(tenant="t", doc_id="d", uri="/srv/docs/a@b.md").uri == "/srv/docs/a@b.md"
    assert IngestRequest(tenant="t", doc_id="d", uri="https://x.org/@user").uri == "https://x.org/@user"
