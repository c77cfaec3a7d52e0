"""One clock for permission changes: a server sequence, with producers' versions kept apart.

``acl_change_seq`` orders every permission change: an applied change (ACL sync, acl event, an
upsert event's ``acl``) takes its next value, an ingest takes its job's (``jobs.acl_seq``, set
when the job is created) or its event's, and ``documents.acl_seq`` holds the clock of the change
that set ``acl``. ``documents.acl_versions`` maps each producer to the version of its last applied
change (only that producer's replays and older changes are dropped), and ``documents.ingest_acl``
is the ACL the last ingest asked for (a re-ingest changes permissions only when it asks for
different ones). ``job_documents.acl_outcome`` counts what an ingest did to permissions.

Existing rows: documents whose ACL came from a sync (``acl_version > 0``) get a clock value, so
their first re-ingest keeps them as before; the ACL of the others is recorded as what their
ingest asked for. Producer versions start empty: a change replayed across the upgrade applies
once more. ``acl_version`` is no longer read (kept for workers of the previous release during a
rolling upgrade).
"""

from yoyo import step

__depends__ = {"0004_documents_acl_hot_updates"}

steps = [
    step("CREATE SEQUENCE IF NOT EXISTS acl_change_seq", "DROP SEQUENCE IF EXISTS acl_change_seq"),
    step(
        "ALTER TABLE documents ADD COLUMN IF NOT EXISTS acl_seq bigint NOT NULL DEFAULT 0,"
        " ADD COLUMN IF NOT EXISTS acl_versions jsonb NOT NULL DEFAULT '{}',"
        " ADD COLUMN IF NOT EXISTS ingest_acl text[]",
        "ALTER TABLE documents DROP COLUMN IF EXISTS acl_seq, DROP COLUMN IF EXISTS acl_versions,"
        " DROP COLUMN IF EXISTS ingest_acl",
    ),
    step("UPDATE documents SET acl_seq = nextval('acl_change_seq') WHERE acl_version > 0"),
    step("UPDATE documents SET ingest_acl = acl WHERE acl_version = 0 AND status = 'ready'"),
    # NULL for jobs created before the clock: their requests take the clock when they are applied
    step(
        "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS acl_seq bigint",
        "ALTER TABLE jobs DROP COLUMN IF EXISTS acl_seq",
    ),
    step("ALTER TABLE jobs ALTER COLUMN acl_seq SET DEFAULT nextval('acl_change_seq')"),
    step(
        "ALTER TABLE job_documents ADD COLUMN IF NOT EXISTS acl_outcome text",
        "ALTER TABLE job_documents DROP COLUMN IF EXISTS acl_outcome",
    ),
]
