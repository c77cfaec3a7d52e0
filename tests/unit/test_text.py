"""The one text module every stage uses: stems, stop words, identifier parts, the language."""

from ragline.shared.worker import text


def test_stems_meet_across_inflections_in_both_languages():
    assert text.stem("запросы") == text.stem("запросов") == text.stem("запрос")
    assert text.stem("retries") == text.stem("retried") == text.stem("retry")
    assert text.stem("Ёлка") == text.stem("елка")


def test_stop_words_carry_no_topic_in_either_language():
    assert text.stems("Как настроить прокси для запросов?", keep_stop_words=False) == {
        text.stem("настроить"),
        text.stem("прокси"),
        text.stem("запросов"),
    }
    assert text.topic_stems("What is the proxy?") == {text.stem("proxy")}
    # a question of stop words only keeps them: something must be searched for
    assert text.topic_stems("What is this?")


def test_identifiers_split_into_the_words_a_question_spells():
    assert text.identifier_parts("TooManyRedirects") == ["toomanyredirects", "too", "many", "redirects"]
    assert text.stem("redirect") in text.term_stems("raise TooManyRedirects()")
    assert text.stem("bundle") in text.term_stems("REQUESTS_CA_BUNDLE")


def test_language_is_read_from_the_own_words_not_the_names():
    assert text.language_of("Что такое Composition API?") == "ru"
    assert text.language_of("How many points did the Panthers defense surrender?") == "en"
    assert text.language_of("Как работает `computed()` во Vue?") == "ru"
    assert text.language_of("1234") == text.FALLBACK
