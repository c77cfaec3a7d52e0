"""The stuck-job check counts what it marks in ``rag_jobs_stuck_total``, the series the
RaglineJobStuck alert (deploy/prometheus/ragline-rules.yml) watches."""

from __future__ import annotations

from prometheus_client import REGISTRY

from ragline.ingest.control.tasks import stuck_jobs_task
from ragline.shared.worker import jobs


def stuck_total() -> float:
    return REGISTRY.get_sample_value("rag_jobs_stuck_total") or 0.0


def test_jobs_marked_stuck_are_counted(conn, tenant):
    assert REGISTRY.get_sample_value("rag_jobs_stuck_total") is not None  # exported at 0 from the start
    silent = jobs.create_job(conn, "ingest", tenant, ["a"], {})
    stuck = jobs.create_job(conn, "ingest", tenant, ["b"], {})
    conn.execute("UPDATE jobs SET heartbeat_at = now() - interval '3 hours' WHERE id = %s", (stuck,))
    conn.commit()  # the task reads through its own pooled connection
    before = stuck_total()
    out = stuck_jobs_task({"older_than_s": 7200})
    marked = {j["id"] for j in out["marked"]}
    assert stuck in marked and silent not in marked
    assert stuck_total() == before + len(marked)
    again = stuck_jobs_task({"older_than_s": 7200})["marked"]  # a job is marked (and counted) once
    assert stuck not in {j["id"] for j in again}
    assert stuck_total() == before + len(marked) + len(again)
