"""a. Ingest throughput through Celery against the loopback Voyage server.

Documents go out as ``ragline.ingest.batch`` tasks (as ``ragline ingest`` sends them) to the
real prefork ingest pool; the ``voyage`` embedder talks to the loopback server over HTTP.

* Fixed latency L per request (4 s and 16 s by default): the bound is ``embed_max_in_flight × embed_batch_size / L``
  chunks/s (4 × 128 / L by default): the cluster-wide in-flight limiter allows 4 requests at
  once, each carrying at most 128 texts. Throughput is measured from the first send to the
  last document stored. The pool has more processes than in-flight slots, so that a process
  parsing or storing does not leave a slot idle.
* 429 storm: every third request is answered 429 with ``Retry-After``; the bound is the
  configured rate limit, ``embed_rpm / 60 × embed_batch_size`` chunks/s. The sliding-window
  limiter lets a full minute's budget through at once when it starts empty, so throughput is
  measured in steady state: the chunks stored from 60 s after the start (their ``updated_at``)
  to the last one. Failed requests also spend rate budget, so 2/3 of the bound is the most a
  client can reach in this storm.

Documents hold 1-8 passages; they are packed into batch tasks of exactly ``embed_batch_size``
chunks (counted with the pipeline's own parse and chunk functions), so every request carries a
full batch. Texts carry a run id, so the embedding cache never answers.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from bench import common

NAME = "ingest_throughput"
TITLE = "Ingest throughput through Celery vs the embedder bound (loopback Voyage)"
SMOKE = {
    "latencies": (0.05,),
    "latency_requests": 4,
    "batch_size": 4,
    "storm_rpm": 600,
    "storm_batch_size": 4,
    "storm_s": 3.0,
    "steady_after_s": 0.0,
    "retry_after_s": 0.1,
    "concurrency": 2,
}


def _chunk_times(tenant: str) -> list[float]:
    """Epoch seconds at which each chunk was stored (the store transaction's ``now()``)."""
    from ragline.shared.worker import db

    with db.connection() as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM updated_at) AS t FROM chunks WHERE tenant = %s ORDER BY 1", (tenant,)
        ).fetchall()
    return [float(r["t"]) for r in rows]


def _chunk_count(text: str, settings) -> int:
    """How many chunks the pipeline makes of this text document (its own pure parse and chunk functions)."""
    from ragline.ingest.chunk import chunk_blocks
    from ragline.ingest.parse import parse_bytes

    parsed = parse_bytes(text.encode(), "md", default_title="doc")
    return len(
        chunk_blocks(
            parsed.blocks,
            settings.chunk.max_chars,
            hard_max_chars=settings.chunk.hard_max_chars,
        )
    )


def plan_tasks(n_tasks: int, chunks_per_task: int, tag: str, settings, seed: int = 3) -> list[list[str]]:
    """Documents of 1-8 passages packed into tasks of exactly ``chunks_per_task`` chunks, so each task's
    texts fill whole embedding batches. Chunk counts come from a pool of passage combinations counted
    once (with a prefix of the same length as the real one)."""
    rng = random.Random(seed)
    pool = common.passages(300, max_chars=700)
    head = f"Документ {tag}-"

    def text(parts: list[str], t: int, d: int) -> str:
        # a title of its own (embedded beside each chunk as its context) and every paragraph tagged,
        # so no chunk, not even one cut from inside a paragraph, is ever in the embedding cache
        body = "\n\n".join(f"{head}{t:05d}-{d:03d}-{i}. {p}" for i, p in enumerate(parts))
        return f"# {head}{t:05d}-{d:03d}\n\n{body}"

    combos: list[tuple[list[str], int]] = []
    for j in range(40):
        parts = rng.sample(pool, 1 if j < 4 else rng.randint(2, 8))
        combos.append((parts, _chunk_count(text(parts, 0, 0), settings)))
    if not any(c == 1 for _, c in combos):
        raise RuntimeError("no one-chunk document to fill tasks with")
    tasks = []
    for t in range(n_tasks):
        docs, left = [], chunks_per_task
        while left:
            parts, c = rng.choice([x for x in combos if x[1] <= left])
            docs.append(text(parts, t, len(docs)))
            left -= c
        tasks.append(docs)
    return tasks


def _timeline(spans: list[tuple[float, float]], start: float, end: float, slots: int) -> dict:
    """Where the time went: before the first request (parse + chunk of the first tasks), after the
    last answer (store), and how busy the in-flight slots were in between."""
    if not spans:
        return {}
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    busy = sum(e - s for s, e in spans)
    return {
        "before_first_request_s": round(first - start, 3),
        "after_last_answer_s": round(end - last, 3),
        "requests_window_s": round(last - first, 3),
        "slot_utilisation": round(busy / (max(1, slots) * (last - first)), 4) if last > first else None,
    }


def _case(srv, tenant: str, tasks: list[list[str]], chunks_expected: int) -> dict:
    from ragline.shared.sdk.names import TASK_INGEST_BATCH
    from ragline.shared.worker.celery_app import app

    n_docs = sum(map(len, tasks))
    srv.reset_stats()
    wall0, t0 = time.time(), time.monotonic()
    d = 0
    for docs in tasks:
        payload = []
        for text in docs:
            payload.append(
                {
                    "tenant": tenant,
                    "doc_id": f"{tenant}-{d}",
                    "content": text,
                    "fmt": "md",
                    "acl": ["bench"],
                    "version": 1,
                }
            )
            d += 1
        app.send_task(TASK_INGEST_BATCH, args=[{"documents": payload}])
    done, errors = common.wait_documents_ready(tenant, n_docs, timeout=3600, poll_s=0.05)
    elapsed = done - t0
    times = _chunk_times(tenant)
    st = srv.stats
    timeline = _timeline(st.spans, wall0, wall0 + elapsed, st.max_in_flight)
    return {
        "timeline": timeline,
        "documents": n_docs,
        "documents_failed": len(errors),
        "errors": errors[:20],
        "tasks": len(tasks),
        "chunks_expected": chunks_expected,
        "chunks": len(times),
        "elapsed_s": round(elapsed, 3),
        "chunks_per_s": round(len(times) / elapsed, 2),
        "start_epoch": wall0,
        "chunk_times": times,
        "server": {
            "requests": st.requests,
            "answered_429": st.answered_429,
            "texts_embedded": st.texts_embedded,
            "texts_per_request": round(st.texts_embedded / max(1, st.requests - st.answered_429), 1),
            "max_in_flight": st.max_in_flight,
        },
    }


def run(
    out_dir: Path = common.RESULTS,
    latencies: tuple[float, ...] = (4.0, 16.0),
    latency_requests: int = 32,
    batch_size: int = 128,
    storm_rpm: int = 60,
    storm_batch_size: int = 32,
    storm_s: float = 150.0,
    steady_after_s: float = 60.0,
    retry_after_s: float = 1.0,
    concurrency: int = 6,
    max_in_flight: int = 4,
) -> dict:
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT
    from ragline.shared.worker import db
    from tests.loopback import Faults, LoopbackServer

    run_id = int(time.time())
    with db.connection() as c:
        desc = common.machine(c)
    raw: dict = {}
    targets: list[common.Target] = []
    base = {
        "embed_provider": "voyage",
        "providers_voyage_api_key": "bench-key",
        "workers_ingest_concurrency": concurrency,
        "embed_max_in_flight": max_in_flight,
        "embed_tpm": 0,
    }

    # --- fixed latency: each L in its own tenant, with a pool started for it ------------------------------
    raw["latency"] = []
    for latency_s in latencies:
        with (
            LoopbackServer(Faults(latency_s=latency_s)) as srv,
            common.settings_env(
                **base,
                providers_voyage_base_url=srv.url,
                embed_batch_size=batch_size,
                embed_rpm=0,
                ingest_batch_docs=batch_size,
            ),
        ):
            with common.prefork_pools({"ingest": (TASK_INGEST_DOCUMENT, {})}):
                tag = f"{run_id}-lat{latency_s:g}".replace(".", "_")
                tasks = plan_tasks(latency_requests, batch_size, tag, get_settings())
                case = _case(srv, f"bench-tp-{tag}", tasks, latency_requests * batch_size)
        bound = max_in_flight * batch_size / latency_s
        case.pop("chunk_times")
        raw["latency"].append(
            {
                **case,
                "latency_s": latency_s,
                "bound_chunks_per_s": round(bound, 2),
                "ratio": round(case["chunks_per_s"] / bound, 4),
            }
        )
        targets.append(
            common.Target(
                f"latency {latency_s:g} s: chunks/s / (in-flight {max_in_flight} x {batch_size} / L)",
                case["chunks_per_s"] / bound,
                ">=",
                0.90,
            )
        )

    # --- 429 storm -----------------------------------------------------------------------------------
    storm_bound = storm_rpm / 60 * storm_batch_size
    # enough documents for the first window's burst, then about storm_s at 2/3 of the bound
    burst = storm_rpm if steady_after_s > 0 else 0
    n_tasks = int(burst + storm_rpm / 60 * storm_s * 2 / 3)
    faults = Faults(latency_s=0.02, every_nth_429=3, retry_after_s=retry_after_s)
    with (
        LoopbackServer(faults) as srv,
        common.settings_env(
            **base,
            providers_voyage_base_url=srv.url,
            embed_batch_size=storm_batch_size,
            embed_rpm=storm_rpm,
            ingest_batch_docs=storm_batch_size,
        ),
    ):
        with common.prefork_pools({"ingest": (TASK_INGEST_DOCUMENT, {})}):
            tasks = plan_tasks(n_tasks, storm_batch_size, f"{run_id}-429", get_settings())
            case = _case(srv, f"bench-tp-{run_id}-429", tasks, n_tasks * storm_batch_size)
    times = case.pop("chunk_times")
    steady_from = case["start_epoch"] + steady_after_s
    steady = [t for t in times if t >= steady_from]
    steady_s = max(times) - steady_from
    steady_rate = len(steady) / steady_s if steady_s > 0 and steady else 0.0
    raw["storm_429"] = {
        **case,
        "every_nth_429": 3,
        "retry_after_s": retry_after_s,
        "embed_rpm": storm_rpm,
        "embed_batch_size": storm_batch_size,
        "bound_chunks_per_s": round(storm_bound, 2),
        "steady_after_s": steady_after_s,
        "steady_chunks": len(steady),
        "steady_s": round(steady_s, 3),
        "steady_chunks_per_s": round(steady_rate, 2),
        "ratio": round(steady_rate / storm_bound, 4),
    }
    targets.append(
        common.Target(
            f"429 storm (every 3rd): steady chunks/s / (rpm {storm_rpm}/60 x {storm_batch_size})",
            steady_rate / storm_bound,
            ">=",
            0.50,
        )
    )
    targets.append(
        common.Target(
            "documents failed (all cases)",
            raw["storm_429"]["documents_failed"] + sum(x["documents_failed"] for x in raw["latency"]),
            "<=",
            0,
        )
    )
    params = {
        "latencies": list(latencies),
        "latency_requests": latency_requests,
        "batch_size": batch_size,
        "storm_rpm": storm_rpm,
        "storm_batch_size": storm_batch_size,
        "storm_s": storm_s,
        "steady_after_s": steady_after_s,
        "ingest_concurrency": concurrency,
        "embed_max_in_flight": max_in_flight,
        "workers": "ragline up's prefork ingest pool",
        "documents": "Markdown, a title and 1-8 tydi-ru passages each, packed into batch tasks of exactly batch_size chunks",
    }
    notes = [
        "Latency case: throughput from the first send to the last document stored, so pipeline start"
        " and drain count against ragline.",
        "Storm case: failed (429) requests spend RPM budget too; 2/3 of the bound is the ceiling.",
    ]
    data = common.result(NAME, TITLE, params, raw, targets, desc, notes)
    common.write_json(data, out_dir)
    common.bar_plot(
        out_dir / f"{NAME}.png",
        "Ingest through Celery vs embedder bound",
        {
            **{
                f"latency {x['latency_s']:g} s": {
                    "bound": x["bound_chunks_per_s"],
                    "measured": x["chunks_per_s"],
                }
                for x in raw["latency"]
            },
            f"429 storm, rpm {storm_rpm}": {"bound": storm_bound, "measured": steady_rate},
        },
        "chunks per second",
        targets,
    )
    return data
