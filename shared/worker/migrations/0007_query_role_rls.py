"""Row-level security for the query pool: a read-only role that sees one tenant's permitted rows.

``ragline_query`` is a group role without login, granted ``SELECT`` on ``chunks`` and ``documents``
and nothing else; the query pool connects as a login role that is a member of it
(``RAGLINE_SERVICES_QUERY_DATABASE_URL``; the embedded stack creates ``ragline_query_login``). Its policies
admit a row only when its tenant is ``ragline.tenant`` and its ACL shares a group with
``ragline.groups``, settings that every retrieval transaction sets for itself
(``ragline.query.retrieval.transaction.set_transaction_params``). Unset or empty settings admit nothing, so a
statement that forgot its scope, or a connection used outside a retrieval transaction, reads no
row instead of every tenant's.

The policy reads the settings directly, not through a sub-select: the planner then estimates
``acl && <groups>`` from the column's statistics (a sub-select's value is unknown when planning,
its default selectivity made the vector search of a large tenant sort the whole tenant instead of
walking the HNSW index).

Under row-level security Postgres uses a ``WHERE`` condition for an index only when its operator
is leakproof, and ``tsvector @@ tsquery`` is not marked so: the lexical search would read every
row of the tenant instead of the GIN index. A superuser running this migration marks it leakproof
(``ts_match_vq`` raises errors only about the query, a too deep or malformed one, never about the
row it is given, so it reveals nothing of rows the policy hides); otherwise an administrator runs
``ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF`` once, or the lexical list
of large tenants is slow (docs/operations.md). The mark is not part of a ``pg_dump``: the embedded
stack sets it again on every start (``ragline.shared.worker.db.ensure_query_login``).

The table owner (ingestion, the control pool, migrations) is not bound by these policies (no
``FORCE ROW LEVEL SECURITY``). Any other role that is not a member of ``ragline_query`` sees no
row of either table. The role is created when missing, which needs ``CREATEROLE``; where the
migrating user lacks it, an administrator creates ``ragline_query`` (``NOLOGIN``) first. Roles
belong to the cluster, so the rollback keeps it.
"""

from yoyo import step

__depends__ = {"0005_acl_clock"}

ROLE = "ragline_query"
SCOPE = (
    "tenant = NULLIF(current_setting('ragline.tenant', true), '')"
    " AND acl && NULLIF(current_setting('ragline.groups', true), '')::text[]"
)

steps = [
    step(
        f"""
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN
                CREATE ROLE {ROLE} NOLOGIN;
            END IF;
            EXECUTE format('GRANT USAGE ON SCHEMA %I TO {ROLE}', current_schema());
        END
        $$
        """
    ),
    step(
        f"GRANT SELECT ON chunks, documents TO {ROLE}",
        f"REVOKE ALL ON chunks, documents FROM {ROLE}",
    ),
    *(
        step(
            f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;"
            f" CREATE POLICY {table}_query_scope ON {table} FOR SELECT TO {ROLE} USING ({SCOPE})",
            f"DROP POLICY IF EXISTS {table}_query_scope ON {table};"
            f" ALTER TABLE {table} DISABLE ROW LEVEL SECURITY",
        )
        for table in ("chunks", "documents")
    ),
    step(
        """
        DO $$
        BEGIN
            IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
                ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF;
            ELSE
                RAISE NOTICE 'ts_match_vq is not leakproof: under row-level security the lexical'
                    ' search cannot use its GIN index until a superuser runs ALTER FUNCTION'
                    ' pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF';
            END IF;
        END
        $$
        """
    ),
]
