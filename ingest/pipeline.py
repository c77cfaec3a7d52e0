"""Documents through every stage: load → parse → chunk → contextualize → embed → store.

:func:`ingest_batch` prepares each document on its own (a bad one fails alone), embeds the chunks
of all prepared documents together (so embedding batches fill up to 128 texts across documents),
and stores the documents whose vectors are in together, one transaction and a fixed number of
statements for all of them, each document's outcome decided as if it were stored alone. :func:`ingest_document` is a batch of one.
What differs between prose and source code (chunking, contexts, layers, a source file's symbol
records) is the document kind's (``ingest/kinds.py``); code chunks carry line spans and identifier
terms for the code lexical search, and symbol records are rows of the same document, so they live
and die with it.
A document whose content did not change, or whose new version failed to load or parse (its stored
version keeps serving), still gets the ACL its request asks for, through the ACL-only path
(``acl_sync.apply_ingest_acls``, no embedding).
Documents that :func:`defers_vectors` picks (source code by default) are stored at once with the
vectors the embedding cache already holds and NULL for the rest: searchable lexically and
structurally in minutes, not after hours of CPU embedding; ``ingest/reembed.py`` fills the rest.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import psycopg
from celery.exceptions import SoftTimeLimitExceeded
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow

from ragline.ingest import exclusions, identity, store
from ragline.ingest.acl_sync import apply_ingest_acls
from ragline.ingest.chunk import Chunk
from ragline.ingest.contextualize import embedding_text
from ragline.ingest.embed import cached_vectors, count_sent, embed_with_cache, text_key
from ragline.ingest.kinds import kind_of
from ragline.ingest.layers import LayerRules
from ragline.ingest.load import Loaded, load
from ragline.ingest.parse import ParsedDocument, ParseError, front_matter, parse_bytes
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk import formats
from ragline.shared.sdk.contracts import IngestRequest, IngestResult
from ragline.shared.worker import db, jobs, replicas
from ragline.shared.worker.identifiers import code_tsvector
from ragline.shared.worker.metrics import ACL_CHANGES, observe_stage
from ragline.shared.worker.pending_vectors import VectorBudget
from ragline.shared.worker.providers import get_embedder
from ragline.shared.worker.time_limit import TimeLimitExceeded, time_limit
from ragline.shared.worker.timing import elapsed_ms

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
    layer: str = "docs"
    metadata: dict = field(default_factory=dict)  # the document's own: front matter, language
    rel_path: str = ""  # the path inside its source (a repository's file path), for code terms
    #: per chunk, a layer other than the document's (the symbol records), else None
    chunk_layers: list[str | None] = field(default_factory=list)
    code: bool = False  # parsed as source code (CodeDocument)

    @property
    def layers(self) -> list[str]:
        """Per chunk, the layer its row is stored in."""
        return [c or self.layer for c in self.chunk_layers or [None] * len(self.chunks)]

    @property
    def texts(self) -> list[str]:
        return [embedding_text(c, ch.content) for c, ch in zip(self.contexts, self.chunks, strict=True)]

    def vector_texts(self, budget: VectorBudget) -> list[str | None]:
        """Per row, the text its vector is made of, or None for a row the embedding budget keeps
        lexical (never embedded, never looked up in the cache)."""
        return [t if keep else None for t, keep in zip(self.texts, budget.mask(self.layers), strict=True)]

    def awaiting(self, vectors: list[np.ndarray | None], budget: VectorBudget) -> int:
        """How many of its rows stored with ``vectors`` wait for the fill (not the lexical-only ones)."""
        return sum(v is None and keep for v, keep in zip(vectors, budget.mask(self.layers), strict=True))


def prepare(req: IngestRequest, embed_model: str, state: dict | None) -> Prepared | IngestResult:
    """Load, parse, chunk and contextualize one document; an unchanged document is skipped here.
    ``state`` is its stored row (``store.current_states``, read for the whole batch at once) or None.
    What differs between prose and code is the document kind's (``ingest/kinds.py``), chosen once
    from the parsed document.

    Raises :class:`DocumentFailed` with the stage and a readable message for a bad document.
    """
    settings = get_settings()
    timings: dict[str, float] = {}
    # the stage histogram gets the unrounded seconds: a stage under 5 µs (the contexts of a short
    # source file) rounds to 0.0 ms in the result's timings and would add nothing to its sum
    seconds: dict[str, float] = {}
    stage = "load"
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        seconds[name] = now - t
        timings[name] = elapsed_ms(t, now)
        t = now

    try:
        loaded = load(req)
        content_hash = hashlib.sha256(loaded.data).hexdigest()
        identity.check_owner(state, req)  # before the unchanged shortcut: another source's copy is not ours
        if (
            store.is_unchanged(state, content_hash, embed_model, prepared_with(loaded.fmt))
            and state["version"] <= req.version
        ):
            return IngestResult(tenant=req.tenant, doc_id=req.doc_id, status="skipped_unchanged")
        lap("load")
        stage = "parse"
        # the document's own bytes decide how long parsing and chunking take (a parser quadratic on
        # some input): past the limit this document fails, named, and the batch goes on
        with time_limit(settings.ingest.parse_timeout_s):
            parsed = parse_bytes(loaded.data, loaded.fmt, default_title=loaded.title)
            meta = _front_matter(loaded, parsed)
            lap("parse")
            kind = kind_of(parsed)
            stage = "chunk"
            chunks = kind.chunks(settings)
            meta.update(kind.metadata())
        lap("chunk")
        stage = "contextualize"
        contexts = kind.contexts(chunks, req)
        lap("contextualize")
    except DOCUMENT_ERRORS as exc:
        raise DocumentFailed(stage, _readable(exc)) from exc
    except TimeLimitExceeded:
        limit = settings.ingest.parse_timeout_s
        raise DocumentFailed(
            stage, f"{stage} time limit: stopped after {limit:g} s (RAGLINE_INGEST_PARSE_TIMEOUT_S)"
        ) from None
    rel = relative_path(req, loaded.path)
    layer, extra_layer = kind.layers(rel, req.layer, LayerRules.from_settings(settings.code))
    for name, s in seconds.items():
        observe_stage(name, s, {layer: 1})
    chunk_layers: list[str | None] = [None] * len(chunks)
    if extra_layer is not None:
        t = time.perf_counter()
        try:
            extra = kind.extra_records(len(chunks), settings)
        except DOCUMENT_ERRORS as exc:
            raise DocumentFailed(kind.extra_stage, _readable(exc)) from exc
        cut = time.perf_counter()
        chunks = [*chunks, *extra]
        contexts = [*contexts, *kind.contexts(extra, req)]
        chunk_layers += [extra_layer] * len(extra)
        # the extra rows' own stages: cut from the parsed document, then given their context
        observe_stage("chunk", cut - t, {extra_layer: 1})
        observe_stage("contextualize", time.perf_counter() - cut, {extra_layer: 1})
    return Prepared(
        req,
        content_hash,
        loaded.path,
        loaded.fmt,
        parsed.title,
        kind.annotate(chunks, meta),
        contexts,
        timings,
        layer=layer,
        metadata=meta,
        rel_path=rel,
        chunk_layers=chunk_layers,
        code=kind.code,
    )


#: raised when what a source file becomes (its chunks and symbol records) changes for the same bytes
CODE_VERSION = 1


def prepared_with(fmt: str) -> str:
    """How a document of ``fmt`` is prepared: the format and its version (``shared/sdk/formats.py``;
    :data:`CODE_VERSION` for source code). Stored with the document, and compared by the unchanged
    check, so a parser that changes re-prepares the documents it reads on their next ingest instead
    of leaving them as the old parser cut them."""
    declared = formats.get(fmt)
    return f"{fmt}/{declared.version if declared else CODE_VERSION}"


def _front_matter(loaded: Loaded, parsed: ParsedDocument) -> dict:
    """The document's own metadata from a Markdown document's front matter; its ``title`` names the
    document when the parser found none but the loader's."""
    fm = front_matter(loaded.data) if loaded.fmt == "md" else {}
    if not fm:
        return {}
    if isinstance(fm.get("title"), str) and fm["title"].strip() and parsed.title == loaded.title:
        parsed.title = fm["title"].strip()
    return {"front_matter": fm}


def defers_vectors(policy: str, code: bool, repository: bool = False) -> bool:
    """Whether a document is stored before its rows are embedded (``RAGLINE_INGEST_DEFER_VECTORS``).

    ``repositories`` (the default) defers a repository's every file, its docs too: a repository is
    indexed as one snapshot, and embedding its reST and Markdown before they are stored kept a
    large one (astropy: 3,700 docs rows) from being searchable for a quarter of an hour. Documents
    that are not a repository's are embedded before they are stored, so a document corpus answers
    with hybrid retrieval from its first question."""
    if policy == "repositories":
        return code or repository
    return policy == "all" or (policy == "code" and code)


def relative_path(req: IngestRequest, path: str) -> str:
    """The document's path inside its source: a repository's file path (``repo_path``), or the
    logical path without its ``<source>/`` prefix, so a source named ``tests`` is not a test."""
    if req.repository_path is not None:
        return req.repository_path
    source = req.metadata.get("source")
    return path[len(source) + 1 :] if isinstance(source, str) and path.startswith(source + "/") else path


def _readable(exc: BaseException) -> str:
    if isinstance(exc, ParseError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}" + (f": {exc.filename}" if exc.filename else "")
    return f"{type(exc).__name__}: {str(exc)[:300]}"


#: a document's outcome in :func:`store_prepared`: ``stored``, ``stale``, ``excluded`` or the refusal
StoreOutcome = str | identity.IdentityConflict


def store_prepared(
    conn: psycopg.Connection[DictRow], docs: list[tuple[Prepared, list]], embed_model: str
) -> list[StoreOutcome]:
    """Several prepared documents with their vectors in one transaction, under their advisory locks;
    per document its outcome, decided as if it were stored alone (a doc id at most once)."""
    if conn.info.transaction_status != TransactionStatus.IDLE:
        # inside an open transaction this would be a savepoint: the documents would commit with the
        # caller's work and hold their locks until it ends
        raise RuntimeError("store_prepared needs an idle connection: the documents are their own transaction")
    records = [(p, _record(p), _rows(p, vectors)) for p, vectors in docs]
    keys = [(p.req.tenant, p.req.doc_id) for p, _ in docs]
    outcomes: list[StoreOutcome] = ["excluded"] * len(docs)
    with conn.transaction():
        store.lock_documents(conn, keys)
        kept_out = exclusions.excluded_pairs(  # excluded while they were embedded; by content too
            conn, keys, [p.req.uri for p, _ in docs], [p.content_hash for p, _ in docs]
        )
        states = store.locked_states(conn, [k for k in keys if k not in kept_out])
        items, where = [], []
        for j, (key, (p, record, rows)) in enumerate(zip(keys, records, strict=True)):
            if key in kept_out:
                continue
            try:  # again under the lock: another source may have stored it meanwhile
                identity.check_owner(states[key], p.req)
            except identity.IdentityConflict as exc:
                outcomes[j] = exc
                continue
            items.append((record, rows))
            where.append(j)
        for j, outcome in zip(where, store.upsert_documents(conn, items, embed_model, states), strict=True):
            outcomes[j] = outcome
    for p, record, _ in records:
        p.acl_outcome = record.acl_outcome
    return outcomes


def _rows(p: Prepared, vectors: list) -> list[store.StoredChunk]:
    return [
        store.StoredChunk(
            ch.chunk_no,
            ch.content,
            ctx,
            " › ".join(ch.heading_path),
            ch.page,
            vec,
            {"kind": ch.kind, **ch.metadata},
            code_tsvector(ch.content, ch.metadata["symbols"], p.rel_path)
            if "symbols" in ch.metadata
            else None,
            layer=chunk_layer,
        )
        for ch, ctx, vec, chunk_layer in zip(
            p.chunks, p.contexts, vectors, p.chunk_layers or [None] * len(p.chunks), strict=True
        )
    ]


def _record(p: Prepared) -> store.DocumentRecord:
    req = p.req
    return store.DocumentRecord(
        tenant=req.tenant,
        doc_id=req.doc_id,
        source_uri=req.uri,
        path=p.path,
        title=p.title,
        content_hash=p.content_hash,
        version=req.version,
        acl=list(req.acl),
        layer=p.layer,
        # what the unchanged check compares comes last: no front matter or producer key overrides it
        metadata={**req.metadata, "format": p.fmt, **p.metadata, "prepared_with": prepared_with(p.fmt)},
        acl_seq=req.acl_seq,
    )


def excluded_result(req: IngestRequest) -> IngestResult:
    """A document kept out of the index (``ingest/exclusions.py``): nothing stored, nothing failed."""
    return IngestResult(
        tenant=req.tenant, doc_id=req.doc_id, status="excluded", error=exclusions.EXCLUDED_ERROR
    )


def record_failure(req: IngestRequest, stage: str, message: str) -> IngestResult:
    with db.connection() as conn:
        store.mark_failed(conn, req.tenant, req.doc_id, req.uri, stage, message, req.job_id)
    return IngestResult(tenant=req.tenant, doc_id=req.doc_id, status="failed", error=message)


#: ``on_result(index, result)``: a document of the batch got its final result (the job's progress)
OnResult = Callable[[int, IngestResult], None]


def ingest_batch(
    reqs: list[IngestRequest], on_result: OnResult | None = None, on_alive: Callable[[], None] | None = None
) -> list[IngestResult]:
    """Ingest several documents with shared embedding batches; one result per request, in order.

    Each document's result is handed to ``on_result`` as soon as it is final (failed, unchanged,
    stored), not when the whole batch is: a document is stored once the embedding requests that hold
    its texts have answered, while later ones are still to come. ``on_alive`` is called after each
    document is prepared and after each embedding request (a heartbeat while a batch embeds).

    A provider outage (:class:`ragline.shared.worker.providers.ProviderError`, infrastructure errors) propagates:
    the task retries the batch, and documents already stored are skipped as unchanged. When the
    task's soft time limit strikes, documents already stored keep their result and only the rest
    are recorded as failed.
    """
    results: list[IngestResult | None] = [None] * len(reqs)

    def settle(i: int, result: IngestResult) -> None:
        results[i] = result
        if on_result is not None:
            on_result(i, result)

    try:
        _ingest_into(results, reqs, settle, on_alive or (lambda: None))
    except SoftTimeLimitExceeded:
        for i, req in enumerate(reqs):
            if results[i] is None:
                settle(
                    i,
                    record_failure(
                        req,
                        "timeout",
                        "timeout: task time limit exceeded before this "
                        "document was stored (try a smaller RAGLINE_INGEST_BATCH_DOCS)",
                    ),
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


def _apply_kept_acls(
    results: list[IngestResult | None], reqs: list[IngestRequest], failed: set[int] = frozenset()
) -> None:
    """Documents whose stored version stays (unchanged, or the new one failed to load or parse, at
    ``failed``): the ACL their request asks for, through the ACL-only path. A failed re-ingest with
    a narrower ACL must not leave the version that keeps serving readable by the old groups."""
    kept = [
        (i, r)
        for i, r in enumerate(reqs)
        if results[i] is not None and (results[i].status == "skipped_unchanged" or i in failed)
    ]
    if not kept:
        return
    with db.connection() as conn:
        outcomes = apply_ingest_acls(conn, [(r.tenant, r.doc_id, list(r.acl), r.acl_seq) for _, r in kept])
        if "updated" in outcomes.values():  # done once the query pool's replicas serve the new ACL
            replicas.wait_for_replay(conn)
    for i, r in kept:
        results[i].acl_outcome = outcomes.get((r.tenant, r.doc_id))  # type: ignore[union-attr]


def _prepare_named(
    i: int, req: IngestRequest, embed_model: str, state: dict | None, settle: OnResult
) -> Prepared | IngestResult:
    """:func:`prepare`; when the task's soft time limit strikes during it (a stage outside the parse
    limit, or one stuck in a C call), this document is recorded as the one it struck on."""
    try:
        return prepare(req, embed_model, state)
    except SoftTimeLimitExceeded:
        message = "timeout: the task's time limit struck while preparing this document"
        settle(i, record_failure(req, "timeout", message))
        raise


def _ingest_into(
    results: list[IngestResult | None],
    reqs: list[IngestRequest],
    settle: OnResult,
    alive: Callable[[], None],
) -> None:
    embedder = get_embedder()
    resolve_acl_clocks(reqs)
    keys = [(r.tenant, r.doc_id) for r in reqs]
    with db.connection() as conn:
        kept_out = exclusions.excluded_pairs(conn, keys, [r.uri for r in reqs])
        states = store.current_states(conn, keys)
    ready: list[tuple[int, Prepared]] = []
    failed: set[int] = set()
    for i, req in enumerate(reqs):
        if (req.tenant, req.doc_id) in kept_out:
            settle(i, excluded_result(req))
            continue
        try:
            out = _prepare_named(i, req, embedder.model, states.get((req.tenant, req.doc_id)), settle)
        except DocumentFailed as exc:
            results[i] = record_failure(req, exc.stage, str(exc))  # settled below, with its ACL
            failed.add(i)
            continue
        except identity.IdentityConflict as exc:
            settle(i, identity.record_refusal(req, str(exc)))
            continue
        finally:
            alive()
        if isinstance(out, IngestResult):
            results[i] = out  # unchanged: settled below, with its ACL
        else:
            ready.append((i, out))
    _apply_kept_acls(results, reqs, failed)
    for i, result in enumerate(results):  # the kept versions' results, now with their ACL outcome
        if result is not None and (result.status == "skipped_unchanged" or i in failed):
            settle(i, result)
    if not ready:
        return
    policy = get_settings().ingest.defer_vectors
    defer = {i for i, p in ready if defers_vectors(policy, p.code, p.req.repository_path is not None)}
    later = [(i, p) for i, p in ready if i in defer]
    ready = [(i, p) for i, p in ready if i not in defer]
    # one pooled connection for the cache and every document's own transaction (not one checkout each)
    with db.connection() as conn:
        t0 = time.perf_counter()
        if later:  # stored first, with the vectors the cache holds: searchable before any embedding
            _store_before_vectors(conn, later, embedder.model, t0, settle)
            alive()
        if not ready:
            return
        budget = VectorBudget.from_settings()
        texts = [p.vector_texts(budget) for _, p in ready]
        waiting = [
            (i, p, [None if t is None else text_key(t) for t in doc])
            for (i, p), doc in zip(ready, texts, strict=True)
        ]
        claimed: set[bytes] = set()
        storing = [0.0]  # seconds spent storing between embedding requests: not the embed stage's

        def store_embedded(found: dict[bytes, np.ndarray], sent: set[bytes]) -> None:
            """Store (and settle) every waiting document whose vectors are all known by now."""
            t = time.perf_counter()
            embed_ms = elapsed_ms(t0)
            complete = [w for w in waiting if all(k is None or k in found for k in w[2])]
            for entry in complete:
                waiting.remove(entry)
            group = [(i, p, [None if k is None else found[k] for k in keys]) for i, p, keys in complete]
            for i, result in _store_group(conn, group, embedder.model, embed_ms, sent, claimed):
                settle(i, result)
            storing[0] += time.perf_counter() - t
            alive()

        batch_size = get_settings().embed.batch_size
        t = time.perf_counter()
        wanted = [text for doc in texts for text in doc if text is not None]
        emb = embed_with_cache(conn, embedder, wanted, batch_size, store_embedded)
        observe_stage(
            "embed", time.perf_counter() - t - storing[0], sent_by_layer([p for _, p in ready], emb.sent)
        )


def sent_by_layer(docs: list[Prepared], sent: set[bytes]) -> dict[str, int]:
    """How many of the texts sent to the embedder each layer's rows account for, a text counted once
    (pure); every text of the documents when none was sent (the time was the cache's lookup)."""
    out: dict[str, int] = {}
    seen: set[bytes] = set()
    for p in docs:
        for text, layer in zip(p.texts, p.layers, strict=True):
            key = text_key(text)
            if key not in seen and (key in sent or not sent):
                seen.add(key)
                out[layer] = out.get(layer, 0) + 1
    return out


def _store_before_vectors(
    conn: psycopg.Connection[DictRow],
    docs: list[tuple[int, Prepared]],
    model: str,
    t0: float,
    settle: Callable[[int, IngestResult], None],
) -> None:
    """Documents stored with the vectors the embedding cache holds and NULL for the rest, which the
    fill task (``ingest/reembed.py``) embeds afterwards; rows the embedding budget keeps lexical get
    NULL and no fill."""
    budget = VectorBudget.from_settings()
    texts = [p.vector_texts(budget) for _, p in docs]
    from_cache = iter(cached_vectors(conn, model, [t for doc in texts for t in doc if t is not None]))
    conn.commit()  # idle again: the documents get a transaction of their own, not a savepoint
    group = [
        (i, p, [None if t is None else next(from_cache) for t in doc])
        for (i, p), doc in zip(docs, texts, strict=True)
    ]
    for i, result in _store_group(conn, group, model, elapsed_ms(t0), set(), set()):
        settle(i, result)


def rounds(keys: list[store.Key]) -> list[list[int]]:
    """The positions of ``keys`` in rounds where each key appears once: the n-th request of a
    document goes in round n, so two versions of one document in a batch are stored one after the
    other, in the order they came, as they would be alone (pure)."""
    seen: dict[store.Key, int] = {}
    out: list[list[int]] = []
    for j, key in enumerate(keys):
        n = seen.get(key, 0)
        seen[key] = n + 1
        if n == len(out):
            out.append([])
        out[n].append(j)
    return out


def _store_group(
    conn: psycopg.Connection[DictRow],
    group: list[tuple[int, Prepared, list[np.ndarray | None]]],
    model: str,
    embed_ms: float,
    sent: set[bytes],
    claimed: set[bytes],
) -> list[tuple[int, IngestResult]]:
    """Prepared documents with their vectors (None: stored before its vector), a transaction per
    round (:func:`rounds`); their results, in order. A round that Postgres refuses (a value it will
    not store) is stored again one document at a time, so only the bad document fails."""
    embedded = [count_sent(p.texts, sent, claimed) for _, p, _ in group]
    results: list[tuple[int, IngestResult]] = []
    for positions in rounds([(p.req.tenant, p.req.doc_id) for _, p, _ in group]):
        members = [group[j] for j in positions]
        t = time.perf_counter()
        try:
            outcomes: list[StoreOutcome | DocumentFailed] = store_prepared(
                conn, [(p, vectors) for _, p, vectors in members], model
            )
        except (*DOCUMENT_ERRORS, psycopg.DataError) as exc:  # e.g. a value Postgres refuses
            if len(members) > 1:
                outcomes = [_store_alone(conn, p, vectors, model) for _, p, vectors in members]
            else:
                outcomes = [DocumentFailed("store", _readable(exc))]
        stored = time.perf_counter()
        store_ms = elapsed_ms(t, stored)
        layers: dict[str, int] = {}
        for _, p, _ in members:
            for layer in p.layers:
                layers[layer] = layers.get(layer, 0) + 1
        observe_stage("store", stored - t, layers or {members[0][1].layer: 1})
        rows = sum(len(p.chunks) for _, p, _ in members) or 1
        for j, (i, p, vectors), outcome in zip(positions, members, outcomes, strict=True):
            # the round's time, shared by its documents in proportion to their rows
            timings = {**p.timings, "embed": embed_ms, "store": store_ms * len(p.chunks) / rows}
            results.append((i, _result(p, vectors, outcome, embedded[j], timings)))
    return results


def _store_alone(
    conn: psycopg.Connection[DictRow], p: Prepared, vectors: list, model: str
) -> StoreOutcome | DocumentFailed:
    try:
        return store_prepared(conn, [(p, vectors)], model)[0]
    except (*DOCUMENT_ERRORS, psycopg.DataError) as exc:
        return DocumentFailed("store", _readable(exc))


def _result(
    p: Prepared,
    vectors: list[np.ndarray | None],
    outcome: StoreOutcome | DocumentFailed,
    embedded: int,
    timings: dict[str, float],
) -> IngestResult:
    """A stored (or refused, excluded, stale, failed) document's result."""
    if isinstance(outcome, DocumentFailed):
        return record_failure(p.req, outcome.stage, str(outcome))
    if isinstance(outcome, identity.IdentityConflict):
        return identity.record_refusal(p.req, str(outcome))
    if outcome == "excluded":
        return excluded_result(p.req)
    if p.acl_outcome:
        ACL_CHANGES.labels("ingest", "applied" if p.acl_outcome == "updated" else "stale").inc()
    return IngestResult(
        tenant=p.req.tenant,
        doc_id=p.req.doc_id,
        status=outcome,
        chunks=len(p.chunks),
        embedded=embedded,
        awaiting_vectors=p.awaiting(vectors, VectorBudget.from_settings()) if outcome == "stored" else 0,
        timings_ms=timings,
        acl_outcome=p.acl_outcome,
    )


def ingest_document(req: IngestRequest) -> IngestResult:
    return ingest_batch([req])[0]
