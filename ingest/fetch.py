"""HTTP(S) fetching for ingestion that cannot be turned against internal services (SSRF guard).

A URL to ingest comes from a source list or from a producer's event, so it is untrusted:

* only ``http`` and ``https``; ``user:pass@`` is dropped before anything is sent or reported;
* every address a host name resolves to must be public: loopback, private, unique-local,
  link-local (cloud metadata at 169.254.169.254), shared (100.64/10), multicast, reserved and
  unspecified addresses are refused, IPv4 addresses embedded in IPv6 (``::ffff:127.0.0.1``, 6to4,
  Teredo, NAT64) included. ``RAGLINE_INGEST_FETCH_ALLOW_PRIVATE`` or ``RAGLINE_INGEST_FETCH_ALLOWED_NETWORKS``
  lift this for all or some networks (an intranet wiki, tests against 127.0.0.1);
* the check runs inside the connection itself (an httpcore network backend): the resolved and
  checked address is the one connected to, so a DNS answer that changes between a check and the
  connection (DNS rebinding) cannot slip through; TLS still verifies the certificate for the name;
* redirects are followed here, hop by hop, each new URL and its addresses checked again, at most
  ``max_redirects``;
* a source may name ``allowed_hosts``: then every hop must stay on them;
* one deadline for the whole fetch, redirects and body included (checked before every request
  and after every chunk; a single read waits at most the time left when its request was sent),
  and the body is read up to the size limit only. Proxies from the environment are not used.

No well-kept library does this for httpx (``advocate`` wraps requests and is unmaintained), so it
is built from httpx's and httpcore's own extension points and :mod:`ipaddress`.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import httpcore
import httpx

from ragline.ingest.parse.common import ParseError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class FetchRefused(ParseError):
    """The URL, a redirect or an address it resolves to is not allowed: the document's error,
    recorded and never retried."""


@dataclass(frozen=True)
class FetchPolicy:
    allow_private: bool = False
    allowed_networks: tuple[Network, ...] = ()
    allowed_hosts: tuple[str, ...] = ()  # empty: any host
    timeout_s: float = 60.0
    max_redirects: int = 5
    max_bytes: int = 64 * 1024 * 1024

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> FetchPolicy:
        s = settings.ingest
        try:
            networks = tuple(ipaddress.ip_network(n, strict=False) for n in s.fetch_allowed_networks)
        except ValueError as exc:
            raise ValueError(f"RAGLINE_INGEST_FETCH_ALLOWED_NETWORKS: {exc}") from None
        values = {
            "allow_private": s.fetch_allow_private,
            "allowed_networks": networks,
            "timeout_s": s.fetch_timeout_s,
            "max_redirects": s.fetch_max_redirects,
            "max_bytes": s.max_bytes,
        }
        return cls(**{**values, **overrides})

    def with_hosts(self, hosts: Iterable[str]) -> FetchPolicy:
        return replace(self, allowed_hosts=tuple(h.lower().rstrip(".") for h in hosts))


def address_problem(addr: Address) -> str | None:
    """Why ``addr`` is not a public unicast address (``"loopback"``, ``"private"``, ...), or None (pure)."""
    if isinstance(addr, ipaddress.IPv6Address):
        embedded = addr.ipv4_mapped or addr.sixtofour or (addr.teredo[1] if addr.teredo else None)
        if embedded is None and addr in _NAT64:
            embedded = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        if embedded is not None and (problem := address_problem(embedded)):
            return f"{problem}, embedded in IPv6"
    for kind in ("unspecified", "loopback", "link_local", "multicast", "private", "reserved"):
        if getattr(addr, f"is_{kind}"):
            return kind.replace("_", "-")
    if not addr.is_global:
        return "not public"
    return None


def check_address(addr: Address, policy: FetchPolicy) -> None:
    problem = address_problem(addr)
    if problem is None or any(addr in net for net in policy.allowed_networks):
        return
    if policy.allow_private and not addr.is_multicast:
        return
    raise FetchRefused(f"refused to connect to {addr}: {problem} address")


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    """``host`` is one of ``allowed``, or below a ``*.domain`` entry (pure)."""
    host = host.lower().rstrip(".")
    for entry in allowed:
        if entry.startswith("*."):
            if host.endswith(entry[1:]):
                return True
        elif host == entry:
            return True
    return False


def redact(url: str | httpx.URL) -> str:
    """The URL without ``user:pass@``, for messages and logs."""
    try:
        return str(httpx.URL(url).copy_with(userinfo=b""))
    except (httpx.InvalidURL, TypeError, ValueError):
        return "(invalid URL)"


def check_url(url: str | httpx.URL, policy: FetchPolicy) -> httpx.URL:
    """The URL to request, without userinfo; a :class:`FetchRefused` for a scheme other than http(s),
    no host, or a host outside the allowlist."""
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise FetchRefused("invalid URL") from None
    if u.scheme not in ("http", "https"):
        raise FetchRefused(f"only http and https URLs are fetched, not {u.scheme or '(none)'!r}")
    if not u.host:
        raise FetchRefused(f"URL without a host: {redact(u)}")
    u = u.copy_with(userinfo=b"")
    if policy.allowed_hosts and not host_allowed(u.host, policy.allowed_hosts):
        raise FetchRefused(f"host {u.host} is not in the source's allowed_hosts")
    return u


def resolve(host: str, port: int, policy: FetchPolicy) -> list[str]:
    """Every address of ``host``, all checked; a :class:`FetchRefused` when any is not allowed (a
    name that also points inside is refused as a whole, whichever address a retry would pick)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc.strerror}") from None
    out: list[str] = []
    for *_, sockaddr in infos:
        ip = str(sockaddr[0])
        check_address(ipaddress.ip_address(ip), policy)
        if ip not in out:
            out.append(ip)
    return out


class _GuardedBackend(httpcore.SyncBackend):
    """Resolves and checks the host itself and connects to the checked address only."""

    def __init__(self, policy: FetchPolicy) -> None:
        self.policy = policy

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # noqa: ANN001, ANN201
        last: Exception | None = None
        for ip in resolve(host, port, self.policy):
            try:
                return super().connect_tcp(ip, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        raise last or httpcore.ConnectError(f"no address for {host}")

    def connect_unix_socket(self, path, timeout=None, socket_options=None):  # noqa: ANN001, ANN201
        raise FetchRefused("unix sockets are never fetched")


class _GuardedTransport(httpx.HTTPTransport):
    def __init__(self, policy: FetchPolicy) -> None:
        super().__init__(trust_env=False)
        # httpx has no public hook for the network backend: the pool is rebuilt around ours
        assert isinstance(self._pool, httpcore.ConnectionPool)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            network_backend=_GuardedBackend(policy),
        )


def guarded_client(policy: FetchPolicy) -> httpx.Client:
    return httpx.Client(
        transport=_GuardedTransport(policy),
        follow_redirects=False,
        trust_env=False,
        headers={"accept-encoding": "gzip, deflate"},
    )


@dataclass
class Fetched:
    status: int
    headers: httpx.Headers
    url: str  # the final URL, redacted
    body: bytes = b""
    redirects: list[str] = field(default_factory=list)


def request(method: str, url: str, policy: FetchPolicy, read_body: bool = True) -> Fetched:
    """One guarded request with its redirects. HTTP errors are returned (``status``), not raised;
    a refusal is a :class:`FetchRefused`, a body over the limit or a deadline passed a
    :class:`ParseError`, a network failure an :class:`httpx.HTTPError`."""
    deadline = time.monotonic() + policy.timeout_s
    current = check_url(url, policy)
    hops: list[str] = []
    with guarded_client(policy) as client:
        for _ in range(policy.max_redirects + 1):
            left = _left(deadline, policy)
            try:
                resp = client.send(client.build_request(method, current, timeout=left), stream=True)
            except httpx.TimeoutException:
                _left(deadline, policy)
                raise
            try:
                if resp.is_redirect:
                    hops.append(redact(current))
                    current = check_url(_join(current, resp.headers["location"]), policy)
                    continue
                body = _read(resp, deadline, policy) if read_body and resp.status_code < 400 else b""
                return Fetched(resp.status_code, resp.headers, redact(current), body, hops)
            finally:
                resp.close()
    raise FetchRefused(f"more than {policy.max_redirects} redirects from {redact(url)}")


def _join(base: httpx.URL, location: str) -> httpx.URL:
    try:
        return base.join(location)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise FetchRefused(f"invalid redirect from {redact(base)}") from None


def _left(deadline: float, policy: FetchPolicy) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ParseError(f"fetch took longer than {policy.timeout_s:g} s (RAGLINE_INGEST_FETCH_TIMEOUT_S)")
    return left


#: content encodings whose decoder inflates at most about a thousand times one network read
_ENCODINGS = {"", "identity", "gzip", "deflate"}


def _read(resp: httpx.Response, deadline: float, policy: FetchPolicy) -> bytes:
    encoding = resp.headers.get("content-encoding", "").strip().lower()
    if encoding not in _ENCODINGS:
        raise FetchRefused(f"unsupported content encoding {encoding!r}")
    chunks, size = [], 0
    try:
        for part in resp.iter_bytes():
            size += len(part)
            if size > policy.max_bytes:
                raise ParseError(f"document too large: more than {policy.max_bytes} bytes")
            chunks.append(part)
            _left(deadline, policy)
    except httpx.TimeoutException:
        _left(deadline, policy)
        raise
    return b"".join(chunks)
