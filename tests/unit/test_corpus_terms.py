"""The policy that leaves a collection's names out of a question (query/retrieval/terms.py): which words are
candidates, which statistics name a source, and what both retrieval lists get."""

from __future__ import annotations

import pytest

from ragline.query.retrieval.terms import CorpusTerms, TermStat, candidates, name_like

#: a tenant of three collections: a standard, a framework's guide and a library's repository
SIZES = {"asvs": 22, "vue3": 52, "requests": 48, "tiny": 2}
STATS = {
    "ASVS": {"asvs": 11, "requests": 1},  # half the standard's documents, hardly elsewhere
    "OWASP": {"asvs": 20, "vue3": 1},
    "Vue": {"vue3": 50},
    "4.0.3": {"asvs": 4},  # the standard's edition: in its preface, not in every chapter
    "5.0": {},  # an edition the standard never mentions
    "3": {"vue3": 17, "requests": 13, "asvs": 1},
    "HTTP": {"requests": 23, "asvs": 5, "vue3": 3},  # a topic of one source, in a minority of it
    "DOM": {"vue3": 37, "asvs": 3},  # most of the guide's pages, and 37 of its 40 documents are there
    "Приложение": {"asvs": 22, "vue3": 31},  # common to two sources: no name
    "Tiny": {"tiny": 2},  # all of a source too small to tell
}


def plan(question: str, **policy):
    words = candidates(question)
    return CorpusTerms(sizes=SIZES, **policy).plan(question, [TermStat(w, STATS.get(w, {})) for w in words])


@pytest.mark.parametrize(
    ("word", "position", "cyrillic", "expected"),
    [
        ("ASVS", 3, True, True),  # an acronym
        ("Vue", 2, True, True),  # Latin in a Cyrillic question
        ("requests", 2, True, True),
        ("requests", 2, False, False),  # a lower-case word of an English question
        ("Session", 5, False, True),  # capitalised past the first word
        ("Where", 0, False, False),  # the first word of a sentence
        ("пароль", 3, True, False),  # an ordinary word
        ("4.0.3", 4, True, False),  # a version is never a name by itself
    ],
)
def test_name_like(word, position, cyrillic, expected):
    assert name_like(word, position, cyrillic) is expected


def test_candidates_are_names_and_the_versions_after_them():
    assert candidates("Какова длина пароля по ASVS 4.0.3, и какой номер у требования 2.1.1?") == [
        "ASVS",
        "4.0.3",
    ]
    assert candidates("Что такое composable во Vue 3?") == ["composable", "Vue", "3"]
    assert candidates("как хранить пароли?") == []


@pytest.mark.parametrize(
    ("word", "source"),
    [
        ("ASVS", "asvs"),
        ("OWASP", "asvs"),
        ("Vue", "vue3"),
        ("HTTP", None),  # under half of the source's documents
        ("DOM", "vue3"),  # says nothing about which page of the guide answers
        ("Приложение", None),
        ("Tiny", None),  # a two-document source says nothing
        ("Unknown", None),  # in no document at all
    ],
)
def test_which_source_a_word_names(word, source):
    assert CorpusTerms(sizes=SIZES).names_source(TermStat(word, STATS.get(word, {}))) == source


@pytest.mark.parametrize(
    ("question", "text", "names", "sources"),
    [
        # the name and the collection's own edition go, with the word attaching them
        (
            "Какова минимальная длина пароля по ASVS 4.0.3 и какой номер у этого требования?",
            "Какова минимальная длина пароля и какой номер у этого требования?",
            ("ASVS", "4.0.3"),
            ("asvs",),
        ),
        (
            "According to ASVS, how long may user passwords be, and may they be truncated?",
            "how long may user passwords be, and may they be truncated?",
            ("ASVS",),
            ("asvs",),
        ),
        # an edition the collection never mentions is what the question asks about: it stays
        (
            "Какие новые требования к аутентификации появились в ASVS 5.0?",
            "Какие новые требования к аутентификации появились 5.0?",
            ("ASVS",),
            ("asvs",),
        ),
        (
            "Как во Vue 3 дождаться обновления страницы?",
            "Как дождаться обновления страницы?",
            ("Vue", "3"),
            ("vue3",),
        ),
        # a question about the collection itself keeps its name
        ("Что такое OWASP ASVS и кто может им пользоваться?", None, (), ()),
        # nothing specific would remain
        ("Что такое ASVS 4.0.3?", None, (), ()),
        ("Как работает Vue?", None, (), ()),
        # no name of a collection at all
        ("Which HTTP headers does a Session send?", None, (), ()),
        ("как хранить пароли пользователей?", None, (), ()),
    ],
)
def test_plan(question, text, names, sources):
    p = plan(question)
    assert p.names == names and p.sources == sources
    expected = question if text is None else text
    assert p.embed_text == expected and p.lexical_text == expected  # both lists get the same text
    assert p.changed is bool(names)


def test_the_thresholds_are_the_policys():
    q = "Какова минимальная длина пароля по ASVS 4.0.3?"
    assert plan(q).changed
    assert not plan(q, share=0.6).changed  # ASVS is in 11 of 22 documents
    assert not plan(q, min_docs=30).changed
    assert not plan(q, min_specific=5).changed
    assert not CorpusTerms(sizes=SIZES, concentration=0.95).names_source(TermStat("DOM", STATS["DOM"]))


def test_the_statistics_statement_stems_each_word_once_outside_the_rows_it_filters():
    from ragline.query.retrieval import sql

    words, rows = sql.TERM_STATS_SQL.split("CROSS JOIN LATERAL")
    assert "to_tsvector" in words and "MATERIALIZED" in words  # once per word, before the join
    assert "to_tsvector" not in rows and "quote_literal" not in rows  # not once per chunk it filters
    assert "c.tsv @@ w.q" in rows
