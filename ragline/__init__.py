"""ragline: a RAG backend on Celery workers and PostgreSQL/pgvector.

The public API for producers (a chat backend, an event bridge) is re-exported here; importing it
loads only the client, the request/response models and Celery (no worker code, nothing patched).
The worker side lives in ``ragline.ingest`` and ``ragline.query`` on top of ``ragline.shared``; the
``ragline`` command line is ``ragline.cli``.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from ragline.shared.sdk.async_client import AsyncRaglineClient
from ragline.shared.sdk.client import (
    RaglineClient,
    RaglineError,
    RaglineForbidden,
    RaglineRateLimited,
    RaglineTimeout,
    RaglineUnavailable,
)
from ragline.shared.sdk.contracts import (
    AclSyncItem,
    AclSyncResult,
    AskRequest,
    AskResponse,
    ChatTurn,
    Citation,
    EventResult,
    Hit,
    IngestEvent,
    RerankResponse,
    SearchRequest,
    SearchResponse,
    pack_vector,
)

try:
    __version__ = _version("ragline")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "AclSyncItem",
    "AclSyncResult",
    "AskRequest",
    "AskResponse",
    "AsyncRaglineClient",
    "ChatTurn",
    "Citation",
    "EventResult",
    "Hit",
    "IngestEvent",
    "RaglineClient",
    "RaglineError",
    "RaglineForbidden",
    "RaglineRateLimited",
    "RaglineTimeout",
    "RaglineUnavailable",
    "RerankResponse",
    "SearchRequest",
    "SearchResponse",
    "__version__",
    "pack_vector",
]
