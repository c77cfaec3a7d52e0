"""Operations that span the pools, below the CLI and above the workers: the HNSW index lifecycle and
bulk-load windows, the evaluations (which send ingest and query tasks and read the catalog) and their
corpora, permission changes in batches. The CLI parses options and prints; benchmarks and tests call
these directly."""
