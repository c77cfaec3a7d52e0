"""JSON Schema of the chat-backend contract, exported from the pydantic models to ``docs/schemas/``.

``ragline schemas`` rewrites the files; a test fails when they drift from the models.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from ragline.shared.sdk import contracts as c
from ragline.shared.sdk import names

#: file stem -> model; the task each one belongs to is in docs/schemas/README.md
MODELS: dict[str, type[BaseModel]] = {
    "search_request": c.SearchRequest,
    "search_response": c.SearchResponse,
    "rerank_request": c.RerankRequest,
    "rerank_response": c.RerankResponse,
    "ask_request": c.AskRequest,
    "ask_response": c.AskResponse,
    "sources_request": c.SourcesRequest,
    "sources_response": c.SourcesResponse,
    "error_result": c.ErrorResult,
    # permissions and document events from the chat backend / upstream systems
    "acl_sync_request": c.AclSyncRequest,
    "acl_sync_result": c.AclSyncResult,
    "ingest_event": c.IngestEvent,
    "event_result": c.EventResult,
}

TASKS = {
    names.TASK_QUERY_RETRIEVE: ("search_request", "search_response"),
    names.TASK_QUERY_RERANK: ("rerank_request", "rerank_response"),
    names.TASK_QUERY_ASK: ("ask_request", "ask_response"),
    names.TASK_QUERY_SOURCES: ("sources_request", "sources_response"),
    names.TASK_ACL_SYNC: ("acl_sync_request", "acl_sync_result"),
    names.TASK_INGEST_EVENT: ("ingest_event", "event_result"),
}


def schemas() -> dict[str, str]:
    """File name -> JSON text (stable: sorted keys, trailing newline)."""
    out = {
        f"{name}.json": json.dumps(model.model_json_schema(), ensure_ascii=False, indent=2, sort_keys=True)
        + "\n"
        for name, model in MODELS.items()
    }
    out["tasks.json"] = (
        json.dumps(
            {
                task: {"request": f"{req}.json", "response": f"{resp}.json", "error": "error_result.json"}
                for task, (req, resp) in TASKS.items()
            },
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )
    return out


def export(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schemas().items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
