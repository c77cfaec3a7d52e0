"""Document sources behind one small interface: list ``(doc_id, version, fingerprint)`` cheaply.

* ``folder``: a path plus a glob; the version is the file's mtime (ns) and the fingerprint is
  ``mtime_ns:size``, read from ``stat`` without opening the file. When the fingerprint moved but the
  bytes did not (a ``touch``), the ingest pipeline's content hash is the tie-breaker: nothing is
  re-embedded.
* ``urls``: a list of HTTP(S) URLs; one ``HEAD`` per URL, the fingerprint is the ``ETag`` (else
  ``Last-Modified``), the version is ``Last-Modified`` when the server sends it. Listing and fetching
  go through the SSRF guard of :mod:`.fetch`, narrowed to the source's ``allowed_hosts`` when set.
* ``git``: a local repository (``path``) or a clone URL (``url``, cloned bare into the ragline home)
  at a ``ref``; only tracked files, minus the skip rules of :mod:`.git` and the source's
  ``include``/``exclude`` globs. The fingerprint is the blob id, so an unchanged file is never
  enqueued; the version is the commit's time; the uri names the repository, commit and path.

A listing also says what it could not see: an unreachable URL or a missing folder is never
taken as "the document vanished", so a network blip or an unmounted disk prunes nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Protocol

import httpx

from ragline.ingest import git, roots
from ragline.ingest.clone_guard import sync_guarded
from ragline.ingest.fetch import FetchPolicy, FetchRefused, redact, request
from ragline.ingest.parse import SUPPORTED, ParseError
from ragline.ingest.source_spec import SourceSpec as SourceSpec
from ragline.ingest.source_spec import clone_dir as clone_dir
from ragline.ingest.source_spec import configured_sources as configured_sources
from ragline.ingest.source_spec import repository_dir
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk import formats

MAX_FETCH_BYTES = 64 * 1024 * 1024


class SourceUnavailable(RuntimeError):
    """The source cannot be listed at all (missing folder): skip it, prune nothing."""


@dataclass(frozen=True)
class Listed:
    doc_id: str
    version: int  # orderable hint; 0 when the source has none
    fingerprint: str  # changes whenever the document may have changed; '' = unknown (always re-check)
    uri: str
    path: str
    size: int = 0  # bytes when the source knows it (folders), for batch planning; 0 = unknown


@dataclass
class Listing:
    items: list[Listed] = field(default_factory=list)
    unavailable: set[str] = field(default_factory=set)  # doc ids that exist but could not be checked now
    errors: list[str] = field(default_factory=list)
    commit: str | None = None  # git: the commit listed
    skipped: list[tuple[str, str]] = field(default_factory=list)  # git: (path, reason) left out by rule


class Source(Protocol):
    spec: SourceSpec

    def list(self) -> Listing: ...


class FolderSource:
    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec

    def list(self) -> Listing:
        root = Path(self.spec.path).expanduser().resolve()  # type: ignore[arg-type]
        if not root.is_dir():
            raise SourceUnavailable(f"folder {root} does not exist")
        out = Listing()
        for f in sorted(root.glob(self.spec.glob)):
            if not f.is_file() or f.suffix.lower() not in SUPPORTED:
                continue
            try:
                st = f.stat()
            except OSError as exc:  # vanished between glob and stat, or unreadable
                out.errors.append(f"{f}: {exc.strerror}")
                continue
            rel = f.relative_to(root).as_posix()
            out.items.append(
                Listed(rel, st.st_mtime_ns, f"{st.st_mtime_ns}:{st.st_size}", str(f), rel, st.st_size)
            )
        return out


def _http_version(last_modified: str | None) -> int:
    if not last_modified:
        return 0
    try:
        return int(parsedate_to_datetime(last_modified).timestamp()) * 1_000_000_000
    except (TypeError, ValueError):
        return 0


def source_policy(spec: SourceSpec, timeout: float | None = None) -> FetchPolicy:
    """The settings' fetch policy for one source: its ``allowed_hosts``, and ``timeout`` as the deadline."""
    policy = FetchPolicy.from_settings(get_settings(), **({"timeout_s": timeout} if timeout else {}))
    return policy.with_hosts(spec.allowed_hosts) if spec.allowed_hosts else policy


class UrlListSource:
    def __init__(self, spec: SourceSpec, timeout: float = 10.0, policy: FetchPolicy | None = None) -> None:
        self.spec = spec
        self.timeout = timeout
        self.policy = policy

    def list(self) -> Listing:
        out = Listing()
        policy = self.policy or source_policy(self.spec, self.timeout)
        for url in self.spec.urls:
            try:
                r = request("HEAD", url, policy, read_body=False)
            except (httpx.HTTPError, ParseError) as exc:  # a refused address is never "vanished"
                out.unavailable.add(url)
                detail = str(exc) if isinstance(exc, ParseError) else type(exc).__name__
                out.errors.append(f"{redact(url)}: {detail}")
                continue
            if r.status in (404, 410):
                continue  # gone: pruned by the reindex
            if r.status >= 400:
                out.unavailable.add(url)
                out.errors.append(f"{redact(url)}: HTTP {r.status}")
                continue
            etag, lm = r.headers.get("etag"), r.headers.get("last-modified")
            fp = f"etag:{etag}" if etag else (f"lm:{lm}" if lm else "")
            out.items.append(Listed(url, _http_version(lm), fp, url, url))
        return out


def git_uri(repo: Path, commit: str, path: str) -> str:
    """``git:<repository>@<commit>:<path>``: what an ingest task reads (:func:`parse_git_uri`)."""
    return f"git:{repo}@{commit}:{path}"


def parse_git_uri(uri: str) -> tuple[Path, str, str]:
    """(repository, commit, path) of a :func:`git_uri`; ``ParseError`` when it is not one."""
    rest = uri.removeprefix("git:")
    repo, sep, tail = rest.partition("@")
    while sep and not git.COMMIT_ID.match(tail):
        more, sep, tail = tail.partition("@")
        repo = f"{repo}@{more}"
    m = git.COMMIT_ID.match(tail)
    if not uri.startswith("git:") or not sep or m is None or not tail[m.end() :]:
        raise ParseError(f"not a git document uri: {uri[:200]!r}")
    return Path(repo), m.group(1), tail[m.end() :]


class GitSource:
    """A repository at a ref: its tracked files minus the skip rules (``ingest/git.py``)."""

    def __init__(self, spec: SourceSpec, timeout: float | None = None) -> None:
        self.spec = spec
        self.timeout = timeout or get_settings().code.git_timeout_s

    def repo_dir(self) -> Path:
        return repository_dir(self.spec)

    def sync(self) -> git.Repository:
        """The repository, cloned or fetched first for a URL, opened through
        :func:`ragline.ingest.roots.admit_repository` (the source's tenant may read it, and git reads
        nothing outside it); ``SourceUnavailable`` when it cannot be had or is refused."""
        repo = self.repo_dir()
        try:
            if self.spec.url is not None:  # checked like any fetched URL (ingest/clone_guard.py)
                sync_guarded(self.spec.url, repo, self.timeout, source_policy(self.spec))
            return roots.admit_repository(self.spec.tenant, repo)
        except (git.GitError, FetchRefused, ValueError) as exc:
            raise SourceUnavailable(git.redact_url(str(exc))) from None

    def selection(self) -> str:
        """A fingerprint of what decides which tracked files this source indexes, recorded with its
        commit (``source_commits.selection``): the include and exclude globs, whether the default
        skip rules apply and the rules themselves, the size and line limits, the supported suffixes.
        A sync whose selection differs from the recorded one lists every file instead of the diff,
        so a file the new selection leaves out is pruned and one it now admits is ingested although
        neither changed in git (an edited ``--include``, a new format, other vendored paths)."""
        code = get_settings().code
        spec = self.spec
        parts: dict[str, object] = {
            "include": spec.include,
            "exclude": spec.exclude,
            "skip_defaults": spec.skip_defaults,
            "max_file_bytes": code.max_file_bytes,
            "suffixes": sorted(SUPPORTED),
        }
        if spec.skip_defaults:
            parts.update(git.skip_rules(), max_line_chars=code.max_line_chars)
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]

    def select(
        self, repo: git.Repository, commit: str, entries: list[git.TreeEntry]
    ) -> tuple[list[git.TreeEntry], list[tuple[str, str]]]:
        """The entries of ``commit`` to index and the skipped ones with their reason: path rules
        first (with the commit's ``.gitattributes``), then the bytes of the rest (read in one
        ``git cat-file --batch``)."""
        code = get_settings().code
        spec = self.spec
        supported = [e.path for e in entries if SUPPORTED.get(Path(e.path).suffix.lower())]
        attributes = (
            git.linguist_attributes(repo, commit, supported, self.timeout) if spec.skip_defaults else {}
        )
        candidates, skipped = [], []
        for e in entries:
            reason = (
                None if SUPPORTED.get(Path(e.path).suffix.lower()) else "unsupported file type"
            ) or git.path_skip_reason(
                e.path,
                e.size,
                code.max_file_bytes,
                spec.include,
                spec.exclude,
                spec.skip_defaults,
                attributes.get(e.path),
            )
            if reason is None and e.size == 0:
                reason = "empty"
            (skipped.append((e.path, reason)) if reason else candidates.append(e))
        blobs = git.read_blobs(repo, [e.blob for e in candidates], self.timeout)
        kept = []
        for e in candidates:
            reason = git.content_skip_reason(
                blobs.get(e.blob, b""), code.max_line_chars if spec.skip_defaults else 0, spec.skip_defaults
            )
            (skipped.append((e.path, reason)) if reason else kept.append(e))
        return kept, skipped

    def list(self) -> Listing:
        repo = self.sync()
        try:
            commit = git.resolve_commit(repo, self.spec.ref, self.timeout)
            version = git.commit_time_ns(repo, commit, self.timeout)
            kept, skipped = self.select(repo, commit, git.list_tree(repo, commit, self.timeout))
        except git.GitError as exc:
            raise SourceUnavailable(str(exc)) from None
        items = [
            Listed(e.path, version, e.blob, git_uri(repo.root, commit, e.path), e.path, e.size) for e in kept
        ]
        return Listing(items, commit=commit, skipped=skipped)


def build_source(spec: SourceSpec, http_timeout: float = 10.0) -> Source:
    if spec.kind == "folder":
        return FolderSource(spec)
    if spec.kind == "git":
        return GitSource(spec)
    return UrlListSource(spec, timeout=http_timeout)


def fetch_url(url: str, policy: FetchPolicy | None = None) -> tuple[bytes, str | None]:
    """GET a document for ingestion through the SSRF guard (:mod:`.fetch`, ``policy`` None: the
    settings'): (bytes, format guessed from the URL suffix or content type).

    A refused URL or address, a 4xx, a body over the limit and a passed deadline are the
    document's problem (``ParseError``, recorded); a network error or a 5xx is transient
    (``ConnectionError``: the ingest task retries).
    """
    policy = policy or FetchPolicy.from_settings(get_settings(), max_bytes=MAX_FETCH_BYTES)
    try:
        r = request("GET", url, policy)
    except FetchRefused as exc:
        raise FetchRefused(f"cannot fetch {redact(url)}: {exc}") from None
    except httpx.HTTPError as exc:
        raise ConnectionError(f"{redact(url)}: {type(exc).__name__}") from None
    if r.status >= 500:
        raise ConnectionError(f"{redact(url)}: HTTP {r.status}")
    if r.status >= 400:
        raise ParseError(f"cannot fetch {redact(url)}: HTTP {r.status}")
    ctype = r.headers.get("content-type", "").split(";")[0].strip().lower()
    return r.body, guess_format(url, ctype)


def guess_format(url: str, content_type: str = "") -> str | None:
    path = httpx.URL(url).path
    suffix = Path(path).suffix.lower()
    return SUPPORTED.get(suffix) or formats.by_content_type(content_type)
