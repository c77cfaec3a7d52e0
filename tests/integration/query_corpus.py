"""Store small documents for query tests straight through ``ragline.ingest.store`` (the real upsert), with
hashed-trigram vectors from ``tests/loopback.py``, so retrieval tests need no embedding model."""

from __future__ import annotations

import hashlib

import numpy as np

from ragline.ingest import store
from tests.loopback import hashed_embedding


def vec(text: str, dim: int = 384) -> np.ndarray:
    return np.asarray(hashed_embedding(text, dim), dtype=np.float32)


def store_docs(conn, tenant: str, docs: list[dict], dim: int = 384) -> None:
    """``docs``: ``{"doc_id", "path", "chunks": [str] | "content": str, "acl", "layer", "page", "heading"}``."""
    for d in docs:
        texts = d.get("chunks") or [d["content"]]
        chunks = [
            store.StoredChunk(
                i,
                t,
                d.get("heading", ""),
                d.get("heading", ""),
                d.get("page"),
                vec(t, dim),
                d.get("metadata", {"kind": "text"}),
            )
            for i, t in enumerate(texts)
        ]
        rec = store.DocumentRecord(
            tenant=tenant,
            doc_id=d["doc_id"],
            source_uri=None,
            path=d.get("path", d["doc_id"]),
            title=d.get("heading", ""),
            content_hash=hashlib.sha256("".join(texts).encode()).hexdigest(),
            version=1,
            acl=d.get("acl", ["g"]),
            layer=d.get("layer", "docs"),
        )
        with conn.transaction():
            store.lock_document(conn, tenant, d["doc_id"])
            store.upsert_document(conn, rec, chunks, "hashed-trigram")
    conn.commit()


#: one document about tenant isolation: what the client tests ask about
ISOLATION_DOCS = [
    {
        "doc_id": "iso.md",
        "path": "docs/iso.md",
        "heading": "Изоляция",
        "content": "Арендаторы изолированы: фильтр по tenant и группам ACL стоит в SQL WHERE.",
    }
]
