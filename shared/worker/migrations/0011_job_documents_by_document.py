"""Find a document's jobs without reading every job's rows.

``job_documents`` is keyed by job (``job_id, tenant, doc_id``): a job's progress reads its own rows.
``ragline docs show`` asks the other way round, for the last job of one document, which without
this index reads the whole table (one row per document per job, so it
grows with every reindex). Built concurrently: ingestion keeps writing while it is built.
"""

from yoyo import step

__depends__ = {"0010_chunk_file_names"}
__transactional__ = False

steps = [
    step(
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS job_documents_by_document"
        " ON job_documents (tenant, doc_id, updated_at DESC)",
        "DROP INDEX CONCURRENTLY IF EXISTS job_documents_by_document",
    ),
]
