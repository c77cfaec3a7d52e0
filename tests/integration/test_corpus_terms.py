"""A question naming the collection it asks about finds the chapter, not the preface
(query/retrieval/terms.py), on real Postgres through the query service, with both lists.

The tenant holds a standard ("XSTD", seven documents: a preface repeating the name and edition,
chapters naming the standard once) and a guide of six documents that never names it. The question
"Как защититься от CSRF по XSTD 2.1?" pulls the preface up when the name is
searched with it: the embedded question shares the name's trigrams with every
sentence of the preface. (The lexical list alone ranks the chapter first here, since it matches
more of the question's words; with the name left out it still does.)

Embedding goes through the ``voyage`` provider against the loopback server (hashed trigram vectors).
"""

from __future__ import annotations

import pytest

from ragline.query import service
from ragline.shared.sdk.contracts import SearchRequest
from tests.integration.query_corpus import store_docs

PREFACE = (
    "Предисловие к XSTD 2.1. Что требует XSTD 2.1? XSTD 2.1 требует от разработчиков XSTD 2.1,"
    " XSTD 2.1 требует от аудиторов. Благодарим авторов XSTD 2.1."
)
CHAPTER = (
    "Глава 4 XSTD. Защита от CSRF: каждая форма несёт случайный токен, сервер сверяет его с"
    " токеном сессии и проверяет заголовок Origin."
)
OTHER_CHAPTERS = [
    "Глава 1 XSTD. Журналирование событий безопасности и хранение журналов.",
    "Глава 2 XSTD. Хранение паролей: соль, медленная функция формирования ключа.",
    "Глава 3 XSTD. Управление сессиями: срок жизни, завершение, повторный вход.",
    "Глава 5 XSTD. Шифрование данных при передаче и хранении.",
    "Глава 6 XSTD. Обработка ошибок без раскрытия подробностей.",
]
GUIDE = [
    "Компоненты отрисовывают шаблон и реагируют на изменения данных.",
    "Маршрутизатор сопоставляет адрес страницы с компонентом.",
    "Формы: привязка полей ввода к данным и проверка значений.",
    "Хранилище состояния доступно всем компонентам приложения.",
    "Запросы к серверу отправляются из хуков жизненного цикла.",
    "Сборка приложения для продакшена и разделение кода.",
]
QUESTION = "Как защититься от CSRF по XSTD 2.1?"


def docs(acl_std: list[str]) -> list[dict]:
    out = [
        {"doc_id": "std/00-preface.md", "content": PREFACE, "acl": acl_std},
        {"doc_id": "std/04-csrf.md", "content": CHAPTER, "acl": acl_std},
    ]
    out += [{"doc_id": f"std/0{i}.md", "content": t, "acl": acl_std} for i, t in enumerate(OTHER_CHAPTERS, 5)]
    out += [{"doc_id": f"guide/{i}.md", "content": t, "acl": ["g"]} for i, t in enumerate(GUIDE)]
    return out


def ranked(tenant: str, mode: str, groups: list[str] | None = None) -> list[str]:
    req = SearchRequest(query=QUESTION, tenant=tenant, groups=groups or ["g"], mode=mode, k=5, rerank=False)
    resp = service.search(req)
    return [h.doc_id for h in resp.hits]


@pytest.mark.parametrize("mode", ["vector", "lexical", "hybrid"])
@pytest.mark.parametrize("on", [True, False])
def test_a_question_naming_the_standard_gets_the_chapter_first(conn, tenant, voyage, mode, on):
    voyage(retrieval_corpus_terms=str(on).lower())
    store_docs(conn, tenant, docs(["g"]))
    order = ranked(tenant, mode)
    if on:
        assert order[0] == "std/04-csrf.md", order
        assert all(d.startswith("std/") for d in order)  # the collection named, and only it
    elif mode != "lexical":  # searched with the name, the preface comes first
        assert order.index("std/00-preface.md") < order.index("std/04-csrf.md"), order


def test_the_statistics_are_the_callers_scope(conn, tenant, voyage):
    """A caller who cannot see the standard's chapters has no collection named XSTD: the question
    is searched as asked (the statistics never count documents outside the caller's groups)."""
    voyage()
    store_docs(conn, tenant, docs(["g", "std-readers"]))
    # the same documents, readable by the standard's readers only, except the preface
    conn.execute(
        "UPDATE chunks SET acl = '{std-readers}' WHERE tenant = %s AND doc_id LIKE 'std/%%'"
        " AND doc_id <> 'std/00-preface.md'",
        (tenant,),
    )
    conn.execute(
        "UPDATE documents SET acl = '{std-readers}' WHERE tenant = %s AND doc_id LIKE 'std/%%'"
        " AND doc_id <> 'std/00-preface.md'",
        (tenant,),
    )
    conn.commit()
    resp = service.search(SearchRequest(query=QUESTION, tenant=tenant, groups=["g"], mode="hybrid", k=5))
    assert resp.corpus_names == [] and resp.hits[0].doc_id == "std/00-preface.md"
    resp = service.search(
        SearchRequest(query=QUESTION, tenant=tenant, groups=["std-readers"], mode="hybrid", k=5)
    )
    assert resp.corpus_names == ["XSTD", "2.1"] and resp.hits[0].doc_id == "std/04-csrf.md"
