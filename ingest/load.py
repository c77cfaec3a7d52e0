"""Load a document's bytes and format from its request (a local path, a URL or inline content).

A local path is untrusted input: any producer can put one in a task. It is read only when it lies
below a root allowed for the task's tenant (``ingest/roots.py``), it is a regular file, and it is
no larger than the size limit. The path is resolved and checked, then opened component by
component below that root without following any symlink (``O_NOFOLLOW`` at every step), so a
folder or file swapped for a symlink between the check and the open is refused instead of read;
``O_NONBLOCK`` keeps a FIFO from blocking the open, and the read stops one byte past the limit,
so ``/dev/zero`` or a growing file cannot exhaust memory. URLs go through :mod:`.fetch`.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ragline.ingest import git, roots
from ragline.ingest.fetch import FetchPolicy, redact
from ragline.ingest.parse import BINARY_FORMATS, SUPPORTED, ParseError
from ragline.ingest.sources import configured_sources, fetch_url, parse_git_uri
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import IngestRequest

MAX_BYTES = 64 * 1024 * 1024  # hard ceiling whatever the settings say
_READ_CHUNK = 1024 * 1024

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


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


def check_path(path: Path, allowed: list[Path]) -> tuple[Path, Path]:
    """(root, resolved path) for a path below one of the ``allowed`` roots (resolved); else a
    :class:`ParseError`. The path must be absolute: a relative one would depend on the worker."""
    if not path.is_absolute():
        raise ParseError(f"a local path must be absolute: {path}")
    real = roots.resolve(path)
    root = roots.containing_root(real, allowed)
    if root is None:
        raise ParseError(f"path outside the allowed ingest roots of this tenant: {path}")
    return root, real


def open_beneath(root: Path, real: Path) -> int:
    """A read-only descriptor of ``real``, opened from ``root`` one component at a time without
    following symlinks. A root that is a file (a single granted file) is opened from its folder."""
    base, rel = (root, real.relative_to(root)) if real != root else (root.parent, Path(root.name))
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in rel.parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(rel.parts[-1] if rel.parts else ".", _FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


def read_bounded(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd``; a :class:`ParseError` when there are more."""
    chunks, size = [], 0
    while size <= limit:
        part = os.read(fd, min(_READ_CHUNK, limit + 1 - size))
        if not part:
            break
        chunks.append(part)
        size += len(part)
    if size > limit:
        raise ParseError(f"document too large: more than {limit} bytes")
    return b"".join(chunks)


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


def read_local(path: Path, allowed: list[Path], limit: int) -> bytes:
    """The bytes of the regular file ``path`` below one of the ``allowed`` roots, at most ``limit``.

    Everything that is the document's fault is a :class:`ParseError` with a readable message:
    outside the roots, missing, not a regular file, too large, or changed into a symlink while
    it was being opened.
    """
    root, real = check_path(path, allowed)
    try:
        fd = open_beneath(root, real)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise ParseError(f"path changed to a symlink while it was opened, refused: {path}") from None
        raise ParseError(f"cannot read {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise ParseError(f"not a regular file ({kind}): {path}")
        if st.st_size > limit:
            raise ParseError(f"document too large: {st.st_size} bytes (limit {limit})")
        return read_bounded(fd, limit)
    finally:
        os.close(fd)


def load(req: IngestRequest) -> Loaded:
    loaded = _load(req)
    check_size(len(loaded.data), loaded.fmt)
    return loaded


def fetch_policy(req: IngestRequest) -> FetchPolicy:
    """The settings' fetch policy, narrowed to the host allowlist of the request's source when the
    request names a configured source of its tenant."""
    settings = get_settings()
    policy = FetchPolicy.from_settings(settings, max_bytes=min(MAX_BYTES, settings.ingest.max_bytes))
    name = req.metadata.get("source")
    for spec in configured_sources(settings.lifecycle.sources) if name else ():
        if spec.name == name and spec.tenant == req.tenant and spec.allowed_hosts:
            return policy.with_hosts(spec.allowed_hosts)
    return policy


def _load(req: IngestRequest) -> Loaded:
    if req.content is not None:
        return Loaded(req.content.encode("utf-8"), req.fmt or "text", req.doc_id, req.path or req.doc_id)
    assert req.uri is not None
    if req.uri.startswith(("http://", "https://")):  # URL-list sources (ingest/sources.py)
        data, served = fetch_url(req.uri, fetch_policy(req))
        fmt = req.fmt or served
        if fmt is None:
            raise ParseError(f"unsupported document type at {redact(req.uri)}")
        return Loaded(data, fmt, Path(req.uri.split("?", 1)[0]).stem or req.doc_id, req.path or req.uri)
    if req.uri.startswith("git:"):  # git sources (ingest/sources.py): a file at a commit
        return load_git(req)
    uri = req.uri.removeprefix("file://")
    p = Path(uri)
    fmt = req.fmt or SUPPORTED.get(p.suffix.lower())
    if fmt is None:
        raise ParseError(f"unsupported file type {p.suffix or '(none)'!r}")
    if not p.is_absolute():
        raise ParseError(f"a local path must be absolute: {uri}")
    root = roots.root_for(req.tenant, roots.resolve(p))
    data = read_local(p, [root] if root is not None else [], size_limit(fmt))
    return Loaded(data, fmt, p.stem, req.path or uri)


def load_git(req: IngestRequest) -> Loaded:
    """A file of a repository at a commit. The repository is opened for the tenant by
    :func:`ragline.ingest.roots.admit_repository` (a granted root or a configured git source itself,
    read at exactly that folder); its title is its path in the repository, the module of its code
    chunks."""
    repo, commit, rel = parse_git_uri(req.uri or "")
    fmt = req.fmt or SUPPORTED.get(Path(rel).suffix.lower())
    if fmt is None:
        raise ParseError(f"unsupported file type {Path(rel).suffix or '(none)'!r}")
    try:
        opened = roots.admit_repository(req.tenant, repo)
        data = git.read_blob(opened, commit, rel, size_limit(fmt), get_settings().code.git_timeout_s)
    except git.GitError as exc:
        raise ParseError(str(exc)) from None
    return Loaded(data, fmt, rel, req.path or rel)
