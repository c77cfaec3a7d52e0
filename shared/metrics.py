"""Prometheus metrics (prometheus-client). Every pool records into these objects.

Prefork workers run in multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR`` is set by ``ragline up``
for the pools, and each pool serves the aggregated registry (see ``shared/metrics_server.py``).
Every name has the ``rag_`` prefix: the query path's metrics, then ingestion's and operations'.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_MS_BUCKETS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)

# --- query path ------------------------------------------------------------------------------
RETRIEVAL_LATENCY_MS = Histogram(
    "rag_retrieval_latency_ms", "Retrieval latency (ms)", ["mode"], buckets=_MS_BUCKETS
)
GENERATION_LATENCY_MS = Histogram(
    "rag_generation_latency_ms", "Answer generation latency (ms)", ["generator"], buckets=_MS_BUCKETS
)
TOKENS_INPUT = Counter("rag_tokens_input", "Prompt tokens sent to the generator", ["generator"])
TOKENS_OUTPUT = Counter("rag_tokens_output", "Completion tokens received from the generator", ["generator"])
RETRIEVED_CHUNKS = Histogram(
    "rag_retrieved_chunks", "Chunks returned per retrieval", buckets=(0, 1, 3, 5, 10, 20, 50, 100)
)
EMPTY_CONTEXT = Counter("rag_empty_context", "Questions answered with no context passing the threshold")
INVALID_CITATIONS = Counter(
    "rag_invalid_citations", "Answers rejected for citing a document not in the prompt"
)
RERANK_DEGRADED = Counter("rag_rerank_degraded", "Reranks that fell back to the fused order", ["reason"])
QUERY_DEGRADED = Counter("rag_query_degraded", "Searches that fell back to lexical only", ["reason"])

# --- ingestion -------------------------------------------------------------------------------
DOCUMENTS_PROCESSED = Counter("rag_documents_processed", "Documents processed by the ingest pool", ["status"])
CHUNKS_PROCESSED = Counter("rag_chunks_processed", "Chunks written by the ingest pool")
EMBED_BATCH_LATENCY_MS = Histogram(
    "rag_embed_batch_latency_ms", "Embedding batch latency (ms)", ["provider"], buckets=_MS_BUCKETS
)
EMBED_TEXTS = Counter("rag_embed_texts", "Texts sent to the embedder", ["provider"])
EMBED_CACHE_HITS = Counter("rag_embed_cache_hits", "Texts whose vector came from the embedding cache")
EMBED_429 = Counter("rag_embedder_429", "Embedder answers with HTTP 429", ["provider"])
EMBED_RETRIES = Counter("rag_embedder_retries", "Embedder request retries", ["provider"])
CONTEXTUALIZE_FALLBACK = Counter(
    "rag_contextualize_fallback", "Chunks whose contextualizer fell back to headings"
)

# --- operations ------------------------------------------------------------------------------
QUEUE_DEPTH = Gauge(
    "rag_queue_depth", "Messages waiting in a Celery queue", ["queue"], multiprocess_mode="max"
)
ACL_SYNC_LAG_S = Histogram(
    "rag_acl_sync_lag_seconds",
    "Time from permission event to applied",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 30, 60, 300),
)
ACL_CHANGES = Counter(
    "rag_acl_changes",
    "Permission changes by entry point (sync, event, ingest, reindex) and outcome (applied, stale,"
    " pending, not_found)",
    ["path", "outcome"],
)
