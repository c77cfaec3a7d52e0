"""A passage and a question reach the embedder in the same form: stress marks never split a word."""

import unicodedata

import numpy as np
import pytest

from ragline.ingest.contextualize import embedding_text
from ragline.shared.worker.text import embedding_form


@pytest.mark.parametrize(
    ("marked", "plain"),
    [
        ("Где наиболее распространена чесо́тка?", "Где наиболее распространена чесотка?"),
        ("Смоле́нское сраже́ние", "Смоленское сражение"),
        ("Ива\u0300н", "Иван"),  # a grave accent as stress mark
        ("Сватовство́ майо́ра", "Сватовство майора"),
    ],
)
def test_stress_marks_on_cyrillic_letters_are_dropped(marked: str, plain: str) -> None:
    assert embedding_form(marked) == plain


def test_letters_with_marks_of_their_own_are_kept() -> None:
    # decomposed й, ё and a Latin é come back composed, never stripped of their mark
    decomposed = unicodedata.normalize("NFD", "йод, ёж, café")
    assert embedding_form(decomposed) == "йод, ёж, café"
    # a combining acute after a Latin letter is not a Russian stress mark
    assert embedding_form("cafe\u0301") == "café"


def test_passages_are_embedded_in_the_question_form() -> None:
    assert embedding_text("Чесо́тка", "Чесо́тка — заразное заболевание.") == (
        "Чесотка\n\nЧесотка — заразное заболевание."
    )
    assert embedding_text("", "Без заголовка") == "Без заголовка"


def test_the_question_is_embedded_in_that_form(monkeypatch) -> None:
    """The query path hands the embedder the normalised question (what the dev set measured)."""
    from ragline.query import service
    from ragline.shared.sdk.contracts import SearchRequest
    from ragline.shared.worker import providers

    seen: list[str] = []

    class Recorder:
        def embed_query(self, text: str) -> list[float]:
            seen.append(text)
            return [1.0, 0.0]

    monkeypatch.setattr(providers, "get_embedder", lambda: Recorder())
    monkeypatch.setattr(providers, "cached", lambda name, make: make(service.get_settings()))
    req = SearchRequest(query="Когда было Смоле́нское сраже́ние?", tenant="t", groups=["g"])
    vec = service._embed_query(req, [])
    assert seen == ["Когда было Смоленское сражение?"]
    assert np.allclose(vec, [1.0, 0.0])
