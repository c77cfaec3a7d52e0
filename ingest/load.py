"""Load a document's bytes and format from its request (a local path or inline content)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ragline.ingest.parse import BINARY_FORMATS, SUPPORTED, ParseError
from ragline.ingest.sources import fetch_url
from ragline.shared.contracts import IngestRequest
from ragline.shared.settings import get_settings

MAX_BYTES = 64 * 1024 * 1024  # hard ceiling whatever the settings say


@dataclass
class Loaded:
    data: bytes
    fmt: str
    title: str
    path: str


def size_limit(fmt: str) -> int:
    s = get_settings()
    return min(MAX_BYTES, s.ingest.max_bytes if fmt in BINARY_FORMATS else s.ingest.max_text_bytes)


def check_size(size: int, fmt: str) -> None:
    """Refuse a document too large to be real text before reading or parsing it."""
    limit = size_limit(fmt)
    if size > limit:
        raise ParseError(f"document too large: {size} bytes (limit {limit} for {fmt})")


def check_allowed(path: Path) -> None:
    """With ``ingest.allowed_roots`` set, a task may only read files below those folders: a
    producer that can enqueue tasks must not be able to make a worker read any file it likes."""
    roots = get_settings().ingest.allowed_roots
    if not roots:
        return
    real = path.resolve()
    if not any(real.is_relative_to(Path(r).resolve()) for r in roots):
        raise ParseError(f"path outside the allowed ingest roots: {path}")


def load(req: IngestRequest) -> Loaded:
    loaded = _load(req)
    check_size(len(loaded.data), loaded.fmt)
    return loaded


def _load(req: IngestRequest) -> Loaded:
    if req.content is not None:
        return Loaded(req.content.encode("utf-8"), req.fmt or "text", req.doc_id, req.path or req.doc_id)
    assert req.uri is not None
    if req.uri.startswith(("http://", "https://")):  # URL-list sources (ingest/sources.py)
        data, fmt = fetch_url(req.uri)
        if (req.fmt or fmt) is None:
            raise ParseError(f"unsupported document type at {req.uri}")
        return Loaded(
            data, req.fmt or fmt, Path(req.uri.split("?", 1)[0]).stem or req.doc_id, req.path or req.uri
        )
    uri = req.uri.removeprefix("file://")
    p = Path(uri)
    check_allowed(p)
    fmt = req.fmt or SUPPORTED.get(p.suffix.lower())
    if fmt is None:
        raise ParseError(f"unsupported file type {p.suffix or '(none)'!r}")
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise ParseError(f"cannot read {uri}: {exc.strerror}") from None
    check_size(size, fmt)
    return Loaded(p.read_bytes(), fmt, p.stem, req.path or uri)
