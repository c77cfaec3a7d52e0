"""Folders (or single files) the operator granted to a tenant for local ingestion.

A worker reads a local path named in a task only below a root allowed for the task's tenant: the
folders of the tenant's configured sources, ``RAGLINE_INGEST_ALLOWED_ROOTS``, and the rows of this
table. ``ragline ingest PATH`` writes them: the CLI holds database credentials, producers (a chat
backend sending events) hold only Redis ones, so a path inside a task payload can never grant
itself. ``root`` is the resolved absolute path on the machine that granted it.
"""

from yoyo import step

__depends__ = {"0005_acl_clock"}

steps = [
    step(
        """
        CREATE TABLE IF NOT EXISTS ingest_roots (
            tenant      text        NOT NULL,
            root        text        NOT NULL CHECK (left(root, 1) = '/'),
            granted_by  text        NOT NULL DEFAULT 'cli',
            granted_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant, root)
        )
        """,
        "DROP TABLE IF EXISTS ingest_roots",
    ),
]
