"""Document ACL updates become HOT too (see 0003 for chunks).

Nothing queries ``documents`` by ACL: retrieval filters ``chunks.acl``, and ACL sync and events
find documents by ``(tenant, doc_id)`` or ``(tenant, path)``. The GIN index on ``documents.acl``
only made every permission change write a new index entry in every index of the table. Without it,
and with room left on each page, the documents statement of an ACL sync of 10,000 documents took
0.08-0.09 s instead of 0.13-0.15 s (in-process, same data). Existing rows get the fillfactor when
the table is rewritten (``VACUUM FULL documents``).
"""

from yoyo import step

__depends__ = {"0003_acl_hot_updates"}

steps = [
    step(
        "DROP INDEX IF EXISTS documents_acl_gin",
        "CREATE INDEX IF NOT EXISTS documents_acl_gin ON documents USING gin (acl)",
    ),
    step("ALTER TABLE documents SET (fillfactor = 70)", "ALTER TABLE documents RESET (fillfactor)"),
]
