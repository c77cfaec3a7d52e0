"""Which writing system a question and its passages are in, and what that leaves the lexical list.

Postgres full text matches words, not meanings. A question written in one script over passages in
another (an English question over Russian documents) can only match the stray tokens of its own
script that those passages hold: an English title, a name in its original spelling, a code
identifier in a sentence. Fused by RRF, that noise outranks the cross-lingual vector list's better
answer (an English "church" question lifts a Russian passage titled United_Methodist_Church over
the one about the executed monks). Such a question keeps its lexical list only where it can match
for real: a term spelled the same in every language, a number or an identifier.

Pure functions; the passages are the texts of the vector list's first hits, the nearest neighbours
of the question in the corpus, so a tenant holding several languages is judged by the part the
question landed in. Measurements: docs/evaluation.md, "English questions over Russian documents".
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

#: how many of the vector list's first hits stand for the passages' script, and how much of each
PASSAGES = 5
PASSAGE_CHARS = 300
#: the share of letters a script needs to be the text's script; below it the text is mixed ("Кто написал
#: Liber servitoris?" is: the Latin title is in the Russian passage too)
MAJORITY = 0.75

_WORD = re.compile(r"\w+(?:[._]\w+)*(?:\(\))?", re.UNICODE)
# what makes a word neutral: a digit, "_", ".", a call's "()", a lower-upper step (camelCase)
_NEUTRAL = re.compile(r"\d|_|\.|\(\)$|[a-z][A-Z]")
# letters are counted as what is left once every run of other characters is cut out (runs make it
# several times faster than finding each letter); the two scripts this project meets most are
# counted that way too, any other letter by letter
_NON_LETTERS = re.compile(r"[\W\d_]+", re.UNICODE)
_FAST = {"LATIN": re.compile(r"[^A-Za-z\u00C0-\u024F]+"), "CYRILLIC": re.compile(r"[^\u0400-\u052F]+")}


@lru_cache(maxsize=4096)
def char_script(ch: str) -> str | None:
    """``LATIN``, ``CYRILLIC``, ``GREEK``, ``CJK``...: the first word of a letter's Unicode name."""
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else None


def is_neutral(word: str) -> bool:
    """A term spelled the same in every language: it holds a digit (``1564``, ``utf8``) or is an
    identifier (``register_hook``, ``author.books``, ``defineProps``, ``now()``)."""
    return bool(_NEUTRAL.search(word))


def neutral_terms(text: str) -> list[str]:
    return [w for w in _WORD.findall(text or "") if is_neutral(w)]


def letters_script(text: str, majority: float = MAJORITY) -> str | None:
    """The script of at least ``majority`` of the text's letters, or None (no letters, or mixed)."""
    letters = _NON_LETTERS.sub("", text)
    if not letters:
        return None
    for script, others in _FAST.items():
        if len(others.sub("", letters)) >= majority * len(letters):
            return script
    counts = Counter(s for s in map(char_script, letters) if s)
    if not counts:
        return None
    script, n = counts.most_common(1)[0]
    return script if n >= majority * len(letters) else None


def own_words(text: str) -> list[str]:
    """The words of a text that belong to its language: its numbers and identifiers left out. The
    one rule both readers of a question's language use: the script check of the lexical list here,
    the answer's language (``query/answer/texts.language_of``)."""
    return [w for w in _WORD.findall(text or "") if not is_neutral(w)]


def script_of(text: str, majority: float = MAJORITY) -> str | None:
    """The script of a question's words, its numbers and identifiers left out."""
    return letters_script(" ".join(own_words(text)), majority)


def passages_script(passages: Sequence[str]) -> str | None:
    """The script of the first :data:`PASSAGES` passages, each cut to :data:`PASSAGE_CHARS`; their
    identifiers count, so Russian prose around much English code reads as mixed (None)."""
    return letters_script("\n".join(p[:PASSAGE_CHARS] for p in passages[:PASSAGES]))


def cross_script(query: str, passages: Sequence[str]) -> bool:
    """True when the question is written in another script than the passages and holds no term
    that both can spell alike; a mixed question ("как работает computed") is not."""
    q = script_of(query)
    if q is None or neutral_terms(query):
        return False
    p = passages_script(passages)
    return p is not None and p != q


def lexical_weight(query: str, passages: Sequence[str], weight: float, cross_script_weight: float) -> float:
    """The RRF weight of the lexical list for this question: ``weight``, or ``cross_script_weight``
    (never more than ``weight``) for a cross-script question. Without passages (no vector list)
    there is nothing to fall back on, so the weight stays."""
    if cross_script_weight >= weight or not passages:
        return weight
    return cross_script_weight if cross_script(query, passages) else weight
