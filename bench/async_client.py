"""g. 200 concurrent questions from one event loop (AsyncRaglineClient) vs the synchronous client
in 200 threads, against the real query pool, same run.

The query pool is ``ragline up``'s as it runs with a remote embedder (solo processes,
``RAGLINE_WORKERS_QUERY_CONCURRENCY`` of them, the ``voyage`` embedder pointed at the loopback server); the
questions are lexical (Postgres full text over synthetic chunks), so no embedder call happens and
this benchmark's process does nothing but be the client. Every round sends ``concurrency``
questions at once through each client, the order of the two alternating between rounds:

* the asyncio client: one event loop, ``asyncio.gather`` of ``concurrency`` ``search`` calls;
* the synchronous client: ``concurrency`` threads, one ``search`` call each, all started together
  (what a threaded chat backend does with that many users at once).

Measured per burst, on the client side only: each question's latency (send to reply), the client
process's CPU time per question (``getrusage``: every thread of this process; the pool's processes
are not in it), the most threads alive and the resident memory at its highest during the burst
(sampled every 5 ms), and the burst's wall time. The pool answers both clients' questions the same
way, so the difference is the client.
"""

from __future__ import annotations

import asyncio
import resource
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from bench import common

NAME = "async_client"
TITLE = "200 concurrent questions: AsyncRaglineClient on one event loop vs RaglineClient in 200 threads"
SMOKE = {"n_chunks": 100, "concurrency": 8, "rounds": 1}
ACL = ["bench"]
K = 5


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Sampler:
    """The most threads alive and the highest RSS of this process while it runs (every 5 ms)."""

    def __init__(self) -> None:
        import psutil

        self.proc = psutil.Process()
        self.threads = threading.active_count()
        self.rss = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.threads = max(self.threads, threading.active_count())
            self.rss = max(self.rss, self.proc.memory_info().rss)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _question(tenant: str, i: int) -> dict:
    return {
        "query": f"синтетический фрагмент {i}",
        "tenant": tenant,
        "groups": ACL,
        "k": K,
        "mode": "lexical",
    }


def _measure(burst, n: int) -> dict:
    """Run ``burst()`` (it returns each question's latency in ms and how many failed) and measure
    the client around it."""
    threads0 = threading.active_count()
    cpu0, t0 = _cpu_s(), time.perf_counter()
    with Sampler() as s:
        ms, failed = burst()
    wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
    return {
        "questions": n,
        "failed": failed,
        "burst_s": round(wall, 3),
        "client_cpu_ms_per_question": round(cpu * 1000 / n, 3),
        "threads_before": threads0 - 1,  # without the sampler's own thread
        "threads_peak": s.threads - 1,
        "extra_threads": s.threads - threads0,
        "rss_peak_mb": round(s.rss / 2**20, 1),
        "ms": ms,
    }


def async_burst(client, tenant: str, start: int, n: int):
    async def one(i: int) -> float | None:
        t = time.perf_counter()
        try:
            res = await client.search(**_question(tenant, i))
        except Exception:
            return None
        return (time.perf_counter() - t) * 1000 if res.hits else None

    async def main() -> list[float | None]:
        return await asyncio.gather(*(one(start + i) for i in range(n)))

    def run() -> tuple[list[float], int]:
        out = asyncio.run(main())
        return [x for x in out if x is not None], sum(x is None for x in out)

    return run


def sync_burst(client, tenant: str, start: int, n: int):
    def run() -> tuple[list[float], int]:
        out: list[float | None] = [None] * n
        go = threading.Event()

        def one(j: int) -> None:
            go.wait()
            t = time.perf_counter()
            try:
                res = client.search(**_question(tenant, start + j))
            except Exception:
                return
            out[j] = (time.perf_counter() - t) * 1000 if res.hits else None

        threads = [threading.Thread(target=one, args=(j,)) for j in range(n)]
        for th in threads:
            th.start()
        go.set()
        for th in threads:
            th.join()
        return [x for x in out if x is not None], sum(x is None for x in out)

    return run


def _summary(bursts: list[dict]) -> dict:
    ms = [x for b in bursts for x in b["ms"]]
    out = common.latency_summary(ms) if ms else {"n": 0}
    for key in ("client_cpu_ms_per_question", "extra_threads", "threads_peak", "rss_peak_mb", "burst_s"):
        values = [b[key] for b in bursts]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    out["per_round_p95_ms"] = [round(common.percentile(b["ms"], 95), 2) for b in bursts if b["ms"]]
    out["failed"] = sum(b["failed"] for b in bursts)
    return out


def run(
    out_dir: Path = common.RESULTS,
    n_chunks: int = 2000,
    concurrency: int = 200,
    rounds: int = 3,
    seed: int = 7,
) -> dict:
    from bench.synthetic import EmbeddingSpace, load_chunks
    from ragline.shared.sdk.async_client import AsyncRaglineClient
    from ragline.shared.sdk.client import RaglineClient
    from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
    from ragline.shared.worker import db
    from tests.loopback import LoopbackServer

    tenant = f"bench-async-{int(time.time())}"
    with db.connection() as c:
        desc = common.machine(c)
    with db.connect() as conn:
        with conn.transaction():
            load_chunks(conn, tenant, EmbeddingSpace().sample(n_chunks, np.random.default_rng(seed)), ACL)
    common.settle("chunks")
    ready = {"query": (TASK_QUERY_RETRIEVE, {"query": "", "tenant": tenant, "groups": []})}
    raw: dict = {"rounds": []}
    # a remote embedder makes the pool ragline up's solo processes, no model loaded; lexical
    # questions never call it
    with LoopbackServer() as srv:
        embedder = {
            "embed_provider": "voyage",
            "providers_voyage_base_url": srv.url,
            "providers_voyage_api_key": "bench-key",
        }
        with common.settings_env(**embedder), common.prefork_pools(ready):
            from ragline.shared.config.settings import get_settings

            settings = get_settings()
            url = settings.effective_redis_url()
            sync_client = RaglineClient(url, timeout=600)
            async_client = AsyncRaglineClient(url, timeout=600)
            # warm both: connections, subscriptions, the pool's statements
            async_burst(async_client, tenant, 0, min(concurrency, 20))()
            sync_burst(sync_client, tenant, 0, min(concurrency, 20))()
            start = 100
            for r in range(rounds):
                order = ("async", "sync") if r % 2 == 0 else ("sync", "async")
                row = {"order": list(order)}
                for kind in order:
                    make = async_burst if kind == "async" else sync_burst
                    client = async_client if kind == "async" else sync_client
                    row[kind] = _measure(make(client, tenant, start, concurrency), concurrency)
                    start += concurrency
                raw["rounds"].append(row)
            asyncio.run(async_client.aclose())
            raw["query_pool"] = settings.effective_query_pool
            raw["query_concurrency"] = settings.workers.query_concurrency
    raw["async"] = _summary([r["async"] for r in raw["rounds"]])
    raw["sync"] = _summary([r["sync"] for r in raw["rounds"]])
    for r in raw["rounds"]:
        for kind in ("async", "sync"):
            r[kind]["p50_ms"] = round(common.percentile(r[kind]["ms"], 50), 2) if r[kind]["ms"] else None
            r[kind]["p95_ms"] = round(common.percentile(r[kind]["ms"], 95), 2) if r[kind]["ms"] else None
            del r[kind]["ms"]
    a, s = raw["async"], raw["sync"]
    cpu_ratio = a["client_cpu_ms_per_question"]["median"] / max(
        s["client_cpu_ms_per_question"]["median"], 1e-9
    )
    p95_ratio = a["p95_ms"] / s["p95_ms"] if a["n"] and s["n"] else float("inf")
    raw["cpu_per_question_ratio_async_over_sync"] = round(cpu_ratio, 3)
    raw["p95_ratio_async_over_sync"] = round(p95_ratio, 3)
    targets = [
        common.Target(
            f"async client: threads added during {concurrency} concurrent questions",
            a["extra_threads"]["max"],
            "<=",
            2,
        ),
        common.Target("async / sync client CPU per question (median of rounds)", cpu_ratio, "<=", 1.0, "x"),
        common.Target("async / sync question latency p95", p95_ratio, "<=", 1.25, "x"),
        common.Target("questions failed (both clients)", a["failed"] + s["failed"], "<=", 0),
    ]
    params = {
        "n_chunks": n_chunks,
        "concurrency": concurrency,
        "rounds": rounds,
        "k": K,
        "mode": "lexical (no embedder call; the voyage embedder is configured so the pool is solo processes)",
    }
    notes = [
        "Each round: one burst of `concurrency` questions through each client, all at once; the order of the"
        " two alternates between rounds. Latency: from the call to the validated reply, per question.",
        "client_cpu_ms_per_question: CPU time (user + system, getrusage) of the benchmark process, which runs"
        " nothing but the client during a burst (the query pool is separate processes), over the questions.",
        "extra_threads / threads_peak / rss_peak_mb: sampled every 5 ms during the burst, the sampler's own"
        " thread left out. The asyncio client's one publishing thread exists from its warm-up on.",
        "Both clients wait for the same pool: latency is mostly the pool's queue (questions answered"
        " `query_concurrency` at a time); the CPU and thread figures are the client's own cost.",
    ]
    data = common.result(NAME, TITLE, params, raw, targets, desc, notes)
    common.write_json(data, out_dir)
    groups = {
        "latency p50, ms": {"async (1 loop)": a.get("p50_ms", 0.0), "sync (threads)": s.get("p50_ms", 0.0)},
        "latency p95, ms": {"async (1 loop)": a.get("p95_ms", 0.0), "sync (threads)": s.get("p95_ms", 0.0)},
        "client CPU ms\nper question": {
            "async (1 loop)": a["client_cpu_ms_per_question"]["median"],
            "sync (threads)": s["client_cpu_ms_per_question"]["median"],
        },
        "threads added": {
            "async (1 loop)": a["extra_threads"]["max"],
            "sync (threads)": s["extra_threads"]["max"],
        },
    }
    common.bar_plot(
        out_dir / f"{NAME}.png",
        f"{concurrency} concurrent questions, {rounds} rounds: asyncio client vs sync client in threads",
        groups,
        "value (log)",
        targets,
        log=True,
    )
    return data
