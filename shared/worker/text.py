"""Text helpers both sides need the same way: the chunker splits documents into sentences and the
extractive generator quotes whole sentences of the chunks it cites; a passage and a question reach
the embedder in the same form."""

from __future__ import annotations

import re
import unicodedata

from razdel import sentenize

# a stress mark (combining grave or acute) on a Cyrillic letter, as Russian Wikipedia writes
# "Чесо́тка" in its first line and people copy it into questions
_STRESS_MARK = re.compile(r"(?<=[\u0400-\u04ff])[\u0300\u0301]+")


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
