"""The GIN index on ``documents.acl`` again: the exact path over a caller's documents reads it.

A caller who sees a small part of a large tenant is searched exactly over the rows of the
documents its groups admit (``ragline.query.retrieval.transaction.vector_path``, "visible"): this index finds
those documents without walking the tenant, the ``(tenant, doc_id, chunk_no)`` index their chunks.
0004 dropped it to keep document ACL updates HOT; the price of having it back is one GIN entry per
group of each written document (an ACL sync's documents statement, an ingest's document upsert),
measured by benches d and f (docs/operations.md, "Vector index and query planning"). The chunks
keep no ACL index, so their ACL updates stay HOT (0003). Built concurrently: ingestion and ACL sync
keep writing while it is built.
"""

from yoyo import step

__depends__ = {"0017_acl_group_rows"}
__transactional__ = False

steps = [
    step(
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS documents_acl_gin ON documents USING gin (acl)",
        "DROP INDEX CONCURRENTLY IF EXISTS documents_acl_gin",
    ),
]
