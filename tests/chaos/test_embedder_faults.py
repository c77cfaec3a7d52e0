"""The Voyage embedder misbehaving (loopback server): 429 storms with Retry-After, 500s, and hangs past
the client timeout, under a prefork ingest pool. Retries absorb 429s and 500s; a provider that hangs
fails the documents with a recorded error and, once it answers again, a re-run completes them. In
every case the final chunk rows equal a clean run, and each failure is counted in the pool's metrics."""

from __future__ import annotations

import time

import pytest

from tests.chaos import harness
from tests.loopback import Faults, LoopbackServer
from tests.pools import start_pool, wait_ready

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def _metric(settings, name: str) -> float:
    from ragline.cli.ops import summarize

    return sum(
        r.get("value", 0.0) for r in summarize(settings) if r["pool"] == "ingest" and r["metric"] == name
    )


def test_429_storm_500s_and_hang(stack, tmp_path, tenant):
    from ragline.shared.worker.celery_app import app
    from ragline.shared.worker.metrics_server import metrics_dir, reset_dir

    reset_dir(metrics_dir(stack, "ingest"))
    env_common = {
        "RAGLINE_EMBED_PROVIDER": "voyage",
        "RAGLINE_PROVIDERS_VOYAGE_API_KEY": "pa-test",
        "RAGLINE_EMBED_BATCH_SIZE": "4",
        "RAGLINE_EMBED_TIMEOUT_S": "1",
        "RAGLINE_EMBED_MAX_RETRIES": "6",
        "RAGLINE_EMBED_BACKOFF_BASE_S": "0.05",
        "RAGLINE_EMBED_BACKOFF_MAX_S": "0.5",
        "RAGLINE_INGEST_TASK_MAX_RETRIES": "1",
    }
    rows = []
    with LoopbackServer(faults=Faults(every_nth_429=2, retry_after_s=0.2)) as srv:
        pool = start_pool(
            stack, "ingest", concurrency=2, env={**env_common, "RAGLINE_PROVIDERS_VOYAGE_BASE_URL": srv.url}
        )
        try:
            wait_ready(app, pool)
            corpora = {}
            # --- 429 storm: every 2nd request, Retry-After 0.2 s ---------------------------------------
            files = corpora["429"] = harness.make_corpus(tmp_path / "a", 4, 3, prefix=f"s429-{tenant}")
            t0 = time.monotonic()
            job, _ = harness.send_job(app, pool.queue, files, tenant + "-429")
            s429 = harness.wait_job(job)
            assert s429["state"] == "succeeded", s429
            n429 = srv.stats.answered_429
            assert n429 > 0
            rows.append(
                (
                    "429 storm (every 2nd request, Retry-After 0.2 s)",
                    "429",
                    len(files),
                    time.monotonic() - t0,
                    n429,
                    f"{n429} answers 429; retried honouring Retry-After; rag_embedder_429 counted",
                )
            )
            # --- 500s: every 3rd request ----------------------------------------------------------------
            srv.faults = Faults(every_nth_500=3)
            files = corpora["500"] = harness.make_corpus(tmp_path / "b", 4, 3, prefix=f"s500-{tenant}")
            t0 = time.monotonic()
            job, _ = harness.send_job(app, pool.queue, files, tenant + "-500")
            s500 = harness.wait_job(job)
            assert s500["state"] == "succeeded", s500
            n500 = srv.stats.answered_500
            assert n500 > 0
            rows.append(
                (
                    "HTTP 500 on every 3rd request",
                    "500",
                    len(files),
                    time.monotonic() - t0,
                    n500,
                    f"{n500} answers 500; retried with backoff",
                )
            )
            # --- hang past the timeout: the documents fail, recorded; then the provider comes back ----
            srv.faults = Faults(hang_s=3.0)
            files = corpora["hang"] = harness.make_corpus(tmp_path / "c", 3, 3, prefix=f"hang-{tenant}")
            job, _ = harness.send_job(app, pool.queue, files, tenant + "-hang")
            hung = harness.wait_job(job, timeout=300)
            assert hung["failed"] == len(files) and all("embed" in e["error"] for e in hung["errors"]), hung
            srv.faults = Faults()
            t0 = time.monotonic()
            again, _ = harness.send_job(app, pool.queue, files, tenant + "-hang")
            assert harness.wait_job(again)["state"] == "succeeded"
            rows.append(
                (
                    "embedder hangs past the 1 s timeout",
                    "hang",
                    len(files),
                    time.monotonic() - t0,
                    hung["failed"],
                    f"{hung['failed']} documents failed with a recorded embed error "
                    "(no partial rows); the re-run after the provider recovered stored them",
                )
            )
            # --- the clean runs ------------------------------------------------------------------------
            refs = {}
            for key, corpus in corpora.items():
                ref_job, _ = harness.send_job(app, pool.queue, corpus, f"{tenant}-{key}-ref")
                assert harness.wait_job(ref_job)["state"] == "succeeded"
                refs[key] = harness.chunk_rows(f"{tenant}-{key}-ref")
            assert pool.proc.poll() is None
        finally:
            pool.stop()
    m429, mretry = _metric(stack, "rag_embedder_429_total"), _metric(stack, "rag_embedder_retries_total")
    assert m429 >= n429 > 0 and mretry > 0
    results = []
    for fault, key, n, took, failures, notes in rows:
        cmp = harness.compare(harness.chunk_rows(f"{tenant}-{key}"), refs[key])
        assert cmp["lost"] == 0 and cmp["duplicated"] == 0 and cmp["unexpected"] == 0, (key, cmp)
        results.append(
            harness.FaultResult(
                fault,
                tasks_affected=n,
                recovered=n,
                lost=0,
                duplicated=0,
                time_to_recover_s=round(took, 2),
                failures_recorded=failures,
                notes=notes,
                extra={**cmp, "metric_rag_embedder_429": m429, "metric_rag_embedder_retries": mretry},
            )
        )
    harness.record("embedder_faults", results)
