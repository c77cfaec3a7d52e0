"""Rows without a vector, by layer: what the vector fill looks for, found without reading the table.

The partial index of 0016 keys the rows without a vector by tenant. Since the embedding budget
keeps whole layers lexical (the symbol records and tests of every code snapshot), most of those rows
never get a vector, and the fill's statement, which looks across every tenant for the rows that
will, made Postgres read the whole table (a parallel scan of 350,000 chunks, about a third of a
second, two or three times per fill task, while an ingest sends one fill task per batch). Keyed by layer,
the fill reads the layers holding rows without a vector (a few index probes) and then only the rows
of the layers it embeds (``ragline.shared.worker.pending_vectors.FILL_PREDICATE``).
"""

from yoyo import step

__depends__ = {"0020_chunks_scope_groups_once"}

steps = [
    step(
        "CREATE INDEX chunks_awaiting_by_layer ON chunks (layer) WHERE embedding IS NULL",
        "DROP INDEX chunks_awaiting_by_layer",
    ),
]
