"""Prometheus metrics (prometheus-client). Every pool records into these objects.

Prefork workers run in multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR`` is set by ``ragline up``
for the pools, and each pool serves the aggregated registry (see ``shared/worker/metrics_server.py``).
Every name has the ``rag_`` prefix: the query path's metrics, then ingestion's and operations'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

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
UNGROUNDED_SENTENCES = Counter(
    "rag_ungrounded_sentences", "Answer sentences removed as unsupported by their cited documents", ["judge"]
)
UNGROUNDED_ANSWERS = Counter(
    "rag_ungrounded_answers", "Answers with at least one unsupported sentence", ["judge", "outcome"]
)
LOW_CONFIDENCE_ANSWERS = Counter(
    "rag_low_confidence_answers", "Answers withheld (no_answer) for a confidence below the minimum"
)
ANSWER_CONFIDENCE = Histogram(
    "rag_answer_confidence",
    "Confidence of returned answers",
    buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
)
CONTEXT_MERGED_CHUNKS = Counter("rag_context_merged_chunks", "Chunks merged into a neighbour's passage")
CONTEXT_DROPPED_CHUNKS = Counter(
    "rag_context_dropped_chunks", "Chunks left out of the prompt by the token budget"
)
ANSWER_STAGE_LATENCY_MS = Histogram(
    "rag_answer_stage_latency_ms",
    "Latency of the answer's stages: context, squeeze, self_consistency, grounding (ms)",
    ["stage"],
    buckets=_MS_BUCKETS,
)
RERANK_LATENCY_MS = Histogram(
    "rag_rerank_latency_ms",
    "Rerank latency (ms), fallbacks included: a slow provider shows here before it times out",
    ["provider"],
    buckets=_MS_BUCKETS,
)
QUERY_ERRORS = Counter(
    "rag_query_errors",
    "Questions answered with an error instead of a result (rate limited, deadline exceeded,"
    " retrieval timeout, internal error)",
    ["error"],
)

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
INGEST_STAGE_SECONDS = Histogram(
    "rag_ingest_stage_seconds",
    "Wall time of ingestion's stages (load, parse, chunk, contextualize, embed, store) by the layer of"
    " the rows they made; a time several layers share (an embedding request, a store transaction, the"
    " fill of deferred vectors) is split between them by their rows",
    ["stage", "layer"],
    buckets=(0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10, 60, 300),
)
CONTEXTUALIZE_FALLBACK = Counter(
    "rag_contextualize_fallback", "Chunks whose contextualizer fell back to headings"
)

# --- operations ------------------------------------------------------------------------------
QUEUE_DEPTH = Gauge(
    "rag_queue_depth", "Messages waiting in a Celery queue", ["queue"], multiprocess_mode="max"
)
ROWS_AWAITING_VECTORS = Gauge(
    "rag_rows_awaiting_vectors",
    "Rows stored searchable (lexically) that await their vectors from the fill, per tenant; read from"
    " the database when the ingest pool's endpoint is scraped",
    ["tenant"],
    multiprocess_mode="max",
)
ACL_SYNC_LAG_S = Histogram(
    "rag_acl_sync_lag_seconds",
    "Time from permission event to applied",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 30, 60, 300),
)
# no labels: the series exists at 0 from the start, so an alert on increase() sees the first one
JOBS_STUCK = Counter(
    "rag_jobs_stuck",
    "Running jobs marked failed by the stuck-job check (no heartbeat for RAGLINE_LIFECYCLE_JOB_STUCK_AFTER_S)",
)
ACL_CHANGES = Counter(
    "rag_acl_changes",
    "Permission changes by entry point (sync, event, ingest, reindex) and outcome (applied, stale,"
    " pending, not_found)",
    ["path", "outcome"],
)

# --- read replicas (shared/worker/replicas.py) --------------------------------------------------------
REPLICA_REPLAY_WAIT_S = Histogram(
    "rag_replica_replay_wait_seconds",
    "Time from a permission change's (or delete's) commit until every replica in the query pool's"
    " rotation replayed it, or the wait gave up (RAGLINE_SERVICES_REPLICA_MAX_LAG_S)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
REPLICA_EXCLUSIONS = Counter(
    "rag_replica_exclusions",
    "Replicas taken out of the query pool's rotation: behind a permission change after the wait"
    " (lag) or not answering its check (unreachable)",
    ["replica", "reason"],
)
REPLICA_READMISSIONS = Counter(
    "rag_replica_readmissions",
    "Replicas put back into rotation once they replayed what they missed",
    ["replica"],
)
QUERY_SERVER_FALLBACKS = Counter(
    "rag_query_server_fallbacks",
    "Query connections that went to another server than the first in turn: it failed (failed),"
    " or no replica was in rotation and the primary answered (primary)",
    ["reason"],
)


class ProcessRestarts:
    """``rag_process_restarts_total{process}``: how often ``ragline up``'s supervisor restarted each
    process of the embedded stack (``shared/stack/supervisor.py``). A collector over the supervisor's
    record, not a Counter: the supervisor is no pool process and a restarted one starts from zero.
    ``read`` returns the record (None without a supervisor: in a container the orchestrator counts
    restarts); ``names`` are the processes one pool's endpoint reports."""

    def __init__(self, read: Callable[[], dict | None], names: list[str]) -> None:
        self.read, self.names = read, names

    def collect(self) -> Iterator[CounterMetricFamily]:
        record = self.read()
        if record is None:
            return
        family = CounterMetricFamily(
            "rag_process_restarts",
            "Restarts of a dead process by ragline up's supervisor (backoff 1 s doubling to 60 s)",
            labels=["process"],
        )
        for name in self.names:
            family.add_metric([name], record.get(name, {}).get("restarts", 0))
        yield family


def observe_stage(stage: str, seconds: float, rows_by_layer: Mapping[str, float]) -> None:
    """``seconds`` of ``stage``, split between the layers in proportion to their rows: the one rule
    by which the ingest and fill paths attribute a shared time (:data:`INGEST_STAGE_SECONDS`)."""
    total = sum(rows_by_layer.values())
    for layer, rows in rows_by_layer.items():
        if rows > 0:
            INGEST_STAGE_SECONDS.labels(stage, layer).observe(seconds * rows / total)
