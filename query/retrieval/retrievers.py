"""The retrievers: the vector, lexical, exact and named-file statements of a search, and
the lookups around them (the collection names of a question, the chunks of given documents).

Each runs its statement (:mod:`ragline.query.retrieval.sql`) in the caller's transaction, whose
scope and timeout :func:`ragline.query.retrieval.transaction.set_transaction_params` set, and
returns rows; :func:`corpus_plan` and :func:`document_chunks` open their own read-only transaction
(the connection must be idle). Which retrievers a search runs, and in what order, is
:func:`ragline.query.retrieval.search.search`'s.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ragline.query.retrieval import sql, structure, terms
from ragline.query.retrieval.filters import clean_paths, compile_filters, has_terms, lexical_query
from ragline.query.retrieval.ranking import PathPreferences
from ragline.query.retrieval.sql import VectorPath
from ragline.query.retrieval.transaction import (
    StatementLimit,
    read_only_transaction,
    scope_rows,
    set_transaction_params,
    vector_path,
)
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import Hit, SearchRequest
from ragline.shared.worker import pending_vectors
from ragline.shared.worker.db import DictConnection, one
from ragline.shared.worker.identifiers import code_terms, or_tsquery, whole_tsquery


def corpus_plan(conn: DictConnection, req: SearchRequest, settings: Settings) -> terms.TermPlan:
    """Which names of a collection to leave out of the question (:mod:`ragline.query.retrieval.terms`), from
    the statistics of the caller's scope; no statement when the question has no name-like word or
    the setting is off. Runs its own read-only transaction (the connection must be idle)."""
    words = terms.candidates(req.query) if settings.retrieval.corpus_terms and req.groups else []
    if not words:
        return terms.TermPlan(req.query, embed_text=req.query, lexical_text=req.query)
    params = {"tenant": req.tenant, "groups": req.groups, "words": words, "cap": sql.TERM_STATS_MAX_ROWS}
    with read_only_transaction(conn):
        set_transaction_params(conn, req, settings, limit=StatementLimit(settings))
        rows = conn.execute(sql.TERM_STATS_SQL.replace("{scope}", sql.SCOPE), params).fetchall()
        sizes = {r["source"]: int(r["docs"]) for r in conn.execute(sql.SOURCE_SIZES_SQL, params).fetchall()}
    docs: dict[str, dict[str, int]] = {w: {} for w in words}
    for r in rows:
        docs[r["word"]][r["source"]] = int(r["docs"])
    policy = terms.CorpusTerms(sizes=sizes)
    return policy.plan(req.query, [terms.TermStat(w, docs[w]) for w in words])


def vector_statement(
    req: SearchRequest, qvec: np.ndarray, n: int, settings: Settings, path: VectorPath
) -> tuple[str, dict]:
    """The vector statement on ``path`` and its parameters (pure)."""
    f = compile_filters(req)
    params = {"tenant": req.tenant, "groups": req.groups, "n": n, "qvec": qvec, **f.params}
    template = sql.VECTOR_TEMPLATES.get(path, sql.VECTOR_SQL)
    statement = sql.render(template, f.where_sql(), order=sql.vector_order(settings, path != "hnsw"))
    return statement, params


def vector_rows(
    conn: DictConnection,
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
        if settings.vector.exact_search_max_rows > 0:
            path = vector_path(settings, *scope_rows(conn, req))
    return conn.execute(*vector_statement(req, qvec, n, settings, path)).fetchall()


def pending_statement(req: SearchRequest, settings: Settings) -> tuple[str, dict]:
    """The count of the scope's rows awaiting their vectors (same scope and filters as the vector
    statement; :func:`ragline.query.retrieval.sql.awaiting_sql`), and its parameters (pure)."""
    return count_statement(
        sql.awaiting_sql(pending_vectors.VectorBudget.from_settings(settings)), req, settings
    )


def count_statement(template: str, req: SearchRequest, settings: Settings) -> tuple[str, dict]:
    """A count over the request's scope and filters with the embedding budget's parameters (pure)."""
    f = compile_filters(req)
    budget = pending_vectors.VectorBudget.from_settings(settings)
    params = {"tenant": req.tenant, "groups": req.groups, **f.params, **budget.params()}
    return sql.render(template, f.where_sql()), params


class Coverage(NamedTuple):
    """What the vector statement could see of a request's scope."""

    #: rows awaiting their vectors (the fill): found only lexically until it reaches them
    unembedded: int = 0
    #: rows the budget keeps lexical + structural (never embedded, by design), counted only while
    #: some rows await (None otherwise): the share needs them then, and counting them in a fully
    #: embedded scope would read each of them on every search
    lexical_only: int | None = None
    #: the share of the rows the budget embeds that have their vector (1 once the fill is done)
    share: float = 1.0


def vector_coverage(
    conn: DictConnection, req: SearchRequest, settings: Settings, counted: dict | None = None
) -> Coverage:
    """The vector statement's :class:`Coverage` of this request (same scope and filters);
    ``counted``: the row of :func:`pending_statement`, when the caller already read it. A fully
    embedded scope pays that count alone, which reads only the rows awaiting their vectors (none);
    while some await, one more pass counts the scope's rows and its lexical-only ones. Lexical-only
    rows are left out of the share: a layer the budget never embeds must not scale the vector list
    down for good."""
    if counted is None:
        counted = one(conn.execute(*pending_statement(req, settings)))
    pending = int(counted["n"])
    if not pending:
        return Coverage(0, None, 1.0)
    scope = one(conn.execute(*count_statement(sql.SCOPE_ROWS_SQL, req, settings)))
    lexical_only = int(scope["lexical_only"])
    embeddable = int(scope["n"]) - lexical_only
    return Coverage(pending, lexical_only, 1.0 - pending / embeddable if embeddable > pending else 0.0)


def vector_search(
    conn: DictConnection,
    req: SearchRequest,
    qvec: np.ndarray,
    n: int,
    settings: Settings,
    path: VectorPath,
) -> tuple[list[dict], Coverage]:
    """The vector statement's rows with :func:`vector_coverage`'s :class:`Coverage`. The vector statement
    and the count of rows awaiting their vectors go out together and come back in one round trip
    (a pipeline: two statements, each under the transaction's timeout, one wait for the server);
    the scope's size is read after, only when some rows await their vectors."""
    with conn.pipeline():
        rows = conn.execute(*vector_statement(req, qvec, n, settings, path))
        pending = conn.execute(*pending_statement(req, settings))
    found = rows.fetchall()
    return found, vector_coverage(conn, req, settings, one(pending))


#: how a question's words match: "any", the words OR-ed as BM25 reads a query (one missing word does not
#: empty the list), not websearch's AND of "all" (:func:`ragline.query.retrieval.filters.lexical_query`)
MATCH = "any"
#: BM25's term-frequency saturation and length normalisation (``RAGLINE_LEXICAL_RANK=bm25``): the
#: usual values (Robertson and Zaragoza), measured in docs/evaluation.md, "Retrieval quality"
BM25_K1 = 1.2
BM25_B = 0.75
#: the normalization bit mask of Postgres' ts_rank / ts_rank_cd: 1 divides by 1 + log of the
#: document length
RANK_NORMALIZATION = 1


def lexical_rows(conn: DictConnection | None, req: SearchRequest, n: int, settings: Settings) -> list[dict]:
    """Empty without touching the database when the query has no terms. A query with identifiers
    (``register_hook``, ``HTTPAdapter.send``) also matches code chunks by their identifier terms;
    restricted to the source layer this is the retrieval contract's lexical code fallback."""
    if not has_terms(req.query):
        return []
    assert conn is not None
    f = compile_filters(req)
    terms = code_terms(req.query, settings.lexical.max_terms)
    code_query = or_tsquery(terms)
    params = {
        "code_query": code_query,
        "code_terms": terms,
        "whole_query": whole_tsquery(req.query, settings.lexical.max_terms),
        "tenant": req.tenant,
        "groups": req.groups,
        "n": n,
        "query": lexical_query(req.query, MATCH, settings.lexical.max_terms),
        "rank_norm": RANK_NORMALIZATION,
        "k1": BM25_K1,
        "b": BM25_B,
        **f.params,
    }
    bm25 = settings.lexical.rank == "bm25"
    if code_query:
        template = sql.CODE_BM25_SQL if bm25 else sql.CODE_LEXICAL_SQL
    else:
        template = sql.BM25_SQL if bm25 else sql.LEXICAL_SQL
    statement = sql.render(template, f.where_sql(), settings.lexical.rank)
    return conn.execute(statement, params).fetchall()


def exact_rows(conn: DictConnection | None, req: SearchRequest, settings: Settings) -> list[dict]:
    """The chunks of the given documents or paths, in the order asked, no vectors; empty paths dropped."""
    doc_ids = [d.strip() for d in req.doc_ids if d.strip()]
    paths = clean_paths(req.paths)
    if not (doc_ids or paths) or not req.groups:
        return []
    assert conn is not None
    f = compile_filters(req)
    params = {
        "tenant": req.tenant,
        "groups": req.groups,
        "n": req.k,
        "doc_ids": doc_ids,
        "paths": paths,
        **f.params,
    }
    return conn.execute(sql.render(sql.EXACT_SQL, f.where_sql()), params).fetchall()


def document_chunks(
    conn: DictConnection, req: SearchRequest, doc_ids: list[str], settings: Settings, n: int
) -> list[Hit]:
    """Every chunk of ``doc_ids`` the caller may read (at most ``n``), for the expansion of the top
    hits (:mod:`ragline.query.retrieval.expand`); its own read-only transaction under the caller's scope."""
    if not doc_ids or not req.groups:
        return []
    sub = req.model_copy(update={"doc_ids": doc_ids, "paths": [], "k": n})
    with read_only_transaction(conn):
        set_transaction_params(conn, sub, settings, limit=StatementLimit(settings))
        params = {
            "tenant": sub.tenant,
            "groups": sub.groups,
            "n": n,
            "doc_ids": doc_ids,
            "paths": [],
        }
        rows = conn.execute(sql.render(sql.EXACT_SQL, ""), params).fetchall()
    paths = PathPreferences.of(sub, settings)
    return [sql.hit(r, **paths.signals(r)) for r in rows]


def named_rows(
    conn: DictConnection,
    req: SearchRequest,
    qvec: np.ndarray | None,
    settings: Settings,
    files: tuple[str, ...] | None = None,
) -> list[dict]:
    """Chunks of the files the question names (``files``, as the search's ranking policy read them;
    read from the question when not given: the retrieval contract's exact-file path), at most
    :data:`ragline.query.retrieval.structure.NAMED_FILES`; empty without touching the database when it
    names none."""
    files = structure.named(req.query).files if files is None else files
    patterns = structure.named_file_patterns(files)
    if not patterns or structure.NAMED_FILES == 0:
        return []
    f = compile_filters(req)
    params = {
        "tenant": req.tenant,
        "groups": req.groups,
        "n": structure.NAMED_FILES,
        "named": patterns,
        "names": structure.file_names(files),
        "qvec": qvec,
        **f.params,
    }
    with_vector = qvec is not None
    statement = sql.NAMED_SQL.format(
        fields=sql.FIELDS,
        scope=sql.SCOPE,
        where=f.where_sql() + (" AND c.embedding IS NOT NULL" if with_vector else ""),
        distance=", c.embedding <=> %(qvec)s AS distance" if with_vector else "",
        order="c.embedding <=> %(qvec)s, c.doc_id, c.chunk_no" if with_vector else "c.doc_id, c.chunk_no",
    )
    return conn.execute(statement, params).fetchall()
