"""Payloads and results of the control pool's tasks: permission sync and document events."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ragline.shared.contracts.common import Group, Ident


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
