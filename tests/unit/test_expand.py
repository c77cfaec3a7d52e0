"""Section and parent-document expansion of the top hits (query/retrieval/expand.py): which chunks each hit
brings, in which order, and what is never added twice."""

from __future__ import annotations

import pytest

from ragline.query.retrieval.expand import Expansion, in_section, section_of
from ragline.shared.sdk.contracts import Hit


def chunk(doc: str, no: int, heading: str, score: float = 0.0) -> Hit:
    return Hit(doc_id=doc, chunk_no=no, path=doc, heading=heading, content=f"{doc}#{no}", score=score)


FORMS = [
    chunk("forms.md", 0, "Формы"),
    chunk("forms.md", 1, "Формы › Текст"),
    chunk("forms.md", 2, "Формы › Модификаторы"),
    chunk("forms.md", 3, "Формы › Модификаторы › .lazy"),
    chunk("forms.md", 4, "Формы › Модификаторы › .number"),
    chunk("forms.md", 5, "Формы › Модификаторы › .trim"),
    chunk("forms.md", 6, "Формы › Компоненты"),
]
OTHER = [chunk("list.md", i, "Списки › v-for") for i in range(3)]


def keys(hits):
    return [(h.doc_id, h.chunk_no) for h in hits]


@pytest.mark.parametrize(
    ("path", "section"),
    [
        ("Формы › Модификаторы › .lazy", "Формы › Модификаторы"),
        ("Формы › Модификаторы", "Формы"),
        ("Формы", "Формы"),  # one level: the chapter itself
        ("", ""),
    ],
)
def test_section_of(path, section):
    assert section_of(path) == section


def test_in_section_is_by_whole_headings():
    assert in_section("Формы › Модификаторы › .trim", "Формы › Модификаторы")
    assert in_section("Формы › Модификаторы", "Формы › Модификаторы")
    assert not in_section("Формы › Модификаторы2", "Формы › Модификаторы")
    assert not in_section("Формы › Текст", "Формы › Модификаторы")


def test_off_adds_nothing_and_reads_nothing():
    hits = [FORMS[3]]
    policy = Expansion("off")
    assert policy.documents(hits) == [] and policy.expand(hits, FORMS) == hits


def test_a_list_item_brings_its_siblings_in_document_order_after_it():
    lazy = FORMS[3].model_copy(update={"score": 0.9})
    out = Expansion("section", hits=3, chunks=6).expand([lazy, OTHER[0]], FORMS + OTHER)
    assert keys(out) == [
        ("forms.md", 3),
        ("forms.md", 2),
        ("forms.md", 4),
        ("forms.md", 5),
        ("list.md", 0),
        ("list.md", 1),
        ("list.md", 2),
    ]
    assert all(h.score == 0.9 for h in out[:4])  # the section ranks with the hit that found it


def test_at_most_chunks_per_hit_nearest_first():
    out = Expansion("document", hits=1, chunks=2).expand([FORMS[3]], FORMS)
    assert keys(out) == [("forms.md", 3), ("forms.md", 2), ("forms.md", 4)]


def test_document_mode_takes_other_sections_too():
    out = Expansion("document", hits=1, chunks=10).expand([FORMS[3]], FORMS)
    assert sorted(keys(out)) == keys(FORMS)


def test_only_the_first_hits_are_expanded_and_nothing_twice():
    a, b = FORMS[3], FORMS[4]  # two hits of one section
    policy = Expansion("section", hits=1, chunks=6)
    assert policy.documents([a, OTHER[0]]) == ["forms.md"]
    out = policy.expand([a, b, OTHER[0]], FORMS + OTHER)
    assert len(keys(out)) == len(set(keys(out)))
    assert ("list.md", 1) not in keys(out)  # the third hit is not expanded
    assert keys(out)[-2:] == [("forms.md", 4), ("list.md", 0)]  # the hits keep their order
