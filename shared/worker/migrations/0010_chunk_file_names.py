"""The file name of every chunk, indexed: the named-files lookup of the structural ranking.

A question that names a file (``requests/sessions.py``, a traceback's
``.../site-packages/flask/app.py``) adds the chunks of that file to the candidates
(``ragline.query.retrieval.structure.named_file_patterns``). The stored path starts with the source's name
and the question's path with anything, so the match is a suffix ``LIKE``, which no btree can
serve: every such question read all of the tenant's chunk rows. ``chunks.file_name`` is the
lower-cased last component of the path, a stored generated column (it follows every write of
``path`` by itself; ACL updates leave it unchanged and stay HOT), and ``(tenant, file_name)`` is
indexed: the lookup reads the rows of the named file names only, and applies the suffix ``LIKE``
to those. A column rather than an expression index because row-level security (0007) lets an
index serve only leakproof conditions, and ``lower``/``split_part`` are not; ``text = text`` is.
Adding a stored column rewrites the table once.
"""

from yoyo import step

__depends__ = {"0009_lexical_stats"}

steps = [
    step(
        "ALTER TABLE chunks ADD COLUMN IF NOT EXISTS file_name text"
        " GENERATED ALWAYS AS (lower(split_part(path, '/', -1))) STORED",
        "ALTER TABLE chunks DROP COLUMN IF EXISTS file_name",
    ),
    step(
        "CREATE INDEX IF NOT EXISTS chunks_tenant_file_name ON chunks (tenant, file_name)",
        "DROP INDEX IF EXISTS chunks_tenant_file_name",
    ),
]
