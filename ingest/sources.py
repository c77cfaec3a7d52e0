"""Document sources behind one small interface: list ``(doc_id, version, fingerprint)`` cheaply.

* ``folder``: a path plus a glob; the version is the file's mtime (ns) and the fingerprint is
  ``mtime_ns:size``, read from ``stat`` without opening the file. When the fingerprint moved but the
  bytes did not (a ``touch``), the ingest pipeline's content hash is the tie-breaker: nothing is
  re-embedded.
* ``urls``: a list of HTTP(S) URLs; one ``HEAD`` per URL, the fingerprint is the ``ETag`` (else
  ``Last-Modified``), the version is ``Last-Modified`` when the server sends it.

A listing also says what it could not see: an unreachable URL or a missing folder is never
taken as "the document vanished", so a network blip or an unmounted disk prunes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Literal, Protocol

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ragline.ingest.parse import SUPPORTED, ParseError
from ragline.shared.contracts import Group, Ident

MAX_FETCH_BYTES = 64 * 1024 * 1024


class SourceUnavailable(RuntimeError):
    """The source cannot be listed at all (missing folder): skip it, prune nothing."""


class SourceSpec(BaseModel):
    """One entry of ``RAGLINE_SOURCES``."""

    model_config = ConfigDict(extra="forbid")

    name: Ident
    kind: Literal["folder", "urls"]
    tenant: Ident
    acl: list[Group] = Field(default_factory=list)
    layer: str = "docs"
    path: Path | None = None
    glob: str = "**/*"
    urls: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _kind_fields(self) -> SourceSpec:
        if self.kind == "folder" and self.path is None:
            raise ValueError(f"source {self.name!r}: a folder source needs 'path'")
        if self.kind == "urls":
            bad = [u for u in self.urls if not u.startswith(("http://", "https://"))]
            if bad:
                raise ValueError(f"source {self.name!r}: not an http(s) URL: {bad[0]!r}")
        return self


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


class UrlListSource:
    def __init__(self, spec: SourceSpec, timeout: float = 10.0) -> None:
        self.spec = spec
        self.timeout = timeout

    def list(self) -> Listing:
        out = Listing()
        with httpx.Client(timeout=self.timeout, follow_redirects=True) as client:
            for url in self.spec.urls:
                try:
                    r = client.head(url)
                except httpx.HTTPError as exc:
                    out.unavailable.add(url)
                    out.errors.append(f"{url}: {type(exc).__name__}")
                    continue
                if r.status_code in (404, 410):
                    continue  # gone: pruned by the reindex
                if r.status_code >= 400:
                    out.unavailable.add(url)
                    out.errors.append(f"{url}: HTTP {r.status_code}")
                    continue
                etag, lm = r.headers.get("etag"), r.headers.get("last-modified")
                fp = f"etag:{etag}" if etag else (f"lm:{lm}" if lm else "")
                out.items.append(Listed(url, _http_version(lm), fp, url, url))
        return out


def build_source(spec: SourceSpec, http_timeout: float = 10.0) -> Source:
    if spec.kind == "folder":
        return FolderSource(spec)
    return UrlListSource(spec, timeout=http_timeout)


def configured_sources(raw: Iterable[dict]) -> list[SourceSpec]:
    specs = [SourceSpec.model_validate(r) for r in raw]
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate source names: {sorted(dup)}")
    return specs


def fetch_url(url: str, timeout: float = 30.0) -> tuple[bytes, str | None]:
    """GET a document for ingestion: (bytes, format guessed from the URL suffix or content type).

    A 4xx is the document's problem (``ParseError``, recorded); a network error or a 5xx is
    transient (``ConnectionError``: the ingest task retries).
    """
    try:
        return _fetch(url, timeout)
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code < 500:
            raise ParseError(f"cannot fetch {url}: HTTP {exc.response.status_code}") from None
        raise ConnectionError(f"{url}: HTTP {exc.response.status_code}") from None
    except httpx.HTTPError as exc:
        raise ConnectionError(f"{url}: {type(exc).__name__}") from None


def _fetch(url: str, timeout: float) -> tuple[bytes, str | None]:
    with httpx.Client(timeout=timeout, follow_redirects=True) as client:
        with client.stream("GET", url) as r:
            r.raise_for_status()
            chunks, size = [], 0
            for part in r.iter_bytes():
                size += len(part)
                if size > MAX_FETCH_BYTES:
                    raise ValueError(f"document too large: more than {MAX_FETCH_BYTES} bytes")
                chunks.append(part)
            ctype = r.headers.get("content-type", "").split(";")[0].strip().lower()
    return b"".join(chunks), guess_format(url, ctype)


_CTYPES = {
    "text/html": "html",
    "text/markdown": "md",
    "text/plain": "text",
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
}


def guess_format(url: str, content_type: str = "") -> str | None:
    path = httpx.URL(url).path
    suffix = Path(path).suffix.lower()
    return SUPPORTED.get(suffix) or _CTYPES.get(content_type)
