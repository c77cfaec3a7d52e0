"""Task payloads and results (pydantic). The chat backend and the CLI import only this module.

Task names are stable API: renaming one breaks every producer.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

TASK_INGEST_DOCUMENT = "ragline.ingest.document"
TASK_QUERY_RETRIEVE = "ragline.query.retrieve"
TASK_QUERY_RERANK = "ragline.query.rerank"
TASK_QUERY_ASK = "ragline.query.ask"
TASK_ACL_SYNC = "ragline.acl.sync"

Ident = Annotated[str, StringConstraints(min_length=1, max_length=512, strip_whitespace=True)]
Group = Annotated[str, StringConstraints(min_length=1, max_length=256, strip_whitespace=True)]


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


class IngestResult(BaseModel):
    tenant: str
    doc_id: str
    status: Literal["stored", "skipped_unchanged", "stale", "failed"]
    chunks: int = 0
    embedded: int = 0
    error: str | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)


class ErrorResult(BaseModel):
    """What a task returns for a payload it cannot accept: the worker stays up."""

    ok: Literal[False] = False
    error: str
    detail: Any = None


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(max_length=4000)
    tenant: Ident
    groups: list[Group] = Field(max_length=1000)
    k: int = Field(default=10, ge=1, le=200)
    mode: Literal["hybrid", "vector", "lexical"] = "hybrid"
    #: a precomputed query embedding (benchmarks, callers that embed themselves): skips the embedder
    query_vector: list[float] | None = Field(default=None, min_length=1, max_length=4096)

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
    score: float = 0.0
    vector_rank: int | None = None
    vector_distance: float | None = None
    lexical_rank: int | None = None
    lexical_score: float | None = None


class SearchResponse(BaseModel):
    hits: list[Hit]
    degraded: bool = False
    degraded_reasons: list[str] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)


class AskRequest(SearchRequest):
    k: int = Field(default=5, ge=1, le=50)


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
    timings_ms: dict[str, float] = Field(default_factory=dict)
    trace: dict[str, Any] = Field(default_factory=dict)
