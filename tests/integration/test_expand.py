"""``ask`` with section or document expansion (``RAGLINE_ANSWER_EXPAND``, query/retrieval/expand.py) on real
Postgres: the passage the answer reads holds the chunks of the hit's section (or document), read
under the caller's scope, and nothing more when expansion is off.

Embedding goes through the ``voyage`` provider against the loopback server (hashed trigram vectors);
the question is asked of the lexical list, whose order does not depend on them.
"""

from __future__ import annotations

import pytest

from ragline.query import service
from ragline.shared.sdk.contracts import AskRequest
from tests.integration.query_corpus import store_docs

SECTION = "Формы › Модификаторы"
CHUNKS = [
    ("Формы › Текст", "Поле ввода связывается с данными директивой v-model."),
    (SECTION + " › .lazy", "Модификатор lazy синхронизирует поле по событию change."),
    (SECTION + " › .number", "Модификатор number приводит ввод к числу через parseFloat."),
    (SECTION + " › .trim", "Модификатор trim убирает пробелы по краям."),
    ("Формы › Компоненты", "Компоненты тоже принимают v-model."),
]


def store(conn, tenant: str, hidden: bool = False) -> None:
    store_docs(
        conn,
        tenant,
        [{"doc_id": "guide/forms.md", "chunks": [t for _, t in CHUNKS], "acl": ["g"]}],
    )
    for no, (heading, _) in enumerate(CHUNKS):  # each chunk under its own heading
        conn.execute(
            "UPDATE chunks SET heading_path = %s WHERE tenant = %s AND doc_id = 'guide/forms.md' AND chunk_no = %s",
            (heading, tenant, no),
        )
    if hidden:  # a chunk of the section the caller may not read
        conn.execute(
            "UPDATE chunks SET acl = '{hr}' WHERE tenant = %s AND doc_id = 'guide/forms.md' AND chunk_no = 3",
            (tenant,),
        )
    conn.commit()


def read(tenant: str, expand: str | None = None) -> tuple[list[int], dict]:
    q = "Что делает модификатор lazy?"
    resp = service.ask(AskRequest(query=q, tenant=tenant, groups=["g"], mode="lexical", k=1, expand=expand))
    chunks = sorted(c for p in resp.trace["context"]["passages"] for c in p["chunks"])
    return chunks, resp.trace.get("expanded", {})


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("off", [1]), ("section", [1, 2, 3]), ("document", [0, 1, 2, 3, 4])],
)
def test_the_answer_reads_the_hits_section_or_document(conn, tenant, voyage, mode, expected):
    voyage(answer_expand=mode)
    store(conn, tenant)
    chunks, expanded = read(tenant)
    assert chunks == expected
    assert expanded.get("added", []) == [["guide/forms.md", n] for n in expected if n != 1]


def test_expansion_reads_only_what_the_caller_may_see(conn, tenant, voyage):
    voyage(answer_expand="section")
    store(conn, tenant, hidden=True)
    chunks, _ = read(tenant)
    assert chunks == [1, 2]


def test_the_request_chooses_over_the_setting(conn, tenant, voyage):
    voyage(answer_expand="document")
    store(conn, tenant)
    assert read(tenant, "section")[0] == [1, 2, 3]
    assert read(tenant, "off")[0] == [1]
