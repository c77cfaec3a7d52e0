"""BM25 in Postgres (migration 0009, ``sql.BM25_SQL``): the statistics follow every write, the
score is BM25's formula, and the query role computes it under row-level security."""

from __future__ import annotations

import math

import pytest

from ragline.query.retrieval import retrievers, search, transaction
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.worker import db
from tests.integration.query_corpus import store_docs, vec

# "кошка" is in every document, "спит" in two, "жираф" in one the caller may see: BM25's idf puts
# the giraffe first, ts_rank (no idf) the document that repeats the common word
DOCS = [
    {"doc_id": "cats.md", "content": "Кошка. Кошка спит, кошка ест, кошка играет с кошкой.", "acl": ["g"]},
    {"doc_id": "zoo.md", "content": "В зоопарке живёт жираф, а у сторожа есть кошка.", "acl": ["g"]},
    {"doc_id": "home.md", "content": "Дома кошка спит на диване у окна весь день.", "acl": ["g"]},
    {"doc_id": "hidden.md", "content": "Секретная кошка отдела кадров и жираф.", "acl": ["hr"]},
]
QUESTION = "кошка спит жираф"


def stats(conn, tenant: str) -> dict[str, tuple[int, int]]:
    rows = conn.execute(
        "SELECT config, sum(docs)::int AS docs, sum(total_len)::int AS len FROM lexical_stats"
        " WHERE tenant = %s GROUP BY config",
        (tenant,),
    ).fetchall()
    return {r["config"]: (r["docs"], r["len"]) for r in rows}


def truth(conn, tenant: str) -> dict[str, tuple[int, int]]:
    row = conn.execute(
        "SELECT count(*)::int AS docs, coalesce(sum(length(tsv)), 0)::int AS len,"
        " count(code_tsv)::int AS cdocs, coalesce(sum(length(code_tsv)), 0)::int AS clen"
        " FROM chunks WHERE tenant = %s",
        (tenant,),
    ).fetchone()
    out = {"russian": (row["docs"], row["len"])}
    if row["cdocs"]:
        out["code"] = (row["cdocs"], row["clen"])
    return out


def test_statistics_follow_inserts_updates_and_deletes(conn, tenant):
    store_docs(conn, tenant, DOCS)
    assert stats(conn, tenant) == truth(conn, tenant) and truth(conn, tenant)["russian"][0] == 4
    # a new version with more chunks, then fewer; a code chunk's identifier terms counted apart
    store_docs(conn, tenant, [{"doc_id": "cats.md", "chunks": ["кошка раз", "кошка два", "три"]}])
    assert stats(conn, tenant) == truth(conn, tenant)
    store_docs(conn, tenant, [{"doc_id": "cats.md", "chunks": ["одна кошка"]}])
    conn.execute(
        "UPDATE chunks SET code_tsv = 'register_hook:1A register:2 hook:3' WHERE tenant = %s AND doc_id = 'zoo.md'",
        (tenant,),
    )
    conn.commit()
    assert stats(conn, tenant) == truth(conn, tenant) and stats(conn, tenant)["code"] == (1, 3)
    # a permission change does not fire the trigger, and changes nothing
    conn.execute("UPDATE chunks SET acl = '{g,x}' WHERE tenant = %s", (tenant,))
    conn.commit()
    assert stats(conn, tenant) == truth(conn, tenant)
    # a rolled back write leaves no count; a document deleted (chunks by cascade) is subtracted
    with pytest.raises(RuntimeError), conn.transaction():
        conn.execute("DELETE FROM chunks WHERE tenant = %s", (tenant,))
        raise RuntimeError("rollback")
    assert stats(conn, tenant) == truth(conn, tenant)
    conn.execute("DELETE FROM documents WHERE tenant = %s", (tenant,))
    conn.commit()
    assert stats(conn, tenant) == {"russian": (0, 0), "code": (0, 0)}


def _lexical_stats_writes(conn) -> int:
    return conn.execute(
        "SELECT pg_stat_get_xact_tuples_inserted(c.oid) + pg_stat_get_xact_tuples_updated(c.oid) AS n"
        " FROM pg_class c WHERE c.relname = 'lexical_stats'"
    ).fetchone()["n"]


def test_a_bulk_write_counts_once_per_statement(conn, tenant):
    """A COPY of many chunks in one transaction writes each counter row once (a row trigger
    updated it once per chunk, each update stepping over the dead versions of the earlier ones:
    quadratic in a bulk load), and the counts are still exact, for two tenants in one statement."""
    import numpy as np

    from bench.synthetic import load_chunks

    other = tenant + "-b"
    texts = ["кошка спит на окне", "собака лает во дворе", "register_hook в коде"]
    # an earlier committed write on this backend, as earlier tests on a pooled connection leave:
    # its counts may still be pending (not flushed to the statistics) when the load below runs
    load_chunks(conn, other + "-earlier", np.zeros((10, 384), dtype=np.float32), ["g"], texts=texts)
    conn.execute("DELETE FROM documents WHERE tenant = %s", (other + "-earlier",))
    conn.commit()  # the load below is a transaction of its own, not a savepoint in an open one
    with conn.transaction():
        # the xact counters also hold the backend's not yet flushed counts of earlier transactions
        # (a pooled connection's earlier tests): only the difference across the load is this one's
        before = _lexical_stats_writes(conn)
        load_chunks(conn, tenant, np.zeros((600, 384), dtype=np.float32), ["g"], texts=texts)
        load_chunks(conn, other, np.zeros((400, 384), dtype=np.float32), ["g"], texts=texts)
        writes = _lexical_stats_writes(conn) - before
    assert writes <= 2  # one counter row per tenant and configuration written; 1,000 with the row trigger
    assert stats(conn, tenant) == truth(conn, tenant) and truth(conn, tenant)["russian"][0] == 600
    assert stats(conn, other) == truth(conn, other) and truth(conn, other)["russian"][0] == 400
    # one statement deleting both tenants' chunks subtracts from each
    conn.execute("DELETE FROM chunks WHERE tenant = ANY(%s)", ([tenant, other],))
    conn.commit()
    assert stats(conn, tenant)["russian"] == (0, 0) and stats(conn, other)["russian"] == (0, 0)
    conn.execute("DELETE FROM documents WHERE tenant = ANY(%s)", ([tenant, other],))
    conn.commit()


def bm25_reference(conn, tenant: str, groups: list[str], query: str, k1: float, b: float) -> dict[str, float]:
    """BM25 recomputed in Python from the stored tsvectors: N and avgdl over the tenant, df over
    the rows the caller may see."""
    lexemes = conn.execute("SELECT tsvector_to_array(to_tsvector('russian', %s)) AS l", (query,)).fetchone()[
        "l"
    ]
    rows = conn.execute(
        "SELECT doc_id, acl, (SELECT array_agg(ARRAY[lexeme, cardinality(positions)::text])"
        " FROM unnest(tsv)) AS terms, length(tsv) AS dl FROM chunks WHERE tenant = %s",
        (tenant,),
    ).fetchall()
    conn.rollback()  # a search needs an idle connection
    n = len(rows)
    avgdl = sum(r["dl"] for r in rows) / n
    visible = [r for r in rows if set(r["acl"]) & set(groups)]
    tfs = {r["doc_id"]: {t: int(f) for t, f in r["terms"]} for r in visible}
    df = {t: sum(t in tf for tf in tfs.values()) for t in lexemes}
    out = {}
    for r in visible:
        tf = tfs[r["doc_id"]]
        if not set(lexemes) & tf.keys():
            continue
        out[r["doc_id"]] = sum(
            math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            * tf[t]
            * (k1 + 1)
            / (tf[t] + k1 * (1 - b + b * r["dl"] / avgdl))
            for t in lexemes
            if t in tf
        )
    return out


def assert_reference(hits, expected: dict[str, float], first: str, hidden: str) -> None:
    """The hits are the reference's documents in its order, with its scores; ``first`` leads and
    ``hidden`` (another group's document) is not there."""
    assert [h.doc_id for h in hits] == sorted(expected, key=lambda d: -expected[d])
    assert hits[0].doc_id == first and hidden not in {h.doc_id for h in hits}
    for h in hits:
        assert h.lexical_score == pytest.approx(expected[h.doc_id], rel=1e-9)


def test_bm25_scores_and_order_as_the_query_role(conn, tenant, monkeypatch):
    store_docs(conn, tenant, DOCS)
    store_docs(conn, tenant + "-other", [{"doc_id": "x.md", "content": "жираф жираф кошка", "acl": ["g"]}])
    settings = Settings(lexical_rank="bm25")
    assert (retrievers.BM25_K1, retrievers.BM25_B) == (1.2, 0.75)
    req = SearchRequest(query=QUESTION, tenant=tenant, groups=["g"], k=10, mode="lexical")
    with db.query_connection() as qconn:  # row-level security binds this role
        hits = search.search(qconn, req, None, settings).hits
        with qconn.transaction():
            transaction.set_transaction_params(qconn, req, settings)
            seen = qconn.execute("SELECT DISTINCT tenant FROM lexical_stats").fetchall()
    assert [r["tenant"] for r in seen] == [tenant]  # the statistics of its own tenant only
    assert_reference(hits, bm25_reference(conn, tenant, ["g"], QUESTION, 1.2, 0.75), "zoo.md", "hidden.md")
    # ts_rank, still selectable, has no idf: the document repeating the common word wins
    ts = search.search(conn, req, None, Settings(lexical_rank="ts_rank")).hits
    assert ts[0].doc_id == "cats.md"
    # and b = 0 turns length normalisation off, as in the formula
    monkeypatch.setattr(retrievers, "BM25_B", 0.0)
    flat = search.search(conn, req, None, settings).hits
    ref = bm25_reference(conn, tenant, ["g"], QUESTION, 1.2, 0.0)
    assert {h.doc_id: round(h.lexical_score, 9) for h in flat} == {d: round(s, 9) for d, s in ref.items()}


def test_hybrid_with_convex_fusion_end_to_end(conn, tenant, monkeypatch):
    from dataclasses import replace

    from ragline.query.retrieval import fusion

    store_docs(conn, tenant, DOCS)
    req = SearchRequest(query=QUESTION, tenant=tenant, groups=["g"], k=3, mode="hybrid")

    def run(settings: Settings, mode: str = "hybrid") -> list:
        with db.query_connection() as qconn:
            return search.search(qconn, req.model_copy(update={"mode": mode}), vec(QUESTION), settings).hits

    shipped = fusion.PROSE
    monkeypatch.setattr(fusion, "PROSE", replace(shipped, convex_lexical=0.8, normalization="minmax"))
    lexical_heavy = run(Settings(lexical_rank="bm25", fusion_method="convex"))
    assert lexical_heavy[0].doc_id == "zoo.md"  # BM25's first, far ahead of the rest
    assert all(0 < h.fused_score <= 1 / 61 for h in lexical_heavy)  # in RRF units
    monkeypatch.setattr(fusion, "PROSE", replace(shipped, convex_lexical=0.0))
    vector_only = run(Settings(fusion_method="convex"))
    assert [h.doc_id for h in vector_only] == [h.doc_id for h in run(Settings(), "vector")]


# code chunks: one defines register_hook, one calls it once among other names, one repeats the
# common part "hook" many times; an hr chunk defines it too. BM25 over the identifier terms puts
# the definition first (weight A: its name; idf: the whole name is rarer than its parts)
CODE = [
    (
        "hooks.py",
        "def register_hook(self, event, hook):\n    self.hooks[event].append(hook)",
        ["register_hook"],
        ["g"],
    ),
    ("sessions.py", "self.register_hook('response', r)\nresp = self.send(request)", [], ["g"]),
    (
        "models.py",
        "hook = hooks.get(hook_name)\nhook(hook)\nhooks.dispatch_hook(hook)",
        ["dispatch_hook"],
        ["g"],
    ),
    ("hr.py", "def register_hook(x): pass", ["register_hook"], ["hr"]),
]
CODE_QUESTION = "где определён register_hook"


def code_bm25_reference(conn, tenant: str, groups: list[str], question: str, k1: float, b: float) -> dict:
    """The words' BM25 over tsv plus the identifier terms' BM25F over code_tsv (label weights A 10,
    B 4, C 2, D 1), each with its tenant's N and avgdl and df over the rows the caller may see."""
    from ragline.shared.worker.identifiers import code_terms

    words = conn.execute("SELECT tsvector_to_array(to_tsvector('russian', %s)) AS l", (question,)).fetchone()[
        "l"
    ]
    label = {"A": 10, "B": 4, "C": 2, "D": 1}
    rows = conn.execute(
        "SELECT doc_id, acl,"
        " (SELECT array_agg(ARRAY[lexeme, cardinality(positions)::text]) FROM unnest(tsv)) AS words,"
        " (SELECT array_agg(ARRAY[lexeme, array_to_string(weights, '')]) FROM unnest(code_tsv)) AS code,"
        " length(tsv) AS dl, length(code_tsv) AS cdl FROM chunks WHERE tenant = %s",
        (tenant,),
    ).fetchall()
    conn.rollback()
    parts = {
        "russian": (words, {r["doc_id"]: {t: float(f) for t, f in r["words"]} for r in rows}, "dl"),
        "code": (
            code_terms(question),
            {r["doc_id"]: {t: float(sum(label[w] for w in ws)) for t, ws in r["code"] or []} for r in rows},
            "cdl",
        ),
    }
    visible = {r["doc_id"]: r for r in rows if set(r["acl"]) & set(groups)}
    out: dict[str, float] = {}
    for lexemes, tfs, length in parts.values():
        counted = [r for r in rows if r[length]]
        n, avgdl = len(counted), sum(r[length] for r in counted) / len(counted)
        df = {t: sum(t in tfs[d] for d in visible) for t in lexemes}
        for d, r in visible.items():
            for t in lexemes:
                if t in tfs[d]:
                    tf = tfs[d][t]
                    idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    out[d] = out.get(d, 0.0) + idf * tf * (k1 + 1) / (
                        tf + k1 * (1 - b + b * r[length] / avgdl)
                    )
    return out


def test_bm25_over_the_identifier_terms_of_code(conn, tenant):
    from ragline.shared.worker.identifiers import code_tsvector

    store_docs(
        conn,
        tenant,
        [
            {"doc_id": p, "path": f"pkg/{p}", "content": c, "acl": a, "layer": "C0_SOURCE_CHUNKS"}
            for p, c, _, a in CODE
        ],
    )
    for path, content, names, _ in CODE:
        conn.execute(
            "UPDATE chunks SET code_tsv = %s::tsvector WHERE tenant = %s AND doc_id = %s",
            (code_tsvector(content, names, f"pkg/{path}"), tenant, path),
        )
    conn.commit()
    req = SearchRequest(query=CODE_QUESTION, tenant=tenant, groups=["g"], k=10, mode="lexical")
    with db.query_connection() as qconn:
        hits = search.search(qconn, req, None, Settings(lexical_rank="bm25")).hits
    assert_reference(
        hits, code_bm25_reference(conn, tenant, ["g"], CODE_QUESTION, 1.2, 0.75), "hooks.py", "hr.py"
    )
    # ts_rank (no idf) still ranks with the identifiers as written added: the chunk that only
    # repeats the common part is not first under either
    ts = search.search(conn, req, None, Settings(lexical_rank="ts_rank")).hits
    assert ts[0].doc_id != "models.py" and {h.doc_id for h in ts} == {h.doc_id for h in hits}
