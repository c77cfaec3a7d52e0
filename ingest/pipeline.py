"""Documents through every stage: load → parse → chunk → contextualize → embed → store.

:func:`ingest_batch` prepares each document on its own (a bad one fails alone), embeds the chunks
of all prepared documents together (so embedding batches fill up to 128 texts across documents),
then stores each document in its own transaction. :func:`ingest_document` is a batch of one.
A document whose content did not change still gets the ACL its request asks for, through the
ACL-only path (``acl_sync.apply_ingest_acls``, no embedding).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

import psycopg
from celery.exceptions import SoftTimeLimitExceeded
from psycopg.pq import TransactionStatus

from ragline.ingest import identity, store
from ragline.ingest.acl_sync import apply_ingest_acls
from ragline.ingest.chunk import Chunk, chunk_blocks
from ragline.ingest.contextualize import contextualize, embedding_text
from ragline.ingest.embed import embed_with_cache
from ragline.ingest.load import load
from ragline.ingest.parse import ParseError, parse_bytes
from ragline.shared import db, jobs
from ragline.shared.contracts import IngestRequest, IngestResult
from ragline.shared.metrics import ACL_CHANGES
from ragline.shared.providers import get_embedder
from ragline.shared.settings import get_settings
from ragline.shared.timing import elapsed_ms

#: errors that mean "this document is bad", not "the system is down"
DOCUMENT_ERRORS = (ParseError, OSError, ValueError, UnicodeError, RecursionError, MemoryError)


class DocumentFailed(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage


@dataclass
class Prepared:
    req: IngestRequest
    content_hash: str
    path: str
    fmt: str
    title: str
    chunks: list[Chunk]
    contexts: list[str]
    timings: dict[str, float] = field(default_factory=dict)
    acl_outcome: str | None = None  # set once stored: 'updated', 'ignored_stale' or None

    @property
    def texts(self) -> list[str]:
        return [embedding_text(c, ch.content) for c, ch in zip(self.contexts, self.chunks, strict=True)]


def prepare(req: IngestRequest, embed_model: str) -> Prepared | IngestResult:
    """Load, parse, chunk and contextualize one document; an unchanged document is skipped here.

    Raises :class:`DocumentFailed` with the stage and a readable message for a bad document.
    """
    settings = get_settings()
    timings: dict[str, float] = {}
    stage = "load"
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        timings[name] = elapsed_ms(t, now)
        t = now

    try:
        loaded = load(req)
        content_hash = hashlib.sha256(loaded.data).hexdigest()
        with db.connection() as conn:
            state = store.current_state(conn, req.tenant, req.doc_id)
            identity.check(conn, req)  # before the unchanged shortcut: another source's copy is not ours
        if store.is_unchanged(state, content_hash, embed_model) and state["version"] <= req.version:
            return IngestResult(tenant=req.tenant, doc_id=req.doc_id, status="skipped_unchanged")
        lap("load")
        stage = "parse"
        parsed = parse_bytes(loaded.data, loaded.fmt, default_title=loaded.title)
        lap("parse")
        stage = "chunk"
        chunks = chunk_blocks(
            parsed.blocks,
            settings.chunk.max_chars,
            settings.chunk.overlap_ratio,
            settings.chunk.hard_max_chars,
        )
        lap("chunk")
        stage = "contextualize"
        contexts = contextualize(parsed.title, chunks, parsed.text)
        lap("contextualize")
    except DOCUMENT_ERRORS as exc:
        raise DocumentFailed(stage, _readable(exc)) from exc
    return Prepared(req, content_hash, loaded.path, loaded.fmt, parsed.title, chunks, contexts, timings)


def _readable(exc: BaseException) -> str:
    if isinstance(exc, ParseError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}" + (f": {exc.filename}" if exc.filename else "")
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def store_prepared(conn: psycopg.Connection, p: Prepared, vectors: list, embed_model: str) -> str:
    """One transaction per document, under its advisory lock; ``stored`` or ``stale``."""
    if conn.info.transaction_status != TransactionStatus.IDLE:
        # inside an open transaction this would be a savepoint: documents would commit together and
        # hold each other's locks until the last one is stored
        raise RuntimeError("store_prepared needs an idle connection: each document is its own transaction")
    req = p.req
    rows = [
        store.StoredChunk(
            ch.chunk_no, ch.content, ctx, " › ".join(ch.heading_path), ch.page, vec, {"kind": ch.kind}
        )
        for ch, ctx, vec in zip(p.chunks, p.contexts, vectors, strict=True)
    ]
    record = store.DocumentRecord(
        tenant=req.tenant,
        doc_id=req.doc_id,
        source_uri=req.uri,
        path=p.path,
        title=p.title,
        content_hash=p.content_hash,
        version=req.version,
        acl=list(req.acl),
        layer=req.layer,
        metadata={**req.metadata, "format": p.fmt},
        acl_seq=req.acl_seq,
    )
    with conn.transaction():
        store.lock_document(conn, req.tenant, req.doc_id)
        identity.check(conn, req)  # again under the lock: another source may have stored it meanwhile
        outcome = store.upsert_document(conn, record, rows, embed_model)
    p.acl_outcome = record.acl_outcome
    return outcome


def record_failure(req: IngestRequest, stage: str, message: str) -> IngestResult:
    with db.connection() as conn:
        store.mark_failed(conn, req.tenant, req.doc_id, req.uri, stage, message, req.job_id)
    return IngestResult(tenant=req.tenant, doc_id=req.doc_id, status="failed", error=message)


def ingest_batch(reqs: list[IngestRequest]) -> list[IngestResult]:
    """Ingest several documents with shared embedding batches; one result per request, in order.

    A provider outage (:class:`ragline.shared.providers.ProviderError`, infrastructure errors) propagates:
    the task retries the batch, and documents already stored are skipped as unchanged. When the
    task's soft time limit strikes, documents already stored keep their result and only the rest
    are recorded as failed.
    """
    results: list[IngestResult | None] = [None] * len(reqs)
    try:
        _ingest_into(results, reqs)
    except SoftTimeLimitExceeded:
        for i, req in enumerate(reqs):
            if results[i] is None:
                results[i] = record_failure(
                    req,
                    "timeout",
                    "timeout: task time limit exceeded before this "
                    "document was stored (try a smaller RAGLINE_INGEST_BATCH_DOCS)",
                )
    return results  # type: ignore[return-value]


def resolve_acl_clocks(reqs: list[IngestRequest]) -> None:
    """A job's requests carry the permission clock of the job's creation (when ragline accepted
    them), so a permission change applied while they waited in the queue wins over their ACL."""
    ids = {r.job_id for r in reqs if r.job_id and r.acl_seq is None}
    if not ids:
        return
    with db.connection() as conn:
        clocks = jobs.acl_clocks(conn, ids)
    for r in reqs:
        if r.acl_seq is None and r.job_id in clocks:
            r.acl_seq = clocks[r.job_id]


def _apply_unchanged_acls(results: list[IngestResult | None], reqs: list[IngestRequest]) -> None:
    """Unchanged documents: the ACL their request asks for, through the ACL-only path."""
    skipped = [
        (i, r)
        for i, r in enumerate(reqs)
        if results[i] is not None and results[i].status == "skipped_unchanged"
    ]
    if not skipped:
        return
    with db.connection() as conn:
        outcomes = apply_ingest_acls(conn, [(r.tenant, r.doc_id, list(r.acl), r.acl_seq) for _, r in skipped])
    for i, r in skipped:
        results[i].acl_outcome = outcomes.get((r.tenant, r.doc_id))  # type: ignore[union-attr]


def _ingest_into(results: list[IngestResult | None], reqs: list[IngestRequest]) -> None:
    embedder = get_embedder()
    resolve_acl_clocks(reqs)
    ready: list[tuple[int, Prepared]] = []
    for i, req in enumerate(reqs):
        try:
            out = prepare(req, embedder.model)
        except DocumentFailed as exc:
            results[i] = record_failure(req, exc.stage, str(exc))
            continue
        except identity.IdentityConflict as exc:
            results[i] = identity.record_refusal(req, str(exc))
            continue
        if isinstance(out, IngestResult):
            results[i] = out
        else:
            ready.append((i, out))
    _apply_unchanged_acls(results, reqs)
    if not ready:
        return
    texts = [p.texts for _, p in ready]
    # one pooled connection for the cache and every document's own transaction (not one checkout each)
    with db.connection() as conn:
        t = time.perf_counter()
        emb = embed_with_cache(
            conn, embedder, [t for doc in texts for t in doc], get_settings().embed.batch_size
        )
        embed_ms = elapsed_ms(t)
        conn.commit()  # idle again: each document below gets a transaction of its own, not a savepoint
        offset = 0
        claimed: set[bytes] = set()
        for (i, p), doc_texts in zip(ready, texts, strict=True):
            vectors = emb.vectors[offset : offset + len(doc_texts)]
            offset += len(doc_texts)
            embedded = emb.count_sent(doc_texts, claimed)
            t = time.perf_counter()
            try:
                outcome = store_prepared(conn, p, vectors, embedder.model)
            except (*DOCUMENT_ERRORS, psycopg.DataError) as exc:  # e.g. a value Postgres refuses
                results[i] = record_failure(p.req, "store", f"store: {_readable(exc)}")
                continue
            except identity.IdentityConflict as exc:
                results[i] = identity.record_refusal(p.req, str(exc))
                continue
            results[i] = IngestResult(
                tenant=p.req.tenant,
                doc_id=p.req.doc_id,
                status=outcome,
                chunks=len(p.chunks),
                embedded=embedded,
                timings_ms={**p.timings, "embed": embed_ms, "store": elapsed_ms(t)},
                acl_outcome=p.acl_outcome,
            )
            if p.acl_outcome:
                ACL_CHANGES.labels("ingest", "applied" if p.acl_outcome == "updated" else "stale").inc()


def ingest_document(req: IngestRequest) -> IngestResult:
    return ingest_batch([req])[0]
