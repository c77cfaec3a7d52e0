"""A job's progress moves per document, not per batch task: ``ragline status``, ``ragline job`` and the
``--wait`` bar (``jobs.wait_for_job``) count each document as soon as it is stored, and the job's
heartbeat moves while a batch waits for the embedder. The batch's embedder is held back request by
request, so what the job shows between two requests is observed, not timed."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from typer.testing import CliRunner

from ragline.shared.worker import db, jobs, providers
from tests.loopback import hashed_embedding

DOCS = 4
PATIENCE_S = 120.0  # how long a step may take on a loaded machine; the test waits for states, not times


class GatedEmbedder:
    """An embedder that answers one request per :meth:`release`: the test decides when."""

    dim = 384

    def __init__(self) -> None:
        self.model = f"gated-{uuid.uuid4().hex[:8]}"  # its own cache entries: every text is sent
        self._gate = threading.Semaphore(0)
        self._lock = threading.Lock()
        self.answered = 0
        self.waiting = False  # a request has come in

    def release(self, n: int = 1) -> None:
        for _ in range(n):
            self._gate.release()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.waiting = True
        if not self._gate.acquire(timeout=PATIENCE_S):
            raise TimeoutError("the test never released this request")
        with self._lock:
            self.answered += 1
        return [hashed_embedding(t, self.dim) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return hashed_embedding(text, self.dim)


@pytest.fixture()
def gated(use_settings, monkeypatch):
    use_settings(embed_batch_size=1, ingest_batch_docs=32)  # one text per request, one batch task
    embedder = GatedEmbedder()
    monkeypatch.setitem(providers._cache, "embedder", embedder)
    yield embedder
    embedder.release(1000)  # a failed test leaves no worker thread waiting


def _until(check, what: str):
    deadline = time.monotonic() + PATIENCE_S
    while (value := check()) is None or value is False:
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)
    return value


def _summary(job_id: str) -> dict:
    with db.connection() as conn:
        return {**jobs.job_summary(conn, job_id), **jobs.job_record(conn, job_id)}


def _enqueue(folder, tenant: str) -> str:
    from ragline.cli import app as cli

    run = CliRunner().invoke(cli, ["ingest", str(folder), "--tenant", tenant, "--acl", "g", "--json"])
    assert run.exit_code == 0, run.output
    return json.loads(run.stdout.strip().splitlines()[-1])["job_id"]


def test_progress_counts_each_document_of_a_batch_as_it_is_stored(celery_worker, gated, tenant, tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    for n in range(DOCS):
        (folder / f"d{n}.md").write_text(f"# Документ {n}\n\nКороткий текст {n} для {tenant}.\n", "utf-8")
    job_id = _enqueue(folder, tenant)
    bar: list[int] = []  # what the --wait bar is given, poll by poll
    waiter = threading.Thread(
        target=jobs.wait_for_job,
        args=(job_id, PATIENCE_S * 2),
        kwargs={"poll_s": 0.05, "on_progress": lambda s: bar.append(jobs.finished_documents(s))},
    )
    waiter.start()
    seen = []
    try:
        for step in range(1, DOCS):
            gated.release()
            _until(lambda step=step: gated.answered >= step, f"embedding request {step}")
            s = _until(lambda step=step: (s := _summary(job_id))["done"] >= step and s, f"document {step}")
            seen.append((s["state"], s["done"]))
            _until(lambda step=step: step in bar, f"the bar at {step}")
        gated.release(1000)
    finally:
        gated.release(1000)
        waiter.join(PATIENCE_S * 2)
    # while the batch task was still waiting for the embedder, each stored document counted already
    assert seen == [("running", n) for n in range(1, DOCS)], seen
    final = _summary(job_id)
    assert (final["state"], final["done"], final["failed"]) == ("succeeded", DOCS, 0)
    assert bar[-1] == DOCS and all(a <= b for a, b in zip(bar, bar[1:], strict=False))


def test_the_heartbeat_moves_while_a_document_embeds(celery_worker, gated, tenant, tmp_path):
    folder = tmp_path / "long"
    folder.mkdir()
    paragraphs = "\n\n".join(
        f"## Раздел {n}\n\n" + f"Абзац {n} о настройке {tenant}. " * 40 for n in range(6)
    )
    (folder / "long.md").write_text(f"# Длинный документ\n\n{paragraphs}\n", "utf-8")
    job_id = _enqueue(folder, tenant)
    _until(lambda: _summary(job_id)["state"] == "running", "the job to run")
    gated.release()  # the first of the document's several requests
    _until(lambda: gated.answered >= 1, "the first embedding request")
    first = _until(lambda: _summary(job_id)["heartbeat_at"], "a heartbeat")
    gated.release()
    _until(lambda: gated.answered >= 2, "the second embedding request")
    later = _until(
        lambda: (s := _summary(job_id))["heartbeat_at"] > first and s, "the heartbeat after a request"
    )
    assert later["done"] == 0 and later["state"] == "running"  # nothing stored yet, and still alive
    gated.release(1000)
    _until(lambda: _summary(job_id)["state"] == "succeeded", "the job to finish")
