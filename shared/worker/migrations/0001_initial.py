"""Initial schema: documents, chunks (pgvector + russian full text), jobs, errors, embedding cache.

The vector dimension comes from ``RAGLINE_EMBED_DIM`` when the schema is first created; a
later change of dimension is a migration of its own (see docs/operations.md).
"""

from yoyo import step

from ragline.shared.config.settings import get_settings

__depends__: set[str] = set()

DIM = get_settings().embed.dim

steps = [
    step("CREATE EXTENSION IF NOT EXISTS vector", "DROP EXTENSION IF EXISTS vector"),
    step(
        """
        CREATE TABLE documents (
            tenant        text        NOT NULL,
            doc_id        text        NOT NULL,
            source_uri    text,
            path          text        NOT NULL DEFAULT '',
            layer         text        NOT NULL DEFAULT 'docs',
            title         text        NOT NULL DEFAULT '',
            content_hash  text,
            version       bigint      NOT NULL DEFAULT 0,
            acl           text[]      NOT NULL DEFAULT '{}',
            acl_version   bigint      NOT NULL DEFAULT 0,
            status        text        NOT NULL DEFAULT 'pending'
                          CHECK (status IN ('pending', 'ready', 'failed', 'deleted')),
            embed_model   text,
            chunk_count   integer     NOT NULL DEFAULT 0,
            metadata      jsonb       NOT NULL DEFAULT '{}',
            error         text,
            created_at    timestamptz NOT NULL DEFAULT now(),
            updated_at    timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant, doc_id)
        )
        """,
        "DROP TABLE documents",
    ),
    step(
        f"""
        CREATE TABLE chunks (
            id            bigserial   PRIMARY KEY,
            tenant        text        NOT NULL,
            doc_id        text        NOT NULL,
            chunk_no      integer     NOT NULL,
            path          text        NOT NULL DEFAULT '',
            layer         text        NOT NULL DEFAULT 'docs',
            heading_path  text        NOT NULL DEFAULT '',
            content       text        NOT NULL,
            context       text        NOT NULL DEFAULT '',
            content_hash  text        NOT NULL,
            page          integer,
            tsv           tsvector    GENERATED ALWAYS AS (
                              setweight(to_tsvector('russian', content), 'A')
                              || setweight(to_tsvector('russian', context), 'B')) STORED,
            embedding     vector({DIM}),
            embed_model   text,
            acl           text[]      NOT NULL DEFAULT '{{}}',
            metadata      jsonb       NOT NULL DEFAULT '{{}}',
            updated_at    timestamptz NOT NULL DEFAULT now(),
            UNIQUE (tenant, doc_id, chunk_no),
            FOREIGN KEY (tenant, doc_id) REFERENCES documents (tenant, doc_id) ON DELETE CASCADE
        )
        """,
        "DROP TABLE chunks",
    ),
    # keep vectors inline: a TOASTed vector is fetched from the TOAST table on every scan
    step("ALTER TABLE chunks ALTER COLUMN embedding SET STORAGE PLAIN"),
    step(
        "CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops)"
        " WITH (m = 16, ef_construction = 64)"
    ),
    step("CREATE INDEX chunks_tsv_gin ON chunks USING gin (tsv)"),
    step("CREATE INDEX chunks_acl_gin ON chunks USING gin (acl)"),
    step("CREATE INDEX chunks_tenant ON chunks (tenant)"),
    step("CREATE INDEX chunks_tenant_path ON chunks (tenant, path text_pattern_ops)"),
    step("CREATE INDEX documents_acl_gin ON documents USING gin (acl)"),
    step(
        """
        CREATE TABLE jobs (
            id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
            kind          text        NOT NULL,
            tenant        text,
            state         text        NOT NULL DEFAULT 'queued'
                          CHECK (state IN ('queued', 'running', 'succeeded', 'completed_with_errors',
                                           'failed', 'cancelled')),
            params        jsonb       NOT NULL DEFAULT '{}',
            result        jsonb,
            total         integer     NOT NULL DEFAULT 0,
            created_at    timestamptz NOT NULL DEFAULT now(),
            started_at    timestamptz,
            finished_at   timestamptz,
            heartbeat_at  timestamptz,
            progress_at   timestamptz
        )
        """,
        "DROP TABLE jobs",
    ),
    step("CREATE INDEX jobs_state ON jobs (state, created_at)"),
    step(
        """
        CREATE TABLE job_documents (
            job_id        uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
            tenant        text        NOT NULL,
            doc_id        text        NOT NULL,
            state         text        NOT NULL DEFAULT 'queued'
                          CHECK (state IN ('queued', 'running', 'done', 'skipped', 'failed')),
            chunks        integer     NOT NULL DEFAULT 0,
            embedded      integer     NOT NULL DEFAULT 0,
            error         text,
            updated_at    timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (job_id, tenant, doc_id)
        )
        """,
        "DROP TABLE job_documents",
    ),
    step(
        """
        CREATE TABLE document_errors (
            id            bigserial   PRIMARY KEY,
            job_id        uuid        REFERENCES jobs (id) ON DELETE SET NULL,
            tenant        text        NOT NULL,
            doc_id        text        NOT NULL,
            source_uri    text,
            stage         text        NOT NULL,
            error         text        NOT NULL,
            resolved      boolean     NOT NULL DEFAULT false,
            created_at    timestamptz NOT NULL DEFAULT now()
        )
        """,
        "DROP TABLE document_errors",
    ),
    step("CREATE INDEX document_errors_open ON document_errors (tenant, doc_id) WHERE NOT resolved"),
    step(
        """
        CREATE TABLE embedding_cache (
            model         text        NOT NULL,
            text_sha256   bytea       NOT NULL,
            embedding     vector      NOT NULL,
            created_at    timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (model, text_sha256)
        )
        """,
        "DROP TABLE embedding_cache",
    ),
    step("ALTER TABLE embedding_cache ALTER COLUMN embedding SET STORAGE PLAIN"),
]
