"""Lifecycle: indexes for ACL sync by path prefix and for listing a source's documents; job errors;
when a document error was resolved.

Documents deleted by an event stay as ``status = 'deleted'`` rows without chunks (tombstones), so an
older upsert that arrives late cannot bring them back.
"""

from yoyo import step

__depends__ = {"0001_initial"}

steps = [
    step(
        "CREATE INDEX IF NOT EXISTS documents_tenant_path ON documents (tenant, path text_pattern_ops)",
        "DROP INDEX IF EXISTS documents_tenant_path",
    ),
    step(
        "CREATE INDEX IF NOT EXISTS documents_source ON documents (tenant, (metadata->>'source'))",
        "DROP INDEX IF EXISTS documents_source",
    ),
    step(
        "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS error text", "ALTER TABLE jobs DROP COLUMN IF EXISTS error"
    ),
    step(
        "CREATE INDEX IF NOT EXISTS jobs_running_heartbeat ON jobs (heartbeat_at) WHERE state = 'running'",
        "DROP INDEX IF EXISTS jobs_running_heartbeat",
    ),
    step(
        "ALTER TABLE document_errors ADD COLUMN IF NOT EXISTS resolved_at timestamptz",
        "ALTER TABLE document_errors DROP COLUMN IF EXISTS resolved_at",
    ),
]
