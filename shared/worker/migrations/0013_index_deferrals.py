"""Bulk loads build the HNSW index after the rows, not row by row.

Inserting into a live HNSW index costs a graph search per row (at a million chunks on two cores
it bounds the store stage); building the graph once after a bulk load is many times cheaper. A row
here records one such window: which HNSW indexes were dropped (their definitions, to build them
again), why, and when it was closed. At most one window is open at a time; while it is open the
vector search is exact (no index to use), and ``ragline index status`` says so.
"""

from yoyo import step

__depends__ = {"0012_lexical_stats_per_statement"}

steps = [
    step(
        """
        CREATE TABLE index_deferrals (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            reason text NOT NULL,
            kind text NOT NULL,
            dropped jsonb NOT NULL DEFAULT '{}'::jsonb,
            started_at timestamptz NOT NULL DEFAULT now(),
            finished_at timestamptz,
            build_s double precision
        )
        """,
        "DROP TABLE index_deferrals",
    ),
    step(
        "CREATE UNIQUE INDEX index_deferrals_one_open ON index_deferrals ((true)) WHERE finished_at IS NULL",
        "DROP INDEX index_deferrals_one_open",
    ),
]
