"""Payloads and results of the ingest pool's tasks."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ragline.shared.sdk.contracts.common import Group, Ident, SafeText
from ragline.shared.sdk.formats import FormatName


class IngestRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: Ident
    doc_id: Ident
    uri: SafeText | None = Field(default=None, max_length=4096, description="file path or URL")
    content: str | None = Field(default=None, max_length=60_000_000, description="inline text")
    fmt: FormatName | None = None
    path: SafeText | None = Field(default=None, max_length=4096, description="logical path used by filters")
    layer: SafeText = Field(default="docs", max_length=64)
    acl: list[Group] = Field(default_factory=list, max_length=1000)
    metadata: dict[str, Any] = Field(default_factory=dict)
    version: int = Field(default=0, ge=0)
    job_id: str | None = None
    acl_seq: int | None = Field(
        default=None,
        ge=0,
        description="the permission clock when ragline accepted the request (set by ragline: an event's"
        " upsert; requests of a job use the job's); a permission change applied later wins over 'acl'",
    )

    @field_validator("uri")
    @classmethod
    def _no_credentials(cls, uri: str | None) -> str | None:
        """``user:pass@`` is dropped where a request enters: ragline never sends it (fetches are
        anonymous, see docs/operations.md, Input trust), and a kept copy would end up in the
        documents table, error records and logs."""
        if uri is None or "://" not in uri:
            return uri
        parts = urlsplit(uri)
        if "@" not in parts.netloc:
            return uri
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))

    @property
    def repository_path(self) -> str | None:
        """The file's path inside its repository when a git source sent it (``repo_path`` in the
        metadata), else None: what makes a document "a repository's file" for the defer policy and
        for its path relative to the source."""
        value = self.metadata.get("repo_path")
        return value if isinstance(value, str) else None

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
    status: Literal["stored", "skipped_unchanged", "stale", "failed", "cancelled", "excluded"] = Field(
        description="'excluded': the doc id is kept out of the index (`ragline docs delete --exclude`)"
    )
    chunks: int = 0
    embedded: int = 0
    awaiting_vectors: int = Field(
        default=0,
        description="rows stored without a vector yet (RAGLINE_INGEST_DEFER_VECTORS): searchable"
        " lexically now, embedded by the fill task afterwards",
    )
    acl_outcome: Literal["updated", "ignored_stale"] | None = Field(
        default=None,
        description="'updated': the requested ACL replaced the stored one (an unchanged document through"
        " the ACL path, no embedding); 'ignored_stale': a later permission change holds",
    )
    error: str | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)
