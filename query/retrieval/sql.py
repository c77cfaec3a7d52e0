"""The retrieval statements' texts, and the hit a selected row becomes.

Every statement of a search is a template formatted by :func:`render` with the selected fields
(:data:`FIELDS`), the caller's scope (:data:`SCOPE`: tenant and ACL, in the ``WHERE`` of every
statement, beside the contract filters of :mod:`ragline.query.retrieval.filters`), the filters'
clauses, the rank function and the vector order; user values only ever travel as bound
parameters. The statements are run by :mod:`ragline.query.retrieval.retrievers` inside the
transaction of :mod:`ragline.query.retrieval.transaction`, whose own statements are here too.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import Hit
from ragline.shared.worker import pending_vectors

FIELDS = "c.doc_id, c.chunk_no, c.path, c.layer, c.heading_path, c.content, c.context, c.page, c.metadata"
SCOPE = "c.tenant = %(tenant)s AND c.acl && %(groups)s::text[]"

# relaxed_order may return rows slightly out of order: re-sort the materialised candidates;
# {order} is the VECTOR_ORDER expression of the configured HNSW index, and the reported distance
# is always the full-precision one, whichever index found the row
VECTOR_SQL = """
WITH candidates AS MATERIALIZED (
    SELECT {fields}, c.embedding <=> %(qvec)s AS distance
    FROM chunks c
    WHERE {scope} AND c.embedding IS NOT NULL{where}
    ORDER BY {order}
    LIMIT %(n)s
)
SELECT * FROM candidates ORDER BY distance, doc_id, chunk_no
"""

# the exact path over the tenant (:func:`vector_path` "tenant"): the tenant's rows, each distance
# computed once in a sub-select kept apart by OFFSET 0 (an ORDER BY over the distance expression would
# compute it a second time per row, and could be served by the HNSW index), sorted by {order} =
# EXACT_ORDER; only ids and distances go through the sort, the n kept rows are read after
EXACT_VECTOR_SQL = """
WITH best AS MATERIALIZED (
    SELECT s.id, s.distance FROM (
        SELECT c.id, c.embedding <=> %(qvec)s AS distance
        FROM chunks c
        WHERE {scope} AND c.embedding IS NOT NULL{where}
        OFFSET 0
    ) s
    ORDER BY {order}
    LIMIT %(n)s
)
SELECT {fields}, b.distance
FROM best b JOIN chunks c ON c.id = b.id
ORDER BY b.distance, c.doc_id, c.chunk_no
"""

# the exact path over the caller's documents (:func:`vector_path` "visible"): the documents the
# caller's groups admit come from the GIN index on ``documents.acl`` (migration 0018), their chunks
# from the (tenant, doc_id, chunk_no) index; a document's chunks carry its ACL (ingest and ACL sync
# write both in one transaction), and the chunks' own scope condition stays
VISIBLE_VECTOR_SQL = """
WITH best AS MATERIALIZED (
    SELECT s.id, s.distance FROM (
        SELECT c.id, c.embedding <=> %(qvec)s AS distance
        FROM chunks c
        WHERE {scope} AND c.embedding IS NOT NULL{where}
          AND c.doc_id IN (SELECT d.doc_id FROM documents d WHERE d.tenant = %(tenant)s AND d.acl && %(groups)s::text[])
        OFFSET 0
    ) s
    ORDER BY {order}
    LIMIT %(n)s
)
SELECT {fields}, b.distance
FROM best b JOIN chunks c ON c.id = b.id
ORDER BY b.distance, c.doc_id, c.chunk_no
"""


def awaiting_sql(budget: pending_vectors.VectorBudget) -> str:
    """The count of the caller's scope's rows that await their vectors (the vector statements skip
    them, so a vector or hybrid search reports how many it could not see yet), by the budget's ranges
    of layers (``VectorBudget.awaiting``): it reads only those rows, never the ones the budget keeps
    lexical; parameters: the scope's, the filters' and ``VectorBudget.params``."""
    return "SELECT count(*) AS n FROM chunks c WHERE {scope} AND " + budget.awaiting() + "{where}"


# the scope's rows and, among them, those the embedding budget keeps lexical (never embedded: not a
# degradation), in one pass, read only while some rows await their vectors (the share of the rows
# the budget embeds that the vector list could see)
SCOPE_ROWS_SQL = (
    "SELECT count(*) AS n, count(*) FILTER (WHERE " + pending_vectors.LEXICAL_ONLY + ") AS lexical_only"
    " FROM chunks c WHERE {scope}{where}"
)

# numnode(q) = 0 when the query holds only stop words: no rows, no NOTICE, same round trip;
# {rank_fn} is ts_rank or ts_rank_cd (a settings Literal, never user text)
LEXICAL_SQL = """
SELECT {fields}, {rank_fn}(c.tsv, q, %(rank_norm)s) AS rank
FROM chunks c, websearch_to_tsquery('russian', %(query)s) q
WHERE numnode(q) > 0 AND {scope} AND c.tsv @@ q{where}
ORDER BY rank DESC, c.doc_id, c.chunk_no
LIMIT %(n)s
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
SELECT {fields}, s.rank
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
    (SELECT {fields}, {rank} AS rank
     FROM chunks c, websearch_to_tsquery('russian', %(query)s) q, CAST(%(code_query)s AS tsquery) cq,
          CAST(%(whole_query)s AS tsquery) cw
     WHERE numnode(q) > 0 AND {scope} AND c.tsv @@ q{where}
     ORDER BY rank DESC, c.doc_id, c.chunk_no LIMIT %(n)s)
    UNION
    (SELECT {fields}, {rank} AS rank
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
# each word's tsquery is built once, in the materialised list: written inside the lateral, the
# stemming ran again for every row of the scope it filtered
TERM_STATS_SQL = """
WITH w AS MATERIALIZED (
    SELECT s.word, quote_literal(s.lexeme)::tsquery AS q
    FROM (
        SELECT t.word, (tsvector_to_array(to_tsvector('russian', t.word)))[1] AS lexeme
        FROM unnest(%(words)s::text[]) AS t(word)
    ) s
    WHERE s.lexeme IS NOT NULL
)
SELECT w.word, split_part(x.path, '/', 1) AS source, count(DISTINCT x.doc_id) AS docs
FROM w CROSS JOIN LATERAL (
    SELECT c.doc_id, c.path FROM chunks c
    WHERE {scope} AND c.tsv @@ w.q
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
SELECT {fields}{distance}
FROM chunks c
WHERE {scope} AND c.file_name = ANY(%(names)s::text[]) AND lower(c.path) LIKE ANY(%(named)s::text[]){where}
ORDER BY {order}
LIMIT %(n)s
"""

EXACT_SQL = """
SELECT {fields}
FROM chunks c
WHERE {scope} AND (c.doc_id = ANY(%(doc_ids)s::text[]) OR c.path = ANY(%(paths)s::text[])){where}
ORDER BY array_position(%(doc_ids)s::text[], c.doc_id), array_position(%(paths)s::text[], c.path), c.chunk_no
LIMIT %(n)s
"""


# the expression each HNSW index of ``ragline index rebuild`` is built on (ragline.operations.index);
# a halfvec index needs the dimension of the column (RAGLINE_EMBED_DIM, migration 0001)
VECTOR_ORDER = {
    "vector": "c.embedding <=> %(qvec)s",
    "halfvec": "c.embedding::halfvec({dim}) <=> %(qvec)s::halfvec({dim})",
}
# the exact paths' order: the distance their sub-select computed, which no index can serve (the
# planner reads the rows through the tenant or documents index and sorts them, never walking HNSW)
EXACT_ORDER = "s.distance"


VectorPath = Literal["tenant", "visible", "hnsw"]
#: each path's statement; "tenant" and "visible" sort by EXACT_ORDER, "hnsw" by the index's order
VECTOR_TEMPLATES: dict[str, str] = {"tenant": EXACT_VECTOR_SQL, "visible": VISIBLE_VECTOR_SQL}


def vector_order(settings: Settings, exact: bool) -> str:
    """The vector statement's ``ORDER BY`` for the configured index, or the exact path's (pure)."""
    if exact:
        return EXACT_ORDER
    return VECTOR_ORDER[settings.vector.index].format(dim=int(settings.embed.dim))


def render(template: str, where: str, rank_fn: str = "ts_rank", order: str | None = None) -> str:
    """A template with the fields, the caller's scope, the filters' ``where``, the rank function
    and the vector ``order`` filled in (:data:`SCOPE` is read at each call)."""
    # BM25's templates compute their own rank; the others take ts_rank or ts_rank_cd
    rank_fn = "ts_rank" if rank_fn == "bm25" else rank_fn
    assert rank_fn in ("ts_rank", "ts_rank_cd")
    return template.format(
        fields=FIELDS,
        scope=SCOPE,
        where=where,
        rank_fn=rank_fn,
        order=order or VECTOR_ORDER["vector"],
    )


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
TENANT_ROWS = (
    "SELECT coalesce(sum(docs), 0) FROM lexical_stats WHERE tenant = %(tenant)s AND config = 'russian'"
)
# the chunks of the documents holding any of the caller's groups (migration 0017), summed over its
# groups; the query role's policy admits only its tenant's counters of the groups it holds
VISIBLE_ROWS = (
    "SELECT coalesce(sum(chunks), 0) FROM acl_group_rows"
    " WHERE tenant = %(tenant)s AND grp = ANY(%(groups)s::text[])"
)
TENANT_ROWS_SQL = f", ({TENANT_ROWS}) AS tenant_rows, ({VISIBLE_ROWS}) AS visible_rows"


def metadata(value: object) -> dict:
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


def hit(row: dict, **ranking: Any) -> Hit:
    """The hit of a row selected with :data:`FIELDS`, with ``ranking``'s fields (the scores, the
    lists' ranks, the path preferences: :meth:`ragline.query.retrieval.ranking.RankingPolicy.hit`)."""
    return Hit(
        doc_id=row["doc_id"],
        chunk_no=row["chunk_no"],
        path=row["path"],
        layer=row["layer"],
        heading=row["heading_path"],
        content=row["content"],
        context=row["context"],
        page=row["page"],
        metadata=metadata(row["metadata"]),
        **ranking,
    )
