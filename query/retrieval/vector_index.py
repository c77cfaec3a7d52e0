"""The HNSW index of ``chunks.embedding``: which storage it uses, and whether it is the one the query
pool's statements need.

``RAGLINE_VECTOR_INDEX`` says how the vector statement orders rows
(:data:`ragline.query.retrieval.sql.VECTOR_ORDER`): by ``embedding <=> q`` (a ``vector`` index) or by
``embedding::halfvec(D) <=> q::halfvec(D)`` (a ``halfvec`` expression index, half the size). Postgres
uses an index only for the expression it was built on, so a setting that disagrees with the
database's index does not fail: every vector search of a large tenant silently reads and sorts the
whole tenant. :func:`problem` names that case, for the query pool's start-up and
``ragline index status``; ``ragline index rebuild`` (``ragline.operations.index``) builds the other index
concurrently and drops the old one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import DictRow

Kind = Literal["vector", "halfvec"]

#: the name each kind's index has once built; ``chunks_embedding_hnsw`` is migration 0001's
INDEX_NAMES: dict[str, str] = {"vector": "chunks_embedding_hnsw", "halfvec": "chunks_embedding_hnsw_halfvec"}
#: the name an index has while ``ragline index rebuild`` builds it
BUILDING = "chunks_embedding_hnsw_building"
OPCLASSES: dict[str, str] = {"vector": "vector_cosine_ops", "halfvec": "halfvec_cosine_ops"}

HNSW_INDEXES_SQL = """
SELECT ci.relname AS name, o.opcname AS opclass, i.indisvalid AS valid,
       pg_get_indexdef(i.indexrelid) AS definition, pg_relation_size(i.indexrelid) AS bytes
FROM pg_index i
JOIN pg_class ci ON ci.oid = i.indexrelid
JOIN pg_am a ON a.oid = ci.relam
JOIN pg_opclass o ON o.oid = i.indclass[0]
WHERE i.indrelid = to_regclass('chunks') AND a.amname = 'hnsw'
ORDER BY ci.relname
"""


def definition(kind: str, dim: int, name: str, m: int = 16, ef_construction: int = 64) -> str:
    """``CREATE INDEX CONCURRENTLY`` of one kind's HNSW index, with migration 0001's graph parameters
    (pure). The halfvec index is on the expression the vector statement orders by."""
    column = "embedding" if kind == "vector" else f"(embedding::halfvec({int(dim)}))"
    return (
        f"CREATE INDEX CONCURRENTLY {name} ON chunks USING hnsw ({column} {OPCLASSES[kind]})"
        f" WITH (m = {int(m)}, ef_construction = {int(ef_construction)})"
    )


def kind_of(index: dict, dim: int) -> str | None:
    """The kind an index listed by :func:`hnsw_indexes` serves, or None: a ``halfvec`` index of
    another dimension, or on another expression, serves no statement of ours (pure)."""
    if index["opclass"] == OPCLASSES["vector"] and "(embedding vector_cosine_ops)" in index["definition"]:
        return "vector"
    if (
        index["opclass"] == OPCLASSES["halfvec"]
        and f"(embedding)::halfvec({int(dim)})" in index["definition"]
    ):
        return "halfvec"
    return None


def hnsw_indexes(conn: psycopg.Connection[DictRow]) -> list[dict]:
    """The HNSW indexes of ``chunks`` (name, operator class, valid, definition, bytes), from the
    catalogs, which every role may read."""
    return [dict(r) for r in conn.execute(HNSW_INDEXES_SQL).fetchall()]


def problem_with(indexes: list[dict], kind: str, dim: int) -> str | None:
    """What is wrong with ``indexes`` for a setting of ``kind``, or None (pure)."""
    valid = [i["name"] for i in indexes if i["valid"] and kind_of(i, dim) == kind]
    if valid:
        return None
    found = ", ".join(
        f"{i['name']} ({kind_of(i, dim) or i['opclass']}{'' if i['valid'] else ', invalid'})" for i in indexes
    )
    return (
        f"RAGLINE_VECTOR_INDEX={kind} but chunks has no valid {kind} HNSW index"
        f" (found: {found or 'none'}): every vector search of a large tenant would read and sort the"
        f" whole tenant; run `ragline index rebuild --type {kind}`, or set RAGLINE_VECTOR_INDEX to the"
        " database's kind (docs/operations.md, Vector index and query planning)"
    )


def problem(conn: psycopg.Connection[DictRow], kind: str, dim: int) -> str | None:
    """Whether the database lacks the index the configured vector statement needs (see
    :func:`problem_with`); the connection's transaction is ended."""
    try:
        indexes = hnsw_indexes(conn)
    finally:
        conn.rollback()
    return problem_with(indexes, kind, dim)
