"""SIGKILL an ingest worker mid-batch: a prefork pool started like ``ragline up`` (local-e5 loaded after
the fork), then the same corpus in a clean run. Nothing lost, nothing duplicated, back within seconds.

Two faults: only the prefork child running the task dies (the pool parent requeues it at once), and
the whole worker dies (parent and children: kombu alone would wait ``visibility_timeout``, an hour;
``shared/worker/redelivery.py`` restores it once the dead worker's alive key expires).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.chaos import harness
from tests.pools import start_pool, wait_ready

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


@pytest.fixture()
def e5_settings(stack, monkeypatch):
    from ragline.shared.config.settings import get_settings, reset_settings

    monkeypatch.setenv("RAGLINE_EMBED_PROVIDER", "local-e5")
    monkeypatch.setenv(
        "RAGLINE_EMBED_BATCH_SIZE", "8"
    )  # several batches per document: a kill lands mid-batch
    monkeypatch.setenv("RAGLINE_WORKERS_ALIVE_TTL_S", "6")
    monkeypatch.setenv("RAGLINE_WORKERS_UNACKED_RESTORE_INTERVAL_S", "1")
    monkeypatch.setenv("RAGLINE_WORKERS_INGEST_MAX_WORKER_LOST", "2")
    reset_settings()
    yield get_settings()
    monkeypatch.undo()
    reset_settings()


def _started_pid(app, task_id: str) -> int:
    res = harness.wait_state(app, task_id, {"STARTED"}, timeout=180, poll=0.05)
    return int(res.info["pid"])


def _started_elsewhere(app, task_id: str, old_pid: int | None, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = app.AsyncResult(task_id)
        if res.state == "STARTED" and int(res.info["pid"]) != old_pid:
            return int(res.info["pid"])
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} was not started again within {timeout}s")


def _restarted(app, task_id: str, old_pid: int, timeout: float = 60) -> float:
    """When the task is seen started again in another process (or already finished)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = app.AsyncResult(task_id)
        if res.state == "SUCCESS" or (res.state == "STARTED" and int(res.info["pid"]) != old_pid):
            return time.monotonic()
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} was not redelivered within {timeout}s")


def _wait_embedding(pid: int, timeout: float = 120) -> None:
    """Until the child is busy in the model (CPU time climbing): the kill then lands mid-batch."""
    import psutil

    proc = psutil.Process(pid)
    base = proc.cpu_times().user
    deadline = time.monotonic() + timeout
    while proc.cpu_times().user - base < 1.0:
        if time.monotonic() > deadline:
            raise AssertionError("the task never started embedding")
        time.sleep(0.1)


def test_sigkill_prefork_child_and_whole_worker_mid_batch(e5_settings, tmp_path, tenant):
    from ragline.shared.worker.celery_app import app

    s = e5_settings
    files = harness.make_corpus(tmp_path / "c", docs=3, sections=6, prefix=f"child-{tenant}")
    files2 = harness.make_corpus(tmp_path / "w", docs=3, sections=6, prefix=f"whole-{tenant}")
    results = []

    # --- 1: SIGKILL the prefork child that runs a task ---------------------------------------------
    pool = start_pool(s, "ingest", concurrency=2)
    try:
        wait_ready(app, pool)
        job, ids = harness.send_job(app, pool.queue, files, tenant)
        victim_pid = _started_pid(app, ids[0])
        assert victim_pid in {c.pid for c in pool.children()}
        _wait_embedding(victim_pid)
        t_kill = time.monotonic()
        os.kill(victim_pid, signal.SIGKILL)
        t_back = _restarted(app, ids[0], victim_pid) - t_kill  # a new child runs it again
        summary = harness.wait_job(job)
        t_done = time.monotonic() - t_kill
        assert summary["state"] == "succeeded" and summary["done"] == len(files), summary
        assert pool.proc.poll() is None  # the pool itself never died
        log = pool.log_text()
        assert "WorkerLostError" in log or "exited with 'signal 9" in log
        results.append(
            harness.FaultResult(
                "SIGKILL prefork child mid-batch (local-e5)",
                tasks_affected=1,
                recovered=1,
                lost=0,
                duplicated=0,
                time_to_recover_s=round(t_back, 2),
                failures_recorded=1,
                notes=f"redelivered by the pool parent (reject_on_worker_lost) in {t_back:.2f}s; job done {t_done:.1f}s "
                "after the kill; WorkerLostError in the worker log",
            )
        )

        # --- 2: SIGKILL the whole worker (parent + children) ---------------------------------------
        tenant2 = tenant + "-whole"
        job2, ids2 = harness.send_job(app, pool.queue, files2, tenant2)
        busy_pid = _started_pid(app, ids2[0])
        _wait_embedding(busy_pid)
        t_kill = time.monotonic()
        os.killpg(pool.pid, signal.SIGKILL)
        pool.proc.wait(10)
    finally:
        pool.stop()
    fresh = start_pool(s, "ingest", concurrency=2, queue=pool.queue)
    try:
        wait_ready(app, fresh)
        summary2 = harness.wait_job(job2, timeout=240)
        t_done2 = time.monotonic() - t_kill
        assert summary2["state"] == "succeeded" and summary2["done"] == len(files2), summary2
        assert "restored" in fresh.log_text() and "dead workers" in fresh.log_text()
        # the clean runs: the same corpora again, undisturbed (vectors from the embedding cache)
        refs = {tenant: tenant + "-ref1", tenant2: tenant + "-ref2"}
        for t, corpus in ((tenant, files), (tenant2, files2)):
            job3, _ = harness.send_job(app, fresh.queue, corpus, refs[t])
            assert harness.wait_job(job3)["state"] == "succeeded"

        # --- 3: a document whose worker child dies every time is failed, not redelivered forever ---
        poison = harness.make_corpus(tmp_path / "p", docs=1, sections=20, prefix=f"poison-{tenant}")
        job4, ids4 = harness.send_job(app, fresh.queue, poison, tenant + "-poison")
        pid = None
        t_first = time.monotonic()
        for _ in range(s.workers.ingest_max_worker_lost):
            pid = _started_elsewhere(app, ids4[0], pid)
            _wait_embedding(pid)
            os.kill(pid, signal.SIGKILL)
        poisoned = harness.wait_job(job4, timeout=120)
        t_poison = time.monotonic() - t_first
        assert poisoned["failed"] == 1 and "died 2 times" in poisoned["errors"][0]["error"], poisoned
        assert fresh.proc.poll() is None
    finally:
        fresh.stop()

    for t, ref in refs.items():
        reference = harness.chunk_rows(ref)
        assert len(reference) >= 3 * 6
        cmp = harness.compare(harness.chunk_rows(t), reference)
        assert cmp["lost"] == 0 and cmp["duplicated"] == 0 and cmp["unexpected"] == 0, (t, cmp)
    results.append(
        harness.FaultResult(
            "SIGKILL whole ingest worker mid-batch (parent + children)",
            tasks_affected=2,
            recovered=2,
            lost=0,
            duplicated=0,
            time_to_recover_s=round(t_done2, 2),
            failures_recorded=1,
            notes="the 2 tasks it held (concurrency 2) came back via shared/worker/redelivery.py once its alive key "
            f"(TTL {s.workers.alive_ttl_s:g}s) expired; kombu alone: visibility_timeout = {s.workers.visibility_timeout_s}s",
            extra={"reference_rows": len(reference)},
        )
    )
    results.append(
        harness.FaultResult(
            "poison document: its worker child SIGKILLed on every delivery",
            tasks_affected=1,
            recovered=0,
            lost=0,
            duplicated=0,
            time_to_recover_s=round(t_poison, 2),
            failures_recorded=1,
            notes=f"after {s.workers.ingest_max_worker_lost} worker deaths the task records the document as failed "
            f"({poisoned['errors'][0]['error'][:90]}) instead of an endless requeue",
        )
    )
    harness.record("worker_kill", results)
