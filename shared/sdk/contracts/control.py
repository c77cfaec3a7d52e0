"""Payloads and results of the control pool's tasks: permission sync and document events.

Versions and times have one unit each (docs/operations.md, "Versions and times"):

* a ``version`` is an integer the producer makes grow; a time given instead, as ISO 8601 with its
  UTC offset (``2026-11-30T12:00:00Z``), becomes Unix time in nanoseconds, the unit of every version
  ragline derives from a time itself (a file's modification time, a URL's Last-Modified), so an
  event's version compares with the version ``ragline ingest`` stored;
* a ``ts`` is the time the change happened, in seconds since the epoch, or ISO 8601 the same way.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    model_validator,
)

from ragline.shared.sdk.contracts.common import Group, Ident, SafeText, server_context
from ragline.shared.sdk.formats import FormatName

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TIME_EXAMPLE = "2026-11-30T12:00:00Z"


def parse_instant(value: str | datetime) -> datetime:
    """An ISO 8601 time with its UTC offset; a time without one is refused rather than guessed, since
    versions from two machines in different zones must compare."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"expected an integer or an ISO 8601 time such as {TIME_EXAMPLE}") from None
    if value.tzinfo is None:
        raise ValueError(f"an ISO 8601 time needs its UTC offset (Z or +03:00), as in {TIME_EXAMPLE}")
    return value


def version_from(value: Any) -> Any:
    """A version as given (an integer, or digits), or an ISO 8601 time as Unix nanoseconds."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if isinstance(value, str | datetime):
        return (parse_instant(value) - EPOCH) // timedelta(microseconds=1) * 1000
    return value


def ts_from(value: Any) -> Any:
    """Seconds since the epoch as given, or an ISO 8601 time converted to them."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return parse_instant(value).timestamp()
    if isinstance(value, datetime):
        return parse_instant(value).timestamp()
    return value


def ahead_of_clock(value: float, per_second: int, now: float, max_skew_s: float) -> str | None:
    """Why ``value`` (a version, ``per_second`` units a second, or a time) is too far ahead of the
    clock ``now``, or None (pure).

    A version or time beyond ``now`` plus the allowed skew would outrank every later change of its
    producer, and an upsert's or delete's every later version, for as long as the clock takes to
    catch up (a time in 2100: for good). An integer version is held to the same bound in
    nanoseconds, the unit of the versions taken from times; a counter never comes near it.
    """
    limit = (now + max_skew_s) * per_second
    if value <= limit:
        return None
    return (
        f"{value} is ahead of the server's clock by more than {max_skew_s:g} s"
        f" (RAGLINE_LIFECYCLE_MAX_CLOCK_SKEW_S); {'a time' if per_second == 1 else 'a version'} may be at most"
        f" {int(limit)}, as in {TIME_EXAMPLE} or an increasing counter"
    )


def _not_ahead(per_second: int):
    def check(value: float, info: ValidationInfo) -> float:
        """Checked where the server validates (the task base passes its clock in the context); a
        producer validating its own payload has no say over the server's clock."""
        ctx = server_context(info)
        if ctx is not None and (
            why := ahead_of_clock(value, per_second, ctx["now"], ctx["max_clock_skew_s"])
        ):
            raise ValueError(why)
        return value

    return check


def _version(minimum: int) -> Any:
    return Annotated[
        int,
        Field(ge=minimum),
        BeforeValidator(version_from, json_schema_input_type=Annotated[int, Field(ge=minimum)] | datetime),
        AfterValidator(_not_ahead(1_000_000_000)),
    ]


Timestamp = Annotated[
    float,
    Field(gt=0),
    BeforeValidator(ts_from, json_schema_input_type=Annotated[float, Field(gt=0)] | datetime),
    AfterValidator(_not_ahead(1)),
]


class AclSyncItem(BaseModel):
    """New permissions for one document or every document under a path prefix.

    Changes are ordered by the server: each applied change takes the next value of a Postgres
    sequence, and the last one applied wins. ``version`` (or, without one, ``ts``) is the producer's
    own counter: it is compared only with that producer's earlier changes of the same document, to
    drop replays and out-of-order older changes, never with another producer's. The producer is
    who sent the change, as the worker verified it (``ingest/acl_sync.py``, ``producer_key``).
    """

    model_config = ConfigDict(extra="forbid")

    tenant: Ident
    doc_id: Ident | None = None
    path_prefix: Annotated[SafeText, StringConstraints(min_length=1, max_length=4096)] | None = None
    acl: list[Group] = Field(max_length=1000)
    version: _version(1) | None = Field(
        default=None,
        description="the producer's own increasing integer, or an ISO 8601 time (taken as Unix nanoseconds)",
    )
    ts: Timestamp | None = Field(
        default=None, description="when the change happened: seconds since the epoch, or ISO 8601"
    )
    producer: Ident | None = Field(
        default=None,
        description="a name for this counter within the sender (e.g. a connector's): versions are compared"
        " only with the earlier ones of the same sender (the role whose key signed the change, or"
        " 'unsigned') and name, so no payload can reach another sender's. Default 'sync';"
        " `ragline acl set` / `acl sync` send 'operator'",
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
        """The version compared with the producer's last one: ``version``, else ``ts`` in microseconds
        (kept apart under its own key, so the two never meet: ``ingest/acl_sync.py``)."""
        return self.version if self.version is not None else round(self.ts * 1_000_000)  # type: ignore[operator]


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
    force: bool = Field(
        default=False,
        description="apply even changes not newer than their producer's last applied one (`ragline acl"
        " set --force`); only the operator and worker roles (or anyone on an unsigned stack) may force,"
        " and a forced change is logged and counted",
    )

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
    stale: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the first 100 documents ignored as stale: {tenant, doc_id, producer, version,"
        " last_version}: the producer's last applied version this change did not exceed",
    )
    forced: int = Field(default=0, description="documents a forced request changed")
    pending: int = Field(default=0, description="permissions kept for documents not ingested yet")
    not_found: list[dict[str, str]] = Field(
        default_factory=list,
        description="with missing='report': items whose document (or any document under the prefix) does"
        " not exist: {tenant, doc_id | path_prefix, reason}",
    )
    unknown_tenants: list[str] = Field(default_factory=list, description="tenants without any document")
    lag_s_max: float | None = None
    lag_s_mean: float | None = None
    replicas: dict[str, Any] | None = Field(
        default=None,
        description="with replicas in RAGLINE_SERVICES_QUERY_DATABASE_URL: the wait for them to replay the change"
        " before it was reported done: {lsn, waited_s, caught_up, excluded} (excluded: out of the query"
        " pool's rotation until they replay it)",
    )
    job_id: str | None = None


#: a commit id, branch, tag or ref expression given to git: never an option, never a range
GitRef = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9._/@^~{}+-]{0,254}$")]


class IngestEvent(BaseModel):
    """What a webhook or an upstream queue consumer sends when a document changes, or, for a
    ``push``, when a configured git source got new commits (``source``, ``before``, ``after``):
    only what ``git diff before..after`` changed is ingested or pruned (docs/code.md)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["upsert", "delete", "acl", "push"]
    tenant: Ident
    doc_id: Ident | None = Field(default=None, description="required except for a push")
    uri: SafeText | None = Field(default=None, max_length=4096)
    version: _version(0) = Field(
        description="the document's version: an upsert or delete older than the stored one is ignored."
        " An integer that grows with every change, or an ISO 8601 time (taken as Unix nanoseconds, the"
        " unit of the versions `ragline ingest` and folder or URL sources store)"
    )
    acl: list[Group] | None = Field(default=None, max_length=1000)
    path: SafeText | None = Field(default=None, max_length=4096)
    layer: SafeText = Field(default="docs", max_length=64)
    fmt: FormatName | None = None
    ts: Timestamp | None = Field(
        default=None, description="when the change happened: seconds since the epoch, or ISO 8601"
    )
    producer: Ident | None = Field(
        default=None,
        description="a name for this counter within the sender: the ACL of an acl or upsert event is"
        " ordered by 'version' against the earlier ones of the same sender (the role whose key signed"
        " the event, or 'unsigned') and name. Default 'events'",
    )
    source: Ident | None = Field(default=None, description="push: the name of a configured git source")
    before: GitRef | None = Field(
        default=None,
        description="push: the commit the branch was at (all zeros or absent: a new branch); the diff"
        " starts from the commit ragline last indexed for the source when it has one",
    )
    after: GitRef | None = Field(default=None, description="push: the commit (or ref) to index")

    @model_validator(mode="after")
    def _needs(self) -> IngestEvent:
        if self.type == "push":
            if not self.source or not self.after:
                raise ValueError("a push event needs 'source' and 'after'")
            return self
        if self.doc_id is None:
            raise ValueError(f"an {self.type} event needs 'doc_id'")
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
    doc_id: str | None = None
    outcome: Literal[
        "enqueued", "deleted", "acl_applied", "ignored_stale", "ignored_duplicate", "synced", "unavailable"
    ] = Field(
        description="unavailable: a push whose repository cannot be read or is refused (push.error says why)"
    )
    task_id: str | None = None
    chunks_deleted: int = 0
    stored_version: int | None = Field(
        default=None,
        description="an upsert or delete ignored as stale or duplicate: the document's stored version,"
        " which the event's version did not exceed",
    )
    acl_outcome: Literal["applied", "ignored_stale"] | None = Field(
        default=None,
        description="an upsert event's 'acl', applied at once through the ACL path (no embedding), or"
        " older than this producer's last applied change",
    )
    replicas: dict[str, Any] | None = Field(
        default=None,
        description="with replicas in RAGLINE_SERVICES_QUERY_DATABASE_URL: the wait for them to replay the change"
        " before it was reported done: {lsn, waited_s, caught_up, excluded} (excluded: out of the query"
        " pool's rotation until they replay it)",
    )
    job_id: str | None = Field(default=None, description="push: the job ingesting the changed files")
    push: dict[str, Any] | None = Field(
        default=None,
        description="push: {source, commit, base, added, modified, renamed, deleted, skipped, enqueued,"
        " unchanged, pruned}; base None means every tracked file was listed",
    )
