"""BM25 statistics for the lexical retriever: per tenant and text-search column, the number of
chunks and the sum of their lengths (distinct lexemes of the ``tsvector``), kept by a trigger.

BM25 needs, besides each chunk's term frequencies (``tsvector`` positions), the collection's size,
its average length and each query term's document frequency. Size and length live in
``lexical_stats``; the document frequencies are computed per question over the rows the GIN index
matches (``ragline.query.retrieve``): every row holding a query term matches an OR-ed query, so
that count is exact for the caller's scope and needs no table that parallel ingests of one tenant
would all write to (a frequent lexeme's counter row would serialise them).

The two counters would be such a row too: a tenant's parallel ingests would queue on it. So each
tenant and column has a few rows (``slot``, the writing backend's pid modulo 16) and the reader
sums them; two writers wait for each other only when their backends share a slot, and never in
a cycle (every statement touches ``russian`` before ``code``).

The trigger runs for each chunk row inserted, deleted, or updated in ``content``, ``context`` or
``code_tsv`` (the inputs of the two columns), in the writing statement's transaction: a rolled
back ingest leaves no count, a document deleted by cascade (tenant drop, retention) is
subtracted. Re-embedding and permission updates do not fire it (their chunk updates stay HOT,
0003). Existing rows are counted once when the migration runs (``CREATE TRIGGER`` holds a lock
that keeps writers out until the migration commits).

The query role reads the rows of its own tenant only (row-level security, as in 0007).
"""

from yoyo import step

__depends__ = {"0007_query_role_rls", "0008_code_search"}

ROLE = "ragline_query"
SLOTS = 16

steps = [
    step(
        """
        CREATE TABLE IF NOT EXISTS lexical_stats (
            tenant     text     NOT NULL,
            config     text     NOT NULL CHECK (config IN ('russian', 'code')),
            slot       smallint NOT NULL,
            docs       bigint   NOT NULL DEFAULT 0,
            total_len  bigint   NOT NULL DEFAULT 0,
            PRIMARY KEY (tenant, config, slot)
        )
        """,
        "DROP TABLE IF EXISTS lexical_stats",
    ),
    step(
        f"""
        CREATE OR REPLACE FUNCTION ragline_lexical_stats() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            s smallint := pg_backend_pid() % {SLOTS};
            d_docs bigint := 0;
            d_len bigint := 0;
            c_docs bigint := 0;
            c_len bigint := 0;
            t text;
        BEGIN
            IF TG_OP IN ('UPDATE', 'DELETE') THEN
                t := OLD.tenant;
                d_docs := d_docs - 1;
                d_len := d_len - length(OLD.tsv);
                IF OLD.code_tsv IS NOT NULL THEN
                    c_docs := c_docs - 1;
                    c_len := c_len - length(OLD.code_tsv);
                END IF;
            END IF;
            IF TG_OP IN ('UPDATE', 'INSERT') THEN
                IF TG_OP = 'UPDATE' AND NEW.tenant IS DISTINCT FROM OLD.tenant THEN
                    RAISE EXCEPTION 'a chunk cannot move to another tenant';
                END IF;
                t := NEW.tenant;
                d_docs := d_docs + 1;
                d_len := d_len + length(NEW.tsv);
                IF NEW.code_tsv IS NOT NULL THEN
                    c_docs := c_docs + 1;
                    c_len := c_len + length(NEW.code_tsv);
                END IF;
            END IF;
            IF d_docs <> 0 OR d_len <> 0 THEN
                INSERT INTO lexical_stats AS ls (tenant, config, slot, docs, total_len)
                VALUES (t, 'russian', s, d_docs, d_len)
                ON CONFLICT (tenant, config, slot) DO UPDATE
                SET docs = ls.docs + EXCLUDED.docs, total_len = ls.total_len + EXCLUDED.total_len;
            END IF;
            IF c_docs <> 0 OR c_len <> 0 THEN
                INSERT INTO lexical_stats AS ls (tenant, config, slot, docs, total_len)
                VALUES (t, 'code', s, c_docs, c_len)
                ON CONFLICT (tenant, config, slot) DO UPDATE
                SET docs = ls.docs + EXCLUDED.docs, total_len = ls.total_len + EXCLUDED.total_len;
            END IF;
            RETURN NULL;
        END
        $$
        """,
        "DROP FUNCTION IF EXISTS ragline_lexical_stats()",
    ),
    step(
        """
        CREATE TRIGGER chunks_lexical_stats
        AFTER INSERT OR DELETE OR UPDATE OF content, context, code_tsv ON chunks
        FOR EACH ROW EXECUTE FUNCTION ragline_lexical_stats()
        """,
        "DROP TRIGGER IF EXISTS chunks_lexical_stats ON chunks",
    ),
    step(
        """
        INSERT INTO lexical_stats (tenant, config, slot, docs, total_len)
        SELECT tenant, 'russian', 0, count(*), coalesce(sum(length(tsv)), 0) FROM chunks GROUP BY tenant
        UNION ALL
        SELECT tenant, 'code', 0, count(*), coalesce(sum(length(code_tsv)), 0)
        FROM chunks WHERE code_tsv IS NOT NULL GROUP BY tenant
        ON CONFLICT (tenant, config, slot) DO UPDATE
        SET docs = lexical_stats.docs + EXCLUDED.docs, total_len = lexical_stats.total_len + EXCLUDED.total_len
        """,
        "DELETE FROM lexical_stats",
    ),
    step(
        f"GRANT SELECT ON lexical_stats TO {ROLE};"
        " ALTER TABLE lexical_stats ENABLE ROW LEVEL SECURITY;"
        f" CREATE POLICY lexical_stats_query_scope ON lexical_stats FOR SELECT TO {ROLE}"
        " USING (tenant = NULLIF(current_setting('ragline.tenant', true), ''))",
        "DROP POLICY IF EXISTS lexical_stats_query_scope ON lexical_stats;"
        f" ALTER TABLE lexical_stats DISABLE ROW LEVEL SECURITY; REVOKE ALL ON lexical_stats FROM {ROLE}",
    ),
]
