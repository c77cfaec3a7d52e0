"""j. Peers side by side: ragline against LlamaIndex (``llama-index-core`` with its Postgres vector
store, the library a team would most likely pick instead) on the same embedded Postgres, the same
Markdown corpus, the same instant loopback embedder and the same machine state.

* **Ingestion**: the same Markdown files through each system's own pipeline: ragline's batch
  tasks on ``ragline up``'s prefork ingest pool (parse, chunk, contextualise, embed, store), and
  LlamaIndex's ``IngestionPipeline`` (``MarkdownNodeParser``, ``SentenceSplitter`` at ragline's
  chunk size, the embedder, ``PGVectorStore`` with ``hybrid_search``) in this process, as its
  documentation runs it. Rounds alternate which system goes first; every round loads into a fresh
  tenant / table. Chunk counts differ (each splits its own way), so the source characters per
  second, the same input for both, are reported next to chunks/s.
* **Hybrid query**: one question at a time, the three calls of each question in a rotating order:
  ragline through its query queue (what a chat backend gets), ragline's ``service.search`` in this
  process (no queue: what LlamaIndex's in-process call compares to), and ``PGVectorStore.query`` in
  ``HYBRID`` mode. Each embeds the question through the loopback server.
* **Recall@10 on tydi-ru-dev with the local model**: the 389 passages through each system's
  ingestion (as above, each passage a document), every one of the 403 questions through each
  system's hybrid query, both embedding with ragline's local e5 provider (the same model, prefixes
  and vectors: LlamaIndex gets it as a ``BaseEmbedding``), ten results each, mapped to passages.
  Quality is not timed; the speed rounds' instant embedder would make every ranking meaningless.

The embedder is ``tests/loopback.py``'s Voyage server answering from a table of pre-serialised
vectors (bench i's): it costs neither side anything, so what is measured is each system's own
work. Without llama-index installed (``pip install -e '.[bench]'``) the benchmark says so and
returns without measuring.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from bench import common

NAME = "peer"
TITLE = "Peers side by side: ragline vs LlamaIndex (PGVectorStore) on one Postgres, corpus and embedder"
SMOKE = {"n_files": 4, "rounds": 2, "n_queries": 4, "warmup": 1, "recall_queries": 4}
DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"
DOCS = DATASETS / "ru-docs"
TYDI = DATASETS / "tydi-ru-dev"
ACL = ["bench"]
K = 10
SIDES = ("ragline queue", "ragline in-process", "llamaindex")
#: the call order of each question, in turn: each side once in each position
ORDERS = (SIDES, SIDES[1:] + SIDES[:1], SIDES[2:] + SIDES[:2])
INSTALL_HINT = "pip install -e '.[bench]'  (llama-index-core, llama-index-vector-stores-postgres)"


def missing_peer() -> str | None:
    """Why LlamaIndex cannot run here (the name of what is missing), or None."""
    try:
        import llama_index.core  # noqa: F401
        import llama_index.vector_stores.postgres  # noqa: F401
    except ImportError as exc:
        return f"{exc.name or exc}: not installed ({INSTALL_HINT})"
    return None


def corpus(n_files: int, root: Path = DOCS) -> list[tuple[str, str]]:
    """The first ``n_files`` Markdown files of the ru-docs sets (sorted paths: the same slice every
    run), as (relative path, text); empty files left out."""
    files = sorted(p for p in root.rglob("*.md") if p.name.lower() != "readme.md")
    out = []
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            out.append((str(p.relative_to(root)), text))
        if len(out) >= n_files:
            break
    return out


def questions(docs: list[tuple[str, str]], n: int) -> list[str]:
    """``n`` questions from the corpus's own headings (no markup), cycled when there are fewer."""
    heads = [
        re.sub(r"[`*_#\[\]{}<>]|\(.*?\)", "", m).strip()
        for _, text in docs
        for m in re.findall(r"^#{1,4}\s+(.+)$", text, flags=re.M)
    ]
    heads = [h for h in dict.fromkeys(heads) if len(h) >= 4] or ["компонент"]
    return [heads[i % len(heads)] for i in range(n)]


def tydi_set(n_queries: int | None = None, root: Path = TYDI) -> tuple[list[tuple[str, str]], list[dict]]:
    """tydi-ru-dev as (passage id, "title\\n\\ntext") documents and its questions (the first
    ``n_queries``, all by default); with a limit, only the passages those questions name, so a smoke
    run embeds little."""
    from ragline.operations.eval import corpus_payloads, grades, read_jsonl

    queries = read_jsonl(root / "dev.jsonl")[:n_queries]
    wanted = None if n_queries is None else {d for q in queries for d in grades(q["relevant"])}
    rows = [r for r in read_jsonl(root / "corpus.jsonl") if wanted is None or str(r["id"]) in wanted]
    # the document text exactly as ``ragline eval`` ingests the passage
    return [(d["doc_id"], d["content"]) for d in corpus_payloads(rows, tenant="")], queries


def ratios(ragline: dict, peer: dict) -> dict[str, float]:
    """ragline over LlamaIndex: throughput (> 1: ragline faster) and latency (< 1: ragline faster)."""

    def div(a: float, b: float) -> float:
        return round(a / b, 4) if b else float("inf")

    return {
        "ingest_chunks_per_s": div(ragline["ingest"]["chunks_per_s"], peer["ingest"]["chunks_per_s"]),
        "ingest_source_chars_per_s": div(
            ragline["ingest"]["source_chars_per_s"], peer["ingest"]["source_chars_per_s"]
        ),
        "query_p50_queue": div(ragline["query_queue"]["p50_ms"], peer["query"]["p50_ms"]),
        "query_p95_queue": div(ragline["query_queue"]["p95_ms"], peer["query"]["p95_ms"]),
        "query_p50_in_process": div(ragline["query_in_process"]["p50_ms"], peer["query"]["p50_ms"]),
        "query_p95_in_process": div(ragline["query_in_process"]["p95_ms"], peer["query"]["p95_ms"]),
        "recall_at_10": div(ragline["recall"]["recall@10"], peer["recall"]["recall@10"]),
    }


def targets(r: dict[str, float], failed: int) -> list[common.Target]:
    """ragline at least as fast as the peer on the same input and machine, and no document lost."""
    return [
        common.Target(
            "ingestion, source chars/s: ragline / LlamaIndex", r["ingest_source_chars_per_s"], ">=", 1.0
        ),
        common.Target("ingestion, chunks/s: ragline / LlamaIndex", r["ingest_chunks_per_s"], ">=", 1.0),
        common.Target(
            "hybrid query p95, in process: ragline / LlamaIndex", r["query_p95_in_process"], "<=", 1.0
        ),
        common.Target(
            "hybrid query p95, ragline's queue / LlamaIndex in process", r["query_p95_queue"], "<=", 1.0
        ),
        common.Target(
            "hybrid recall@10 on tydi-ru-dev, local model: ragline / LlamaIndex", r["recall_at_10"], ">=", 1.0
        ),
        common.Target("documents failed (ragline, every round)", failed, "<=", 0),
    ]


def _throughput(chunks: int, chars: int, seconds: float) -> dict:
    return {
        "chunks": chunks,
        "source_chars": chars,
        "seconds": round(seconds, 3),
        "chunks_per_s": round(chunks / seconds, 1) if seconds > 0 else 0.0,
        "source_chars_per_s": round(chars / seconds, 1) if seconds > 0 else 0.0,
    }


# ------------------------------------------------------------------------------------ ragline
def _ragline_ingest(tenant: str, docs: list[tuple[str, str]], batch_docs: int) -> dict:
    """Every document as ``ragline ingest`` sends it: batch tasks of ``batch_docs``, waited until ready."""
    from ragline.shared.sdk.names import TASK_INGEST_BATCH
    from ragline.shared.worker import db
    from ragline.shared.worker.celery_app import app

    t0 = time.monotonic()
    for first in range(0, len(docs), batch_docs):
        payload = [
            {"tenant": tenant, "doc_id": path, "content": text, "fmt": "md", "acl": ACL, "version": 1}
            for path, text in docs[first : first + batch_docs]
        ]
        app.send_task(TASK_INGEST_BATCH, args=[{"documents": payload}])
    done, errors = common.wait_documents_ready(tenant, len(docs), timeout=3600, poll_s=0.05)
    with db.connection() as conn:
        chunks = conn.execute("SELECT count(*) AS n FROM chunks WHERE tenant = %s", (tenant,)).fetchone()["n"]
    out = _throughput(chunks, sum(len(t) for _, t in docs), done - t0)
    out.update(documents=len(docs), documents_failed=len(errors), errors=errors[:5])
    return out


def _search_request(tenant: str, q: str):
    from ragline.shared.sdk.contracts import SearchRequest

    return SearchRequest(query=q, tenant=tenant, groups=ACL, k=K, mode="hybrid", rerank=False)


def _ragline_queue(tenant: str, q: str) -> tuple[float, list[str]]:
    from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
    from ragline.shared.worker.celery_app import app

    payload = _search_request(tenant, q).model_dump(exclude_defaults=True)
    payload.update(mode="hybrid", groups=ACL)
    t = time.perf_counter()
    res = app.send_task(TASK_QUERY_RETRIEVE, args=[payload]).get(timeout=120)
    ms = (time.perf_counter() - t) * 1000
    if "hits" not in res:
        raise RuntimeError(f"retrieve task failed: {res}")
    return ms, [h["doc_id"] for h in res["hits"]]


def _ragline_in_process(tenant: str, q: str, k: int = K) -> tuple[float, list[str]]:
    from ragline.query import service

    req = _search_request(tenant, q).model_copy(update={"k": k})
    t = time.perf_counter()
    resp = service.search(req)
    return (time.perf_counter() - t) * 1000, [h.doc_id for h in resp.hits]


# ----------------------------------------------------------------------------------- llamaindex
def _llama_embedding(url: str, dim: int, batch: int):
    """A LlamaIndex embedding that calls the loopback Voyage server like ragline's provider does."""
    import httpx
    from llama_index.core.embeddings import BaseEmbedding

    client = httpx.Client(base_url=url, timeout=60.0)

    def embed(texts: list[str]) -> list[list[float]]:
        r = client.post("/v1/embeddings", json={"input": texts, "model": "voyage-4", "output_dimension": dim})
        r.raise_for_status()
        return [d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]

    class LoopbackEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return embed([query])[0]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return embed([query])[0]

        def _get_text_embedding(self, text: str) -> list[float]:
            return embed([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return embed(texts)

    return LoopbackEmbedding(model_name="loopback-instant", embed_batch_size=batch)


def _llama_local_embedding(batch: int):
    """ragline's own local e5 provider (one model in this process) as a LlamaIndex embedding: the
    same model, prefixes and vectors on both sides of the recall comparison."""
    from llama_index.core.embeddings import BaseEmbedding

    from ragline.shared.worker.providers import get_embedder

    class RaglineLocalEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return get_embedder().embed_query(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return get_embedder().embed_query(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return get_embedder().embed_documents([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return get_embedder().embed_documents(texts)

    return RaglineLocalEmbedding(model_name="ragline-local-e5", embed_batch_size=batch)


def _sqlalchemy_url(conninfo: str, driver: str):
    """ragline's database URL as SQLAlchemy's (the embedded server may listen on a socket directory)."""
    from psycopg.conninfo import conninfo_to_dict
    from sqlalchemy.engine import URL

    info = conninfo_to_dict(conninfo)
    host, port = str(info.get("host") or "127.0.0.1"), info.get("port")
    socket = host.startswith("/")
    return URL.create(
        f"postgresql+{driver}",
        username=info.get("user"),
        password=info.get("password"),
        host=None if socket else host,
        port=None if socket or not port else int(port),
        database=info.get("dbname"),
        query={"host": host, **({"port": str(port)} if port else {})} if socket else {},
    )


def _llama_store(table: str, dim: int, settings):
    from llama_index.vector_stores.postgres import PGVectorStore

    url = settings.effective_database_url()
    return PGVectorStore.from_params(
        connection_string=_sqlalchemy_url(url, "psycopg2"),
        async_connection_string=_sqlalchemy_url(url, "asyncpg"),
        table_name=table,
        embed_dim=dim,
        hybrid_search=True,
        text_search_config="russian",
        # ragline's index: HNSW, cosine, m 16, ef_construction 64, ragline's ef_search
        hnsw_kwargs={
            "hnsw_m": 16,
            "hnsw_ef_construction": 64,
            "hnsw_ef_search": settings.vector.hnsw_ef_search,
            "hnsw_dist_method": "vector_cosine_ops",
        },
    )


def _llama_ingest(store, embed_model, docs: list[tuple[str, str]], settings) -> dict:
    from llama_index.core import Document
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.node_parser import MarkdownNodeParser, SentenceSplitter

    from ragline.ingest.chunk.prose import OVERLAP_RATIO

    c = settings.chunk
    # ragline's chunk size in code points: a character tokenizer (the default one downloads tiktoken's)
    splitter = SentenceSplitter(
        chunk_size=c.max_chars, chunk_overlap=int(c.max_chars * OVERLAP_RATIO), tokenizer=list
    )
    pipeline = IngestionPipeline(
        transformations=[MarkdownNodeParser(), splitter, embed_model], vector_store=store
    )
    t0 = time.monotonic()
    nodes = pipeline.run(documents=[Document(text=text, metadata={"path": path}) for path, text in docs])
    seconds = time.monotonic() - t0
    return {**_throughput(len(nodes), sum(len(t) for _, t in docs), seconds), "documents": len(docs)}


def _llama_query(store, embed_model, q: str) -> tuple[float, list[str]]:
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

    t = time.perf_counter()
    res = store.query(
        VectorStoreQuery(
            query_embedding=embed_model.get_query_embedding(q),
            query_str=q,
            similarity_top_k=K,
            sparse_top_k=K,
            mode=VectorStoreQueryMode.HYBRID,
        )
    )
    ms = (time.perf_counter() - t) * 1000
    return ms, [n.metadata.get("path", "") for n in (res.nodes or [])]


def _drop_llama_tables(prefix: str) -> None:
    from ragline.shared.worker import db

    with db.connection() as conn:
        for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE %s",
            (f"data_{prefix}%",),
        ).fetchall():
            conn.execute(f'DROP TABLE IF EXISTS public."{r["tablename"]}"')


# ------------------------------------------------------------------------------------- recall
def _recall(raw: dict, prefix: str, n_queries: int | None, batch_docs: int) -> None:
    """Hybrid recall@10 / MRR@10 of both systems on tydi-ru-dev with the local model (untimed), into
    ``raw["recall"]``; the metrics are ``ragline eval``'s own (``ragline.operations.eval``)."""
    from ragline.operations.eval import ModeReport, doc_ranking, grades, recall_at_k
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT

    docs, queries = tydi_set(n_queries)
    with (
        common.settings_env(embed_provider="local-e5", rerank_provider="none", ingest_batch_docs=batch_docs),
        common.prefork_pools({"ingest": (TASK_INGEST_DOCUMENT, {})}),
    ):
        s = get_settings()
        tenant = f"bench-{prefix}-tydi"
        ingest = _ragline_ingest(tenant, docs, batch_docs)
        embed_model = _llama_local_embedding(s.embed.batch_size)
        store = _llama_store(f"{prefix}_tydi", s.embed.dim, s)
        _llama_ingest(store, embed_model, docs, s)
        reports = {"ragline": ModeReport("hybrid", K), "llamaindex": ModeReport("hybrid", K)}
        # PGVectorStore's HYBRID list is its dense top-k, then the full-text top-k it did not hold
        # (no fusion): its first ten are the dense ten; recall over its whole list is kept beside
        whole_list: list[float] = []
        for row in queries:
            rel = grades(row["relevant"])
            _, found = _ragline_in_process(tenant, row["query"])
            reports["ragline"].add(row["query"], doc_ranking(found), rel)
            _, found = _llama_query(store, embed_model, row["query"])
            reports["llamaindex"].add(row["query"], doc_ranking(found), rel)
            whole_list.append(recall_at_k(doc_ranking(found), rel, 2 * K))
    raw["recall"] = {
        "passages": len(docs),
        "questions": len(queries),
        "ragline_documents_failed": ingest["documents_failed"],
        **{side: rep.summary() for side, rep in reports.items()},
        "llamaindex_recall_whole_list": round(sum(whole_list) / len(whole_list), 4) if whole_list else 0.0,
    }


# ------------------------------------------------------------------------------------------ run
def _compare(
    raw: dict,
    url: str,
    docs: list[tuple[str, str]],
    qs: list[str],
    rounds: int,
    warmup: int,
    batch_docs: int,
    prefix: str,
) -> dict[str, list[float]]:
    """Ingestion rounds (alternating which system goes first), then the questions on the last round's
    data with the three sides in a rotating order; per-round results into ``raw``, latencies returned."""
    from ragline.shared.config.settings import get_settings

    s = get_settings()
    dim = s.embed.dim
    embed_model = _llama_embedding(url, dim, s.embed.batch_size)
    store = tenant = None
    # ---- ingestion, alternating which system goes first
    for r in range(rounds):
        tenant, table = f"bench-{prefix}-{r}", f"{prefix}_{r}"
        store = _llama_store(table, dim, s)
        common.checkpoint()
        out: dict = {}
        for side in ("ragline", "llamaindex") if r % 2 == 0 else ("llamaindex", "ragline"):
            if side == "ragline":
                out[side] = _ragline_ingest(tenant, docs, batch_docs)
            else:
                out[side] = _llama_ingest(store, embed_model, docs, s)
        raw["rounds"].append(out)
    # ---- hybrid queries on the last round's data, the three sides in a rotating order, both
    # systems' tables vacuumed and analysed first
    common.settle("chunks", "documents", f'public."data_{prefix}_{rounds - 1}"')
    calls = {
        "ragline queue": lambda q: _ragline_queue(tenant, q),
        "ragline in-process": lambda q: _ragline_in_process(tenant, q),
        "llamaindex": lambda q: _llama_query(store, embed_model, q),
    }
    for q in qs[:warmup]:
        for fn in calls.values():
            fn(q)
    ms: dict[str, list[float]] = {side: [] for side in SIDES}
    empty = dict.fromkeys(SIDES, 0)
    for i, q in enumerate(qs[warmup:]):
        for side in ORDERS[i % len(ORDERS)]:
            t, hits = calls[side](q)
            ms[side].append(t)
            empty[side] += not hits
    raw["questions"] = qs[warmup : warmup + 5]
    raw["empty_answers"] = empty
    return ms


def run(
    out_dir: Path = common.RESULTS,
    n_files: int = 60,
    rounds: int = 2,
    n_queries: int = 100,
    warmup: int = 10,
    batch_docs: int = 8,
    concurrency: int | None = None,
    recall_queries: int | None = None,
) -> dict:
    missing = missing_peer()
    if missing:
        return {"benchmark": NAME, "title": TITLE, "skipped": missing, "targets": [], "passed": None}

    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT, TASK_QUERY_RETRIEVE
    from ragline.shared.worker import db
    from tests.loopback import Faults, LoopbackServer

    settings = get_settings()
    concurrency = concurrency or os.cpu_count() or 2
    docs = corpus(n_files)
    qs = questions(docs, warmup + n_queries)
    prefix = f"peer{int(time.time())}"
    with db.connection() as c:
        desc = common.machine(c)
    raw: dict = {"rounds": [], "ragline": {}, "llamaindex": {}}
    try:
        with (
            LoopbackServer(Faults(instant_vectors=True, shuffle_embeddings=False)) as srv,
            common.settings_env(
                embed_provider="voyage",
                providers_voyage_api_key="bench-key",
                providers_voyage_base_url=srv.url,
                embed_rpm=0,
                embed_tpm=0,
                ingest_batch_docs=batch_docs,
                workers_ingest_concurrency=concurrency,
                rerank_provider="none",
            ),
            common.prefork_pools(
                {
                    "ingest": (TASK_INGEST_DOCUMENT, {}),
                    "query": (
                        TASK_QUERY_RETRIEVE,
                        _search_request("none", "x").model_dump(exclude_defaults=True),
                    ),
                }
            ),
        ):
            ms = _compare(raw, srv.url, docs, qs, rounds, warmup, batch_docs, prefix)
        # last: it loads the local model into this process, which nothing forks afterwards
        _recall(raw, prefix, recall_queries, batch_docs)
    finally:
        _drop_llama_tables(prefix)
        with db.connection() as conn:
            conn.execute("DELETE FROM documents WHERE tenant LIKE %s", (f"bench-{prefix}-%",))

    def median_round(side: str) -> dict:
        runs = sorted((x[side] for x in raw["rounds"]), key=lambda x: x["chunks_per_s"])
        return runs[len(runs) // 2]

    raw["ragline"] = {
        "ingest": median_round("ragline"),
        "query_queue": common.latency_summary(ms["ragline queue"]),
        "query_in_process": common.latency_summary(ms["ragline in-process"]),
        "recall": raw["recall"]["ragline"],
    }
    raw["llamaindex"] = {
        "ingest": median_round("llamaindex"),
        "query": common.latency_summary(ms["llamaindex"]),
        "recall": raw["recall"]["llamaindex"],
    }
    raw["ratios_ragline_over_llamaindex"] = ratios(raw["ragline"], raw["llamaindex"])
    failed = (
        sum(x["ragline"]["documents_failed"] for x in raw["rounds"])
        + raw["recall"]["ragline_documents_failed"]
    )
    tgs = targets(raw["ratios_ragline_over_llamaindex"], failed)

    params, notes = _describe(docs, rounds, n_queries, warmup, batch_docs, concurrency, settings)
    data = common.result(NAME, TITLE, params, raw, tgs, desc, notes)
    common.write_json(data, out_dir)
    _plot(out_dir, len(docs), raw, tgs)
    return data


def _describe(docs, rounds, n_queries, warmup, batch_docs, concurrency, settings) -> tuple[dict, list[str]]:
    """The parameters and notes of the result: what was compared, how."""
    from importlib.metadata import version

    params = {
        "n_files": len(docs),
        "corpus": f"the first {len(docs)} Markdown files (sorted paths) of ../shared/datasets/ru-docs",
        "rounds": rounds,
        "n_queries": n_queries,
        "warmup": warmup,
        "k": K,
        "ingest_batch_docs": batch_docs,
        "ingest_concurrency": concurrency,
        "chunk_max_chars": settings.chunk.max_chars,
        "embedder": "loopback Voyage answering from 4,096 pre-serialised vectors (instant), both sides over HTTP",
        "versions": {
            p: version(p) for p in ("llama-index-core", "llama-index-vector-stores-postgres", "sqlalchemy")
        },
        "llamaindex": "IngestionPipeline(MarkdownNodeParser, SentenceSplitter(chunk_size=ragline's max_chars,"
        " character tokenizer), embedder) into PGVectorStore(hybrid_search=True, text_search_config='russian',"
        " HNSW m 16 / ef_construction 64, cosine), one process; query: VectorStoreQueryMode.HYBRID,"
        " similarity_top_k = sparse_top_k = 10",
        "ragline": "batch ingest tasks on ragline up's prefork ingest pool; hybrid retrieve through the query"
        " queue and service.search in this process; reranker off",
        "recall_set": "tydi-ru-dev (../shared/datasets/tydi-ru-dev): its passages and questions, local e5 on both sides",
    }
    notes = [
        "One run at small sizes (load_average_start / _end in machine): the ratios hold better than the"
        " absolute numbers, and even they move with the load; repeat the run and report the spread.",
        "Before the questions both systems' tables are vacuumed and analysed (bench.common.settle), so"
        " neither side's tail holds the autovacuum its load set off.",
        "ingest: the median round of each system (rounds alternate which goes first); each round loads the"
        " same files into a fresh tenant (ragline) and a fresh table (LlamaIndex).",
        "ragline's ingestion runs on its prefork pool (ingest_concurrency processes), LlamaIndex's"
        " IngestionPipeline.run in one process, as each documents its use.",
        "Latency: client-side ms per question, each embedding the question through the same loopback server.",
        "Recall (untimed): tydi-ru-dev's passages as documents into a fresh tenant and table, each system's"
        " hybrid query per question with ragline's local e5 provider on both sides, ten results (ragline k=10;"
        " LlamaIndex similarity_top_k = sparse_top_k = 10, its list's first ten passages), ragline eval's"
        " recall@10 / MRR@10. PGVectorStore's HYBRID list is its dense top ten followed by the full-text hits"
        " not among them (no fusion); llamaindex_recall_whole_list scores all of its up to twenty results.",
    ]
    return params, notes


def _plot(out_dir: Path, n_files: int, raw: dict, tgs: list[common.Target]) -> None:
    common.bar_plot(
        out_dir / f"{NAME}.png",
        f"ragline vs LlamaIndex: {n_files} Markdown files, instant embedder",
        {
            "ingest, chunks/s ÷ 10": {
                "ragline": raw["ragline"]["ingest"]["chunks_per_s"] / 10,
                "LlamaIndex": raw["llamaindex"]["ingest"]["chunks_per_s"] / 10,
            },
            "hybrid query p50, ms": {
                "ragline": raw["ragline"]["query_in_process"]["p50_ms"],
                "ragline via queue": raw["ragline"]["query_queue"]["p50_ms"],
                "LlamaIndex": raw["llamaindex"]["query"]["p50_ms"],
            },
            "hybrid query p95, ms": {
                "ragline": raw["ragline"]["query_in_process"]["p95_ms"],
                "ragline via queue": raw["ragline"]["query_queue"]["p95_ms"],
                "LlamaIndex": raw["llamaindex"]["query"]["p95_ms"],
            },
            "tydi-ru-dev hybrid recall@10 × 100": {
                "ragline": raw["ragline"]["recall"]["recall@10"] * 100,
                "LlamaIndex": raw["llamaindex"]["recall"]["recall@10"] * 100,
            },
        },
        "chunks/s ÷ 10 | ms | recall × 100",
        tgs,
    )
