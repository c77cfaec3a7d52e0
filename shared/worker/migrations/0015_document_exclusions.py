"""Documents kept out of the index on purpose (``ragline docs delete --exclude``).

Deleting a document whose file is still in its folder (or its configured source) is undone by the
next ingest of that folder or reindex of that source. A row here keeps the doc id out: the ingest
pool refuses to store it, whatever sent it, until ``ragline docs include`` lifts the exclusion. It
outlives the document's tombstone and is separate from it, so a purge of tombstones keeps it.
"""

from yoyo import step

__depends__ = {"0013_index_deferrals"}

steps = [
    step(
        """
        CREATE TABLE document_exclusions (
            tenant text NOT NULL,
            doc_id text NOT NULL,
            reason text NOT NULL DEFAULT '',
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant, doc_id)
        )
        """,
        "DROP TABLE document_exclusions",
    ),
]
