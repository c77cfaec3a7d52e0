"""Hybrid retrieval: pgvector HNSW + Postgres full text, fused by the fusion policy; exact lookup.

The two lists become one through :class:`ragline.query.retrieval.fusion.FusionPolicy`: by default a convex
combination of normalised scores for prose, weighted RRF for code retrieval (:func:`fusion_policy`).

Tenant and ACL filters live in SQL ``WHERE`` of every statement, beside the contract filters of
:mod:`ragline.query.retrieval.filters`; all statements of one search run in one read-only transaction that
first sets, for that transaction only and in one round trip (:func:`set_transaction_params`):

* ``ragline.tenant`` and ``ragline.groups``, which the row-level security policies of migration
  0007 read: on the query pool's role a statement that forgot its tenant or ACL filter still sees
  only the caller's rows (the ``WHERE`` filters stay, because they are what the indexes use);
* ``statement_timeout``: ``RAGLINE_RETRIEVAL_STATEMENT_TIMEOUT_MS``, or the time left of the
  question when that is shorter; a cancelled statement becomes :class:`RetrievalTimeout` or
  :class:`QuestionDeadlineExceeded`, never a generic database error;
* for a vector search, the HNSW search parameters and two counts the query role reads under
  row-level security too: the tenant's chunks (migration 0009) and the chunks the caller's groups
  admit (migration 0017). :func:`vector_path` picks from them how the vector list is found: an
  exact sort of the tenant's rows, an exact sort of the rows of the documents the caller sees, or
  the HNSW index with iterative scans.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Literal

import numpy as np
import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow

from ragline.query import deadline

from ragline.query.retrieval import feedback, structure, terms
from ragline.query.deadline import QuestionDeadlineExceeded, RetrievalTimeout
from ragline.query.retrieval.filters import clean_paths, compile_filters, has_terms, lexical_query
from ragline.query.retrieval.fusion import FusionPolicy, hybrid_inputs
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import Hit, SearchRequest, SearchResponse
from ragline.shared.worker import pending_vectors
from ragline.shared.worker.identifiers import code_terms, code_tsquery, or_tsquery, whole_tsquery
from ragline.shared.worker.timing import elapsed_ms

_FIELDS = "c.doc_id, c.chunk_no, c.path, c.layer, c.heading_path, c.content, c.context, c.page, c.metadata"
_SCOPE = "c.tenant = %(tenant)s AND c.acl && %(groups)s::text[]"

# relaxed_order may return rows slightly out of order: re-sort the materialised candidates;
# {order} is the VECTOR_ORDER expression of the configured HNSW index, and the reported distance
# is always the full-precision one, whichever index found the row
VECTOR_SQL = """
WITH candidates AS MATERIALIZED (
    SELECT {fields}{columns}, c.embedding <=> %(qvec)s AS distance
    FROM chunks c
    WHERE {scope} AND c.embedding IS NOT NULL{where}
    ORDER BY {order}
    LIMIT %(n)s
)
SELECT * FROM candidates ORDER BY distance, doc_id, chunk_no
"""

# the exact path over the tenant (:func:`vector_path` "tenant"): the tenant's rows sorted by {order} = EXACT_ORDER, which no
# index serves; only ids and distances go through the sort, the n kept rows are read after
EXACT_VECTOR_SQL = """
WITH best AS MATERIALIZED (
    SELECT c.id, c.embedding <=> %(qvec)s AS distance
    FROM chunks c
    WHERE {scope} AND c.embedding IS NOT NULL{where}
    ORDER BY {order}
    LIMIT %(n)s
)
SELECT {fields}{columns}, b.distance
FROM best b JOIN chunks c ON c.id = b.id
ORDER BY b.distance, c.doc_id, c.chunk_no
"""

# the exact path over the caller's documents (:func:`vector_path` "visible"): the documents the
# caller's groups admit come from the GIN index on ``documents.acl`` (migration 0018), their chunks
# from the (tenant, doc_id, chunk_no) index; a document's chunks carry its ACL (ingest and ACL sync
# write both in one transaction), and the chunks' own scope condition stays
VISIBLE_VECTOR_SQL = """
WITH best AS MATERIALIZED (
    SELECT c.id, c.embedding <=> %(qvec)s AS distance
    FROM chunks c
    WHERE {scope} AND c.embedding IS NOT NULL{where}
      AND c.doc_id IN (SELECT d.doc_id FROM documents d WHERE d.tenant = %(tenant)s AND d.acl && %(groups)s::text[])
    ORDER BY {order}
    LIMIT %(n)s
)
SELECT {fields}{columns}, b.distance
FROM best b JOIN chunks c ON c.id = b.id
ORDER BY b.distance, c.doc_id, c.chunk_no
"""

# rows of the caller's scope stored before their vectors (shared/worker/pending_vectors.py): the vector
# statements skip them, so a vector or hybrid search reports how many it could not see
UNEMBEDDED_SQL = (
    "SELECT count(*) AS n FROM chunks c WHERE {scope} AND " + pending_vectors.PREDICATE + "{where}"
)
# the scope's rows, read only while some await their vectors (the share the vector list could see)
SCOPE_ROWS_SQL = "SELECT count(*) AS n FROM chunks c WHERE {scope}{where}"

# numnode(q) = 0 when the query holds only stop words: no rows, no NOTICE, same round trip;
# {rank_fn} is ts_rank or ts_rank_cd (a settings Literal, never user text)
LEXICAL_SQL = """
SELECT {fields}{columns}, {rank_fn}(c.tsv, q, %(rank_norm)s) AS rank
FROM chunks c, websearch_to_tsquery('russian', %(query)s) q
WHERE numnode(q) > 0 AND {scope} AND c.tsv @@ q{where}
ORDER BY rank DESC, c.doc_id, c.chunk_no
LIMIT %(n)s
"""

# the lexical list of pseudo-relevance feedback (query/retrieval/feedback.py): the question's terms OR-ed with
# the expansion terms, which add their own rank at prf_term_weight
LEXICAL_PRF_SQL = """
SELECT {fields}{columns}, {rank_fn}(c.tsv, q, %(rank_norm)s) + %(prf_weight)s * {rank_fn}(c.tsv, e, %(rank_norm)s) AS rank
FROM chunks c, websearch_to_tsquery('russian', %(query)s) q, CAST(%(expansion)s AS tsquery) e
WHERE {scope} AND c.tsv @@ (q || e){where}
ORDER BY rank DESC, c.doc_id, c.chunk_no
LIMIT %(n)s
"""

# the first pass's best hits for pseudo-relevance feedback: their vectors and their lexemes with
# occurrence counts, and the question's own lexemes (same configuration as its tsquery)
FEEDBACK_SQL = """
SELECT c.doc_id, c.chunk_no, c.embedding::real[] AS embedding,
       ARRAY(SELECT t.lexeme FROM unnest(c.tsv) t) AS lexemes,
       ARRAY(SELECT coalesce(cardinality(t.positions), 1) FROM unnest(c.tsv) t) AS counts,
       tsvector_to_array(to_tsvector('russian', %(query)s)) AS query_lexemes
FROM chunks c
WHERE {scope} AND (c.doc_id, c.chunk_no) IN (SELECT * FROM unnest(%(doc_ids)s::text[], %(chunk_nos)s::int[])){where}
"""

# the scoring half of both BM25 statements: each ``tf`` row (id, config, lexeme, tf, dl) scored with
# its configuration's N and avgdl from lexical_stats and its lexeme's df among the matched rows;
# only the n best rows are read back from the table
_BM25_SCORED = """, stats AS (
    SELECT config, greatest(sum(docs), 1)::float8 AS n,
           greatest(sum(total_len), 1)::float8 / greatest(sum(docs), 1) AS avgdl
    FROM lexical_stats WHERE tenant = %(tenant)s GROUP BY config
), scored AS (
    SELECT x.id, sum(ln(1 + (greatest(s.n, x.df) - x.df + 0.5) / (x.df + 0.5))
                     * x.tf * (%(k1)s + 1) / (x.tf + %(k1)s * (1 - %(b)s + %(b)s * x.dl / s.avgdl))) AS rank
    FROM (SELECT tf.*, count(*) OVER (PARTITION BY tf.config, tf.lexeme) AS df FROM tf) x
    JOIN stats s ON s.config = x.config
    GROUP BY x.id
    ORDER BY rank DESC, x.id
    LIMIT %(n)s
)
SELECT {fields}{columns}, s.rank
FROM scored s JOIN chunks c ON c.id = s.id
ORDER BY s.rank DESC, c.doc_id, c.chunk_no
"""

# BM25 over the rows the GIN index matches (migration 0009 explains the statistics): tf is a lexeme's
# number of positions in the chunk's tsvector (content and context), the chunk's length its number of
# distinct lexemes; the question's lexemes come from the same configuration as its tsquery, and
# their document frequencies are counted over the matched rows, exact for the caller's scope
# because an OR-ed query matches every row holding any of them. Only the n best rows are read back
# from the table.
BM25_SQL = (
    """
WITH q AS MATERIALIZED (
    SELECT websearch_to_tsquery('russian', %(query)s) AS q,
           tsvector_to_array(to_tsvector('russian', %(query)s)) AS lexemes
), matched AS MATERIALIZED (
    SELECT c.id, c.tsv FROM chunks c, q
    WHERE numnode(q.q) > 0 AND {scope} AND c.tsv @@ q.q{where}
), tf AS MATERIALIZED (
    SELECT m.id, 'russian' AS config, t.lexeme, cardinality(t.positions)::float8 AS tf, length(m.tsv) AS dl
    FROM matched m, q, unnest(m.tsv) t
    WHERE t.lexeme = ANY(q.lexemes)
)"""
    + _BM25_SCORED
)

# a question naming identifiers also searches the code terms (``chunks.code_tsv``, migration 0008,
# NULL outside code): the rank adds the words' rank, the identifier terms' and the rank of the
# identifiers as written (a whole name outranks its parts). Each branch is driven by its own GIN
# index and keeps its best n by that sum; their union holds the best n overall (a row matching only
# the words is in the first branch's n, one matching the identifiers in the second's). One OR over
# both columns would scan the table.
CODE_LEXICAL_SQL = """
SELECT * FROM (
    (SELECT {fields}{columns}, {rank} AS rank
     FROM chunks c, websearch_to_tsquery('russian', %(query)s) q, CAST(%(code_query)s AS tsquery) cq,
          CAST(%(whole_query)s AS tsquery) cw
     WHERE numnode(q) > 0 AND {scope} AND c.tsv @@ q{where}
     ORDER BY rank DESC, c.doc_id, c.chunk_no LIMIT %(n)s)
    UNION
    (SELECT {fields}{columns}, {rank} AS rank
     FROM chunks c, websearch_to_tsquery('russian', %(query)s) q, CAST(%(code_query)s AS tsquery) cq,
          CAST(%(whole_query)s AS tsquery) cw
     WHERE {scope} AND c.code_tsv @@ cq{where}
     ORDER BY rank DESC, c.doc_id, c.chunk_no LIMIT %(n)s)
) AS hits
ORDER BY rank DESC, doc_id, chunk_no
LIMIT %(n)s
""".replace(
    "{rank}",
    "CASE WHEN numnode(q) > 0 THEN {rank_fn}(c.tsv, q, %(rank_norm)s) ELSE 0 END"
    " + coalesce({rank_fn}(c.code_tsv, cq, %(rank_norm)s), 0)"
    " + coalesce({rank_fn}(c.code_tsv, cw, %(rank_norm)s), 0)",
)

# BM25 for a question naming identifiers (lexical_rank = bm25): the words' BM25 over ``tsv`` (as
# BM25_SQL) plus the identifier terms' BM25 over ``code_tsv``, each with its own statistics (the
# 'russian' and 'code' rows of lexical_stats) and document frequencies counted over the rows either
# branch matches. A rare whole name (``register_hook``) outweighs its common parts by its idf, so
# no third rank for the names as written is needed. Identifier terms are counted BM25F-style with
# the weights ts_rank gives the tsvector's labels (A 1.0, B 0.4, C 0.2, D 0.1, relative to D): a
# term at weight A (a definition's name, the path) counts ten times an ordinary occurrence.
CODE_BM25_SQL = (
    """
WITH q AS MATERIALIZED (
    SELECT websearch_to_tsquery('russian', %(query)s) AS q,
           tsvector_to_array(to_tsvector('russian', %(query)s)) AS lexemes,
           CAST(%(code_query)s AS tsquery) AS cq,
           %(code_terms)s::text[] AS code_lexemes
), matched AS MATERIALIZED (
    SELECT c.id, c.tsv, c.code_tsv FROM chunks c
    WHERE c.id IN (
        SELECT c.id FROM chunks c, q WHERE numnode(q.q) > 0 AND {scope} AND c.tsv @@ q.q{where}
        UNION
        SELECT c.id FROM chunks c, q WHERE {scope} AND c.code_tsv @@ q.cq{where}
    )
), tf AS MATERIALIZED (
    SELECT m.id, 'russian' AS config, t.lexeme, cardinality(t.positions)::float8 AS tf, length(m.tsv) AS dl
    FROM matched m, q, unnest(m.tsv) t
    WHERE t.lexeme = ANY(q.lexemes)
    UNION ALL
    SELECT m.id, 'code', t.lexeme,
           (SELECT sum(CASE w WHEN 'A' THEN 10 WHEN 'B' THEN 4 WHEN 'C' THEN 2 ELSE 1 END)
            FROM unnest(t.weights) w)::float8,
           length(m.code_tsv)
    FROM matched m, q, unnest(m.code_tsv) t
    WHERE t.lexeme = ANY(q.code_lexemes)
)"""
    + _BM25_SCORED
)

# the statistics of :mod:`ragline.query.retrieval.terms` for a question's name-like words, in the caller's
# scope: per word and source (a stored path's first segment), the documents holding its lexeme,
# from at most %(cap)s of its chunks (a word in more chunks is counted on those: its shares are
# lower bounds, so a capped count can only keep a word, never drop one); and per source its
# documents. Only run for a question holding such a word.
TERM_STATS_SQL = """
WITH w AS (
    SELECT t.word, (tsvector_to_array(to_tsvector('russian', t.word)))[1] AS lexeme
    FROM unnest(%(words)s::text[]) AS t(word)
)
SELECT w.word, split_part(x.path, '/', 1) AS source, count(DISTINCT x.doc_id) AS docs
FROM w CROSS JOIN LATERAL (
    SELECT c.doc_id, c.path FROM chunks c
    WHERE w.lexeme IS NOT NULL AND {scope} AND c.tsv @@ quote_literal(w.lexeme)::tsquery
    LIMIT %(cap)s
) x
GROUP BY 1, 2
"""
SOURCE_SIZES_SQL = """
SELECT split_part(d.path, '/', 1) AS source, count(*) AS docs
FROM documents d
WHERE d.tenant = %(tenant)s AND d.acl && %(groups)s::text[] AND d.status = 'ready'
GROUP BY 1
"""
#: chunks per word :data:`TERM_STATS_SQL` reads at most
TERM_STATS_MAX_ROWS = 20000

# the chunks of the files a question names (``structure.named_file_patterns``: path suffixes), the
# nearest to the question first when there is a vector; the (tenant, file_name) index of migration
# 0010 finds the rows of the named file names, the suffix LIKE (case-insensitive, as the names are)
# keeps those of the named paths
NAMED_SQL = """
SELECT {fields}{columns}{distance}
FROM chunks c
WHERE {scope} AND c.file_name = ANY(%(names)s::text[]) AND lower(c.path) LIKE ANY(%(named)s::text[]){where}
ORDER BY {order}
LIMIT %(n)s
"""

EXACT_SQL = """
SELECT {fields}{columns}
FROM chunks c
WHERE {scope} AND (c.doc_id = ANY(%(doc_ids)s::text[]) OR c.path = ANY(%(paths)s::text[])){where}
ORDER BY array_position(%(doc_ids)s::text[], c.doc_id), array_position(%(paths)s::text[], c.path), c.chunk_no
LIMIT %(n)s
"""


def _metadata(value: object) -> dict:
    """Always a dict, whatever the driver hands back (jsonb dict, JSON text, NULL)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, (str, bytes)):
        try:
            decoded = json.loads(value)
        except ValueError:
            return {}
        return decoded if isinstance(decoded, dict) else {}
    return {}


def _hit(row: dict, **ranking: float | int) -> Hit:
    return Hit(
        doc_id=row["doc_id"],
        chunk_no=row["chunk_no"],
        path=row["path"],
        layer=row["layer"],
        heading=row["heading_path"],
        content=row["content"],
        context=row["context"],
        page=row["page"],
        metadata=_metadata(row["metadata"]),
        prefer_bonus=float(row["prefer_bonus"]),
        test_penalty=float(row["test_penalty"]),
        **ranking,
    )


# the expression each HNSW index of ``ragline index rebuild`` is built on (ragline.operations.index);
# a halfvec index needs the dimension of the column (RAGLINE_EMBED_DIM, migration 0001)
VECTOR_ORDER = {
    "vector": "c.embedding <=> %(qvec)s",
    "halfvec": "c.embedding::halfvec({dim}) <=> %(qvec)s::halfvec({dim})",
}
# an expression over the distance, which no index can serve: the planner reads the tenant's rows
# through the tenant index and sorts them, never walking the HNSW graph
EXACT_ORDER = "(c.embedding <=> %(qvec)s) + 0"


VectorPath = Literal["tenant", "visible", "hnsw"]
#: each path's statement; "tenant" and "visible" sort by EXACT_ORDER, "hnsw" by the index's order
VECTOR_TEMPLATES: dict[str, str] = {"tenant": EXACT_VECTOR_SQL, "visible": VISIBLE_VECTOR_SQL}


def vector_order(settings: Settings, exact: bool) -> str:
    """The vector statement's ``ORDER BY`` for the configured index, or the exact path's (pure)."""
    if exact:
        return EXACT_ORDER
    return VECTOR_ORDER[settings.retrieval.vector_index].format(dim=int(settings.embed.dim))


def vector_path(settings: Settings, tenant_rows: int | None, visible_rows: int | None) -> VectorPath:
    """How a vector search finds its candidates, from the tenant's chunks and the chunks the
    caller's groups admit (pure; the one place every search path takes this decision).

    * ``tenant``: the tenant holds at most ``exact_search_max_rows`` chunks; its rows, read through
      the tenant index, sorted by distance (exact).
    * ``visible``: the tenant is larger but the caller sees at most that many; the rows of the
      documents its groups admit, found through the ACL index of ``documents``, sorted (exact).
    * ``hnsw``: the caller sees more; the HNSW index with iterative scans (approximate).

    Filtered HNSW slows down and loses recall as the share of the index the filter keeps shrinks:
    even with iterative scans it stops at ``hnsw.max_scan_tuples`` with a partial list, and the
    planner, which estimates a tenant's share but not the caller's, walks a large tenant's rows
    instead. An exact sort costs about the same per row whichever index found the rows, so its
    cost follows the rows it sorts; the tenant index comes first because it reads no other table.
    ``visible_rows`` sums the caller's groups' counts: an upper bound when they overlap."""
    limit = settings.retrieval.exact_search_max_rows
    if limit <= 0:
        return "hnsw"
    if tenant_rows is not None and tenant_rows <= limit:
        return "tenant"
    if visible_rows is not None and visible_rows <= limit:
        return "visible"
    return "hnsw"


def _sql(template: str, columns: str, where: str, rank_fn: str = "ts_rank", order: str | None = None) -> str:
    # BM25's templates compute their own rank; the others take ts_rank or ts_rank_cd
    rank_fn = "ts_rank" if rank_fn == "bm25" else rank_fn
    assert rank_fn in ("ts_rank", "ts_rank_cd")
    return template.format(
        fields=_FIELDS,
        columns=columns,
        scope=_SCOPE,
        where=where,
        rank_fn=rank_fn,
        order=order or VECTOR_ORDER["vector"],
    )


@contextmanager
def read_only_transaction(conn: psycopg.Connection) -> Iterator[None]:
    """A read-only transaction whose mode travels with BEGIN (one round trip less than
    ``SET TRANSACTION READ ONLY``); the connection must be idle."""
    conn.read_only = True
    try:
        with conn.transaction():
            yield
    finally:
        with suppress(psycopg.Error):  # a broken connection is discarded by the pool anyway
            conn.read_only = None


SCOPE_SQL = (
    "SELECT set_config('ragline.tenant', %(tenant)s, true),"
    " set_config('ragline.groups', %(groups)s::text[]::text, true),"
    " set_config('statement_timeout', %(timeout)s, true)"
)
HNSW_SQL = (
    ", set_config('hnsw.ef_search', %(ef_search)s, true),"
    " set_config('hnsw.iterative_scan', 'relaxed_order', true)"
)
# after the set_configs in the same select list: the query role's policy on lexical_stats reads
# ragline.tenant, which is set by then (a sub-select in the select list runs when first read)
_TENANT_ROWS = (
    "SELECT coalesce(sum(docs), 0) FROM lexical_stats WHERE tenant = %(tenant)s AND config = 'russian'"
)
# the chunks of the documents holding any of the caller's groups (migration 0017), summed over its
# groups; the query role's policy admits only its tenant's counters of the groups it holds
_VISIBLE_ROWS = (
    "SELECT coalesce(sum(chunks), 0) FROM acl_group_rows"
    " WHERE tenant = %(tenant)s AND grp = ANY(%(groups)s::text[])"
)
TENANT_ROWS_SQL = f", ({_TENANT_ROWS}) AS tenant_rows, ({_VISIBLE_ROWS}) AS visible_rows"


class StatementLimit:
    """The ``statement_timeout`` in force in a retrieval transaction, and whether the question's
    deadline (rather than the setting) set it."""

    def __init__(self, settings: Settings) -> None:
        self.limit_ms = settings.retrieval.statement_timeout_ms
        self.timeout_ms, self.by_deadline = deadline.statement_timeout_ms(self.limit_ms)
        # the tenant's chunks and the caller's, read by set_transaction_params for a vector search
        self.tenant_rows: int | None = None
        self.visible_rows: int | None = None

    def vector_path(self, settings: Settings) -> VectorPath:
        """The vector search's path (:func:`vector_path`) from the counts this transaction read."""
        return vector_path(settings, self.tenant_rows, self.visible_rows)

    def tighten(self, conn: psycopg.Connection, stage: str) -> None:
        """Before a further statement: stop when the question has no time left, and lower the
        timeout when the deadline is now nearer than it (a round trip only near the deadline)."""
        deadline.check(stage)
        timeout_ms, by_deadline = deadline.statement_timeout_ms(self.limit_ms)
        if by_deadline and timeout_ms < self.timeout_ms:
            conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(timeout_ms),))
            self.timeout_ms, self.by_deadline = timeout_ms, True

    def error(self, stage: str) -> Exception:
        if self.by_deadline:
            return QuestionDeadlineExceeded(
                f"the question's deadline passed during {stage}", stage=stage, timeout_ms=self.timeout_ms
            )
        return RetrievalTimeout(
            f"{stage} ran past the retrieval statement timeout of {self.timeout_ms} ms",
            stage=stage,
            timeout_ms=self.timeout_ms,
        )


def set_transaction_params(
    conn: psycopg.Connection,
    req: SearchRequest,
    settings: Settings,
    n: int | None = None,
    limit: StatementLimit | None = None,
) -> StatementLimit:
    """The caller's scope for row-level security, the statement timeout and (with ``n``, for a
    vector search) the HNSW parameters, local to the current transaction, in one round trip; for a
    vector search with the exact paths on, that round trip also reads the tenant's number of chunks
    and the caller's into the returned limit's ``tenant_rows`` and ``visible_rows``."""
    limit = limit or StatementLimit(settings)
    params = {"tenant": req.tenant, "groups": req.groups, "timeout": str(limit.timeout_ms)}
    sql = SCOPE_SQL
    count = n is not None and settings.retrieval.exact_search_max_rows > 0
    if n is not None:
        sql += HNSW_SQL + (TENANT_ROWS_SQL if count else "")
        params["ef_search"] = str(int(max(settings.retrieval.hnsw_ef_search, n)))
    row = conn.execute(sql, params).fetchone()
    if count:
        limit.tenant_rows = int(row["tenant_rows"])
        limit.visible_rows = int(row["visible_rows"])
    return limit


def tenant_rows(conn: psycopg.Connection, tenant: str) -> int:
    """The tenant's number of chunks (every chunk, with or without its embedding yet): the sum of
    its counter slots of migration 0009, a few rows of one index whatever the tenant's size."""
    row = conn.execute(f"SELECT ({_TENANT_ROWS}) AS n", {"tenant": tenant}).fetchone()
    return int(row["n"])


def corpus_plan(conn: psycopg.Connection, req: SearchRequest, settings: Settings) -> terms.TermPlan:
    """Which names of a collection to leave out of the question (:mod:`ragline.query.retrieval.terms`), from
    the statistics of the caller's scope; no statement when the question has no name-like word or
    the setting is off. Runs its own read-only transaction (the connection must be idle)."""
    words = terms.candidates(req.query) if settings.retrieval.corpus_terms and req.groups else []
    if not words:
        return terms.TermPlan(req.query, embed_text=req.query, lexical_text=req.query)
    params = {"tenant": req.tenant, "groups": req.groups, "words": words, "cap": TERM_STATS_MAX_ROWS}
    with read_only_transaction(conn):
        set_transaction_params(conn, req, settings, limit=StatementLimit(settings))
        rows = conn.execute(TERM_STATS_SQL.replace("{scope}", _SCOPE), params).fetchall()
        sizes = {r["source"]: int(r["docs"]) for r in conn.execute(SOURCE_SIZES_SQL, params).fetchall()}
    docs: dict[str, dict[str, int]] = {w: {} for w in words}
    for r in rows:
        docs[r["word"]][r["source"]] = int(r["docs"])
    policy = terms.CorpusTerms(sizes=sizes)
    return policy.plan(req.query, [terms.TermStat(w, docs[w]) for w in words])


def scope_rows(conn: psycopg.Connection, req: SearchRequest) -> tuple[int, int]:
    """The tenant's chunks and those the caller's groups admit (:func:`vector_path`'s inputs)."""
    params = {"tenant": req.tenant, "groups": req.groups}
    row = conn.execute(f"SELECT ({_TENANT_ROWS}) AS t, ({_VISIBLE_ROWS}) AS v", params).fetchone()
    return int(row["t"]), int(row["v"])


def filters_for(req: SearchRequest, settings: Settings):
    """The request's filters with the configured bonus, penalty and test globs."""
    r = settings.retrieval
    return compile_filters(req, r.prefer_bonus, r.test_penalty, settings.code.test_globs)


def vector_rows(
    conn: psycopg.Connection,
    req: SearchRequest,
    qvec: np.ndarray,
    n: int,
    settings: Settings,
    path: VectorPath | None = None,
) -> list[dict]:
    """The vector statement; the transaction's parameters must be set (:func:`set_transaction_params`
    with ``n``). ``path``: the one :func:`vector_path` chose from the counts that call read; None
    reads the counts first (a round trip more, for callers that did not keep them)."""
    if path is None:
        path = "hnsw"
        if settings.retrieval.exact_search_max_rows > 0:
            path = vector_path(settings, *scope_rows(conn, req))
    f = filters_for(req, settings)
    params = {"tenant": req.tenant, "groups": req.groups, "n": n, "qvec": qvec, **f.params}
    template = VECTOR_TEMPLATES.get(path, VECTOR_SQL)
    sql = _sql(template, f.columns_sql(), f.where_sql(), order=vector_order(settings, path != "hnsw"))
    return conn.execute(sql, params).fetchall()


def vector_coverage(conn: psycopg.Connection, req: SearchRequest, settings: Settings) -> tuple[int, float]:
    """``(rows the vector statement could not see, share of the scope it could)`` for this request
    (same scope and filters); the scope is counted only when some rows await their vectors, so a
    fully embedded tenant pays one index-only count of nothing."""
    f = filters_for(req, settings)
    params = {"tenant": req.tenant, "groups": req.groups, **f.params}
    pending = int(conn.execute(_sql(UNEMBEDDED_SQL, "", f.where_sql()), params).fetchone()["n"])
    if not pending:
        return 0, 1.0
    total = int(conn.execute(_sql(SCOPE_ROWS_SQL, "", f.where_sql()), params).fetchone()["n"])
    return pending, 1.0 - pending / total if total > pending else 0.0


def lexical_rows(
    conn: psycopg.Connection | None, req: SearchRequest, n: int, settings: Settings, expansion: str = ""
) -> list[dict]:
    """Empty without touching the database when the query has no terms. A query with identifiers
    (``register_hook``, ``HTTPAdapter.send``) also matches code chunks by their identifier terms;
    restricted to the source layer this is the retrieval contract's lexical code fallback.
    ``expansion``: a tsquery literal of feedback terms (:func:`feedback_pass`; words, not code)."""
    if not has_terms(req.query):
        return []
    assert conn is not None
    f = filters_for(req, settings)
    terms = code_terms(req.query, settings.retrieval.lexical_max_terms)
    code_query = or_tsquery(terms)
    params = {
        "code_query": code_query,
        "code_terms": terms,
        "whole_query": whole_tsquery(req.query, settings.retrieval.lexical_max_terms),
        "tenant": req.tenant,
        "groups": req.groups,
        "n": n,
        "query": lexical_query(
            req.query, settings.retrieval.lexical_match, settings.retrieval.lexical_max_terms
        ),
        "rank_norm": settings.retrieval.lexical_rank_normalization,
        "k1": settings.retrieval.bm25_k1,
        "b": settings.retrieval.bm25_b,
        "expansion": expansion,
        "prf_weight": settings.retrieval.prf_term_weight,
        **f.params,
    }
    bm25 = settings.retrieval.lexical_rank == "bm25"
    if code_query:
        template = CODE_BM25_SQL if bm25 else CODE_LEXICAL_SQL
    elif expansion and lexical_expands(req, settings):
        template = LEXICAL_PRF_SQL
    else:
        template = BM25_SQL if bm25 else LEXICAL_SQL
    sql = _sql(template, f.columns_sql(), f.where_sql(), settings.retrieval.lexical_rank)
    return conn.execute(sql, params).fetchall()


def lexical_expands(req: SearchRequest, settings: Settings) -> bool:
    """Whether lexical feedback applies: the words' ts_rank list (a question naming identifiers
    searches the code terms too, BM25 has its own statistics: neither is expanded)."""
    r = settings.retrieval
    return (
        r.prf in ("lexical", "both")
        and r.lexical_rank != "bm25"
        and not code_tsquery(req.query, r.lexical_max_terms)
    )


def feedback_pass(
    conn: psycopg.Connection,
    req: SearchRequest,
    qvec: np.ndarray | None,
    vector: list[dict],
    lexical: list[dict],
    n: int,
    settings: Settings,
    path: VectorPath | None = None,
) -> tuple[list[dict], list[dict]]:
    """Pseudo-relevance feedback (:mod:`ragline.query.retrieval.feedback`): the first pass's top
    ``prf_docs`` fused hits steer a second vector search (Rocchio) and/or a second lexical search
    (expansion terms); the lists it replaces are returned in their place, the others as they were.
    Its statements run in the caller's transaction, so under the same tenant and ACL scope (and the
    same filters) as the first pass, and the second vector search takes the first's path
    (``path``, :func:`vector_path`). No statement when there is nothing to steer."""
    r = settings.retrieval
    dense = r.prf in ("dense", "both") and qvec is not None and bool(vector)
    lexical_on = bool(lexical) and lexical_expands(req, settings)
    if not (dense or lexical_on):
        return vector, lexical
    keys = feedback.feedback_keys(fused_keys(vector, lexical, settings, req.query), r.prf_docs)
    f = filters_for(req, settings)
    params = {
        "tenant": req.tenant,
        "groups": req.groups,
        "query": req.query,
        "doc_ids": [k[0] for k in keys],  # type: ignore[index]
        "chunk_nos": [k[1] for k in keys],  # type: ignore[index]
        **f.params,
    }
    found = {
        (row["doc_id"], row["chunk_no"]): row
        for row in conn.execute(_sql(FEEDBACK_SQL, "", f.where_sql()), params).fetchall()
    }
    rows = [found[k] for k in keys if k in found]
    if not rows:
        return vector, lexical
    if dense:
        moved = feedback.rocchio(
            qvec, [row["embedding"] for row in rows if row["embedding"] is not None], r.prf_alpha, r.prf_beta
        )
        vector = vector_rows(conn, req, moved, n, settings, path)
    if lexical_on:
        terms = feedback.expansion_terms(
            rows[0]["query_lexemes"],
            [dict(zip(row["lexemes"], row["counts"], strict=True)) for row in rows],
            r.prf_terms,
        )
        if terms:
            lexical = lexical_rows(conn, req, n, settings, feedback.tsquery_literal(terms))
    return vector, lexical


def exact_rows(conn: psycopg.Connection | None, req: SearchRequest, settings: Settings) -> list[dict]:
    """The chunks of the given documents or paths, in the order asked, no vectors; empty paths dropped."""
    doc_ids = [d.strip() for d in req.doc_ids if d.strip()]
    paths = clean_paths(req.paths)
    if not (doc_ids or paths) or not req.groups:
        return []
    assert conn is not None
    f = filters_for(req, settings)
    params = {
        "tenant": req.tenant,
        "groups": req.groups,
        "n": req.k,
        "doc_ids": doc_ids,
        "paths": paths,
        **f.params,
    }
    return conn.execute(_sql(EXACT_SQL, f.columns_sql(), f.where_sql()), params).fetchall()


def document_chunks(
    conn: psycopg.Connection, req: SearchRequest, doc_ids: list[str], settings: Settings, n: int
) -> list[Hit]:
    """Every chunk of ``doc_ids`` the caller may read (at most ``n``), for the expansion of the top
    hits (:mod:`ragline.query.retrieval.expand`); its own read-only transaction under the caller's scope."""
    if not doc_ids or not req.groups:
        return []
    sub = req.model_copy(update={"doc_ids": doc_ids, "paths": [], "k": n})
    with read_only_transaction(conn):
        set_transaction_params(conn, sub, settings, limit=StatementLimit(settings))
        f = filters_for(sub, settings)
        params = {
            "tenant": sub.tenant,
            "groups": sub.groups,
            "n": n,
            "doc_ids": doc_ids,
            "paths": [],
            **f.params,
        }
        rows = conn.execute(_sql(EXACT_SQL, f.columns_sql(), ""), params).fetchall()
    return [_hit(r) for r in rows]


def named_rows(
    conn: psycopg.Connection, req: SearchRequest, qvec: np.ndarray | None, settings: Settings
) -> list[dict]:
    """Chunks of the files the question names (the retrieval contract's exact-file path), at most
    ``RAGLINE_CODE_NAMED_FILES``; empty without touching the database when it names none."""
    files = structure.named(req.query).files
    patterns = structure.named_file_patterns(files)
    if not patterns or settings.code.named_files == 0:
        return []
    f = filters_for(req, settings)
    params = {
        "tenant": req.tenant,
        "groups": req.groups,
        "n": settings.code.named_files,
        "named": patterns,
        "names": structure.file_names(files),
        "qvec": qvec,
        **f.params,
    }
    with_vector = qvec is not None
    sql = NAMED_SQL.format(
        fields=_FIELDS,
        columns=f.columns_sql(),
        scope=_SCOPE,
        where=f.where_sql() + (" AND c.embedding IS NOT NULL" if with_vector else ""),
        distance=", c.embedding <=> %(qvec)s AS distance" if with_vector else "",
        order="c.embedding <=> %(qvec)s, c.doc_id, c.chunk_no" if with_vector else "c.doc_id, c.chunk_no",
    )
    return conn.execute(sql, params).fetchall()


def row_security_problem(conn: psycopg.Connection[DictRow]) -> str | None:
    """What weakens row-level security on ``conn``'s role, or None: the role is not bound by the
    policies of migration 0007 (the owner, a superuser, not a member of ``ragline_query``), or it is
    and its lexical search cannot use the GIN index (``tsvector @@ tsquery`` is not leakproof)."""
    row = conn.execute(
        "SELECT current_user AS who, r.rolsuper OR r.rolbypassrls"
        " OR pg_has_role(current_user, c.relowner, 'USAGE')"
        " OR CASE WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = 'ragline_query')"
        " THEN NOT pg_has_role(current_user, 'ragline_query', 'USAGE') ELSE true END AS unbound,"
        " p.proleakproof AS leakproof"
        " FROM pg_proc p, pg_class c, pg_roles r"
        " WHERE p.oid = 'pg_catalog.ts_match_vq(tsvector, tsquery)'::regprocedure"
        " AND c.oid = 'chunks'::regclass AND r.rolname = current_user"
    ).fetchone()
    conn.rollback()
    if row["unbound"]:
        return (
            f"the query pool connects as {row['who']}, which row-level security does not bind:"
            " set RAGLINE_SERVICES_QUERY_DATABASE_URL to a member of ragline_query (docs/operations.md)"
        )
    if not row["leakproof"]:
        return (
            "the lexical search reads every row of the tenant instead of its GIN index: row-level"
            " security binds the query role and ts_match_vq is not leakproof; a superuser can run"
            " ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF (docs/operations.md)"
        )
    return None


def code_retrieval(query: str, settings: Settings, rows: Iterable[dict] = ()) -> bool:
    """Whether a search is code retrieval: the question names a file or an identifier, or a
    candidate comes from a code layer or points at code (``related_code``). Such a search fuses
    with ``fusion_code`` and ``rrf_weight_lexical_code``: its structural bonuses were tuned in RRF
    units, and identifiers make the lexical list a strong partner there, where on prose it is weak."""
    named = structure.named(query)
    if named.files or named.identifiers:
        return True
    code_layers = {settings.code.source_layer, settings.code.tests_layer, settings.code.symbols_layer}
    return any(
        row.get("layer") in code_layers or _metadata(row.get("metadata")).get("related_code") for row in rows
    )


def fusion_policy(query: str, settings: Settings, rows: Iterable[dict] = ()) -> FusionPolicy:
    """The fusion of this search: the code policy for code retrieval (:func:`code_retrieval`), else
    the prose one. Code retrieval is decided once, and not at all when both policies agree."""
    prose = FusionPolicy.from_settings(settings)
    code = FusionPolicy.from_settings(settings, code=True)
    if code == prose:
        return prose
    return code if code_retrieval(query, settings, rows) else prose


def fusion_plan(query: str, settings: Settings, rows: Iterable[dict] = ()) -> tuple[str, float]:
    """``(method, lexical weight before the script check)`` of :func:`fusion_policy`."""
    policy = fusion_policy(query, settings, rows)
    return policy.method, policy.lexical_weight


def fusion_for(query: str, settings: Settings, rows: Iterable[dict] = ()) -> str:
    """``fusion_code`` for code retrieval (:func:`code_retrieval`), else ``fusion``."""
    return fusion_policy(query, settings, rows).method


def fused_keys(
    vector: list[dict], lexical: list[dict], settings: Settings, query: str = "", vector_share: float = 1.0
) -> list[tuple[tuple[str, int], float]]:
    """The candidates' keys, best first, with their fused score in RRF units (pure): the rows
    (:func:`ragline.query.retrieval.fusion.hybrid_inputs`) fused by this search's :func:`fusion_policy`, whose
    vector list saw ``vector_share`` of the scope (:meth:`FusionPolicy.covering`)."""
    policy = fusion_policy(query, settings, [*vector, *lexical]).covering(vector_share)
    return policy.hybrid(query, *hybrid_inputs(vector, lexical))  # type: ignore[return-value]


def fuse(
    vector: list[dict],
    lexical: list[dict],
    settings: Settings,
    limit: int,
    query: str = "",
    vector_share: float = 1.0,
) -> list[Hit]:
    """The two lists fused by this search's policy (:func:`fused_keys`), plus
    prefer bonus, minus test penalty; pure.

    The lexical weight depends on the question (``query``): one written in another script than the
    passages the vector list found (English over Russian) and holding no number or identifier gets
    ``rrf_weight_lexical_cross_script``, because its words can only match stray tokens of its own
    script there (:mod:`ragline.query.retrieval.language`).

    Scores are computed on the rows; only the ``limit`` kept become :class:`Hit` models: a question
    has many more candidates than hits, and a model per candidate would dominate the task's own time."""
    rows: dict[tuple[str, int], dict] = {}
    ranks: dict[tuple[str, int], dict[str, float | int]] = {}
    for rank, row in enumerate(vector, start=1):
        key = (row["doc_id"], row["chunk_no"])
        rows.setdefault(key, row)
        ranks.setdefault(key, {}).update(vector_rank=rank, vector_distance=float(row["distance"]))
    for rank, row in enumerate(lexical, start=1):
        key = (row["doc_id"], row["chunk_no"])
        rows.setdefault(key, row)
        ranks.setdefault(key, {}).update(lexical_rank=rank, lexical_score=float(row["rank"]))
    fused = fused_keys(vector, lexical, settings, query, vector_share)
    scored = []
    for position, (key, score) in enumerate(fused):
        row = rows[key]
        final = round(score + float(row["prefer_bonus"]) - float(row["test_penalty"]), 8)
        scored.append((final, position, key, score))
    # a stable sort keeps RRF's own tie-breaking among equal final scores
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [
        _hit(rows[key], score=final, fused_score=round(score, 8), **ranks[key])
        for final, _, key, score in scored[:limit]
    ]


def search(
    conn: psycopg.Connection,
    req: SearchRequest,
    qvec: np.ndarray | None,
    settings: Settings,
    limit: int | None = None,
) -> SearchResponse:
    """Run the retrievers the mode asks for and fuse them. ``qvec`` None means no vector search.

    ``limit`` (default ``req.k``) is how many fused hits to keep: more when a reranker follows.
    """
    timings: dict[str, float] = {}
    if not req.groups:
        return SearchResponse(hits=[], timings_ms=timings)
    if req.mode == "lexical_code":
        return lexical_code_search(conn, req, settings, limit)
    if conn.info.transaction_status != TransactionStatus.IDLE:
        # inside a caller's transaction this would be a savepoint: SET LOCAL would outlive the search
        # and READ ONLY would bind the caller's transaction
        raise RuntimeError("retrieval needs an idle connection: it runs its own read-only transaction")
    deadline.check("retrieval")
    limit = limit or req.k
    n = max(settings.retrieval.top_n, limit)
    vector: list[dict] = []
    lexical: list[dict] = []
    named: list[dict] = []
    unembedded, share = 0, 1.0
    stage = "the retrieval settings"
    statements = StatementLimit(settings)
    try:
        with read_only_transaction(conn):
            if req.mode == "exact":
                t = time.perf_counter()
                set_transaction_params(conn, req, settings, limit=statements)
                stage = "the exact lookup"
                hits = [_hit(r) for r in exact_rows(conn, req, settings)]
                timings["exact"] = elapsed_ms(t)
                return SearchResponse(hits=hits, timings_ms=timings)
            vector_search = req.mode in ("hybrid", "vector") and qvec is not None
            lexical_search = req.mode in ("hybrid", "lexical") and has_terms(req.query)
            if vector_search or lexical_search:
                set_transaction_params(conn, req, settings, n if vector_search else None, statements)
            if vector_search:
                t = time.perf_counter()
                stage = "the vector search"
                vector = vector_rows(conn, req, qvec, n, settings, statements.vector_path(settings))
                unembedded, share = vector_coverage(conn, req, settings)
                timings["vector"] = elapsed_ms(t)
            if lexical_search:
                t = time.perf_counter()
                if vector_search:
                    statements.tighten(conn, "the lexical search")
                stage = "the lexical search"
                lexical = lexical_rows(conn, req, n, settings)
                timings["lexical"] = elapsed_ms(t)
            if settings.retrieval.prf != "off" and (vector or lexical):
                t = time.perf_counter()
                statements.tighten(conn, "the feedback pass")
                stage = "the feedback pass"
                vector, lexical = feedback_pass(
                    conn,
                    req,
                    qvec if vector_search else None,
                    vector,
                    lexical,
                    n,
                    settings,
                    statements.vector_path(settings),
                )
                timings["feedback"] = elapsed_ms(t)
            if (vector_search or lexical_search) and structure_on(req, settings) and names_a_file(req):
                t = time.perf_counter()
                statements.tighten(conn, "the named files")
                stage = "the named files"
                named = named_rows(conn, req, qvec if vector_search else None, settings)
                timings["named"] = elapsed_ms(t)
    except psycopg.errors.QueryCanceled as exc:
        if "statement timeout" not in str(exc):
            raise
        raise statements.error(stage) from None
    if req.ordering == "contract" or named or structural(req, vector, lexical, settings):
        t = time.perf_counter()
        hits = fuse(vector, lexical, settings, n * 2, req.query, share)
        if named:
            hits = structure.with_named(
                hits,
                [_hit(r) for r in named],
                settings.code.named_weight,
                FusionPolicy.from_settings(settings, code=True),  # a question naming files is code retrieval
            )
        hits = ranked_by_structure(req, hits, settings)[:limit]
        timings["structure"] = elapsed_ms(t)
    else:
        hits = fuse(vector, lexical, settings, limit, req.query, share)
    return SearchResponse(
        hits=hits,
        timings_ms=timings,
        unembedded_rows=unembedded,
        vectors_complete=not unembedded,
        vector_share=round(share, 6),
    )


def structural(req: SearchRequest, vector: list[dict], lexical: list[dict], settings: Settings) -> bool:
    """Whether the structural re-score can change anything: it is on (the request, else the
    setting), and the question names a file or an identifier, a candidate carries ``related_code``,
    or layers of different rank compete with a layer step. Otherwise the fused order stands and no
    candidate beyond the kept ones becomes a model."""
    if not structure_on(req, settings):
        return False
    named = structure.named(req.query)
    if named.files or named.identifiers:
        return True
    rows = [*vector, *lexical]
    if any(_metadata(r["metadata"]).get("related_code") for r in rows):
        return True
    ranks = {structure.layer_rank(r["layer"], settings.code.layer_ranks) for r in rows}
    return settings.code.layer_step > 0 and len(ranks) > 1


def lexical_code_search(
    conn: psycopg.Connection, req: SearchRequest, settings: Settings, limit: int | None = None
) -> SearchResponse:
    """The retrieval contract's lexical code fallback (mode ``lexical_code``): lexical search of the
    source layer (``RAGLINE_CODE_SOURCE_LAYER``) alone, whatever layers the request names, for a
    caller whose embedder is down or who wants identifiers matched as written. A query without a
    single term runs no statement at all, not even the transaction's ``BEGIN``: the fallback is
    what a caller reaches for when everything else failed, and must cost nothing when it cannot
    match."""
    if not has_terms(req.query):
        return SearchResponse(hits=[], timings_ms={})
    source = req.model_copy(update={"mode": "lexical", "layers": [settings.code.source_layer]})
    return search(conn, source, None, settings, limit)


def structure_on(req: SearchRequest, settings: Settings) -> bool:
    return settings.code.structure if req.structure is None else req.structure


def names_a_file(req: SearchRequest) -> bool:
    return bool(structure.named(req.query).files)


def ranked_by_structure(req: SearchRequest, hits: list[Hit], settings: Settings) -> list[Hit]:
    """The candidates re-scored by structure, or in the retrieval contract's order (pure)."""
    weights = structure.weights_from(settings)
    if req.ordering == "contract":
        return structure.contract_order(hits, req.query, weights, settings)
    return structure.rescore(hits, req.query, weights, settings)
