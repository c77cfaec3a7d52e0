"""Helpers for the ACL and lifecycle tests: documents written through the real store, with
loopback-style hashed vectors, so no model is loaded."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

import numpy as np

from ragline.ingest import store
from ragline.shared.worker import db, jobs
from tests.loopback import hashed_embedding

MODEL = "hashed-trigram"


def put_document(
    tenant: str,
    doc_id: str,
    paragraphs: list[str],
    acl: list[str],
    version: int = 1,
    path: str | None = None,
    model: str = MODEL,
) -> str:
    """Store a document whose chunks are ``paragraphs`` (one chunk each); returns the store outcome."""
    chunks = [
        store.StoredChunk(i, text, "", doc_id, None, np.asarray(hashed_embedding(text, 384), np.float32))
        for i, text in enumerate(paragraphs)
    ]
    rec = store.DocumentRecord(
        tenant=tenant,
        doc_id=doc_id,
        source_uri=None,
        path=path or doc_id,
        title=doc_id,
        content_hash=str(hash(tuple(paragraphs))),
        version=version,
        acl=acl,
    )
    with db.connection() as conn, conn.transaction():
        store.lock_document(conn, tenant, doc_id)
        return store.upsert_document(conn, rec, chunks, model)


def bulk_documents(conn, tenant: str, n: int, acl: list[str]) -> None:
    """``n`` documents with one chunk each, written with COPY (volume tests)."""
    with conn.cursor() as cur:
        with cur.copy("COPY documents (tenant, doc_id, path, status, acl, chunk_count) FROM STDIN") as cp:
            for i in range(n):
                cp.write_row((tenant, f"d{i:05d}", f"bulk/d{i:05d}.md", "ready", acl, 1))
        with cur.copy(
            "COPY chunks (tenant, doc_id, chunk_no, path, content, content_hash, acl) FROM STDIN"
        ) as cp:
            for i in range(n):
                cp.write_row(
                    (tenant, f"d{i:05d}", 0, f"bulk/d{i:05d}.md", f"документ номер {i}", f"h{i}", acl)
                )
    conn.commit()


def acl_of(conn, tenant: str, doc_id: str) -> tuple[list[str], set[tuple[str, ...]]]:
    """(document ACL, set of distinct chunk ACLs)."""
    doc = conn.execute(
        "SELECT acl FROM documents WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
    ).fetchone()
    rows = conn.execute(
        "SELECT DISTINCT acl FROM chunks WHERE tenant = %s AND doc_id = %s", (tenant, doc_id)
    ).fetchall()
    return sorted(doc["acl"]), {tuple(sorted(r["acl"])) for r in rows}


def wait_job(job_id: str, timeout: float = 120) -> dict:
    summary = jobs.wait_for_job(job_id, timeout, poll_s=0.2)
    assert summary["state"] not in jobs.ACTIVE_STATES, f"job {job_id} still running: {summary}"
    return summary


class MarkdownSite(BaseHTTPRequestHandler):
    """A loopback web site of Markdown pages with ETags, for URL sources: ``pages`` maps a path to
    ``(etag, body)``; a path not in it is a 404. Subclass it per test module (``pages`` is the
    class's own)."""

    pages: dict[str, tuple[str, bytes]] = {}

    def log_message(self, *a):
        pass

    def _reply(self, body: bool):
        if self.path not in self.pages:
            self.send_response(404)
            self.end_headers()
            return
        etag, data = self.pages[self.path]
        self.send_response(200)
        self.send_header("ETag", etag)
        self.send_header("Content-Type", "text/markdown; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_HEAD(self):  # noqa: N802
        self._reply(False)

    def do_GET(self):  # noqa: N802
        self._reply(True)
