"""Rows without a vector, by tenant and layer: a search counts the rows awaiting their vectors
without reading the rows the embedding budget keeps lexical.

Every vector or hybrid search counts the rows of its scope that await their vectors
(``unembedded_rows``). The partial index of 0016 keys the rows without a vector by tenant only, and
since the embedding budget keeps whole layers lexical (a code snapshot's symbol records and tests),
most of those rows never get a vector: the count read each of them (a heap visit under row-level
security) to learn that it was lexical-only. On an astropy snapshot, 7,826 symbol records, that was
15–21 ms of every code search, growing with the repository.

Keyed by tenant and then layer in code-point order (``COLLATE "C"``), the count reads the ranges of
layers between the lexical-only ones
(:meth:`ragline.shared.worker.pending_vectors.VectorBudget.awaiting`), so it visits only the rows
that await. The index replaces 0016's, whose every use it serves (tenant is its first column).
"""

from yoyo import step

__depends__ = {"0021_chunks_awaiting_by_layer"}

steps = [
    step(
        'CREATE INDEX chunks_without_vector ON chunks (tenant, (layer COLLATE "C")) WHERE embedding IS NULL',
        "DROP INDEX chunks_without_vector",
    ),
    step(
        "DROP INDEX chunks_awaiting_vectors",
        "CREATE INDEX chunks_awaiting_vectors ON chunks (tenant) WHERE embedding IS NULL",
    ),
]
