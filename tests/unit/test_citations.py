"""Citations a chat UI can show: page, heading path, line span, a printable locator, and the
snippet the answer actually used."""

from __future__ import annotations

from ragline.query.answer.citations import SNIPPET_MAX, build_citations, claims, locator, snippet
from ragline.query.answer.extractive import extractive_answer
from ragline.shared.sdk.contracts import Citation, Hit

# OWASP Top 10 2017 (Russian), page 8 as the PDF parser reads it; CC BY-SA 4.0, © The OWASP Foundation
INJECTION = (
    "Является ли приложение уязвимым?\n"
    "Для предотвращения внедрений необходимо изолировать данные от команд и запросов.\n"
    "Используйте безопасный API, исключающий применение интерпретатора или предоставляющий "
    "параметризованный интерфейс, либо используйте инструменты объектно-реляционного отображения (ORM).\n"
    "Реализуйте на сервере белые списки для проверки входных данных."
)
PDF = Hit(
    doc_id="ru-docs/owasp-top10-2017-ru/pdf/OWASP_Top10-2017-ru.pdf",
    chunk_no=41,
    path="owasp-top10-2017-ru/pdf/OWASP_Top10-2017-ru.pdf",
    heading="Топ-10 OWASP — 2017 › Внедрение",
    page=8,
    content=INJECTION,
)
CODE = Hit(
    doc_id="repo/src/retry.py",
    chunk_no=3,
    path="src/retry.py",
    heading="retry",
    content="def retry(call):\n    return call()\n",
    metadata={"kind": "code", "start_line": 12, "end_line": 40},
)
SECTION = Hit(
    doc_id="ru-docs/vue3/computed.md",
    chunk_no=6,
    path="vue3/computed.md",
    heading="Вычисляемые свойства › Кэширование",
    content="Вычисляемое свойство будет пересчитываться только при изменении одной из своих зависимостей.",
)


def test_locators():
    assert locator("src/retry.py", None, "retry", 12, 40) == "src/retry.py:12-40"
    assert locator("src/retry.py", None, "", 7, 7) == "src/retry.py:7"
    assert locator("a.pdf", 11, "A › B", None, None) == "p. 11"
    assert locator("a.pdf", 11, "A › B", None, None, "ru") == "с. 11"  # in the answer's language
    assert locator("src/retry.py", None, "retry", 12, 40, "ru") == "src/retry.py:12-40"
    assert locator("a.md", None, "A › B", None, None) == "§ A › B"
    assert locator("a.txt", None, "", None, None) == "a.txt"


def test_extractive_citations_carry_page_heading_and_the_quoted_sentences():
    answer = extractive_answer("Как предотвратить внедрения?", [PDF, SECTION])
    assert answer.startswith("Для предотвращения внедрений необходимо изолировать данные")
    c = build_citations(answer, [PDF, SECTION], "ru")[0]
    assert (c.n, c.page, c.locator) == (1, 8, "с. 8")
    assert c.heading_path == c.heading == "Топ-10 OWASP — 2017 › Внедрение"
    assert c.start_line is None and c.end_line is None
    # the snippet is exactly the sentences the answer quotes from this chunk, not the chunk
    quoted = answer.split(" [1]")[0]
    assert c.snippet == quoted
    assert "Является ли приложение уязвимым?" not in c.snippet


def test_code_and_section_citations():
    cites = build_citations("Повторы в коде [1], а кэширование описано отдельно [2].", [CODE, SECTION])
    assert [(c.locator, c.start_line, c.end_line) for c in cites] == [
        ("src/retry.py:12-40", 12, 40),
        ("§ Вычисляемые свойства › Кэширование", None, None),
    ]
    assert cites[1].snippet == SECTION.content  # nothing matched word for word: the chunk's opening


def test_generated_claims_point_at_the_closest_sentence():
    answer = "Нужно отделять данные от команд и запросов [1]. Также стоит проверять входные данные по белым спискам [1]."
    said = claims(answer)
    assert said == {
        1: [
            "Нужно отделять данные от команд и запросов",
            ". Также стоит проверять входные данные по белым спискам",
        ]
    }
    snip = snippet(PDF.content, said[1])
    assert snip == (
        "Для предотвращения внедрений необходимо изолировать данные от команд и запросов. "
        "Реализуйте на сервере белые списки для проверки входных данных."
    )


def test_both_numbers_of_a_citation_group_stand_behind_the_same_text():
    assert claims("Данные отделяют от команд [1][2].") == {
        1: ["Данные отделяют от команд"],
        2: ["Данные отделяют от команд"],
    }


def test_snippets_are_bounded():
    long = Hit(doc_id="d", chunk_no=0, content="Внедрения " + "очень " * 150 + "опасны.")
    [c] = build_citations("Внедрения опасны [1].", [long])
    assert len(c.snippet) <= SNIPPET_MAX and c.snippet.endswith("очень…")


def test_old_clients_read_new_citations():
    """A client built on the first contract (five fields) still validates a new citation."""
    new = build_citations("Повторы [1].", [CODE])[0].model_dump()

    class OldCitation(Citation.__base__):  # type: ignore[name-defined,misc]
        n: int
        doc_id: str
        chunk_no: int
        heading: str = ""
        path: str = ""

    old = OldCitation.model_validate(new)
    assert (old.n, old.doc_id, old.heading, old.path) == (1, CODE.doc_id, "retry", "src/retry.py")


def test_the_cli_prints_where_to_look_not_the_chunk_number(capsys):
    from ragline.cli.query import print_answer

    res = {
        "answer": "Данные отделяют от команд [1].",
        "citations": [
            Citation(
                n=1,
                doc_id=PDF.doc_id,
                chunk_no=68,
                heading=PDF.heading,
                path=PDF.path,
                page=11,
                heading_path=PDF.heading,
                snippet="Для предотвращения внедрений необходимо изолировать данные от команд и запросов.",
                locator="p. 11",
            ).model_dump()
        ],
        "removed_links": ["https://attacker.example/p.png"],
        "degraded": False,
        "timings_ms": {"total": 12.0},
    }
    print_answer("Как предотвратить внедрения?", res)
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "[1] owasp-top10-2017-ru/pdf/OWASP_Top10-2017-ru.pdf · p. 11 · Топ-10 OWASP — 2017 › Внедрение" in out
    )
    assert "chunk 68" not in out and "изолировать данные от команд" in out
    assert "1 link(s) to addresses not in the cited documents removed" in out
    # a result from a worker that predates locators still prints
    old = {k: res["citations"][0][k] for k in ("n", "doc_id", "chunk_no", "heading", "path")}
    print_answer("q", {**res, "citations": [old], "removed_links": []})
    assert "· chunk 68 ·" in " ".join(capsys.readouterr().out.split())


def test_citation_numbers_have_no_gaps_and_code_keeps_its_brackets():
    from ragline.query.answer.citations import renumber

    answer = "First [3]. Second [1][3].\n```python\ncodes[2] = x\n```\nThird [5]."
    text, order = renumber(answer)
    assert order == [3, 1, 5]
    assert text == "First [1]. Second [2][1].\n```python\ncodes[2] = x\n```\nThird [3]."
    assert renumber("No citation.") == ("No citation.", [])
