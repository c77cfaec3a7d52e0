"""Language handling every stage shares: sentence splitting, script and language detection, word
stems, stop words and identifier parts. The chunker splits documents into sentences, retrieval
stems a question's words, the answer composer scores the sentences it quotes with the same stems
and writes its framing in the language detected here: one rule for each, so no two stages disagree.

Built on maintained libraries: ``razdel`` splits Russian (and English) sentences without breaking
"т.е.", "v1.2" or "3.14"; ``snowballstemmer`` (the Snowball project's Porter2 and Russian
stemmers, pure Python) gives stems. The stop words are the Snowball project's lists for English and
Russian (snowballstem.org/algorithms/*/stop.txt), which the stemmer package does not ship, plus the
question words both languages ask with: the words that carry no topic.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import snowballstemmer
from razdel import sentenize

from ragline.shared.worker.identifiers import component_parts

# a stress mark (combining grave or acute) on a Cyrillic letter, as Russian Wikipedia writes
# "Чесо́тка" in its first line and people copy it into questions
_STRESS_MARK = re.compile(r"(?<=[\u0400-\u04ff])[\u0300\u0301]+")
_WORD = re.compile(r"\w+", re.UNICODE)
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")
#: a word spelled alike in every language: it holds a digit or is an identifier (``max_retries``,
#: ``author.books``, ``defineProps``, ``now()``)
_NEUTRAL = re.compile(r"\d|_|\.|\(\)$|[a-z][A-Z]")
_TOKEN = re.compile(r"\w+(?:[._]\w+)*(?:\(\))?", re.UNICODE)
#: quoted code and markup say nothing about the language
_MARKUP = re.compile(r"`[^`\n]*`|<[^<>\n]*>")

#: the languages ragline detects and writes its own texts in; the fallback for anything else
LANGUAGES = ("ru", "en")
FALLBACK = "en"
#: the share of a text's letters in Cyrillic from which it is Russian: a Russian question names
#: English things ("Что такое Composition API?"), so its own words are a smaller share of its
#: letters than an English question's Russian loanwords ever are
RUSSIAN_SHARE = 0.3

STOP_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset(
        """
        i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she
        her hers herself it its itself they them their theirs themselves what which who whom this that
        these those am is are was were be been being have has had having do does did doing would should
        could ought a an the and but if or because as until while of at by for with about against
        between into through during before after above below to from up down in out on off over under
        again further then once here there when where why how all any both each few more most other some
        such no nor not only own same so than too very can will just shall may might must also whose
        """.split()
    ),
    "ru": frozenset(
        """
        и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по только ее её
        мне было вот от меня еще ещё нет о из ему теперь когда даже ну вдруг ли если уже или ни быть
        был него до вас нибудь опять уж вам ведь там потом себя ничего ей может они тут где есть надо
        ней для мы тебя их чем была сам чтоб без будто чего раз тоже себе под будет ж тогда кто этот
        того потому этого какой совсем ним здесь этом один почти мой тем чтобы нее сейчас были куда
        зачем всех никогда можно при наконец два об другой хоть после над больше тот через эти нас про
        всего них какая много разве три эту моя впрочем хорошо свою этой перед иногда лучше чуть том
        нельзя такой им более всегда конечно всю между это такое такая такие какие каким каких каком
        почему сколько который которая которое которые нужно также является являются
        """.split()
    ),
}
_ALL_STOP = STOP_WORDS["en"] | STOP_WORDS["ru"]
_STEMMERS = {"en": snowballstemmer.stemmer("english"), "ru": snowballstemmer.stemmer("russian")}


def split_sentences(text: str) -> list[str]:
    """Russian-aware sentence split (razdel keeps "т.е.", "v1.2", "3.14" intact)."""
    return [s.text for s in sentenize(text) if s.text.strip()]


def embedding_form(text: str) -> str:
    """The text an embedder sees, for passages and questions alike: stress marks on Cyrillic letters
    dropped after NFC. A stress mark splits a word into sub-word pieces the model has rarely seen
    ("чесо́тка" is not "чесотка" to it), so a question or passage written with marks drifts away
    from its unmarked counterpart. NFC first, so letters that exist precomposed keep their mark
    ("й", "ё", Macedonian "ѓ", a Latin "é"): Russian stressed vowels have no precomposed form.
    Lexical search has its own handling (``query/retrieval/filters.py``)."""
    return _STRESS_MARK.sub("", unicodedata.normalize("NFC", text))


def words(text: str) -> list[str]:
    """The words of ``text`` as written (runs of letters, digits and ``_``)."""
    return _WORD.findall(text or "")


def is_neutral(word: str) -> bool:
    """A term spelled the same in every language: a number, a version, an identifier."""
    return bool(_NEUTRAL.search(word))


def own_words(text: str) -> list[str]:
    """The words of a text that belong to its language: numbers and identifiers left out."""
    return [w for w in _TOKEN.findall(text or "") if not is_neutral(w)]


def language_of(text: str) -> str:
    """``ru`` or ``en``: the alphabet the text's own words (:func:`own_words`, quoted code and
    markup left out) are written in; "Как работает computed?" is Russian."""
    own = " ".join(own_words(_MARKUP.sub(" ", text or "")))
    cyrillic, latin = len(_CYRILLIC.findall(own)), len(_LATIN.findall(own))
    if not cyrillic and not latin:
        cyrillic, latin = len(_CYRILLIC.findall(text or "")), len(_LATIN.findall(text or ""))
    if cyrillic == latin == 0:
        return FALLBACK
    return "ru" if cyrillic >= RUSSIAN_SHARE * (cyrillic + latin) else "en"


def word_language(word: str) -> str:
    """The language whose stemmer reads ``word``: its script decides."""
    return "ru" if _CYRILLIC.search(word) else "en"


def is_stop_word(word: str) -> bool:
    """A word that carries no topic in either language (lower case expected)."""
    return word in _ALL_STOP


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Snowball stem of one word, lower-cased, "ё" read as "е"; numbers stay as written."""
    w = word.lower().replace("ё", "е")
    if not w.isalpha():
        return w
    return str(_STEMMERS[word_language(w)].stemWord(w))


def stems(text: str, *, keep_stop_words: bool = True, min_len: int = 2) -> set[str]:
    """The stems of the words of ``text`` of at least ``min_len`` characters; stop words dropped
    unless ``keep_stop_words``."""
    return {
        stem(w)
        for w in _WORD.findall((text or "").lower())
        if len(w) >= min_len and (keep_stop_words or w not in _ALL_STOP)
    }


def topic_stems(text: str) -> set[str]:
    """The stems of the words that carry a topic (stop words dropped; all words when none is left)."""
    return stems(text, keep_stop_words=False) or stems(text)


def identifier_parts(token: str) -> list[str]:
    """An identifier's lower-cased parts (snake_case and camelCase split), the whole one first:
    ``TooManyRedirects`` holds ``redirects``, ``REQUESTS_CA_BUNDLE`` holds ``bundle``."""
    return [token.lower(), *component_parts(token)]


def term_stems(text: str, *, keep_stop_words: bool = False) -> set[str]:
    """:func:`stems` of ``text`` and of its identifiers' parts: code and its documentation answer in
    names that a question spells as words."""
    out = stems(text, keep_stop_words=keep_stop_words)
    for token in _WORD.findall(text or ""):
        if "_" in token or token != token.lower():
            out |= {
                stem(p)
                for p in component_parts(token)
                if len(p) >= 2 and (keep_stop_words or p not in _ALL_STOP)
            }
    return out
