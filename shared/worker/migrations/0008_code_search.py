"""Code repositories: identifier-aware lexical search over code chunks, and the commit each git
source was indexed at.

``chunks.code_tsv`` holds a code chunk's identifier terms (``register_hook`` whole and split,
``getUserName`` as ``getusername``, ``get``, ``user``, ``name``; definition names and the path at
weight A), written by the ingest pipeline as a ``tsvector`` literal computed by
``ragline.shared.worker.identifiers``; the query side casts its terms to a ``tsquery`` with the same
tokenizer. It is NULL for every other chunk, so existing rows need no backfill, and its GIN index
is partial: it holds code chunks only, and writing other chunks never touches it. An ACL update does not touch it: chunk ACL updates stay HOT (0003).

``source_commits`` records, per tenant and git source, the last commit whose changes were queued
(a push event, ``ragline ingest`` of a repository), with the job that ingests them, the version
its documents were written with and the version of the push event: the next push diffs from this
commit, a push event not newer than the last one is ignored, and documents get a higher version
than before even when the commits' times go backwards.
"""

from yoyo import step

__depends__ = {"0005_acl_clock"}

steps = [
    step(
        "ALTER TABLE chunks ADD COLUMN IF NOT EXISTS code_tsv tsvector",
        "ALTER TABLE chunks DROP COLUMN IF EXISTS code_tsv",
    ),
    step(
        "CREATE INDEX IF NOT EXISTS chunks_code_tsv_gin ON chunks USING gin (code_tsv) WHERE code_tsv IS NOT NULL",
        "DROP INDEX IF EXISTS chunks_code_tsv_gin",
    ),
    step(
        """
        CREATE TABLE IF NOT EXISTS source_commits (
            tenant      text        NOT NULL,
            source      text        NOT NULL,
            repo        text        NOT NULL,
            commit_id   text        NOT NULL,
            version     bigint      NOT NULL,
            event_version bigint    NOT NULL DEFAULT 0,
            job_id      uuid,
            updated_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant, source)
        )
        """,
        "DROP TABLE IF EXISTS source_commits",
    ),
]
