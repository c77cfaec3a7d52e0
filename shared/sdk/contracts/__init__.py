"""Task payloads and results (pydantic), one module per pool; everything is re-exported here.

A producer (the chat backend's client, the CLI) imports only these models and
:mod:`ragline.shared.sdk.names`; the workers validate every payload into them.
"""

from ragline.shared.sdk.contracts.common import ErrorResult, Group, Ident, Pattern, pack_vector
from ragline.shared.sdk.contracts.control import (
    AclSyncItem,
    AclSyncRequest,
    AclSyncResult,
    EventResult,
    IngestEvent,
)
from ragline.shared.sdk.contracts.ingest import IngestBatchRequest, IngestRequest, IngestResult
from ragline.shared.sdk.contracts.query import (
    AskRequest,
    AskResponse,
    ChatTurn,
    Citation,
    FileHit,
    Hit,
    RerankRequest,
    RerankResponse,
    SearchRequest,
    SearchResponse,
    SourceInfo,
    SourcesRequest,
    SourcesResponse,
)

__all__ = [
    "AclSyncItem",
    "AclSyncRequest",
    "AclSyncResult",
    "AskRequest",
    "AskResponse",
    "ChatTurn",
    "Citation",
    "ErrorResult",
    "EventResult",
    "FileHit",
    "Group",
    "Hit",
    "Ident",
    "IngestBatchRequest",
    "IngestEvent",
    "IngestRequest",
    "IngestResult",
    "Pattern",
    "RerankRequest",
    "RerankResponse",
    "SearchRequest",
    "SearchResponse",
    "SourceInfo",
    "SourcesRequest",
    "SourcesResponse",
    "pack_vector",
]
