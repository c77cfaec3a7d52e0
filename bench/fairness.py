"""h. Per-tenant fairness on the query queue: tenant B's latency alone and while tenant A floods.

The query pool is ``ragline up``'s as it runs with a remote embedder (solo processes,
``RAGLINE_WORKERS_QUERY_CONCURRENCY`` of them): each question embeds its text through the ``voyage``
embedder against the loopback Voyage server, which answers after a fixed latency (a remote
embedder's round trip), then runs the vector search. Every question text is new, so the
query-embedding cache never answers.

Tenant B asks one question at a time with a short pause (a chat user); tenant A floods: its own
client process sends questions open loop at ``flood_factor`` times what the pool answers (measured
first, in the same run, on the same machine load) and never waits for them. Each round measures B
alone, then B while A floods, with the same pool; the pool runs twice in the same run: with
per-tenant admission off (one FIFO for every tenant: B waits behind A's backlog) and on
(``RAGLINE_ADMISSION_TENANT_RATE`` / ``_BURST`` / ``_MAX_IN_FLIGHT``, a quarter of the pool's rate and one
question in flight for each tenant: A's excess questions are answered "rate limited" at once, so
B's question meets a short queue).

The claim is a ratio within one run: B's p95 while A floods over B's p95 alone, with fairness on.
After each flood the queue is purged, so the next phase starts empty.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from bench import common

NAME = "fairness"
TITLE = "Per-tenant fairness: tenant B's latency alone vs while tenant A floods the query queue"
SMOKE = {"n_chunks": 200, "phase_s": 2.0, "rounds": 1, "calibration_questions": 20, "embed_latency_s": 0.005}
ACL = ["bench"]
K = 5


def _load(tenants: list[str], n_chunks: int, seed: int) -> None:
    from bench.synthetic import EmbeddingSpace, load_chunks
    from ragline.shared.worker import db

    rng = np.random.default_rng(seed)
    space = EmbeddingSpace()
    with db.connect() as conn:
        with conn.transaction():
            for tenant in tenants:
                load_chunks(conn, tenant, space.sample(n_chunks, rng), ACL)
    common.settle("chunks", "documents")


class Questions:
    """A new question text every time (the query-embedding cache must not answer)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.n = 0
        self.lock = threading.Lock()

    def next(self, tenant: str) -> dict:
        with self.lock:
            self.n += 1
            n = self.n
        return {
            "query": f"{self.prefix} вопрос {n} о повторах запросов после ошибки",
            "tenant": tenant,
            "groups": ACL,
            "k": K,
            "mode": "vector",
        }


def _ask(payload: dict) -> tuple[float, dict]:
    from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
    from ragline.shared.worker.celery_app import app

    t = time.perf_counter()
    res = app.send_task(TASK_QUERY_RETRIEVE, args=[payload]).get(timeout=600)
    return (time.perf_counter() - t) * 1000, res


def _interactive(tenant: str, questions: Questions, until: float, interval_s: float) -> dict:
    """B: one question at a time, one every ``interval_s`` (or at once when the last one took
    longer), until ``until`` (monotonic)."""
    ms, refused, failed = [], 0, 0
    while (start := time.monotonic()) < until:
        took, res = _ask(questions.next(tenant))
        if res.get("ok") is False:
            refused += res.get("error") == "rate limited"
            failed += res.get("error") != "rate limited"
        else:
            ms.append(took)
        time.sleep(max(0.0, start + interval_s - time.monotonic()))
    return {"ms": ms, "refused": refused, "failed": failed}


def flood(tenant: str, prefix: str, rate: float, duration_s: float, collect_s: float) -> dict:
    """Tenant A's client: sends open loop at ``rate`` for ``duration_s`` without waiting, then counts
    the answers that arrived within ``collect_s`` of its last send.

    It runs in a process of its own (``python -m bench.fairness flood ...``) and sends through a
    Celery app without a result backend: a client subscribes to the result of every task it sends,
    and thousands of unread subscriptions would slow whoever shares them, not the pool. The workers
    store every answer as usual; they are read afterwards."""
    from celery import Celery

    from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
    from ragline.shared.worker.celery_app import app

    client = Celery("bench-flood", broker=app.conf.broker_url)
    client.conf.update(
        task_queues=app.conf.task_queues,
        task_routes=app.conf.task_routes,
        task_serializer="json",
        accept_content=["json"],
    )
    questions, ids = Questions(prefix), []
    start = time.monotonic()
    while time.monotonic() - start < duration_s:
        delay = start + len(ids) / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        ids.append(client.send_task(TASK_QUERY_RETRIEVE, args=[questions.next(tenant)]).id)
    sent_s = time.monotonic() - start
    pending = [app.AsyncResult(i) for i in ids]
    counts = {"answered": 0, "refused": 0, "other": 0}
    stop = time.monotonic() + collect_s
    while pending and time.monotonic() < stop:
        still, misses = [], 0
        for j, r in enumerate(pending):
            if misses == 20:  # answers come about in order: the rest is not there yet either
                still += pending[j:]
                break
            if not r.ready():
                still.append(r)
                misses += 1
                continue
            res = r.result
            key = "other"
            if isinstance(res, dict):
                key = (
                    "refused"
                    if res.get("error") == "rate limited"
                    else "answered"
                    if "hits" in res
                    else "other"
                )
            counts[key] += 1
        pending = still
        time.sleep(0.2)
    return {"sent": len(ids), "sent_per_s": round(len(ids) / sent_s, 1), **counts, "unanswered": len(pending)}


def _purge_query_queue() -> int:
    from ragline.shared.worker.celery_app import app

    with app.connection_for_write() as conn:
        return int(conn.default_channel.queue_purge("query") or 0)


def _phase(
    b: str, a: str | None, questions: Questions, phase_s: float, interval_s: float, rate: float
) -> dict:
    """B's latencies for ``phase_s`` seconds, with A's client flooding at ``rate`` when ``a`` is given."""
    import json
    import subprocess
    import sys

    flooder = None
    lead_s = min(1.0, phase_s / 4)  # B arrives while the flood is under way
    if a is not None:
        argv = [sys.executable, "-m", "bench.fairness", "flood", a, f"{questions.prefix}-a", str(rate)]
        argv += [str(lead_s + phase_s), "3"]
        flooder = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])
        time.sleep(lead_s)
    t0 = time.monotonic()
    out = _interactive(b, questions, t0 + phase_s, interval_s)
    out["duration_s"] = round(time.monotonic() - t0, 2)
    if flooder is not None:
        stdout, _ = flooder.communicate(timeout=600)
        if flooder.returncode:
            raise RuntimeError(f"the flooding client failed ({flooder.returncode})")
        out["a"] = json.loads(stdout.strip().splitlines()[-1])
        out["a"]["purged"] = _purge_query_queue()
        time.sleep(1.0)  # the questions already taken finish before the next phase
    return out


def _summary(rounds: list[dict], key: str) -> dict:
    ms = [x for r in rounds for x in r[key]["ms"]]
    out = common.latency_summary(ms) if ms else {"n": 0}
    out["per_round_p95_ms"] = [round(common.percentile(r[key]["ms"], 95), 2) for r in rounds if r[key]["ms"]]
    out["b_refused"] = sum(r[key]["refused"] for r in rounds)
    out["b_failed"] = sum(r[key]["failed"] for r in rounds)
    return out


def _drain(tenant: str, questions: Questions, n: int) -> dict:
    """``n`` questions of ``tenant`` sent at once: how many the pool got through per second, and
    what they were answered with."""
    from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
    from ragline.shared.worker.celery_app import app

    t = time.perf_counter()
    pending = [app.send_task(TASK_QUERY_RETRIEVE, args=[questions.next(tenant)]) for _ in range(n)]
    answers = [r.get(timeout=600) for r in pending]
    took = time.perf_counter() - t
    refused = sum(1 for r in answers if r.get("error") == "rate limited")
    return {"questions": n, "seconds": round(took, 3), "per_s": round(n / took, 1), "refused": refused}


def _config(cfg_rounds: list[dict], settings) -> dict:
    return {
        "query_pool": settings.effective_query_pool,
        "query_concurrency": settings.workers.query_concurrency,
        "b_alone": _summary(cfg_rounds, "alone"),
        "b_while_a_floods": _summary(cfg_rounds, "flooded"),
        "a": {
            k: [r["flooded"]["a"][k] for r in cfg_rounds]
            for k in ("sent", "sent_per_s", "answered", "refused", "other", "unanswered", "purged")
        },
        "rounds": [
            {
                phase: {k: v for k, v in r[phase].items() if k != "ms"}
                | {"b_p95_ms": round(common.percentile(r[phase]["ms"], 95), 2) if r[phase]["ms"] else None}
                for phase in ("alone", "flooded")
            }
            for r in cfg_rounds
        ],
    }


def run(
    out_dir: Path = common.RESULTS,
    n_chunks: int = 5000,
    phase_s: float = 20.0,
    rounds: int = 3,
    flood_factor: float = 3.0,
    calibration_questions: int = 150,
    b_share: float = 0.5,
    embed_latency_s: float = 0.03,
    tenant_max_in_flight: int = 1,
    seed: int = 5,
) -> dict:
    """``flood_factor``: A floods at this multiple of what the pool answers, measured first in the
    same run (``calibration_questions`` sent at once); the tenant rate is a quarter of it, and B asks
    at ``b_share`` of the tenant rate (a tenant within its budget)."""
    from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
    from ragline.shared.worker import db
    from tests.loopback import Faults, LoopbackServer

    run_id = int(time.time())
    a, b = f"bench-fair-{run_id}-A", f"bench-fair-{run_id}-B"
    with db.connection() as c:
        desc = common.machine(c)
    _load([a, b], n_chunks, seed)
    questions = Questions(f"r{run_id}")
    ready = {"query": (TASK_QUERY_RETRIEVE, {"query": "", "tenant": b, "groups": []})}
    raw: dict = {"configs": {}}
    with LoopbackServer(faults=Faults(latency_s=embed_latency_s)) as srv:
        embedder = {
            "embed_provider": "voyage",
            "providers_voyage_base_url": srv.url,
            "providers_voyage_api_key": "bench-key",
            "embed_rpm": 0,
            "embed_tpm": 0,
        }
        fairness: dict[str, dict] = {
            "off": {
                "admission_tenant_rate": 0,
                "admission_tenant_burst": 0,
                "admission_tenant_max_in_flight": 0,
            }
        }
        for label in ("off", "on"):
            with common.settings_env(**embedder, **fairness[label]), common.prefork_pools(ready):
                from ragline.shared.config.settings import get_settings

                settings = get_settings()
                for _ in range(2):  # warm: connections, the embedder client, HNSW pages
                    _ask(questions.next(b))
                if label == "off":  # what the pool answers per second sets the flood and the tenant rate
                    capacity = _drain(a, questions, calibration_questions)
                    raw["pool_answers_per_s"] = capacity
                    flood_rate = round(flood_factor * capacity["per_s"], 1)
                    tenant_rate = max(1.0, round(capacity["per_s"] / 4, 1))
                    b_interval_s = round(1 / (b_share * tenant_rate), 3)  # B stays within its own rate
                    fairness["on"] = {
                        "admission_tenant_rate": tenant_rate,
                        "admission_tenant_burst": max(1, round(tenant_rate)),
                        "admission_tenant_max_in_flight": tenant_max_in_flight,
                    }
                else:  # how many over-limit questions the pool turns away per second
                    raw["pool_refusals_per_s"] = _drain(a, questions, 3 * calibration_questions)
                    time.sleep(2.0)  # A's window empties before the rounds
                per_round = []
                for _ in range(rounds):
                    alone = _phase(b, None, questions, phase_s, b_interval_s, flood_rate)
                    flooded = _phase(b, a, questions, phase_s, b_interval_s, flood_rate)
                    per_round.append({"alone": alone, "flooded": flooded})
                raw["configs"][label] = _config(per_round, settings)
        raw["embedder_requests"] = srv.stats.by_path.get("/v1/embeddings", 0)
    ratios = {}
    for label, cfg in raw["configs"].items():
        alone, flooded = cfg["b_alone"], cfg["b_while_a_floods"]
        ratios[label] = round(flooded["p95_ms"] / alone["p95_ms"], 3) if flooded["n"] and alone["n"] else None
        cfg["p95_ratio_per_round"] = [
            round(f / al, 3)
            for al, f in zip(alone["per_round_p95_ms"], flooded["per_round_p95_ms"], strict=False)
        ]
    raw["b_p95_ratio_flooded_over_alone"] = ratios
    on = raw["configs"]["on"]
    targets = [
        common.Target(
            f"fairness on: B p95 while A floods at {flood_factor:g}x capacity / B p95 alone",
            ratios["on"] or float("inf"),
            "<=",
            2.0,
            "x",
        ),
        common.Target(
            "fairness on: B's questions refused",
            on["b_alone"]["b_refused"] + on["b_while_a_floods"]["b_refused"],
            "<=",
            0,
        ),
        common.Target("fairness on: A's questions refused", sum(on["a"]["refused"]), ">=", 1),
    ]
    params = {
        "n_chunks_per_tenant": n_chunks,
        "phase_s": phase_s,
        "rounds": rounds,
        "flood_factor": flood_factor,
        "flood_rate_per_s": flood_rate,
        "b_share_of_tenant_rate": b_share,
        "b_interval_s": b_interval_s,
        "embed_latency_s": embed_latency_s,
        "fairness_on": fairness["on"],
        "k": K,
        "mode": "vector (query embedded by the voyage embedder against the loopback server)",
    }
    notes = [
        "Calibration, same run: pool_answers_per_s is what the pool answered with calibration_questions of A"
        " sent at once (admission off); A floods at flood_factor times that, and fairness on admits a quarter"
        " of it per tenant. pool_refusals_per_s: over-limit questions sent at once, admission on.",
        "Tenant A's client (a process of its own, `python -m bench.fairness flood`) sends open loop at"
        " flood_rate_per_s and reads its answers afterwards; tenant B asks one question at a time, one every"
        " b_interval_s (half its tenant rate: within its budget). Each round: B alone for phase_s, then B"
        " while A floods (A starts 1 s earlier).",
        "In-worker admission helps as long as the pool turns A's excess away faster than A sends it"
        " (pool_refusals_per_s): past that, A's backlog grows and B waits behind it again.",
        "fairness off: one FIFO for every tenant; A's backlog grows for the whole phase, so B's latency"
        " grows with the phase length (the number is a lower bound of what a longer flood does).",
        "a.answered / a.refused: A's questions answered with hits / 'rate limited' within 3 s of its last"
        " send; a.unanswered: not answered by then; a.purged: still queued after B's phase, removed.",
        "The ratio is B's p95 while A floods over B's p95 alone in the same pool and run; per-round ratios"
        " show the spread.",
    ]
    data = common.result(NAME, TITLE, params, raw, targets, desc, notes)
    common.write_json(data, out_dir)
    groups = {}
    for label, cfg in raw["configs"].items():
        for p in ("p50", "p95"):
            groups[f"fairness {label}\n{p}"] = {
                "B alone": cfg["b_alone"].get(f"{p}_ms", 0.0),
                "B while A floods": cfg["b_while_a_floods"].get(f"{p}_ms", 0.0),
            }
    common.bar_plot(
        out_dir / f"{NAME}.png",
        f"Tenant B's question latency, A flooding at {flood_rate:g}/s (p95 ratio on: {ratios['on']}, off: {ratios['off']})",
        groups,
        "latency, ms (log)",
        targets,
        log=True,
    )
    return data


if __name__ == "__main__":
    import json
    import sys

    if sys.argv[1:2] != ["flood"]:
        raise SystemExit("usage: python -m bench.fairness flood TENANT PREFIX RATE DURATION_S COLLECT_S")
    tenant, prefix, rate, duration_s, collect_s = sys.argv[2:7]
    print(json.dumps(flood(tenant, prefix, float(rate), float(duration_s), float(collect_s))), flush=True)
