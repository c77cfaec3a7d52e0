"""Clone URLs of git sources under the fetch policy of :mod:`ragline.ingest.fetch`.

A git source's ``url`` makes the control pool's git connect to a host: the same server-side
request forgery as a fetched document (the cloud metadata address, an intranet service, the
Redis beside the worker) unless the URL goes through the same checks. They run before git does:
the host must be allowed (a source's ``allowed_hosts``) and every address it resolves to public,
or allowed by ``RAGLINE_INGEST_FETCH_ALLOW_PRIVATE`` / ``RAGLINE_INGEST_FETCH_ALLOWED_NETWORKS``; otherwise
:class:`~ragline.ingest.fetch.FetchRefused`, and git never starts. git then may use only the URL's
own transport (``GIT_ALLOW_PROTOCOL``: no redirect into ``file://`` or another scheme), follows no
HTTP redirect (``http.followRedirects=false``: its target was never checked; git's dumb-HTTP walker
reads a server's ``http-alternates`` and ``alternates`` only when redirects are followed, so a
remote cannot send it to another store either), never runs ``ext::``
helpers, and over http(s) connects to the addresses checked here (``http.curloptResolve``), not to
a second answer of the resolver. An ssh or git:// connection resolves the name again inside git:
a name whose record changes between the check and the connection is not caught there
(docs/code.md). A local path or ``file://`` URL has no address to check; git copies its objects, so
it is opened like any repository first (:func:`ragline.ingest.git.open_repository` in
:func:`~ragline.ingest.git.sync_clone`: a link out of its git dir is refused).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import httpcore

from ragline.ingest import git
from ragline.ingest.fetch import FetchPolicy, FetchRefused, check_address, host_allowed, resolve
from ragline.shared.config.settings import get_settings
from ragline.shared.worker import credentials

#: options for every clone and fetch, whatever the transport
BASE_OPTIONS = ("-c", "protocol.ext.allow=never", "-c", "http.followRedirects=false")


def guarded_options(url: str, policy: FetchPolicy) -> tuple[list[str], str]:
    """The ``-c`` options and the allowed transports for cloning or fetching ``url``;
    :class:`FetchRefused` when the policy refuses its host or an address of it, ``ValueError`` for
    a transport git may not use, :class:`~ragline.ingest.git.GitError` when the name does not
    resolve."""
    target = git.clone_target(url)
    options = list(BASE_OPTIONS)
    if target.scheme == "file":
        return options, "file"
    assert target.host is not None and target.port is not None
    if policy.allowed_hosts and not host_allowed(target.host, policy.allowed_hosts):
        raise FetchRefused(f"host {target.host} is not in the source's allowed_hosts")
    try:
        literal = ipaddress.ip_address(target.host)
    except ValueError:
        literal = None
    if literal is not None:
        check_address(literal, policy)
        addresses = [str(literal)]
    else:
        try:
            addresses = resolve(target.host, target.port, policy)
        except httpcore.ConnectError as exc:
            raise git.GitError(str(exc)) from None
    if target.scheme in ("http", "https"):
        pinned = ",".join(f"[{a}]" if ":" in a else a for a in addresses)
        options += ["-c", f"http.curloptResolve={target.host}:{target.port}:{pinned}"]
    return options, target.scheme


def sync_guarded(url: str, dest: Path, timeout: float = 600.0, policy: FetchPolicy | None = None) -> Path:
    """:func:`ragline.ingest.git.sync_clone` of ``url`` after the checks, with their options;
    ``policy`` defaults to the settings' fetch policy."""
    policy = policy or FetchPolicy.from_settings(get_settings())
    options, protocols = guarded_options(url, policy)
    # a tenant's clones hold its documents: their folder is private whichever process clones
    credentials.private_dir(dest.parent)
    return git.sync_clone(url, dest, timeout, config=options, protocols=protocols)
