"""Collect files and enqueue them under a job, in batch tasks whose chunks share embedding requests.

A document's id is ``<source>/<path relative to the folder given>``: the source is ``--source NAME``
or, by default, the folder's name plus 8 hex digits of SHA-256 of its resolved absolute path
(:func:`default_source_name`), so two different ``docs/`` folders never share an id and the same
folder always gives the same ids. A file given directly has its parent folder as the root.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ragline.ingest.file_names import record_refused, split_named
from ragline.ingest.parse import SUPPORTED
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.names import TASK_INGEST_BATCH, TASK_INGEST_DOCUMENT
from ragline.shared.worker import db, jobs
from ragline.shared.worker.celery_app import app

SUFFIXES = set(SUPPORTED)


#: an explicit ``--source`` name: one path segment (it is the first segment of every doc id)
SOURCE_NAME = re.compile(r"\w[\w.-]{0,127}")
_UNSAFE = re.compile(r"[^\w.-]+")


class SourceFile(NamedTuple):
    path: Path  # the file (absolute)
    doc_id: str  # "<source>/<path relative to root>"
    source: str
    root: Path  # the folder the id is relative to


class IdConflict(ValueError):
    """Two different files would get one doc id (one ``--source`` name over several folders)."""


def default_source_name(root: Path) -> str:
    """``<folder name>-<8 hex of SHA-256 of the resolved absolute path>``: readable, stable for one
    folder, different for two folders of the same name."""
    root = root.expanduser().resolve()
    label = _UNSAFE.sub("-", root.name).strip("-.")[:48] or "root"
    digest = hashlib.sha256(str(root).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{label}-{digest}"


def check_source_name(name: str) -> str:
    if not SOURCE_NAME.fullmatch(name):
        raise ValueError(
            f"invalid source name {name!r}: letters, digits, '_', '.' and '-' (up to 128), "
            "not starting with '.' or '-' and without '/'"
        )
    return name


def collect_files(paths: list[Path], source: str | None = None) -> list[SourceFile]:
    """The supported files under ``paths`` with their doc ids ``<source>/<relative path>``.

    ``source`` None derives each folder's name with :func:`default_source_name`. A file reached twice
    (given again, or inside two folders given) is kept once, under the outermost folder given, so its
    id does not depend on the order of the arguments. Two different files under one id raise
    :class:`IdConflict`: one would overwrite the other.
    """
    if source is not None:
        check_source_name(source)
    found: list[SourceFile] = []
    for p in paths:
        p = p.expanduser().resolve()
        if p.is_file():
            root, files = p.parent, [p]
        else:
            root = p
            files = [f for f in sorted(p.rglob("*")) if f.is_file() and f.suffix.lower() in SUFFIXES]
        name = source or default_source_name(root)
        found.extend(SourceFile(f, f"{name}/{f.relative_to(root).as_posix()}", name, root) for f in files)
    outermost: dict[Path, SourceFile] = {}
    for sf in found:
        if sf.path not in outermost or len(sf.root.parts) < len(outermost[sf.path].root.parts):
            outermost[sf.path] = sf
    out: list[SourceFile] = []
    by_id: dict[str, SourceFile] = {}
    clashes: list[str] = []
    for sf in found:
        if outermost.get(sf.path) is not sf:
            continue
        del outermost[sf.path]
        other = by_id.setdefault(sf.doc_id, sf)
        if other is not sf:
            clashes.append(f"{sf.doc_id} ({other.path} and {sf.path})")
            continue
        out.append(sf)
    if clashes:
        raise IdConflict(
            f"{len(clashes)} doc id(s) would hold two different files, e.g. {clashes[0]}: "
            "ingest these folders under different --source names (or without --source)"
        )
    return out


def stored_under_other_ids(tenant: str, files: list[SourceFile]) -> list[dict]:
    """Files of ``files`` the tenant already holds under another doc id (ingested before ids had a
    source prefix, or from another folder given): they would be answered from twice."""
    ids = {str(f.path): f.doc_id for f in files}
    if not ids:
        return []
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT doc_id, source_uri FROM documents WHERE tenant = %s AND status = 'ready'"
            " AND source_uri = ANY(%s) AND NOT (doc_id = ANY(%s)) ORDER BY doc_id",
            (tenant, list(ids), list(ids.values())),
        ).fetchall()
    return [{"doc_id": ids[r["source_uri"]], "also_stored_as": r["doc_id"]} for r in rows]


def document_version(path: Path) -> int:
    st = path.stat()
    return st.st_mtime_ns


def plan_batches(sizes: list[int], max_docs: int, max_bytes: int) -> list[range]:
    """Consecutive groups of at most ``max_docs`` documents and ``max_bytes`` bytes (a larger file goes
    alone), so one batch task stays well inside the task time limit."""
    groups: list[range] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start >= max_docs or total + size > max_bytes):
            groups.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        groups.append(range(start, len(sizes)))
    return groups


def send_in_batches(
    payloads: list[dict],
    sizes: list[int],
    send_task: Callable[[str, dict], object],
    batch_docs: int | None = None,
    batch_bytes: int | None = None,
) -> int:
    """Send ``payloads`` (ingest requests) as ``ragline.ingest.batch`` tasks of at most ``ingest.batch_docs``
    documents and ``batch_bytes`` (default ``ingest.batch_bytes``) bytes, a lone document as
    ``ragline.ingest.document``; returns the number of tasks. At least one batch per ingest process,
    so a small set still keeps every process busy."""
    settings = get_settings()
    per_batch = max(
        1,
        min(
            batch_docs or settings.ingest.batch_docs, -(-len(payloads) // settings.workers.ingest_concurrency)
        ),
    )
    groups = plan_batches(sizes, per_batch, batch_bytes or settings.ingest.batch_bytes)
    for group in groups:
        if len(group) == 1:
            send_task(TASK_INGEST_DOCUMENT, payloads[group[0]])
        else:
            send_task(TASK_INGEST_BATCH, {"documents": [payloads[i] for i in group]})
    return len(groups)


def enqueue_files(files: list[SourceFile], tenant: str, acl: list[str], batch_docs: int | None = None) -> str:
    """One job; the documents go out through :func:`send_in_batches`, each recording its source and
    root folder (``documents.metadata``), which the ingest pool checks before writing over a doc id.
    A file whose name cannot be a doc id is a failed document of the job (``ingest/file_names.py``)."""
    files, refused = split_named(files, lambda f: (f.doc_id, f.doc_id))
    with db.connection() as conn:
        job_id = jobs.create_job(
            conn, "ingest", tenant, [f.doc_id for f in files], {"files": len(files) + len(refused)}
        )
        record_refused(conn, job_id, tenant, refused)
    payloads, sizes = [], []
    for path, doc_id, source, root in files:
        try:
            st = path.stat()
            version, size = st.st_mtime_ns, st.st_size
        except OSError:
            version, size = 0, 0  # vanished since it was listed: the task records the error
        payloads.append(
            {
                "tenant": tenant,
                "doc_id": doc_id,
                "uri": str(path),
                "path": doc_id,
                "acl": acl,
                "version": version,
                "job_id": job_id,
                "metadata": {"source": source, "source_root": str(root)},
            }
        )
        sizes.append(size)
    send_in_batches(payloads, sizes, lambda name, payload: app.send_task(name, args=[payload]), batch_docs)
    return job_id
