"""Exclusions keep out a document's source and content, not only its doc id.

``docs delete --exclude`` recorded the doc id alone, so the same file upserted under another doc id
(another source name, an event naming it anew, a producer's inline copy) came back. An exclusion now
also holds the excluded document's source (``ingest/exclusions.py``'s ``source_key``: a file's
path, a ``git:`` address as the file in its repository) and its content hash, and the ingest pool
refuses a document matching any of the three. The rows already there take the source from their
document's tombstone (a tombstone keeps ``source_uri``; its content hash is gone, so an exclusion
made before this migration matches by doc id and source only).
"""

from yoyo import step

__depends__ = {"0022_chunks_without_vector_by_tenant_layer"}

steps = [
    step(
        "ALTER TABLE document_exclusions ADD COLUMN source text, ADD COLUMN content_hash text",
        "ALTER TABLE document_exclusions DROP COLUMN source, DROP COLUMN content_hash",
    ),
    step(
        r"""
        UPDATE document_exclusions x SET source = CASE
            WHEN d.source_uri LIKE 'git:%'
                THEN regexp_replace(d.source_uri, '^git:(.*?)@([0-9a-f]{64}|[0-9a-f]{40}):', '\1/')
            WHEN d.source_uri LIKE '%://%' AND d.source_uri NOT LIKE 'file://%'
                THEN split_part(d.source_uri, '#', 1)
            ELSE regexp_replace(d.source_uri, '^file://', '')
        END
        FROM documents d
        WHERE d.tenant = x.tenant AND d.doc_id = x.doc_id AND d.source_uri IS NOT NULL
        """
    ),
    step(
        "CREATE INDEX document_exclusions_source ON document_exclusions (tenant, source) WHERE source IS NOT NULL",
        "DROP INDEX document_exclusions_source",
    ),
    step(
        "CREATE INDEX document_exclusions_content ON document_exclusions (tenant, content_hash)"
        " WHERE content_hash IS NOT NULL",
        "DROP INDEX document_exclusions_content",
    ),
]
