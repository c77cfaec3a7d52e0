"""Make permission changes cheap: chunk ACL updates become HOT (heap-only) updates.

With a GIN index on ``chunks.acl`` every updated chunk row is written again into every index of
the table, HNSW included. Postgres updates a row in place (HOT, no index writes) only when no
index covers the changed column and the new version fits on the same page. A chunk row with its
vector fills about a quarter of a page: fillfactor 50 leaves room for a new version of every row
of the page. The price is a heap about twice as large; HNSW and tenant-index lookups fetch one
page per row either way. The measurements are in docs/architecture.md ("Performance notes").

Retrieval never used the GIN index on ``chunks.acl``: the tenant btree, HNSW or the tsvector GIN
choose the rows, and ``acl && groups`` is checked on them. ``documents.acl`` keeps its GIN index.
Existing rows get the new fillfactor when the table is rewritten (``VACUUM FULL chunks``).
"""

from yoyo import step

__depends__ = {"0002_lifecycle"}

steps = [
    step(
        "DROP INDEX IF EXISTS chunks_acl_gin",
        "CREATE INDEX IF NOT EXISTS chunks_acl_gin ON chunks USING gin (acl)",
    ),
    step("ALTER TABLE chunks SET (fillfactor = 50)", "ALTER TABLE chunks RESET (fillfactor)"),
]
