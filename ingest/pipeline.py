"""One document through every stage: load → parse → chunk → contextualize → embed → store."""

from __future__ import annotations

import hashlib
import time

from ingest import store
from ingest.chunk import chunk_blocks
from ingest.contextualize import contextualize, embedding_text
from ingest.embed import embed_with_cache
from ingest.load import load
from ingest.parse import ParseError, parse_bytes
from shared import db
from shared.contracts import IngestRequest, IngestResult
from shared.providers import get_embedder
from shared.settings import get_settings


def ingest_document(req: IngestRequest) -> IngestResult:
    settings = get_settings()
    timings: dict[str, float] = {}
    stage = "load"

    def lap(name: str, t0: float) -> float:
        now = time.perf_counter()
        timings[name] = round((now - t0) * 1000, 2)
        return now

    t = time.perf_counter()
    try:
        loaded = load(req)
        content_hash = hashlib.sha256(loaded.data).hexdigest()
        embedder = get_embedder()
        with db.connection() as conn:
            state = store.current_state(conn, req.tenant, req.doc_id)
        if store.is_unchanged(state, content_hash, embedder.model) and state["version"] <= req.version:
            return IngestResult(tenant=req.tenant, doc_id=req.doc_id, status="skipped_unchanged")
        t = lap("load", t)
        stage = "parse"
        parsed = parse_bytes(loaded.data, loaded.fmt, default_title=loaded.title)
        t = lap("parse", t)
        stage = "chunk"
        chunks = chunk_blocks(parsed.blocks, settings.chunk_max_chars, settings.chunk_overlap_ratio,
                              settings.chunk_hard_max_chars)
        t = lap("chunk", t)
        stage = "contextualize"
        contexts = contextualize(parsed.title, chunks)
        t = lap("contextualize", t)
        stage = "embed"
        with db.connection() as conn:
            emb = embed_with_cache(
                conn, embedder, [embedding_text(c, ch.content) for c, ch in zip(contexts, chunks, strict=True)],
                settings.embed_batch_size,
            )
        t = lap("embed", t)
        stage = "store"
        rows = [
            store.StoredChunk(ch.chunk_no, ch.content, ctx, " › ".join(ch.heading_path), ch.page, vec,
                              {"kind": ch.kind})
            for ch, ctx, vec in zip(chunks, contexts, emb.vectors, strict=True)
        ]
        record = store.DocumentRecord(
            tenant=req.tenant, doc_id=req.doc_id, source_uri=req.uri, path=loaded.path, title=parsed.title,
            content_hash=content_hash, version=req.version, acl=list(req.acl), layer=req.layer,
            metadata={**req.metadata, "format": loaded.fmt},
        )
        with db.connection() as conn, conn.transaction():
            store.lock_document(conn, req.tenant, req.doc_id)
            outcome = store.upsert_document(conn, record, rows, embedder.model)
        lap("store", t)
        return IngestResult(tenant=req.tenant, doc_id=req.doc_id, status=outcome, chunks=len(rows),
                            embedded=emb.embedded, timings_ms=timings)
    except (ParseError, OSError, ValueError) as exc:
        message = f"{stage}: {exc}"
        with db.connection() as conn:
            store.mark_failed(conn, req.tenant, req.doc_id, req.uri, stage, message, req.job_id)
        return IngestResult(tenant=req.tenant, doc_id=req.doc_id, status="failed", error=message,
                            timings_ms=timings)
