"""Document ACL updates become HOT too (see 0003 for chunks).

Nothing queries ``documents`` by ACL: retrieval filters ``chunks.acl``, and ACL sync and events
find documents by ``(tenant, doc_id)`` or ``(tenant, path)``. The GIN index on ``documents.acl``
only made every permission change write a new index entry in every index of the table; without
it, and with room left on each page, document ACL updates are HOT as well (measurement in
docs/architecture.md, "Performance notes"). Existing rows get the fillfactor when the table is
rewritten (``VACUUM FULL documents``).
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
