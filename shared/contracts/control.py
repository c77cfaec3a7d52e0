"""Payloads and results of the control pool's tasks: permission sync and document events."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ragline.shared.contracts.common import Group, Ident


class AclSyncItem(BaseModel):
    """New permissions for one document or every document under a path prefix.

    Changes are ordered by the server: each applied change takes the next value of a Postgres
    sequence, and the last one applied wins. ``version`` (or, without one, ``ts`` in microseconds)
    is the producer's own counter: it is compared only with that producer's earlier changes of the
    same document, to drop replays and out-of-order older changes, never with another producer's.
    """

    model_config = ConfigDict(extra="forbid")

    tenant: Ident
    doc_id: Ident | None = None
    path_prefix: Annotated[str, StringConstraints(min_length=1, max_length=4096)] | None = None
    acl: list[Group] = Field(max_length=1000)
    version: int | None = Field(default=None, ge=1)
    ts: float | None = Field(default=None, gt=0, description="event time, epoch seconds")
    producer: Ident | None = Field(
        default=None,
        description="who sends the change (e.g. a connector's name); its versions are compared only with"
        " its own earlier ones. Default 'sync'; `ragline acl set` / `acl sync` send 'operator'",
    )

    @model_validator(mode="after")
    def _target(self) -> AclSyncItem:
        if (self.doc_id is None) == (self.path_prefix is None):
            raise ValueError("exactly one of 'doc_id' or 'path_prefix' is required")
        if self.version is None and self.ts is None:
            raise ValueError("'version' or 'ts' is required to order permission changes")
        return self

    @property
    def effective_version(self) -> int:
        return self.version if self.version is not None else round(self.ts * 1_000_000)  # type: ignore[operator]

    @property
    def producer_key(self) -> str:
        """Versions are compared only between changes with the same key: the producer, with ``:ts``
        appended when the version is the event time, so explicit versions and times never meet."""
        name = self.producer or "sync"
        return name if self.version is not None else f"{name}:ts"


class AclSyncRequest(BaseModel):
    """One item (the fields inline) or a batch (``items``).

    ``missing`` says what happens to a ``doc_id`` that is not indexed (or was deleted): ``pending``
    (connectors and events, whose permission may arrive before the document's first ingest) keeps
    the permission in a pending row for that ingest; ``report`` (``ragline acl set`` / ``acl sync``)
    changes nothing and lists it in ``not_found``. A path prefix matching no document is always
    reported.
    """

    model_config = ConfigDict(extra="forbid")

    items: list[AclSyncItem] = Field(min_length=1, max_length=50_000)
    missing: Literal["pending", "report"] = "pending"

    @model_validator(mode="before")
    @classmethod
    def _single(cls, data: Any) -> Any:
        if isinstance(data, dict) and "items" not in data:
            item = dict(data)
            missing = item.pop("missing", None)
            return {"items": [item]} | ({"missing": missing} if missing is not None else {})
        return data


class AclSyncResult(BaseModel):
    items: int
    documents_updated: int
    chunks_updated: int
    ignored_stale: int = Field(description="changes older than their producer's last applied one (replays)")
    pending: int = Field(default=0, description="permissions kept for documents not ingested yet")
    not_found: list[dict[str, str]] = Field(
        default_factory=list,
        description="with missing='report': items whose document (or any document under the prefix) does"
        " not exist: {tenant, doc_id | path_prefix, reason}",
    )
    unknown_tenants: list[str] = Field(default_factory=list, description="tenants without any document")
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
    producer: Ident | None = Field(
        default=None,
        description="who sends the event; the ACL of an acl or upsert event is ordered against that"
        " producer's earlier ones by 'version'. Default 'events'",
    )

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
    acl_outcome: Literal["applied", "ignored_stale"] | None = Field(
        default=None,
        description="an upsert event's 'acl', applied at once through the ACL path (no embedding), or"
        " older than this producer's last applied change",
    )
