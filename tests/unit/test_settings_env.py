"""Every environment variable reaches its field in the grouped settings, and every variable of 0.1
either still does (its name was already derived) or stops the settings with an error naming the
variable that replaced it.

``OLD_VARIABLES`` is the list of variables ragline 0.1 read (taken from the flat ``Settings`` and the
generated table in docs/configuration.md): the name, a valid non-default value as it would be
written in the environment, where the value lands, and the value expected there.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError
from typer.testing import CliRunner

from ragline.cli.config import app as config_app
from ragline.shared.config.renamed import REMOVED, RENAMED
from ragline.shared.config.settings import (
    PLATFORM_NAMES,
    RenamedVariables,
    Settings,
    env_name,
    renamed_message,
    reset_settings,
)

SOURCES = [{"name": "wiki", "kind": "folder", "tenant": "acme", "acl": ["staff"], "path": "/data/wiki"}]

# (variable, value in the environment, group.field, expected value)
OLD_VARIABLES: list[tuple[str, str, str, object]] = [
    ("RAGLINE_DATABASE_URL", "postgresql://u@db:5432/r", "services.database_url", "postgresql://u@db:5432/r"),
    ("DATABASE_URL", "postgresql://u@db2:5432/r", "services.database_url", "postgresql://u@db2:5432/r"),
    ("RAGLINE_REDIS_URL", "redis://cache:6379/1", "services.redis_url", "redis://cache:6379/1"),
    ("REDIS_URL", "redis://cache2:6379/2", "services.redis_url", "redis://cache2:6379/2"),
    ("RAGLINE_HOME", "/srv/ragline-home", "services.home", Path("/srv/ragline-home")),
    ("RAGLINE_PG_SHARED_BUFFERS", "2GB", "services.pg_shared_buffers", "2GB"),
    ("RAGLINE_REDIS_PORT", "6390", "services.redis_port", 6390),
    ("RAGLINE_REDIS_PASSWORD", "redis-secret", "services.redis_password", SecretStr("redis-secret")),
    ("RAGLINE_QUERY_DATABASE_URL", "postgresql://q@d/r", "services.query_database_url", "postgresql://q@d/r"),
    ("RAGLINE_REPLICA_MAX_LAG_S", "1.5", "services.replica_max_lag_s", 1.5),
    ("RAGLINE_QUERY_PRIMARY_READS", "never", "services.query_primary_reads", "never"),
    ("RAGLINE_REPLICA_RETRY_S", "7", "services.replica_retry_s", 7.0),
    ("RAGLINE_REPLICA_CONNECT_TIMEOUT_S", "0.5", "services.replica_connect_timeout_s", 0.5),
    ("RAGLINE_INGEST_CONCURRENCY", "5", "workers.ingest_concurrency", 5),
    ("RAGLINE_QUERY_CONCURRENCY", "6", "workers.query_concurrency", 6),
    ("RAGLINE_QUERY_POOL", "prefork", "workers.query_pool", "prefork"),
    ("RAGLINE_THREAD_POOL_SWITCH_INTERVAL_S", "0.002", "workers.thread_pool_switch_interval_s", 0.002),
    ("RAGLINE_ACL_CONCURRENCY", "3", "workers.acl_concurrency", 3),
    ("RAGLINE_WORKER_WARMUP", "false", "workers.warmup", False),
    ("RAGLINE_WORKER_START_TIMEOUT_S", "45.5", "workers.start_timeout_s", 45.5),
    ("RAGLINE_TASK_SOFT_TIME_LIMIT_S", "610", "workers.task_soft_time_limit_s", 610),
    ("RAGLINE_TASK_TIME_LIMIT_S", "910", "workers.task_time_limit_s", 910),
    ("RAGLINE_VISIBILITY_TIMEOUT_S", "7200", "workers.visibility_timeout_s", 7200),
    ("RAGLINE_UNACKED_RESTORE_INTERVAL_S", "2.5", "workers.unacked_restore_interval_s", 2.5),
    ("RAGLINE_WORKER_ALIVE_TTL_S", "20", "workers.alive_ttl_s", 20.0),
    ("RAGLINE_INGEST_MAX_WORKER_LOST", "4", "workers.ingest_max_worker_lost", 4),
    ("RAGLINE_REINDEX_SCHEDULE_S", "1800", "lifecycle.reindex_schedule_s", 1800.0),
    ("RAGLINE_FLOWER_HOST", "0.0.0.0", "flower.host", "0.0.0.0"),
    ("RAGLINE_FLOWER_PORT", "5556", "flower.port", 5556),
    ("RAGLINE_FLOWER_USER", "ops", "flower.user", "ops"),
    ("RAGLINE_FLOWER_PASSWORD", "flower-secret", "flower.password", SecretStr("flower-secret")),
    ("RAGLINE_METRICS_HOST", "0.0.0.0", "ops.metrics_host", "0.0.0.0"),
    ("RAGLINE_METRICS_PORT", "9600", "ops.metrics_port", 9600),
    ("RAGLINE_METRICS_USER", "prom", "ops.metrics_user", "prom"),
    ("RAGLINE_METRICS_PASSWORD", "metrics-secret", "ops.metrics_password", SecretStr("metrics-secret")),
    ("RAGLINE_RESULT_EXPIRES_S", "60", "ops.result_expires_s", 60),
    ("RAGLINE_LOG_LEVEL", "DEBUG", "ops.log_level", "DEBUG"),
    ("RAGLINE_LOG_JSON", "0", "ops.log_json", False),
    (
        "RAGLINE_SIGNING_KEY_FILE",
        "/etc/ragline/key.pem",
        "ops.signing_key_file",
        Path("/etc/ragline/key.pem"),
    ),
    (
        "RAGLINE_SIGNING_CERT_FILE",
        "/etc/ragline/cert.pem",
        "ops.signing_cert_file",
        Path("/etc/ragline/cert.pem"),
    ),
    (
        "RAGLINE_SIGNING_CERT_STORE",
        "/etc/ragline/certs",
        "ops.signing_cert_store",
        Path("/etc/ragline/certs"),
    ),
    ("RAGLINE_CHUNK_MAX_CHARS", "900", "chunk.max_chars", 900),
    ("RAGLINE_CHUNK_OVERLAP_RATIO", "0.2", "chunk.overlap_ratio", 0.2),
    ("RAGLINE_CHUNK_HARD_MAX_CHARS", "5000", "chunk.hard_max_chars", 5000),
    ("RAGLINE_CODE_SOURCE_LAYER", "src", "code.source_layer", "src"),
    ("RAGLINE_CODE_TESTS_LAYER", "tests", "code.tests_layer", "tests"),
    ("RAGLINE_CODE_TEST_GLOBS", '["qa/*"]', "code.test_globs", ["qa/*"]),
    ("RAGLINE_CODE_MAX_CHARS", "2000", "code.max_chars", 2000),
    ("RAGLINE_CODE_MIN_CHARS", "100", "code.min_chars", 100),
    ("RAGLINE_CODE_MAX_FILE_BYTES", "65536", "code.max_file_bytes", 65536),
    ("RAGLINE_CODE_MAX_LINE_CHARS", "400", "code.max_line_chars", 400),
    ("RAGLINE_CODE_BATCH_BYTES", "65536", "code.batch_bytes", 65536),
    ("RAGLINE_GIT_TIMEOUT_S", "60", "code.git_timeout_s", 60.0),
    ("RAGLINE_CODE_SYMBOLS", "false", "code.symbols", False),
    ("RAGLINE_CODE_SYMBOLS_LAYER", "map", "code.symbols_layer", "map"),
    ("RAGLINE_CODE_SYMBOL_DOC_CHARS", "120", "code.symbol_doc_chars", 120),
    ("RAGLINE_CODE_NAMED_FILES", "5", "code.named_files", 5),
    ("RAGLINE_CODE_FILE_RANK", "false", "code.file_rank", False),
    ("RAGLINE_CODE_LAYER_RANKS", '{"src": 0, "map": 1}', "code.layer_ranks", {"src": 0, "map": 1}),
    ("RAGLINE_CODE_STRUCTURE", "false", "code.structure", False),
    ("RAGLINE_EMBEDDER", "voyage", "embed.provider", "voyage"),
    ("RAGLINE_EMBED_MODEL", "voyage-4-lite", "embed.model", "voyage-4-lite"),
    ("RAGLINE_EMBED_DIM", "1024", "embed.dim", 1024),
    ("RAGLINE_EMBED_BATCH_SIZE", "64", "embed.batch_size", 64),
    ("RAGLINE_EMBED_BATCH_TOKENS", "50000", "embed.batch_tokens", 50000),
    ("RAGLINE_EMBED_MAX_IN_FLIGHT", "8", "embed.max_in_flight", 8),
    ("RAGLINE_EMBED_RPM", "2000", "embed.rpm", 2000),
    ("RAGLINE_EMBED_TPM", "3000000", "embed.tpm", 3000000),
    ("RAGLINE_EMBED_TIMEOUT_S", "12.5", "embed.timeout_s", 12.5),
    ("RAGLINE_EMBED_MAX_RETRIES", "2", "embed.max_retries", 2),
    ("RAGLINE_LOCAL_EMBED_BATCH", "16", "embed.local_batch", 16),
    (
        "RAGLINE_INGEST_ALLOWED_ROOTS",
        '["/data/a", "/data/b"]',
        "ingest.allowed_roots",
        [Path("/data/a"), Path("/data/b")],
    ),
    ("RAGLINE_EMBED_BACKOFF_BASE_S", "0.25", "embed.backoff_base_s", 0.25),
    ("RAGLINE_EMBED_BACKOFF_MAX_S", "10", "embed.backoff_max_s", 10.0),
    ("RAGLINE_EMBED_ADMISSION_WAIT_S", "60", "embed.admission_wait_s", 60.0),
    ("RAGLINE_CONTEXTUALIZE_MAX_TOKENS", "200", "context.max_tokens", 200),
    ("RAGLINE_CONTEXTUALIZE_TIMEOUT_S", "15", "context.timeout_s", 15.0),
    ("RAGLINE_CONTEXTUALIZE_MAX_RETRIES", "4", "context.max_retries", 4),
    ("RAGLINE_CONTEXTUALIZE_MAX_DOC_CHARS", "100000", "context.max_doc_chars", 100000),
    ("RAGLINE_INGEST_BATCH_DOCS", "64", "ingest.batch_docs", 64),
    ("RAGLINE_INGEST_BATCH_BYTES", "1048576", "ingest.batch_bytes", 1048576),
    ("RAGLINE_INGEST_MAX_BYTES", "1000000", "ingest.max_bytes", 1000000),
    ("RAGLINE_INGEST_MAX_TEXT_BYTES", "500000", "ingest.max_text_bytes", 500000),
    ("RAGLINE_INGEST_TASK_MAX_RETRIES", "7", "ingest.task_max_retries", 7),
    ("RAGLINE_FETCH_ALLOW_PRIVATE", "true", "ingest.fetch_allow_private", True),
    ("RAGLINE_FETCH_ALLOWED_NETWORKS", '["10.20.0.0/16"]', "ingest.fetch_allowed_networks", ["10.20.0.0/16"]),
    ("RAGLINE_FETCH_TIMEOUT_S", "20", "ingest.fetch_timeout_s", 20.0),
    ("RAGLINE_FETCH_MAX_REDIRECTS", "2", "ingest.fetch_max_redirects", 2),
    ("RAGLINE_PDF_MAX_PAGES", "500", "ingest.pdf_max_pages", 500),
    ("RAGLINE_PDF_MAX_STREAM_BYTES", "1048576", "ingest.pdf_max_stream_bytes", 1048576),
    ("RAGLINE_PDF_MAX_DECODED_BYTES", "8388608", "ingest.pdf_max_decoded_bytes", 8388608),
    ("RAGLINE_DOCX_MAX_XML_BYTES", "4194304", "ingest.docx_max_xml_bytes", 4194304),
    ("RAGLINE_CONTEXTUALIZER", "anthropic", "context.provider", "anthropic"),
    ("RAGLINE_RERANKER", "cross-encoder", "rerank.provider", "cross-encoder"),
    ("RAGLINE_RERANK_MODEL", "rerank-2.5-lite", "rerank.model", "rerank-2.5-lite"),
    ("RAGLINE_RERANK_MODEL_DIR", "/models/bge-reranker", "rerank.model_dir", Path("/models/bge-reranker")),
    ("RAGLINE_RERANK_CANDIDATES", "80", "rerank.candidates", 80),
    ("RAGLINE_RERANK_TOP_K", "8", "rerank.top_k", 8),
    ("RAGLINE_RERANK_THRESHOLD", "0.3", "rerank.threshold", 0.3),
    ("RAGLINE_RERANK_TIMEOUT_S", "1.5", "rerank.timeout_s", 1.5),
    ("RAGLINE_RERANK_MAX_CANDIDATES", "40", "rerank.max_candidates", 40),
    ("RAGLINE_RERANK_MAX_CHARS", "1000", "rerank.max_chars", 1000),
    ("RAGLINE_GENERATOR", "openai", "answer.provider", "openai"),
    ("RAGLINE_GENERATOR_MODEL", "claude-opus-4-1", "answer.model", "claude-opus-4-1"),
    ("RAGLINE_GENERATOR_TEMPERATURE", "0.4", "answer.temperature", 0.4),
    ("RAGLINE_GENERATOR_TIMEOUT_S", "90", "answer.timeout_s", 90.0),
    ("RAGLINE_VOYAGE_API_KEY", "pa-voyage-key", "providers.voyage_api_key", SecretStr("pa-voyage-key")),
    (
        "RAGLINE_VOYAGE_BASE_URL",
        "http://voyage.local/v1",
        "providers.voyage_base_url",
        "http://voyage.local/v1",
    ),
    ("RAGLINE_ANTHROPIC_API_KEY", "sk-ant-key", "providers.anthropic_api_key", SecretStr("sk-ant-key")),
    (
        "RAGLINE_ANTHROPIC_BASE_URL",
        "http://claude.local",
        "providers.anthropic_base_url",
        "http://claude.local",
    ),
    ("RAGLINE_ANTHROPIC_MODEL", "claude-sonnet-4-5", "context.model", "claude-sonnet-4-5"),
    ("RAGLINE_OLLAMA_BASE_URL", "http://ollama:11434", "providers.ollama_base_url", "http://ollama:11434"),
    ("RAGLINE_OPENAI_BASE_URL", "http://vllm:8000/v1", "providers.openai_base_url", "http://vllm:8000/v1"),
    ("RAGLINE_OPENAI_API_KEY", "sk-openai-key", "providers.openai_api_key", SecretStr("sk-openai-key")),
    ("RAGLINE_RETRIEVAL_TOP_N", "80", "retrieval.top_n", 80),
    ("RAGLINE_RRF_K", "30", "fusion.rrf_k", 30),
    ("RAGLINE_RRF_WEIGHT_VECTOR", "0.8", "fusion.rrf_weight_vector", 0.8),
    ("RAGLINE_RRF_WEIGHT_LEXICAL", "0.5", "fusion.rrf_weight_lexical", 0.5),
    ("RAGLINE_RRF_WEIGHT_LEXICAL_CROSS_SCRIPT", "0.01", "fusion.rrf_weight_lexical_cross_script", 0.01),
    ("RAGLINE_RRF_WEIGHT_LEXICAL_CODE", "0.25", "fusion.rrf_weight_lexical_code", 0.25),
    ("RAGLINE_HNSW_EF_SEARCH", "200", "vector.hnsw_ef_search", 200),
    ("RAGLINE_EXACT_SEARCH_MAX_ROWS", "5000", "vector.exact_search_max_rows", 5000),
    ("RAGLINE_VECTOR_INDEX", "halfvec", "vector.index", "halfvec"),
    ("RAGLINE_ANSWER_MIN_SCORE", "0.01", "answer.min_score", 0.01),
    ("RAGLINE_ANSWER_STREAM_MAXLEN", "200", "answer.stream_maxlen", 200),
    ("RAGLINE_ANSWER_STREAM_TTL_S", "60", "answer.stream_ttl_s", 60),
    ("RAGLINE_ANSWER_CONTEXT_MERGE", "false", "answer.context_merge", False),
    ("RAGLINE_ANSWER_CONTEXT_REORDER", "0", "answer.context_reorder", False),
    (
        "RAGLINE_ANSWER_CONTEXT_BUDGET_TOKENS",
        '{"anthropic": 4000}',
        "answer.context_budget_tokens",
        {"anthropic": 4000},
    ),
    ("RAGLINE_ANSWER_CONTEXT_SQUEEZE", "true", "answer.context_squeeze", True),
    ("RAGLINE_ANSWER_SQUEEZE_MIN_TOKENS", "800", "answer.squeeze_min_tokens", 800),
    ("RAGLINE_ANSWER_GROUNDING", "lexical", "answer.grounding", "lexical"),
    ("RAGLINE_ANSWER_GROUNDING_MIN_SHARE", "0.3", "answer.grounding_min_share", 0.3),
    ("RAGLINE_ANSWER_MAX_UNSUPPORTED_SHARE", "0.25", "answer.max_unsupported_share", 0.25),
    ("RAGLINE_ANSWER_SELF_CONSISTENCY", "3", "answer.self_consistency", 3),
    ("RAGLINE_ANSWER_MIN_CONFIDENCE", "0.6", "answer.min_confidence", 0.6),
    ("RAGLINE_PREFER_BONUS", "0.01", "fusion.prefer_bonus", 0.01),
    ("RAGLINE_LEXICAL_MATCH", "all", "lexical.match", "all"),
    ("RAGLINE_LEXICAL_RANK", "ts_rank_cd", "lexical.rank", "ts_rank_cd"),
    ("RAGLINE_LEXICAL_RANK_NORMALIZATION", "32", "lexical.rank_normalization", 32),
    ("RAGLINE_BM25_K1", "0.9", "lexical.bm25_k1", 0.9),
    ("RAGLINE_BM25_B", "0.4", "lexical.bm25_b", 0.4),
    ("RAGLINE_FUSION", "rrf", "fusion.method", "rrf"),
    ("RAGLINE_FUSION_CODE", "convex", "fusion.method_code", "convex"),
    ("RAGLINE_FUSION_NORMALIZATION", "zscore", "fusion.normalization", "zscore"),
    ("RAGLINE_CONVEX_WEIGHT_LEXICAL", "0.5", "fusion.convex_weight_lexical", 0.5),
    ("RAGLINE_PRF", "dense", "prf.mode", "dense"),
    ("RAGLINE_PRF_DOCS", "5", "prf.docs", 5),
    ("RAGLINE_PRF_ALPHA", "0.8", "prf.alpha", 0.8),
    ("RAGLINE_PRF_BETA", "0.25", "prf.beta", 0.25),
    ("RAGLINE_PRF_TERMS", "10", "prf.terms", 10),
    ("RAGLINE_PRF_TERM_WEIGHT", "0.5", "prf.term_weight", 0.5),
    ("RAGLINE_TEST_PENALTY", "0.02", "fusion.test_penalty", 0.02),
    ("RAGLINE_GENERATOR_MAX_TOKENS", "2048", "answer.max_tokens", 2048),
    ("RAGLINE_OPENAI_MODEL", "qwen2.5", "answer.openai_model", "qwen2.5"),
    ("RAGLINE_QUERY_REWRITE", "true", "transform.rewrite", True),
    ("RAGLINE_MULTI_QUERY", "3", "transform.multi_query", 3),
    ("RAGLINE_HYDE", "1", "transform.hyde", True),
    ("RAGLINE_RETRIEVAL_STATEMENT_TIMEOUT_MS", "500", "deadlines.statement_timeout_ms", 500),
    ("RAGLINE_LEXICAL_MAX_TERMS", "16", "lexical.max_terms", 16),
    ("RAGLINE_QUESTION_DEADLINE_S", "12.5", "deadlines.question_s", 12.5),
    ("RAGLINE_QUERY_TENANT_RATE", "2.5", "admission.tenant_rate", 2.5),
    ("RAGLINE_QUERY_TENANT_BURST", "5", "admission.tenant_burst", 5),
    ("RAGLINE_QUERY_TENANT_MAX_IN_FLIGHT", "3", "admission.tenant_max_in_flight", 3),
    ("RAGLINE_AGENTIC", "yes", "answer.agentic", True),
    ("RAGLINE_AGENTIC_MAX_ROUNDS", "5", "answer.agentic_max_rounds", 5),
    ("RAGLINE_AGENTIC_MAX_SEARCHES", "10", "answer.agentic_max_searches", 10),
    ("RAGLINE_AGENTIC_MAX_EVIDENCE", "20", "answer.agentic_max_evidence", 20),
    ("RAGLINE_ANSWER_DECOMPOSE", "rules", "answer.decompose", "rules"),
    ("RAGLINE_QUERY_EMBED_TIMEOUT_S", "1.5", "deadlines.query_embed_timeout_s", 1.5),
    ("RAGLINE_QUERY_CACHE_SIZE", "0", "retrieval.query_cache_size", 0),
    ("RAGLINE_SOURCES", json.dumps(SOURCES), "lifecycle.sources", SOURCES),
    ("RAGLINE_HTTP_SOURCE_TIMEOUT_S", "20", "lifecycle.http_source_timeout_s", 20.0),
    ("RAGLINE_JOB_STUCK_AFTER_S", "3600", "lifecycle.job_stuck_after_s", 3600.0),
    ("RAGLINE_STUCK_CHECK_SCHEDULE_S", "30", "lifecycle.stuck_check_schedule_s", 30.0),
    ("RAGLINE_TOMBSTONE_RETENTION_DAYS", "90", "lifecycle.tombstone_retention_days", 90.0),
    ("RAGLINE_JOB_RETENTION_DAYS", "7", "lifecycle.job_retention_days", 7.0),
    ("RAGLINE_PURGE_SCHEDULE_S", "43200", "lifecycle.purge_schedule_s", 43200.0),
    ("RAGLINE_ACL_SYNC_BATCH_SIZE", "500", "lifecycle.acl_sync_batch_size", 500),
    ("RAGLINE_LIFECYCLE_MAX_CLOCK_SKEW_S", "60", "lifecycle.max_clock_skew_s", 60.0),  # new: no old name
    ("RAGLINE_REEMBED_BATCH_SIZE", "128", "lifecycle.reembed_batch_size", 128),
    # derived names of the retrieval group, before it was split by stage
    ("RAGLINE_RETRIEVAL_RRF_K", "30", "fusion.rrf_k", 30),
    ("RAGLINE_RETRIEVAL_RRF_WEIGHT_VECTOR", "0.8", "fusion.rrf_weight_vector", 0.8),
    ("RAGLINE_RETRIEVAL_RRF_WEIGHT_LEXICAL", "0.5", "fusion.rrf_weight_lexical", 0.5),
    (
        "RAGLINE_RETRIEVAL_RRF_WEIGHT_LEXICAL_CROSS_SCRIPT",
        "0.01",
        "fusion.rrf_weight_lexical_cross_script",
        0.01,
    ),
    ("RAGLINE_RETRIEVAL_RRF_WEIGHT_LEXICAL_CODE", "0.25", "fusion.rrf_weight_lexical_code", 0.25),
    ("RAGLINE_RETRIEVAL_HNSW_EF_SEARCH", "200", "vector.hnsw_ef_search", 200),
    ("RAGLINE_RETRIEVAL_EXACT_SEARCH_MAX_ROWS", "5000", "vector.exact_search_max_rows", 5000),
    ("RAGLINE_RETRIEVAL_VECTOR_INDEX", "halfvec", "vector.index", "halfvec"),
    ("RAGLINE_RETRIEVAL_LEXICAL_MATCH", "all", "lexical.match", "all"),
    ("RAGLINE_RETRIEVAL_LEXICAL_RANK", "ts_rank_cd", "lexical.rank", "ts_rank_cd"),
    ("RAGLINE_RETRIEVAL_BM25_K1", "0.9", "lexical.bm25_k1", 0.9),
    ("RAGLINE_RETRIEVAL_BM25_B", "0.4", "lexical.bm25_b", 0.4),
    ("RAGLINE_RETRIEVAL_FUSION", "rrf", "fusion.method", "rrf"),
    ("RAGLINE_RETRIEVAL_FUSION_CODE", "convex", "fusion.method_code", "convex"),
    ("RAGLINE_RETRIEVAL_FUSION_NORMALIZATION", "zscore", "fusion.normalization", "zscore"),
    ("RAGLINE_RETRIEVAL_CONVEX_WEIGHT_LEXICAL", "0.5", "fusion.convex_weight_lexical", 0.5),
    ("RAGLINE_RETRIEVAL_LEXICAL_RANK_NORMALIZATION", "32", "lexical.rank_normalization", 32),
    ("RAGLINE_RETRIEVAL_PRF", "dense", "prf.mode", "dense"),
    ("RAGLINE_RETRIEVAL_PRF_DOCS", "5", "prf.docs", 5),
    ("RAGLINE_RETRIEVAL_PRF_ALPHA", "0.8", "prf.alpha", 0.8),
    ("RAGLINE_RETRIEVAL_PRF_BETA", "0.25", "prf.beta", 0.25),
    ("RAGLINE_RETRIEVAL_PRF_TERMS", "10", "prf.terms", 10),
    ("RAGLINE_RETRIEVAL_PRF_TERM_WEIGHT", "0.5", "prf.term_weight", 0.5),
    ("RAGLINE_RETRIEVAL_PREFER_BONUS", "0.01", "fusion.prefer_bonus", 0.01),
    ("RAGLINE_RETRIEVAL_TEST_PENALTY", "0.02", "fusion.test_penalty", 0.02),
    ("RAGLINE_RETRIEVAL_QUERY_EMBED_TIMEOUT_S", "1.5", "deadlines.query_embed_timeout_s", 1.5),
    ("RAGLINE_RETRIEVAL_QUERY_REWRITE", "true", "transform.rewrite", True),
    ("RAGLINE_RETRIEVAL_MULTI_QUERY", "3", "transform.multi_query", 3),
    ("RAGLINE_RETRIEVAL_HYDE", "1", "transform.hyde", True),
    ("RAGLINE_RETRIEVAL_LEXICAL_MAX_TERMS", "16", "lexical.max_terms", 16),
    ("RAGLINE_RETRIEVAL_QUESTION_DEADLINE_S", "12.5", "deadlines.question_s", 12.5),
    ("RAGLINE_RETRIEVAL_TENANT_RATE", "2.5", "admission.tenant_rate", 2.5),
    ("RAGLINE_RETRIEVAL_TENANT_BURST", "5", "admission.tenant_burst", 5),
    ("RAGLINE_RETRIEVAL_TENANT_MAX_IN_FLIGHT", "3", "admission.tenant_max_in_flight", 3),
]


@pytest.fixture(autouse=True)
def _forget_cached_settings():
    reset_settings()
    yield
    reset_settings()


def _clean_env(monkeypatch, tmp_path: Path) -> None:
    """No ragline variable from the caller's environment and no ``.env`` of the repository."""
    for name in list(os.environ):
        if name.upper().startswith("RAGLINE_") or name.upper() in ("DATABASE_URL", "REDIS_URL"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _at(settings: Settings, path: str) -> object:
    group, field = path.split(".")
    return getattr(getattr(settings, group), field)


def _plain(value: object) -> object:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def test_every_old_variable_is_derived_or_renamed_to_the_derived_name():
    """The table of renamed variables is exactly the 0.1 names that are not derived, each mapped to
    the derived name of the setting it set (a table that forgot one would let it be ignored)."""
    renamed = {}
    for variable, _raw, path, _expected in OLD_VARIABLES:
        derived = env_name(*path.split("."))
        if variable in PLATFORM_NAMES:
            assert Settings.env_names(*path.split(".")) == (derived, variable)
        elif variable != derived:
            renamed[variable] = derived
    assert renamed == RENAMED


#: the settings 0.2 removed (:data:`REMOVED`), which old variables may still name
GONE = {path for _v, _r, path, _e in OLD_VARIABLES if env_name(*path.split(".")) in REMOVED}
RENAMED_ROWS = [row for row in OLD_VARIABLES if row[0] in RENAMED and row[2] not in GONE]
RENAMED_TO_REMOVED = [row for row in OLD_VARIABLES if row[0] in RENAMED and row[2] in GONE]


@pytest.mark.parametrize("where", ["env", ".env"])
@pytest.mark.parametrize(
    ("variable", "raw", "path", "expected"), RENAMED_ROWS, ids=[r[0] for r in RENAMED_ROWS]
)
def test_a_renamed_variable_stops_the_settings_naming_its_replacement(
    monkeypatch, tmp_path, where, variable, raw, path, expected
):
    _clean_env(monkeypatch, tmp_path)
    if where == "env":
        monkeypatch.setenv(variable, raw)
    else:
        (tmp_path / ".env").write_text(f"{variable}={raw}\n")
    with pytest.raises(RenamedVariables) as caught:
        Settings()
    assert caught.value.renamed == [(variable, RENAMED[variable])]
    assert f"{variable} is no longer read: set {RENAMED[variable]}" in str(caught.value)
    if len(raw) > 3:  # the value is never shown (a short one may occur in the text by chance)
        assert raw not in str(caught.value)


def test_a_renamed_variable_stops_the_settings_even_beside_its_replacement(monkeypatch, tmp_path):
    _clean_env(monkeypatch, tmp_path)
    monkeypatch.setenv("RAGLINE_EMBEDDER", "voyage")
    monkeypatch.setenv("RAGLINE_EMBED_PROVIDER", "ollama")
    (tmp_path / ".env").write_text("RAGLINE_RRF_K=61\n")
    with pytest.raises(RenamedVariables) as caught:
        Settings()
    assert caught.value.renamed == [
        ("RAGLINE_EMBEDDER", "RAGLINE_EMBED_PROVIDER"),
        ("RAGLINE_RRF_K", "RAGLINE_FUSION_RRF_K"),
    ]


def test_a_renamed_variable_whose_setting_was_removed_is_named_as_removed():
    assert renamed_message("RAGLINE_EMBEDDER", "RAGLINE_EMBED_PROVIDER") == (
        "RAGLINE_EMBEDDER is no longer read: set RAGLINE_EMBED_PROVIDER"
    )
    assert renamed_message("RAGLINE_OLD", "RAGLINE_CHUNK_NO_SUCH_SETTING") == (
        "RAGLINE_OLD is no longer read, and its setting (RAGLINE_CHUNK_NO_SUCH_SETTING) was removed: unset it"
    )


@pytest.mark.parametrize("variable", sorted(REMOVED))
def test_a_removed_variable_stops_the_settings_saying_what_became_of_it(monkeypatch, tmp_path, variable):
    """A variable 0.2 removed is refused as set, with what became of it; a ranking weight names its
    constant, a real field of that module's constant (no stale pointer)."""
    _clean_env(monkeypatch, tmp_path)
    monkeypatch.setenv(variable, "0.5")
    with pytest.raises(RenamedVariables) as caught:
        Settings()
    assert caught.value.renamed == [(variable, REMOVED[variable])]
    assert f"{variable} is no longer read ({REMOVED[variable]}): unset it" in str(caught.value)
    assert variable.removeprefix("RAGLINE_").lower() not in {f"{g}_{n}" for g, n, _ in Settings.iter_fields()}
    if REMOVED[variable].startswith("now a constant: "):
        path, attribute = REMOVED[variable].removeprefix("now a constant: ").split(" ")
        module = importlib.import_module("ragline." + path.removesuffix(".py").replace("/", "."))
        constant, _, field = attribute.partition(".")
        assert hasattr(module, constant)
        assert not field or field in {f.name for f in dataclasses.fields(getattr(module, constant))}


@pytest.mark.parametrize(
    ("variable", "raw", "path", "expected"), RENAMED_TO_REMOVED, ids=[r[0] for r in RENAMED_TO_REMOVED]
)
def test_a_renamed_variable_whose_setting_0_2_removed_says_so(
    monkeypatch, tmp_path, variable, raw, path, expected
):
    _clean_env(monkeypatch, tmp_path)
    monkeypatch.setenv(variable, raw)
    with pytest.raises(RenamedVariables) as caught:
        Settings()
    assert (
        f"{variable} is no longer read, and its setting ({RENAMED[variable]}) was removed: unset it"
        in str(caught.value)
    )


def test_ragline_config_names_each_renamed_variable_and_fails(monkeypatch, tmp_path):
    _clean_env(monkeypatch, tmp_path)
    monkeypatch.setenv("RAGLINE_QUERY_POOL", "solo")
    monkeypatch.setenv("RAGLINE_METRICS_PASSWORD", "metrics-old-name-pw")
    result = CliRunner().invoke(config_app, [])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: RAGLINE_METRICS_PASSWORD is no longer read: set RAGLINE_OPS_METRICS_PASSWORD",
        "error: RAGLINE_QUERY_POOL is no longer read: set RAGLINE_WORKERS_QUERY_POOL",
    ]
    assert "metrics-old-name-pw" not in result.output


def test_the_prefixed_url_wins_over_the_platform_one(monkeypatch, tmp_path):
    _clean_env(monkeypatch, tmp_path)
    monkeypatch.setenv("DATABASE_URL", "postgresql://platform/db")
    monkeypatch.setenv("RAGLINE_SERVICES_DATABASE_URL", "postgresql://ragline/db")
    monkeypatch.setenv("REDIS_URL", "redis://platform:6379/0")
    s = Settings()
    assert s.services.database_url == "postgresql://ragline/db"
    assert s.services.redis_url == "redis://platform:6379/0"
    assert not s.embedded_db and not s.embedded_redis
    assert s.effective_redis_url() == "redis://platform:6379/0"


def test_dotenv_file_is_read_and_the_environment_wins(monkeypatch, tmp_path):
    _clean_env(monkeypatch, tmp_path)
    (tmp_path / ".env").write_text(
        "RAGLINE_CHUNK_MAX_CHARS=950\n"
        "RAGLINE_EMBED_RPM=120\n"
        "DATABASE_URL=postgresql://dotenv/db\n"
        "RAGLINE_PROVIDERS_VOYAGE_API_KEY=pa-from-dotenv\n"
        'RAGLINE_INGEST_ALLOWED_ROOTS=["/data/docs"]\n'
    )
    monkeypatch.setenv("RAGLINE_EMBED_RPM", "60")
    s = Settings()
    assert s.chunk.max_chars == 950
    assert s.embed.rpm == 60
    assert s.services.database_url == "postgresql://dotenv/db"
    assert s.providers.voyage_api_key.get_secret_value() == "pa-from-dotenv"
    assert s.ingest.allowed_roots == [Path("/data/docs")]


def test_keyword_overrides_take_variable_names_or_groups(monkeypatch, tmp_path):
    _clean_env(monkeypatch, tmp_path)
    monkeypatch.setenv("RAGLINE_CHUNK_MAX_CHARS", "950")
    monkeypatch.setenv("RAGLINE_CHUNK_HARD_MAX_CHARS", "4500")
    flat = Settings(chunk_max_chars=700, embed_provider="ollama", services_home=tmp_path)
    assert (flat.chunk.max_chars, flat.chunk.hard_max_chars) == (700, 4500)
    assert flat.embed.provider == "ollama" and flat.services.home == tmp_path
    nested = Settings(chunk={"max_chars": 700}, embed={"provider": "ollama"})
    assert (nested.chunk.max_chars, nested.chunk.hard_max_chars) == (700, 4500)
    assert nested.embed.provider == "ollama"
    with pytest.raises(ValidationError, match="no_such_setting"):
        Settings(no_such_setting=1)
    with pytest.raises(ValidationError, match="embedder"):  # a keyword of 0.1
        Settings(embedder="ollama")
    with pytest.raises(ValidationError, match="max_charz"):
        Settings(chunk={"max_charz": 1})


def test_constraints_are_checked(monkeypatch, tmp_path):
    _clean_env(monkeypatch, tmp_path)
    monkeypatch.setenv("RAGLINE_EMBED_BATCH_SIZE", "129")
    with pytest.raises(ValidationError, match="RAGLINE_EMBED_BATCH_SIZE"):
        Settings()
    monkeypatch.delenv("RAGLINE_EMBED_BATCH_SIZE")
    with pytest.raises(ValidationError):
        Settings(transform_multi_query=6)
    with pytest.raises(ValidationError):
        Settings(lifecycle={"purge_schedule_s": 0})
    monkeypatch.setenv("RAGLINE_WORKERS_QUERY_POOL", "gevent")
    with pytest.raises(ValidationError, match="RAGLINE_WORKERS_QUERY_POOL"):  # the name that was set
        Settings()


def test_secrets_stay_masked(monkeypatch, tmp_path):
    _clean_env(monkeypatch, tmp_path)
    monkeypatch.setenv("RAGLINE_PROVIDERS_VOYAGE_API_KEY", "pa-very-secret-key")
    monkeypatch.setenv("RAGLINE_FLOWER_PASSWORD", "flower-very-secret")
    s = Settings()
    assert isinstance(s.providers.voyage_api_key, SecretStr)
    assert "pa-very-secret-key" not in repr(s) and "flower-very-secret" not in str(s)

    out = CliRunner().invoke(config_app, []).output
    shown = json.loads(CliRunner().invoke(config_app, []).stdout)
    assert shown["providers"]["voyage_api_key"] == "***"
    assert shown["flower"]["password"] == "***"
    assert shown["chunk"]["max_chars"] == 800
    assert "pa-very-secret-key" not in out and "flower-very-secret" not in out


# ------------------------------------------------------------------------------ derived names
#: settings added since names were derived: they have the derived name only
NEW_VARIABLES: list[tuple[str, str, str, object]] = [
    ("RAGLINE_SERVICES_REDIS_ROLE", "chat", "services.redis_role", "chat"),
    ("RAGLINE_SERVICES_REDIS_AOF_REWRITE_MIN_MB", "2", "services.redis_aof_rewrite_min_mb", 2),
    ("RAGLINE_SERVICES_REDIS_APPENDFSYNC", "always", "services.redis_appendfsync", "always"),
    ("RAGLINE_SERVICES_REDIS_MAXMEMORY_MB", "64", "services.redis_maxmemory_mb", 64),
    ("RAGLINE_INGEST_DEFER_VECTORS", "all", "ingest.defer_vectors", "all"),
    ("RAGLINE_INGEST_FILL_BATCH_ROWS", "64", "ingest.fill_batch_rows", 64),
    (
        "RAGLINE_INGEST_LEXICAL_ONLY_LAYERS",
        '["C0_TEST_CHUNKS"]',
        "ingest.lexical_only_layers",
        ["C0_TEST_CHUNKS"],
    ),
    ("RAGLINE_INGEST_FILL_BATCHES_PER_TASK", "2", "ingest.fill_batches_per_task", 2),
    ("RAGLINE_INGEST_FILL_RUNNERS", "3", "ingest.fill_runners", 3),
    ("RAGLINE_INGEST_PARSE_TIMEOUT_S", "5", "ingest.parse_timeout_s", 5.0),
    ("RAGLINE_SERVICES_STACK_CHANGE_WAIT_S", "5", "services.stack_change_wait_s", 5.0),
    ("RAGLINE_RETRIEVAL_CORPUS_TERMS", "false", "retrieval.corpus_terms", False),
    ("RAGLINE_ANSWER_EXPAND", "section", "answer.expand", "section"),
]
#: every setting once, by its derived name, with the value and expectation of its old variable
DERIVED_VARIABLES = (
    list(
        {
            path: (RENAMED.get(variable, variable), raw, path, expected)
            for variable, raw, path, expected in OLD_VARIABLES
            if variable not in PLATFORM_NAMES and path not in GONE
        }.values()
    )
    + NEW_VARIABLES
)


def test_every_name_is_derived_from_its_group_and_field():
    for group, name, _field in Settings.iter_fields():
        assert Settings.env_names(group, name)[0] == f"RAGLINE_{group.upper()}_{name.upper()}"
    assert {row[2] for row in DERIVED_VARIABLES} == {f"{g}.{n}" for g, n, _ in Settings.iter_fields()}


@pytest.mark.parametrize(
    ("variable", "raw", "path", "expected"), DERIVED_VARIABLES, ids=[r[0] for r in DERIVED_VARIABLES]
)
def test_derived_variable_reaches_its_field(monkeypatch, tmp_path, variable, raw, path, expected):
    _clean_env(monkeypatch, tmp_path)
    monkeypatch.setenv(variable, raw)
    value = _at(Settings(), path)
    assert type(value) is type(expected) and _plain(value) == _plain(expected)


def test_any_ragline_command_names_the_renamed_variables_without_a_traceback(tmp_path):
    """The console script reports a renamed variable as the operator's error (exit 2), whichever
    command loaded the settings."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RAGLINE_")}
    env |= {"RAGLINE_EMBEDDER": "voyage", "RAGLINE_SERVICES_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "ragline.cli", "status"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "error: RAGLINE_EMBEDDER is no longer read: set RAGLINE_EMBED_PROVIDER"
    ]
