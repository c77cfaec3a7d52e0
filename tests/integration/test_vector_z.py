"""``Hit.vector_z`` from a real search: the hit's similarity standardised against the question's
background in the searched scope (the vector list past its tenth place), which the extractive
answer's confidence reads instead of any embedding model's cosine level. The background is what the
caller may see: the vector list is filtered by tenant and ACL in SQL, so documents of another group
or tenant never shape it."""

from __future__ import annotations

import random

from ragline.shared.sdk.contracts import SearchRequest
from tests.integration.lifecycle_helpers import put_document
from tests.loopback import hashed_embedding

WORDS = ["очередь", "отчёт", "бюджет", "сервер", "отпуск", "договор", "релиз", "пароль", "индекс", "клиент"]
QUESTION = "как настроить репликацию журнала базы данных"


def _search(tenant: str, groups: list[str], k: int = 5):
    from ragline.query.service import search

    return search(
        SearchRequest(
            query=QUESTION,
            tenant=tenant,
            groups=groups,
            k=k,
            mode="vector",
            query_vector=hashed_embedding(QUESTION, 384),
        )
    ).hits


def test_the_hit_that_matches_stands_out_of_the_background_and_acl_shapes_it(stack):
    rnd = random.Random(7)
    tenant = "vector-z"
    for i in range(30):
        put_document(tenant, f"noise-{i}", [" ".join(rnd.choices(WORDS, k=10))], ["all"])
    put_document(tenant, "answer", [QUESTION + " и проверить её состояние"], ["all"])
    # another group's documents, near the question: the caller of "all" never sees them
    for i in range(20):
        put_document(tenant, f"hidden-{i}", [QUESTION + f" вариант {i}"], ["secret"])
    hits = _search(tenant, ["all"])
    assert hits[0].doc_id == "answer"
    assert hits[0].vector_z is not None and hits[0].vector_z > 3
    assert all(h.vector_z is not None and h.vector_z < hits[0].vector_z for h in hits[1:])
    # with the hidden group the background is near the question too: the same hit stands out less
    both = {h.doc_id: h.vector_z for h in _search(tenant, ["all", "secret"], k=25)}
    assert both["answer"] is not None and both["answer"] < hits[0].vector_z


def test_a_scope_too_small_for_a_background_has_none(stack):
    tenant = "vector-z-small"
    for i in range(12):
        put_document(tenant, f"d-{i}", [f"{QUESTION} {i}" if i == 0 else f"документ номер {i}"], ["all"])
    hits = _search(tenant, ["all"])
    assert hits and all(h.vector_z is None for h in hits)
