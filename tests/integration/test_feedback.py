"""Pseudo-relevance feedback end to end (``retrievers.feedback_pass``): on a tiny constructed corpus
the second pass moves the passage the feedback points at up (dense) or in (lexical), and its
statements keep the tenant and ACL filters in SQL (the owner connection, which row-level security
does not bind, sees only the caller's rows)."""

from __future__ import annotations

import numpy as np
import pytest

from ragline.query.retrieval import search
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.worker import db
from tests.integration.query_corpus import store_docs


def unit(*head: float, dim: int = 384) -> np.ndarray:
    v = np.zeros(dim, dtype=np.float32)
    v[: len(head)] = head
    return v / np.linalg.norm(v)


# question e0; two hits close to it that lean toward e1 (the feedback), a passage worded like them
# (e0 + e1) and a distractor nearer the question alone (e0 + 0.8 e2): cos 0.707 against 0.781
VECTORS = {
    "f1.md": unit(1, 0.6),
    "f2.md": unit(1, 0.6, 0, 0.1),
    "target.md": unit(1, 1),
    "distractor.md": unit(1, 0, 0.8),
}
# what the moved question (e0 + mean of the feedback) is nearest to: outside the caller's scope
MOVED = unit(1.857, 0.514)
QUESTION = "кошка"
DOCS = [
    {"doc_id": "f1.md", "content": "Кошка мурлыкает и ловит мышей."},
    {"doc_id": "f2.md", "content": "Кошка громко мурлыкает вечером."},
    {"doc_id": "target.md", "content": "Домашний питомец мурлыкает на диване."},
    {"doc_id": "distractor.md", "content": "Погода в горах меняется быстро."},
    {"doc_id": "hidden.md", "content": "Секретный питомец мурлыкает в отделе кадров.", "acl": ["hr"]},
]


def _store(conn, tenant: str) -> None:
    store_docs(conn, tenant, DOCS)
    store_docs(conn, tenant + "-other", [{"doc_id": "other.md", "content": "Чужой питомец мурлыкает."}])
    for t, doc, v in [
        *((tenant, d, v) for d, v in VECTORS.items()),
        (tenant, "hidden.md", MOVED),
        (tenant + "-other", "other.md", MOVED),
    ]:
        conn.execute("UPDATE chunks SET embedding = %s WHERE tenant = %s AND doc_id = %s", (v, t, doc))
    conn.commit()


def _order(connection, tenant: str, mode: str, **prf) -> list[str]:
    req = SearchRequest(query=QUESTION, tenant=tenant, groups=["g"], k=10, mode=mode)
    settings = Settings(prf_docs=2, **prf)
    return [h.doc_id for h in search.search(connection, req, unit(1), settings).hits]


@pytest.mark.parametrize("role", ["owner", "query"])
def test_dense_feedback_lifts_the_passage_the_best_hits_point_at(conn, tenant, role):
    _store(conn, tenant)
    with db.query_connection() as qconn:
        connection = conn if role == "owner" else qconn
        before = _order(connection, tenant, "vector")
        after = _order(connection, tenant, "vector", prf="dense", prf_alpha=1.0, prf_beta=1.0)
    assert before == ["f1.md", "f2.md", "distractor.md", "target.md"]
    assert after.index("target.md") < after.index("distractor.md")
    # the moved vector's nearest rows are another tenant's and another group's: never returned
    assert set(after) == set(before)


@pytest.mark.parametrize("role", ["owner", "query"])
def test_lexical_feedback_finds_the_passage_worded_like_the_best_hits(conn, tenant, role):
    _store(conn, tenant)
    with db.query_connection() as qconn:
        connection = conn if role == "owner" else qconn
        before = _order(connection, tenant, "lexical")
        after = _order(connection, tenant, "lexical", prf="lexical", prf_terms=3, prf_term_weight=0.5)
    # "мурлыкает" is shared by both hits for "кошка"; the passage holding it but not the question's
    # word joins the list, below them (its rank is the expansion's, at half weight); the other
    # tenant's and the hr group's passages with the same word do not
    assert before == ["f1.md", "f2.md"]
    assert after[:2] == ["f1.md", "f2.md"] and after[2:] == ["target.md"]
