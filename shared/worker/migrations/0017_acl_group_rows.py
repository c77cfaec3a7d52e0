"""Caller-scoped counts: per tenant and ACL group, the number of chunks of the documents holding it.

A vector search chooses its path by the number of rows the caller can see
(``ragline.query.retrieval.transaction.vector_path``). The tenant's count (``lexical_stats``, 0009) says how
large the tenant is, not how much of it one caller's groups admit: a department that sees a tenth
of a large tenant was searched through HNSW (a filter that keeps under 1% of the index) or by
walking the whole tenant. ``acl_group_rows`` holds, for each ``(tenant, grp)``, the sum of
``documents.chunk_count`` over the documents whose ACL holds the group; the sum over a caller's
groups bounds what the caller sees (exact for one group, an upper bound when its groups overlap).

The counters are written by statement triggers on ``documents`` from the statement's transition
tables, once per statement whatever its size: an ingest's document upsert, an ACL sync's batch
update and a cascade delete each add one aggregate upsert. An update that changes neither ``acl``
nor ``chunk_count`` (a status change, a heartbeat) nets to zero and writes nothing. As in
``lexical_stats``, each ``(tenant, grp)`` has up to 16 rows (``slot``: the writing backend's pid
modulo 16) summed by the reader, so parallel ingests of one tenant do not queue on one counter
row, and each statement upserts its rows in ``(tenant, grp)`` order, so writers cannot deadlock.

The query role reads only its tenant's counters of the groups it holds (row-level security, as in
0007). Existing documents are counted once when the migration runs (``CREATE TRIGGER`` holds a
lock that keeps writers out until the migration commits).
"""

from yoyo import step

__depends__ = {"0016_chunks_awaiting_vectors"}

ROLE = "ragline_query"
SLOTS = 16


def _delta(rows: str, sign: str) -> str:
    """(tenant, grp, chunks) of ``rows``' documents, signed."""
    return f"SELECT tenant, unnest(acl) AS grp, {sign}chunk_count::bigint AS chunks FROM {rows}"


def _upsert(source: str) -> str:
    """Add ``source``'s per-(tenant, grp) totals into this backend's slot; zero totals write nothing."""
    return f"""
            INSERT INTO acl_group_rows AS a (tenant, grp, slot, chunks)
            SELECT tenant, grp, s, sum(chunks) FROM ({source}) r
            GROUP BY tenant, grp
            HAVING sum(chunks) <> 0
            ORDER BY tenant, grp
            ON CONFLICT (tenant, grp, slot) DO UPDATE SET chunks = a.chunks + EXCLUDED.chunks;"""


def _function(name: str, source: str) -> str:
    return f"""
        CREATE OR REPLACE FUNCTION {name}() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            s smallint := pg_backend_pid() % {SLOTS};
        BEGIN
            {_upsert(source)}
            RETURN NULL;
        END
        $$"""


FUNCTIONS = {
    "ragline_acl_rows_inserted": _delta("new_rows", ""),
    "ragline_acl_rows_deleted": _delta("old_rows", "-"),
    "ragline_acl_rows_updated": _delta("new_rows", "") + " UNION ALL " + _delta("old_rows", "-"),
}

steps = [
    step(
        """
        CREATE TABLE IF NOT EXISTS acl_group_rows (
            tenant  text     NOT NULL,
            grp     text     NOT NULL,
            slot    smallint NOT NULL,
            chunks  bigint   NOT NULL DEFAULT 0,
            PRIMARY KEY (tenant, grp, slot)
        )
        """,
        "DROP TABLE IF EXISTS acl_group_rows",
    ),
    step(
        ";".join(_function(name, source) for name, source in FUNCTIONS.items()),
        ";".join(f"DROP FUNCTION IF EXISTS {name}()" for name in FUNCTIONS),
    ),
    step(
        """
        CREATE TRIGGER documents_acl_rows_inserted
        AFTER INSERT ON documents REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION ragline_acl_rows_inserted();
        CREATE TRIGGER documents_acl_rows_deleted
        AFTER DELETE ON documents REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION ragline_acl_rows_deleted();
        CREATE TRIGGER documents_acl_rows_updated
        AFTER UPDATE ON documents REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION ragline_acl_rows_updated()
        """,
        "DROP TRIGGER IF EXISTS documents_acl_rows_inserted ON documents;"
        " DROP TRIGGER IF EXISTS documents_acl_rows_deleted ON documents;"
        " DROP TRIGGER IF EXISTS documents_acl_rows_updated ON documents",
    ),
    step(
        """
        INSERT INTO acl_group_rows (tenant, grp, slot, chunks)
        SELECT tenant, grp, 0, sum(chunk_count) FROM (SELECT tenant, unnest(acl) AS grp, chunk_count FROM documents) d
        GROUP BY tenant, grp
        ON CONFLICT (tenant, grp, slot) DO UPDATE SET chunks = acl_group_rows.chunks + EXCLUDED.chunks
        """,
        "DELETE FROM acl_group_rows",
    ),
    step(
        f"GRANT SELECT ON acl_group_rows TO {ROLE};"
        " ALTER TABLE acl_group_rows ENABLE ROW LEVEL SECURITY;"
        f" CREATE POLICY acl_group_rows_query_scope ON acl_group_rows FOR SELECT TO {ROLE}"
        " USING (tenant = NULLIF(current_setting('ragline.tenant', true), '')"
        " AND grp = ANY(NULLIF(current_setting('ragline.groups', true), '')::text[]))",
        "DROP POLICY IF EXISTS acl_group_rows_query_scope ON acl_group_rows;"
        f" ALTER TABLE acl_group_rows DISABLE ROW LEVEL SECURITY; REVOKE ALL ON acl_group_rows FROM {ROLE}",
    ),
]
