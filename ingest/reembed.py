"""Background re-embedding after a model change (same vector dimension), and the vector fill.

Chunks whose ``embed_model`` differs from the configured model are re-embedded batch by batch
and updated in place; every chunk keeps its old vector until its new one is written, so search
keeps serving throughout (lexical retrieval is unaffected; vector scores across two models are
not comparable while the switch runs). Texts go through the embedding cache, so each distinct
text is sent to the embedder once. A change of dimension needs a new column first: see
"Re-embedding runbook" in docs/operations.md.

The fill (:func:`run_fill`) is the same machinery for rows stored before their vectors
(``RAGLINE_INGEST_DEFER_VECTORS``): the ingest task sends it once it has stored such rows. It embeds
only what the embedding budget embeds (:class:`ragline.shared.worker.pending_vectors.VectorBudget`):
rows of a lexical-only layer are never picked.

This runs on the ingest pool, which owns the embedder; the control pool only counts what is
pending (:func:`ragline.ingest.store.pending_reembed`) and never imports this module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import psycopg
from psycopg.rows import DictRow

from ragline.ingest.contextualize import embedding_text
from ragline.ingest.embed import embed_with_cache
from ragline.shared.config.settings import get_settings
from ragline.shared.worker import db, jobs, pending_vectors, progress
from ragline.shared.worker.metrics import observe_stage
from ragline.shared.worker.providers import get_embedder

log = logging.getLogger(__name__)

LOCK_KEY = "ragline.reembed"
#: the fill's runner slots: the two-key advisory locks (hashtext(FILL_LOCK_KEY), slot)
FILL_LOCK_KEY = "ragline.fill_vectors"
SLOT_LOCK_SQL = "SELECT pg_try_advisory_lock(hashtext(%(key)s), %(slot)s) AS ok"
SLOT_UNLOCK_SQL = "SELECT pg_advisory_unlock(hashtext(%(key)s), %(slot)s)"
HELD_SLOTS_SQL = (
    "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
    " AND classid = hashtext(%(key)s)::oid"
)
#: a row a fill runner is embedding: the advisory lock (hashtext(ROW_LOCK_KEY), the row's id folded
#: to int4); two ids that fold alike only make one of them wait for the next batch
ROW_LOCK_KEY = "ragline.fill_rows"
ROW_LOCK = "hashtext(%(ns)s), mod(u.id, 2147483647)::int"

#: a model change re-embeds the rows whose vector comes from another model; the fill embeds the rows
#: stored before their vectors (:data:`ragline.shared.worker.pending_vectors.PREDICATE`). The two sets are
#: disjoint, so a re-embedding and a fill running at once never embed the same row twice
REEMBED_ROWS = "c.embed_model IS DISTINCT FROM %(model)s AND c.embedding IS NOT NULL"
FILL_ROWS = pending_vectors.FILL_PREDICATE

# prose before code: the rows of every layer that is not code (a repository's docs and README, a
# folder's documents) first, then source chunks, symbol records and tests; shorter rows first within
# a layer; rows without any vector before rows of an older model, should one statement ever serve
# both. A vector adds most where the lexical search is weakest: prose is found by its words only
# (and not at all by a question in another language), while code keeps its identifier terms, its
# symbol records (never embedded by default) and the structural ranking until its vectors come
BATCH_SQL = """
SELECT c.id, c.tenant, c.doc_id, c.layer, c.content, c.context, c.content_hash FROM chunks c
WHERE {rows} AND (%(tenant)s::text IS NULL OR c.tenant = %(tenant)s)
ORDER BY c.embedding IS NOT NULL,
         CASE c.layer WHEN %(source)s THEN 1 WHEN %(symbols)s THEN 2 WHEN %(tests)s THEN 3 ELSE 0 END,
         length(c.content), c.id
LIMIT %(n)s
"""

# the content_hash guard: a chunk rewritten by a concurrent ingest is left to that ingest
UPDATE_SQL = """
UPDATE chunks c SET embedding = u.embedding, embed_model = %(model)s, updated_at = now()
FROM unnest(%(ids)s::bigint[], %(hashes)s::text[], %(vecs)s::vector[]) AS u(id, content_hash, embedding)
WHERE c.id = u.id AND c.content_hash = u.content_hash
  AND (c.embedding IS NULL OR c.embed_model IS DISTINCT FROM %(model)s)
"""

DOCS_SQL = """
UPDATE documents d SET embed_model = %(model)s, updated_at = now()
FROM (SELECT DISTINCT tenant, doc_id FROM unnest(%(tenants)s::text[], %(docs)s::text[]) AS t(tenant, doc_id)) t
WHERE d.tenant = t.tenant AND d.doc_id = t.doc_id AND d.embed_model IS DISTINCT FROM %(model)s
  AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.tenant = d.tenant AND c.doc_id = d.doc_id
                  AND c.embed_model IS DISTINCT FROM %(model)s)
"""


def batch_statement(
    rows: str, model: str, n: int, tenant: str | None = None, bound: dict | None = None
) -> tuple[str, dict]:
    """The statement of the next ``n`` rows matching ``rows`` (:data:`REEMBED_ROWS`, or
    :data:`FILL_ROWS` with ``bound``'s ``fill_layers``), by priority, and its parameters (pure)."""
    settings = get_settings()
    code = settings.code
    params = {
        **pending_vectors.VectorBudget.from_settings(settings).params(),
        "model": model,
        "tenant": tenant,
        "n": n,
        "source": code.source_layer,
        "symbols": code.symbols_layer,
        "tests": code.tests_layer,
        **(bound or {}),
    }
    return BATCH_SQL.format(rows=rows), params


def next_rows(
    conn: psycopg.Connection[DictRow],
    rows: str,
    model: str,
    n: int,
    tenant: str | None = None,
    bound: dict | None = None,
) -> list[dict]:
    """The rows of :func:`batch_statement`."""
    return conn.execute(*batch_statement(rows, model, n, tenant, bound)).fetchall()


def next_fill_rows(conn: psycopg.Connection[DictRow], model: str, n: int) -> list[dict]:
    """The next ``n`` rows awaiting their vectors, by priority, read by layer
    (:data:`~ragline.shared.worker.pending_vectors.FILL_PREDICATE`); no batch statement when none await."""
    layers = pending_vectors.fill_layers(conn)
    if not layers:
        return []
    return next_rows(conn, FILL_ROWS, model, n, bound={"fill_layers": layers})


#: texts per embedding request of a batch: the cache keeps each request's vectors as it returns, so
#: a batch stopped part way (the soft time limit, a provider outage) loses one request's work and the
#: runner after it embeds only the rest. One request per batch of 128 was all or nothing: on a
#: starved CPU (load 9, nice 10) a batch of 128 prose rows ran 655 s past the 600 s limit and was
#: redone from its first row, again and again
REQUEST_ROWS = 16


def embed_rows(conn: psycopg.Connection[DictRow], embedder, rows: list[dict]) -> tuple[int, int]:
    """Embed ``rows`` through the cache (:data:`REQUEST_ROWS` a request) and write their vectors in
    one transaction; (rows written, texts sent to the embedder)."""
    layers: dict[str, int] = {}
    for r in rows:
        layers[r["layer"]] = layers.get(r["layer"], 0) + 1
    t0 = t = time.perf_counter()
    emb = embed_with_cache(
        conn,
        embedder,
        [embedding_text(r["context"], r["content"]) for r in rows],
        min(REQUEST_ROWS, get_settings().embed.batch_size),
    )
    observe_stage("embed", time.perf_counter() - t, layers)
    # the cache lookup leaves its read open when every text was cached (nothing embedded, nothing
    # committed): ended here, the write below is a transaction of its own, not a savepoint the
    # fill's rollback after the batch would undo
    conn.commit()
    t = time.perf_counter()
    with conn.transaction():
        cur = conn.execute(
            UPDATE_SQL,
            {
                "model": embedder.model,
                "ids": [r["id"] for r in rows],
                "hashes": [r["content_hash"] for r in rows],
                "vecs": [np.asarray(v, dtype=np.float32) for v in emb.vectors],
            },
        )
        conn.execute(
            DOCS_SQL,
            {
                "model": embedder.model,
                "tenants": [r["tenant"] for r in rows],
                "docs": [r["doc_id"] for r in rows],
            },
        )
    observe_stage("store", time.perf_counter() - t, layers)
    # the rate `ragline status` and `ragline job` show (shared/worker/progress.py)
    progress.record_fill(
        get_settings().effective_redis_url(), [r["tenant"] for r in rows], time.perf_counter() - t0
    )
    return cur.rowcount, emb.embedded


def fill_batches(
    batch: Callable[[], tuple[int, int] | None],
    max_batches: int,
    budget_s: float,
    started: float,
    clock: Callable[[], float] = time.monotonic,
    give_way: Callable[[], bool] = lambda: False,
) -> tuple[int, int, bool]:
    """Run ``batch`` (rows written and texts embedded, None when nothing is left) up to
    ``max_batches`` times, starting no batch once ``budget_s`` has passed since ``started``
    (on ``clock``) or once ``give_way`` says so; at least one batch always runs. The totals (rows
    written, texts embedded) and whether ``give_way`` ended the run."""
    written = sent = 0
    for _ in range(max_batches):
        done = batch()
        if done is None:
            break
        written, sent = written + done[0], sent + done[1]
        if clock() - started >= budget_s:
            break
        if give_way():
            return written, sent, True
    return written, sent, False


def fill_runners(settings) -> int:
    """How many fill tasks may embed at once: ``RAGLINE_INGEST_FILL_RUNNERS``, or one per process of
    the ingest pool. A prefork child runs its model on one core, so one runner leaves the others
    idle once the ingest batches are done."""
    return settings.ingest.fill_runners or settings.workers.ingest_concurrency


def take_slot(conn: psycopg.Connection[DictRow], runners: int, extra: bool) -> int | None:
    """A runner slot (a session advisory lock), or None when every slot this runner may take is held.
    Slot 0 is always open; the others only when ``extra`` (no job is ingesting: a second fill task
    would otherwise take the process a queued ingest batch is waiting for)."""
    for slot in range(runners if extra else 1):
        if db.one(conn.execute(SLOT_LOCK_SQL, {"key": FILL_LOCK_KEY, "slot": slot}))["ok"]:
            return slot
    return None


def claim(conn: psycopg.Connection[DictRow], rows: list[dict], n: int) -> list[dict]:
    """The first ``n`` of ``rows`` no other runner holds, each held by this session until
    :func:`release`: two runners reading the same priority order embed disjoint rows."""
    got = {
        r["id"]
        for r in conn.execute(
            f"SELECT id FROM unnest(%(ids)s::bigint[]) AS u(id) WHERE pg_try_advisory_lock({ROW_LOCK})",
            {"ids": [r["id"] for r in rows], "ns": ROW_LOCK_KEY},
        )
    }
    mine = [r for r in rows if r["id"] in got][:n]
    release(conn, sorted(got - {r["id"] for r in mine}))
    return mine


def release(conn: psycopg.Connection[DictRow], ids: list[int]) -> None:
    if ids:
        conn.execute(
            f"SELECT pg_advisory_unlock({ROW_LOCK}) FROM unnest(%(ids)s::bigint[]) AS u(id)",
            {"ids": ids, "ns": ROW_LOCK_KEY},
        )


def held_slots(conn: psycopg.Connection[DictRow]) -> int:
    """Runner slots held now, by any session."""
    return db.one(conn.execute(HELD_SLOTS_SQL, {"key": FILL_LOCK_KEY}))["n"]


def run_fill(
    max_batches: int | None = None,
    batch_rows: int | None = None,
    max_seconds: float | None = None,
    ask_for_runner: Callable[[], None] = lambda: None,
) -> dict:
    """Embed rows stored before their vectors, by priority: at most ``max_batches`` batches and no
    new batch after ``max_seconds`` (default half the task's soft time limit), then the worker goes
    back to queued ingest batches. The time budget matters on a loaded machine: four batches of 128
    rows at a CPU embedder's 0.8 rows/s outlast a 600 s soft limit, and a fill task stopped by the
    limit sends no successor.

    Up to :func:`fill_runners` runners at once, each in its own slot, each claiming the rows it
    embeds (:func:`claim`), so every core of the pool embeds once no job is ingesting; while one is,
    a single runner, as the ingest batches need the other processes (an extra runner that started
    before the job gives way after its current batch). A runner that gets a slot and
    sees open ones and rows for more than itself asks for more runners (``ask_for_runner``, once per
    open slot). A runner that finds no slot leaves the rows to the holders, which look again after
    releasing theirs (``more``: rows no runner holds), so no row stored meanwhile is left without a
    fill."""
    settings = get_settings()
    max_batches = max_batches or settings.ingest.fill_batches_per_task
    batch_rows = batch_rows or settings.ingest.fill_batch_rows
    budget = settings.workers.task_soft_time_limit_s / 2 if max_seconds is None else max_seconds
    runners = fill_runners(settings)
    started = time.monotonic()
    embedder = get_embedder()
    window = batch_rows * runners

    def free(conn: psycopg.Connection[DictRow]) -> list[dict]:
        """Rows a runner could claim next: the top of the priority order, wide enough to hold every
        other runner's batch and one more."""
        rows = next_fill_rows(conn, embedder.model, window + 1)
        mine = claim(conn, rows, len(rows))
        release(conn, [r["id"] for r in mine])
        return mine

    with db.connection() as conn:

        def ingesting() -> bool:
            """A job is queued or running: its batches need every process but one runner's, so no
            extra runner starts, and one that started before the job gives way after its current
            batch (a push would otherwise wait out whole fill tasks, minutes on a CPU embedder)."""
            return jobs.any_active(conn, settings.lifecycle.job_stuck_after_s)

        extra = runners > 1 and not ingesting()
        slot = take_slot(conn, runners, extra)
        conn.commit()
        if slot is None:
            return {"state": "skipped", "reason": "every fill runner is busy", "more": False}
        siblings = 0
        try:
            open_slots = runners - held_slots(conn) if extra else 0
            if open_slots > 0 and len(free(conn)) > batch_rows:
                siblings = open_slots
            conn.commit()
            for _ in range(siblings):
                ask_for_runner()

            def batch() -> tuple[int, int] | None:
                rows = claim(conn, next_fill_rows(conn, embedder.model, window), batch_rows)
                conn.commit()
                if not rows:
                    return None
                try:
                    return embed_rows(conn, embedder, rows)
                finally:
                    conn.rollback()
                    release(conn, [r["id"] for r in rows])
                    conn.commit()

            written, sent, gave_way = fill_batches(
                batch, max_batches, budget, started, give_way=ingesting if slot > 0 else lambda: False
            )
        finally:
            conn.rollback()
            conn.execute(SLOT_UNLOCK_SQL, {"key": FILL_LOCK_KEY, "slot": slot})
            conn.commit()
        # after the unlock: a row stored while the slot was held, whose own fill was skipped, is seen here
        more = bool(free(conn))
        conn.commit()
    log.info(
        "vector fill, runner %d of %d: %d rows written, %d texts embedded, more: %s%s",
        slot + 1,
        runners,
        written,
        sent,
        more,
        ", gave way to an ingest job" if gave_way else "",
    )
    return {
        "state": "succeeded",
        "rows": written,
        "embedded": sent,
        "more": more,
        "runner": slot,
        "siblings": siblings,
        "gave_way": gave_way,
    }


def column_dim(conn: psycopg.Connection[DictRow]) -> int | None:
    row = conn.execute(
        "SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute"
        " WHERE attrelid = 'chunks'::regclass AND attname = 'embedding'"
    ).fetchone()
    t = row["t"] if row else ""
    return int(t[t.index("(") + 1 : t.index(")")]) if "(" in t else None


def run_reembed(job_id: str | None = None, batch_size: int | None = None, tenant: str | None = None) -> dict:
    """Re-embed every chunk (of ``tenant``, or all) not on the configured model; one runner at a time;
    cancellable through its job (``ragline cancel JOB``)."""
    settings = get_settings()
    size = batch_size or settings.lifecycle.reembed_batch_size
    embedder = get_embedder()
    model = embedder.model
    with db.connection() as conn:
        got = db.one(conn.execute("SELECT pg_try_advisory_lock(hashtext(%s)) AS ok", (LOCK_KEY,)))["ok"]
        conn.commit()
        if not got:
            return {"state": "skipped", "reason": "another re-embedding is running"}
        try:
            dim = column_dim(conn)
            if dim is not None and embedder.dim != dim:
                raise RuntimeError(
                    f"model {model} has dimension {embedder.dim}, chunks.embedding has {dim}:"
                    " follow the re-embedding runbook (new column) in docs/operations.md"
                )
            if job_id is None:
                job_id = jobs.create_job(conn, "reembed", tenant, [], {"model": model})
            conn.commit()
            chunks = sent = 0
            state = "succeeded"
            while True:
                if not jobs.heartbeat(conn, job_id):
                    state = jobs.job_state(conn, job_id) or "cancelled"
                    break
                conn.commit()
                rows = next_rows(conn, REEMBED_ROWS, model, size, tenant)
                if not rows:
                    break
                n, e = embed_rows(conn, embedder, rows)
                chunks += n
                sent += e
                jobs.heartbeat(conn, job_id, progress=True)
                conn.commit()
            result = {"model": model, "chunks": chunks, "embedded": sent}
            if state == "succeeded":
                jobs.finish_job(conn, job_id, "succeeded", result)
            conn.commit()
            log.info("re-embedding %s: %s", state, result)
            return {"job_id": job_id, "state": state, **result}
        except Exception as exc:
            conn.rollback()
            if job_id:
                jobs.finish_job(conn, job_id, "failed", error=f"{type(exc).__name__}: {str(exc)[:500]}")
                conn.commit()
            raise
        finally:
            conn.rollback()
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (LOCK_KEY,))
            conn.commit()
