"""d. ACL sync of N documents (``ragline.acl.sync`` on the ``acl`` queue) against re-ingesting them.

Setup and baseline are the same run: N text documents go through the ``ingest`` queue (batch
tasks of ``ingest_batch_docs``, as ``ragline ingest`` sends them) to the real prefork ingest
pool, embedded by the ``voyage`` embedder against the loopback Voyage server (no latency, so
the baseline is the pipeline's own cost, the cheapest re-ingest there can be with a remote
embedder). That is what re-ingesting costs when the content has to be re-embedded. Then the new
permissions for all N documents go to the real prefork control pool the way ``ragline acl sync``
sends a file (``ragline/operations/acl.py``): tasks of ``acl_sync_batch_size`` items, all sent at once, results added up.
The loopback server counts embedding requests during the sync (must be 0), and the documents
and chunks are checked to carry the new ACL.

For reference, the same texts are ingested again into a second tenant: every vector then
comes from the embedding cache, the cheapest possible re-ingest (reported, not a target).
RPM/TPM limits are switched off so that the baseline measures ragline, not a quota.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import common

NAME = "acl_sync"
TITLE = "ACL sync of N documents vs re-ingesting them"
SMOKE = {"n_docs": 20}
OLD_ACL, NEW_ACL = ["staff"], ["auditors", "staff"]


def send_documents(tenant: str, texts: list[str], per_task: int, acl: list[str] = OLD_ACL) -> None:
    """Enqueue like ``ragline ingest`` does: ``ragline.ingest.batch`` tasks of ``per_task`` documents."""
    from ragline.shared.sdk.names import TASK_INGEST_BATCH
    from ragline.shared.worker.celery_app import app

    docs = [
        {"tenant": tenant, "doc_id": f"doc-{i}", "content": text, "fmt": "text", "acl": acl, "version": 1}
        for i, text in enumerate(texts)
    ]
    for i in range(0, len(docs), per_task):
        app.send_task(TASK_INGEST_BATCH, args=[{"documents": docs[i : i + per_task]}])


def _ingest(tenant: str, texts: list[str], per_task: int) -> float:
    t = time.monotonic()
    send_documents(tenant, texts, per_task)
    done, errors = common.wait_documents_ready(tenant, len(texts), timeout=3600)
    if errors:  # the sync below must find every document
        raise RuntimeError(f"{len(errors)} documents failed to ingest in {tenant}: {errors[:3]}")
    return done - t


@contextmanager
def caller_counts_off(off: bool) -> Iterator[None]:
    """With ``off``, the documents' caller-scoped upkeep (migrations 0017, 0018) removed for the
    duration: the counters' update trigger disabled, the ACL index dropped; put back after."""
    from ragline.shared.worker import db

    if not off:
        yield
        return
    with db.connection() as conn:
        conn.execute("ALTER TABLE documents DISABLE TRIGGER documents_acl_rows_updated")
        conn.execute("DROP INDEX documents_acl_gin")
    try:
        yield
    finally:
        with db.connection() as conn:
            conn.execute("ALTER TABLE documents ENABLE TRIGGER documents_acl_rows_updated")
            conn.execute("CREATE INDEX documents_acl_gin ON documents USING gin (acl)")


def _acl_state(tenant: str, acl: list[str] = NEW_ACL) -> dict:
    from ragline.shared.worker import db

    with db.connection() as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM documents WHERE tenant = %(t)s AND acl = %(acl)s) AS documents,"
            " (SELECT count(*) FROM chunks WHERE tenant = %(t)s AND acl = %(acl)s) AS chunks,"
            " (SELECT count(*) FROM chunks WHERE tenant = %(t)s) AS chunks_total",
            {"t": tenant, "acl": acl},
        ).fetchone()


def _changes(tenant: str, n_docs: int, acl: list[str], version: int) -> list:
    """The permission changes of one sync, validated before the clock starts (as ``acl sync`` reads its file)."""
    from ragline.shared.sdk.contracts import AclSyncItem

    return [AclSyncItem(tenant=tenant, doc_id=f"doc-{i}", acl=acl, version=version) for i in range(n_docs)]


def run(out_dir: Path = common.RESULTS, n_docs: int = 10_000) -> dict:
    from ragline.operations import acl as acl_ops
    from ragline.shared.sdk.names import TASK_ACL_SYNC, TASK_INGEST_DOCUMENT
    from ragline.shared.worker import db
    from tests.loopback import LoopbackServer

    run_id = int(time.time())
    tenant, tenant_warm = f"bench-acl-{run_id}", f"bench-acl-{run_id}-cached"
    texts = common.passages(n_docs, f"Документ {run_id}-")
    with db.connection() as c:
        desc = common.machine(c)
    with (
        LoopbackServer() as srv,
        common.settings_env(
            embed_provider="voyage",
            providers_voyage_base_url=srv.url,
            providers_voyage_api_key="bench-key",
            embed_rpm=0,
            embed_tpm=0,
        ),
    ):
        from ragline.shared.config.settings import get_settings

        settings = get_settings()
        ready = {
            "ingest": (TASK_INGEST_DOCUMENT, {}),
            "control": (TASK_ACL_SYNC, {}),
        }  # invalid: answered at once
        with common.prefork_pools(ready):
            srv.reset_stats()
            common.checkpoint()
            ingest_s = _ingest(tenant, texts, settings.ingest.batch_docs)
            ingest_requests, ingest_texts = (
                srv.stats.by_path.get("/v1/embeddings", 0),
                srv.stats.texts_embedded,
            )
            chunks = _acl_state(tenant)["chunks_total"]

            srv.reset_stats()
            sync_runs: list[float] = []
            bare_runs: list[float] = []
            batch = settings.lifecycle.acl_sync_batch_size
            # six syncs (to another ACL and back, newer versions each time), alternately with and
            # without what the caller-scoped vector path costs a permission change (the counters'
            # trigger, 0017, and the ACL index of documents, 0018); the medians are the results
            for version, acl in enumerate((NEW_ACL, OLD_ACL) * 3, start=1):
                bare = version % 2 == 0
                items = _changes(tenant, n_docs, acl, version)
                with caller_counts_off(bare):
                    common.checkpoint()
                    t = time.perf_counter()
                    res = acl_ops.sync(items, timeout=3600, batch_size=batch)
                    (bare_runs if bare else sync_runs).append(time.perf_counter() - t)
                if res.get("documents_updated") != n_docs:
                    raise RuntimeError(f"ACL sync {version} did not apply everywhere: {res}")
            sync_s = statistics.median(sync_runs)
            bare_s = statistics.median(bare_runs)
            sync_requests = srv.stats.requests
            state = _acl_state(tenant, acl)
            if (
                state["documents"] != n_docs or state["chunks"] != chunks
            ):  # each sync's count is checked above
                raise RuntimeError(f"ACL sync did not apply everywhere: {res}, {state}, chunks {chunks}")

            srv.reset_stats()
            common.checkpoint()
            warm_s = _ingest(tenant_warm, texts, settings.ingest.batch_docs)
            warm_requests = srv.stats.by_path.get("/v1/embeddings", 0)
    ratio = ingest_s / sync_s
    targets = [
        common.Target("re-ingest time / ACL sync time", ratio, ">=", 100, "x"),
        common.Target("embedder requests during the ACL sync", sync_requests, "<=", 0),
    ]
    raw = {
        "documents": n_docs,
        "chunks": chunks,
        "reingest_s": round(ingest_s, 3),
        "reingest_docs_per_s": round(n_docs / ingest_s, 1),
        "reingest_embed_requests": ingest_requests,
        "reingest_texts_embedded": ingest_texts,
        "acl_sync_s": round(sync_s, 4),
        "acl_sync_runs_s": [round(x, 4) for x in sync_runs],
        "acl_sync_docs_per_s": round(n_docs / sync_s, 1),
        "acl_sync_embed_requests": sync_requests,
        "acl_sync_without_caller_counts_s": round(bare_s, 4),
        "acl_sync_without_caller_counts_runs_s": [round(x, 4) for x in bare_runs],
        "caller_counts_cost": round(sync_s / bare_s - 1, 3),
        "acl_sync_result": res,
        "speed_ratio": round(ratio, 2),
        "reingest_cached_s": round(warm_s, 3),
        "reingest_cached_embed_requests": warm_requests,
        "speed_ratio_vs_cached_reingest": round(warm_s / sync_s, 2),
    }
    params = {
        "n_docs": n_docs,
        "fmt": "text",
        "embedder": "voyage on the loopback server, no latency",
        "embed_rpm": 0,
        "embed_tpm": 0,
        "ingest_concurrency": settings.workers.ingest_concurrency,
        "acl_sync_batch_size": settings.lifecycle.acl_sync_batch_size,
        "acl_concurrency": settings.workers.acl_concurrency,
        "ingest_batch_docs": settings.ingest.batch_docs,
        "workers": "ragline up's prefork ingest and control pools",
    }
    notes = [
        "Re-ingest = the N documents through the ingest pool with every text new to the embedding cache"
        " (the work a permission change would cost without ACL sync); timed from the first send to the"
        " last document ready.",
        "ACL sync = what `ragline acl sync FILE` does with N items: ragline.acl.sync tasks of"
        " acl_sync_batch_size items sent at once to the acl queue, timed until the last result; three"
        " syncs (new ACL, old ACL, new ACL, each with a newer version), the median is compared.",
        "acl_sync_without_caller_counts_*: the syncs between them (versions 2, 4, 6) with the"
        " acl_group_rows trigger of documents disabled and documents_acl_gin dropped (what the vector"
        " search's caller-scoped path costs a permission change: caller_counts_cost = with / without - 1).",
        "Each timed phase starts after a CHECKPOINT, so none pays for the previous phase's dirty pages.",
        "reingest_cached_*: the same texts again into a second tenant, vectors from the embedding cache.",
    ]
    data = common.result(NAME, TITLE, params, raw, targets, desc, notes)
    common.write_json(data, out_dir)
    common.bar_plot(
        out_dir / f"{NAME}.png",
        f"Permission change for {n_docs:,} documents ({chunks:,} chunks)",
        {
            "seconds": {
                "re-ingest (embedding)": ingest_s,
                "re-ingest (embedding cache)": warm_s,
                "ACL sync": sync_s,
                "ACL sync, no caller counts": bare_s,
            }
        },
        "seconds (log scale)",
        targets,
        log=True,
    )
    return data
