"""Rows awaiting their vectors: a partial index over the chunks stored before they are embedded.

Source files are stored searchable before their vectors exist (RAGLINE_INGEST_DEFER_VECTORS); each
search counts the pending rows in the caller's scope and ``ragline status`` counts them per tenant.
The index holds only those rows. Since the embedding budget (rows it keeps lexical-only never get a
vector) it also holds every lexical-only row, so a count by tenant alone reads them all; 0022
replaces it with ``(tenant, layer)``, which lets a search read only the rows that await.
"""

from yoyo import step

__depends__ = {"0014_acl_versions_by_sender"}

steps = [
    step(
        "CREATE INDEX chunks_awaiting_vectors ON chunks (tenant) WHERE embedding IS NULL",
        "DROP INDEX chunks_awaiting_vectors",
    ),
]
