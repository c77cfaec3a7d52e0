"""Requeue documents with open errors (``ragline retry-failed``), under one job.

The retry needs what the original request said: the URI comes from the error, the ACL, path and
layer from the stored document (a previous good version or a permission sync), else from the
configured source that produced it, else from the operator (``--acl``). A document whose ACL is
unknown is not retried: ingesting it with no groups would hide it from everybody.
"""

from __future__ import annotations

from ragline.ingest.parse import ParseError
from ragline.ingest.sources import configured_sources, parse_git_uri
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import IngestRequest
from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT
from ragline.shared.worker import db, jobs
from ragline.shared.worker.celery_app import app

#: what a retry keeps of the stored document's metadata: its source (doc id ownership) and fingerprint
SOURCE_KEYS = ("source", "source_root", "source_fp")


def _source_acl(metadata: dict, tenant: str) -> list[str] | None:
    name = (metadata or {}).get("source")
    for spec in configured_sources(get_settings().lifecycle.sources):
        if spec.name == name and spec.tenant == tenant:
            return list(spec.acl)
    return None


def _source_layer(metadata: dict, tenant: str) -> str:
    name = (metadata or {}).get("source")
    for spec in configured_sources(get_settings().lifecycle.sources):
        if spec.name == name and spec.tenant == tenant:
            return spec.layer
    return "docs"


def git_identity(doc_id: str, uri: str) -> tuple[str, dict] | None:
    """The path and source metadata a sync gave a git document that was never stored (pure): its
    id is ``<source>/<path in the repository>`` and its URI names the repository, commit and path
    (``ingest/events.py``). Without them the retry would store the file under its bare repository
    path, outside its source's prefix, and unowned by the source."""
    try:
        repo, commit, rel = parse_git_uri(uri)
    except ParseError:
        return None
    if not doc_id.endswith("/" + rel):
        return None
    source = doc_id[: -len(rel) - 1]
    return doc_id, {"source": source, "source_root": str(repo), "repo_path": rel, "commit": commit}


def plan_retries(conn, tenant: str | None, fallback_acl: list[str]) -> tuple[list[IngestRequest], list[dict]]:
    requests, skipped = [], []
    for err in jobs.open_errors(conn, tenant, limit=100_000):
        doc = conn.execute(
            "SELECT acl, ingest_acl, path, layer, version, metadata, status FROM documents"
            " WHERE tenant = %s AND doc_id = %s",
            (err["tenant"], err["doc_id"]),
        ).fetchone()
        if err["stage"] == "identity":  # retrying cannot help: the doc id holds another source's document
            skipped.append({**err, "reason": "doc id belongs to another source: see the error"})
            continue
        if not err["source_uri"]:
            skipped.append({**err, "reason": "no URI recorded (inline content): resend it"})
            continue
        if doc is not None and doc["status"] == "deleted":
            skipped.append({**err, "reason": "document was deleted"})
            continue
        # what the last ingest asked for, not the current ACL: a retry must not turn a permission
        # change (acl sync) into the ingest's own request, which a later reindex would then undo
        asked = (doc["ingest_acl"] if doc["ingest_acl"] is not None else doc["acl"]) if doc else None
        meta = {k: v for k, v in ((doc or {}).get("metadata") or {}).items() if k in SOURCE_KEYS}
        # never stored: no row, or only the row of its failure (``store.mark_failed``: no path)
        stored = doc is not None and bool(doc["path"])
        path = doc["path"] if stored else None
        if not stored and (identity := git_identity(err["doc_id"], err["source_uri"])):
            path, meta = identity[0], {**identity[1], **meta}
        acl = list(asked) if asked else None
        acl = acl or _source_acl(meta, err["tenant"]) or fallback_acl
        if not acl:
            skipped.append({**err, "reason": "ACL unknown: pass --acl"})
            continue
        requests.append(
            IngestRequest(
                tenant=err["tenant"],
                doc_id=err["doc_id"],
                uri=err["source_uri"],
                acl=acl,
                path=path,
                layer=(doc["layer"] if stored else _source_layer(meta, err["tenant"])),
                version=int(doc["version"]) if doc else 0,
                metadata=meta,
            )
        )
    return requests, skipped


def enqueue_retries(tenant: str | None, fallback_acl: list[str]) -> dict:
    with db.connection() as conn:
        requests, skipped = plan_retries(conn, tenant, fallback_acl)
        job_id = None
        if requests:
            by_tenant = {r.tenant for r in requests}
            job_id = jobs.create_job(
                conn,
                "retry",
                by_tenant.pop() if len(by_tenant) == 1 else None,
                [],
                {"documents": len(requests)},
            )
            for t in {r.tenant for r in requests}:
                jobs.add_documents(conn, job_id, t, [r.doc_id for r in requests if r.tenant == t])
        conn.commit()
    for r in requests:
        app.send_task(TASK_INGEST_DOCUMENT, args=[{**r.model_dump(exclude_none=True), "job_id": job_id}])
    return {
        "job_id": job_id,
        "requeued": len(requests),
        "skipped": [{"tenant": s["tenant"], "doc_id": s["doc_id"], "reason": s["reason"]} for s in skipped],
    }
