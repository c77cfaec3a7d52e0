"""Task payloads and results (pydantic). The chat backend and the CLI import only this module.

Task names are stable API: renaming one breaks every producer.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

TASK_INGEST_DOCUMENT = "ragline.ingest.document"
TASK_INGEST_BATCH = "ragline.ingest.batch"
TASK_QUERY_RETRIEVE = "ragline.query.retrieve"
TASK_QUERY_RERANK = "ragline.query.rerank"
TASK_QUERY_ASK = "ragline.query.ask"
TASK_ACL_SYNC = "ragline.acl.sync"
TASK_INGEST_EVENT = "ragline.ingest.event"
TASK_INGEST_REEMBED = "ragline.ingest.reembed"
TASK_REINDEX = "ragline.maintenance.reindex"
TASK_STUCK_JOBS = "ragline.maintenance.stuck_jobs"
TASK_PURGE = "ragline.maintenance.purge"

Ident = Annotated[str, StringConstraints(min_length=1, max_length=512, strip_whitespace=True)]
Group = Annotated[str, StringConstraints(min_length=1, max_length=256, strip_whitespace=True)]
Pattern = Annotated[str, StringConstraints(max_length=1024)]


class IngestRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: Ident
    doc_id: Ident
    uri: str | None = Field(default=None, max_length=4096, description="file path or URL")
    content: str | None = Field(default=None, max_length=60_000_000, description="inline text")
    fmt: Literal["md", "html", "text", "pdf", "docx"] | None = None
    path: str | None = Field(default=None, max_length=4096, description="logical path used by filters")
    layer: str = Field(default="docs", max_length=64)
    acl: list[Group] = Field(default_factory=list, max_length=1000)
    metadata: dict[str, Any] = Field(default_factory=dict)
    version: int = Field(default=0, ge=0)
    job_id: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> IngestRequest:
        if (self.uri is None) == (self.content is None):
            raise ValueError("exactly one of 'uri' or 'content' is required")
        return self


class IngestBatchRequest(BaseModel):
    """Several documents in one task, so their chunks share embedding batches of up to 128 texts."""

    model_config = ConfigDict(extra="forbid")

    documents: list[IngestRequest] = Field(min_length=1, max_length=500)


class IngestResult(BaseModel):
    tenant: str
    doc_id: str
    status: Literal["stored", "skipped_unchanged", "stale", "failed", "cancelled"]
    chunks: int = 0
    embedded: int = 0
    error: str | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)


class ErrorResult(BaseModel):
    """What a task returns for a payload it cannot accept: the worker stays up."""

    ok: Literal[False] = False
    error: str
    detail: Any = None

    @field_validator("detail")
    @classmethod
    def _json_safe(cls, v: Any) -> Any:
        """Validation errors carry exception objects in ``ctx``: a result must stay JSON-serializable."""
        import json

        return json.loads(json.dumps(v, default=str))

    @classmethod
    def invalid_payload(cls, exc: ValidationError) -> dict:
        """The result of a task whose payload failed validation (input values left out: they may be huge)."""
        return cls(
            error="invalid payload", detail=exc.errors(include_url=False, include_input=False)
        ).model_dump()


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(default="", max_length=4000)
    tenant: Ident
    groups: list[Group] = Field(
        max_length=1000, description="caller's ACL groups; empty means nothing is visible"
    )
    k: int = Field(default=10, ge=1, le=200)
    mode: Literal["hybrid", "vector", "lexical", "exact"] = Field(
        default="hybrid", description="'exact' returns the chunks of `doc_ids` / `paths` without ranking"
    )
    #: a precomputed query embedding (benchmarks, callers that embed themselves): skips the embedder
    query_vector: list[float] | None = Field(default=None, min_length=1, max_length=4096)
    # --- filters (retrieval contract, seed 000); path patterns are LIKE-escaped -----------------
    layers: list[Pattern] = Field(default_factory=list, max_length=50, description="only these source layers")
    path_prefixes: list[Pattern] = Field(
        default_factory=list, max_length=100, description="include paths with a prefix"
    )
    exclude_path_prefixes: list[Pattern] = Field(default_factory=list, max_length=100)
    exclude_like_patterns: list[Pattern] = Field(
        default_factory=list,
        max_length=100,
        description="globs: * any run, ? one character; all else literal",
    )
    prefer_path_prefixes: list[Pattern] = Field(
        default_factory=list, max_length=100, description="ranking bonus"
    )
    prefer_like_patterns: list[Pattern] = Field(
        default_factory=list, max_length=100, description="globs; bonus"
    )
    prefer_non_tests: bool = Field(default=False, description="penalise test paths in the ranking")
    # --- exact lookup (mode 'exact') -------------------------------------------------------------
    doc_ids: list[Pattern] = Field(default_factory=list, max_length=1000)
    paths: list[Pattern] = Field(default_factory=list, max_length=1000, description="empty ones are dropped")
    rerank: bool | None = Field(default=None, description="None: rerank when a reranker is configured")

    @field_validator("groups")
    @classmethod
    def _groups(cls, v: list[str]) -> list[str]:
        return sorted(set(v))


class Hit(BaseModel):
    doc_id: str
    chunk_no: int
    path: str = ""
    heading: str = ""
    content: str = ""
    context: str = ""
    page: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    layer: str = ""
    score: float = Field(
        default=0.0, description="final ranking score (fused + bonus - penalty, or rerank score)"
    )
    fused_score: float | None = Field(default=None, description="weighted RRF before bonuses")
    vector_rank: int | None = None
    vector_distance: float | None = None
    lexical_rank: int | None = None
    lexical_score: float | None = None
    prefer_bonus: float = 0.0
    test_penalty: float = 0.0
    rerank_score: float | None = None


class SearchResponse(BaseModel):
    hits: list[Hit]
    degraded: bool = False
    degraded_reasons: list[str] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)


class RerankRequest(BaseModel):
    """Rerank given candidates (e.g. the hits of a retrieve call) for a query."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=4000)
    hits: list[Hit] = Field(max_length=1000)
    top_k: int | None = Field(default=None, ge=1, le=200, description="default: settings.rerank_top_k")
    threshold: float | None = Field(default=None, description="default: settings.rerank_threshold")


class RerankResponse(SearchResponse):
    """The same shape as a search response: the reranked hits."""


class ChatTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str = Field(max_length=20_000)


class AskRequest(SearchRequest):
    k: int = Field(default=5, ge=1, le=50)
    history: list[ChatTurn] = Field(
        default_factory=list,
        max_length=50,
        description="earlier turns; used to rewrite a follow-up into a standalone question",
    )
    agentic: bool | None = Field(default=None, description="None: settings.agentic")


class Citation(BaseModel):
    n: int
    doc_id: str
    chunk_no: int
    heading: str = ""
    path: str = ""


class AskResponse(BaseModel):
    answer: str
    citations: list[Citation]
    no_answer: bool = False
    degraded: bool = False
    degraded_reasons: list[str] = Field(default_factory=list)
    #: why there is no answer (nothing passed the threshold, citations rejected, generator failed)
    reason: str | None = None
    #: the agentic loop stopped on its budget, not because the evidence was enough
    partial: bool = False
    timings_ms: dict[str, float] = Field(default_factory=dict)
    trace: dict[str, Any] = Field(default_factory=dict)


# --- lifecycle: permission sync and document events (issues 5, 6) -----------------------------
class AclSyncItem(BaseModel):
    """New permissions for one document or every document under a path prefix.

    ``version`` orders changes (last writer wins; an older one never undoes a newer one). When
    the source has no version, ``ts`` (event time, epoch seconds) in microseconds is used.
    """

    model_config = ConfigDict(extra="forbid")

    tenant: Ident
    doc_id: Ident | None = None
    path_prefix: Annotated[str, StringConstraints(min_length=1, max_length=4096)] | None = None
    acl: list[Group] = Field(max_length=1000)
    version: int | None = Field(default=None, ge=1)
    ts: float | None = Field(default=None, gt=0, description="event time, epoch seconds")

    @model_validator(mode="after")
    def _target(self) -> AclSyncItem:
        if (self.doc_id is None) == (self.path_prefix is None):
            raise ValueError("exactly one of 'doc_id' or 'path_prefix' is required")
        if self.version is None and self.ts is None:
            raise ValueError("'version' or 'ts' is required to order permission changes")
        return self

    @property
    def effective_version(self) -> int:
        return self.version if self.version is not None else int(self.ts * 1_000_000)  # type: ignore[operator]


class AclSyncRequest(BaseModel):
    """One item (the fields inline) or a batch (``items``)."""

    model_config = ConfigDict(extra="forbid")

    items: list[AclSyncItem] = Field(min_length=1, max_length=50_000)

    @model_validator(mode="before")
    @classmethod
    def _single(cls, data: Any) -> Any:
        if isinstance(data, dict) and "items" not in data:
            return {"items": [data]}
        return data


class AclSyncResult(BaseModel):
    items: int
    documents_updated: int
    chunks_updated: int
    ignored_stale: int
    lag_s_max: float | None = None
    lag_s_mean: float | None = None
    job_id: str | None = None


class IngestEvent(BaseModel):
    """What a webhook or an upstream queue consumer sends when a document changes."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["upsert", "delete", "acl"]
    tenant: Ident
    doc_id: Ident
    uri: str | None = Field(default=None, max_length=4096)
    version: int = Field(ge=0)
    acl: list[Group] | None = Field(default=None, max_length=1000)
    path: str | None = Field(default=None, max_length=4096)
    layer: str = Field(default="docs", max_length=64)
    fmt: Literal["md", "html", "text", "pdf", "docx"] | None = None
    ts: float | None = Field(default=None, gt=0, description="event time, epoch seconds")

    @model_validator(mode="after")
    def _needs(self) -> IngestEvent:
        if self.type == "upsert" and not self.uri:
            raise ValueError("an upsert event needs 'uri'")
        if self.type == "acl" and self.acl is None:
            raise ValueError("an acl event needs 'acl'")
        if self.type == "acl" and self.version < 1:
            raise ValueError("an acl event needs a version >= 1")
        return self


class EventResult(BaseModel):
    type: str
    tenant: str
    doc_id: str
    outcome: Literal["enqueued", "deleted", "acl_applied", "ignored_stale", "ignored_duplicate"]
    task_id: str | None = None
    chunks_deleted: int = 0


#: payload fields that may appear in task events and Flower; never question text, content,
#: vectors, groups or ACLs (the payload itself still travels whole in the message body)
_REPR_FIELDS = ("tenant", "doc_id", "job_id", "mode", "k", "type", "fmt", "version")
_REPR_COUNTS = ("documents", "items", "history")


def payload_summary(args: object) -> str:
    """The ``argsrepr`` of a ragline task: a short, redacted summary of its one dict payload.

    Celery would put ``saferepr(args)`` into the message headers, and from there into every task
    event and Flower's task list: the caller's question, inline document text, a query vector
    (computing that repr took ~0.6 ms of each question's round trip in bench c)."""
    if not (isinstance(args, list | tuple) and len(args) == 1 and isinstance(args[0], dict)):
        return f"<{type(args).__name__} of {len(args) if isinstance(args, list | tuple) else '?'}>"
    p = args[0]
    out = {k: p[k] for k in _REPR_FIELDS if isinstance(p.get(k), str | int | float)}
    out.update({f"n_{k}": len(p[k]) for k in _REPR_COUNTS if isinstance(p.get(k), list)})
    if isinstance(p.get("query"), str):
        out["query_chars"] = len(p["query"])
    return repr(out)
