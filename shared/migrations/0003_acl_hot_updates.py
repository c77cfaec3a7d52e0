"""Make permission changes cheap: chunk ACL updates become HOT updates.

Measured in bench d (ACL sync of 10,000 documents): with a GIN index on ``chunks.acl`` every
updated chunk row is written again into every index of the table, HNSW included (5,000 chunks:
1.8 s with the HNSW index, 0.17 s without). No index may cover ``chunks.acl`` for Postgres to
update the row in place (HOT), and the page needs free space: fillfactor 70.

Retrieval never used the GIN index on ``chunks.acl``: the tenant btree, HNSW or the tsvector GIN
choose the rows, and ``acl && groups`` is checked on them. ``documents.acl`` keeps its GIN index
for ACL administration.
"""

from yoyo import step

__depends__ = {"0002_lifecycle"}

steps = [
    step("DROP INDEX IF EXISTS chunks_acl_gin", "CREATE INDEX IF NOT EXISTS chunks_acl_gin ON chunks USING gin (acl)"),
    step("ALTER TABLE chunks SET (fillfactor = 70)", "ALTER TABLE chunks RESET (fillfactor)"),
]
