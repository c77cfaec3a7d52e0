"""Count inserted and deleted chunks once per statement, not once per row.

The row trigger of 0009 upserts a ``lexical_stats`` row for every chunk written. Inside one
transaction each upsert leaves a dead version of the same counter row that the next one has to
step over, so a transaction writing n chunks did O(n²) work: a COPY of 100,000 chunks took 158 s
instead of 9 s, and a million-row load never finished. Inserts and deletes now fire a statement
trigger that reads the statement's transition table and adds each tenant's totals in one upsert
per tenant and configuration; a document's store (one multi-row statement) also writes its counters
once instead of once per chunk.

Updates of ``content``, ``context`` or ``code_tsv`` keep the row trigger: a trigger with a column
list cannot have transition tables, and such updates are rare (re-embedding and permission
updates do not fire it). The rows each statement upserts are taken in (tenant, config) order, the
same order in every statement, so two writers of several tenants cannot deadlock.
"""

from yoyo import step

__depends__ = {"0011_job_documents_by_document"}

SLOTS = 16


def _counts(rows: str, sign: str) -> str:
    """The upsert of ``rows``' per-tenant counts (``sign`` '+' or '-') into this backend's slots."""
    return f"""
            INSERT INTO lexical_stats AS ls (tenant, config, slot, docs, total_len)
            SELECT tenant, config, s, {sign}count(*), {sign}coalesce(sum(len), 0)
            FROM (
                SELECT tenant, 'russian' AS config, length(tsv) AS len FROM {rows}
                UNION ALL
                SELECT tenant, 'code', length(code_tsv) FROM {rows} WHERE code_tsv IS NOT NULL
            ) r
            GROUP BY tenant, config
            ORDER BY tenant, config
            ON CONFLICT (tenant, config, slot) DO UPDATE
            SET docs = ls.docs + EXCLUDED.docs, total_len = ls.total_len + EXCLUDED.total_len;"""


steps = [
    step(
        f"""
        CREATE OR REPLACE FUNCTION ragline_lexical_stats_inserted() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            s smallint := pg_backend_pid() % {SLOTS};
        BEGIN
            {_counts("new_rows", "")}
            RETURN NULL;
        END
        $$;
        CREATE OR REPLACE FUNCTION ragline_lexical_stats_deleted() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            s smallint := pg_backend_pid() % {SLOTS};
        BEGIN
            {_counts("old_rows", "-")}
            RETURN NULL;
        END
        $$
        """,
        "DROP FUNCTION IF EXISTS ragline_lexical_stats_inserted();"
        " DROP FUNCTION IF EXISTS ragline_lexical_stats_deleted()",
    ),
    step(
        """
        DROP TRIGGER IF EXISTS chunks_lexical_stats ON chunks;
        CREATE TRIGGER chunks_lexical_stats
        AFTER UPDATE OF content, context, code_tsv ON chunks
        FOR EACH ROW EXECUTE FUNCTION ragline_lexical_stats();
        CREATE TRIGGER chunks_lexical_stats_inserted
        AFTER INSERT ON chunks REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION ragline_lexical_stats_inserted();
        CREATE TRIGGER chunks_lexical_stats_deleted
        AFTER DELETE ON chunks REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION ragline_lexical_stats_deleted()
        """,
        """
        DROP TRIGGER IF EXISTS chunks_lexical_stats_inserted ON chunks;
        DROP TRIGGER IF EXISTS chunks_lexical_stats_deleted ON chunks;
        DROP TRIGGER IF EXISTS chunks_lexical_stats ON chunks;
        CREATE TRIGGER chunks_lexical_stats
        AFTER INSERT OR DELETE OR UPDATE OF content, context, code_tsv ON chunks
        FOR EACH ROW EXECUTE FUNCTION ragline_lexical_stats()
        """,
    ),
]
