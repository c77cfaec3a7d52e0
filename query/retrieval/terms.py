"""Names of a collection in a question: "… according to Acme Standard 4.0.3?", "… во Foo 3?".

A question that names the collection it asks about ("How long may a token live according to
Acme Standard 4.0.3?") puts the collection's name into both retrieval lists, and the name says nothing about
which of the collection's documents answers. Worse, it points at the documents *about* the
collection: the foreword, the preface and the table of contents repeat the name in every
paragraph, so the embedded question lands on the preface (the name dominates the question's
vector) and the lexical list ranks it by the name's frequency (``ts_rank`` has no IDF). The
chapter that answers falls out of the top hits.

Such a name is recognisable from the tenant's own statistics, in the caller's scope: a word
written as a name (not a lower-case word of the question's language) whose lexeme occurs in at
least ``share`` of the documents of one source (an ingested folder or repository, the first
segment of the stored path) and whose documents lie almost all (``concentration``) in that
source. Statistics per source, not per tenant: a tenant holding a standard, a framework's guide
and a library's code has each collection's name in a minority of its documents, yet in most of
its own collection's. A word common to several sources (``приложение``, ``use``) is no name.

:class:`CorpusTerms` decides once what both lists get (:meth:`CorpusTerms.plan`): the names
(and a version written right after one, "4.0.3", "3") are left out of the embedded text and of
the lexical query, provided the rest of the question still holds ``min_specific`` content words
(a question *about* the collection, "What is the Acme Standard?", keeps them), and the named source's
documents only are searched (the question said which collection answers), so dropping the name
does not send the question to another collection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ragline.query.question import STOP_WORDS, definition_subject

#: a word of a question as the lexical retriever sees it (query/retrieval/filters.py's notion, with the dots
#: and hyphens inside versions and identifiers kept: "4.0.3", "v-if")
_TOKEN = re.compile(r"[\w\u0300\u0301]+(?:[.\-][\w\u0300\u0301]+)*", re.UNICODE)
_VERSION = re.compile(r"v?\d+(?:\.\d+)*[a-z]?", re.IGNORECASE)
_LATIN = re.compile(r"[A-Za-z]")
_CYRILLIC = re.compile(r"[\u0400-\u04FF]")


@dataclass(frozen=True)
class TermStat:
    """One candidate word's statistics in the caller's scope: ``docs`` documents of each source
    hold its lexeme; ``sizes``: each source's number of documents (in the same scope)."""

    word: str
    docs: dict[str, int]


@dataclass(frozen=True)
class TermPlan:
    """What the retrieval lists get: ``names`` (the words left out), the sources they name, the
    text to embed and the text of the lexical query (the question itself when nothing was left out)."""

    question: str
    names: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    embed_text: str = ""
    lexical_text: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.names)

    def trace(self) -> dict:
        return {"names": list(self.names), "sources": list(self.sources), "embedded": self.embed_text}


def tokens(question: str) -> list[re.Match[str]]:
    return list(_TOKEN.finditer(question or ""))


def is_version(word: str) -> bool:
    return bool(_VERSION.fullmatch(word))


def name_like(word: str, position: int, cyrillic_question: bool) -> bool:
    """Written as a name: an acronym or a capitalised word past the question's first word, or a
    Latin-script word in a Cyrillic question ("во Foo", "по Acme"). Lower-case words of the
    question's own language are ordinary words, however common, and are never left out."""
    if is_version(word) or not any(ch.isalpha() for ch in word):
        return False
    if cyrillic_question and _LATIN.search(word) and not _CYRILLIC.search(word):
        return True
    if len(word) > 1 and word.isupper():
        return True
    return position > 0 and word[0].isupper()


def candidates(question: str) -> list[str]:
    """The question's name-like words and the versions written right after one, distinct, in
    order: the only words whose statistics are read."""
    cyr = bool(_CYRILLIC.search(question or ""))
    out: dict[str, None] = {}
    after_name = False
    for i, m in enumerate(tokens(question)):
        w = m.group()
        if name_like(w, i, cyr):
            out.setdefault(w, None)
            after_name = True
        elif after_name and is_version(w):
            out.setdefault(w, None)
        else:
            after_name = False
    return list(out)


@dataclass(frozen=True)
class CorpusTerms:
    """The policy (module docstring). ``share``: a source's share of documents holding the word;
    ``concentration``: the share of the word's documents inside that source; ``min_docs``: sources
    smaller than this say nothing (every word of a one-document source is in all its documents);
    ``min_specific``: content words the question must keep for the names to be left out."""

    share: float = 0.5
    concentration: float = 0.9
    min_docs: int = 5
    min_specific: int = 2
    sizes: dict[str, int] = field(default_factory=dict)

    def names_source(self, stat: TermStat) -> str | None:
        """The source ``stat``'s word names, or None."""
        total = sum(stat.docs.values())
        if total <= 0:
            return None
        for source, n in sorted(stat.docs.items(), key=lambda kv: (-kv[1], kv[0])):
            size = self.sizes.get(source, 0)
            if size < self.min_docs or n > size:
                continue
            if n / size >= self.share and n / total >= self.concentration:
                return source
            return None  # only the source holding most of the word's documents can be named by it
        return None

    def plan(self, question: str, stats: list[TermStat]) -> TermPlan:
        """Which names to leave out of ``question`` (pure); ``stats``: the candidates' statistics
        (:func:`candidates`). A definition question whose subject is the name ("Что такое
        Acme?") asks about the collection itself and keeps it."""
        by_word = {s.word: s for s in stats}
        named = {s.word: src for s in stats if not is_version(s.word) and (src := self.names_source(s))}
        if not named:
            return TermPlan(question, embed_text=question, lexical_text=question)
        toks = tokens(question)
        drop: list[re.Match[str]] = []
        source = None  # the source the last word named, while the words after it may be its version
        for m in toks:
            w = m.group()
            if w in named:
                drop.append(m)
                source = named[w]
            elif source is not None and is_version(w):
                # "Acme 4.0.3", "Foo 3": the collection's own edition is part of its name; an
                # edition its documents never mention ("Acme 5.0") is what the question asks about
                if by_word.get(w, TermStat(w, {})).docs.get(source, 0) > 0:
                    drop.append(m)
                else:
                    source = None
            else:
                source = None
        dropped = {m.start() for m in drop}
        specific = [
            m.group()
            for m in toks
            if m.start() not in dropped and len(m.group()) >= 3 and m.group().lower() not in STOP_WORDS
        ]
        subject = definition_subject(question)
        names_subject = subject is not None and {m.group() for m in tokens(subject)} <= {
            m.group() for m in drop
        }
        if len(specific) < self.min_specific or names_subject:
            return TermPlan(question, embed_text=question, lexical_text=question)
        text = _without(question, drop)
        sources = tuple(dict.fromkeys(named[m.group()] for m in drop if m.group() in named))
        return TermPlan(
            question,
            names=tuple(dict.fromkeys(m.group() for m in drop)),
            sources=sources,
            embed_text=text,
            lexical_text=text,
        )


#: the words that attach a collection's name to a question ("по Acme", "according to Acme", "во Foo"):
#: cut with the name, since alone they only dangle
_LEAD_IN = re.compile(r"(?:\b(?:according\s+to|согласно|по|во|в|in|per)\s+)$", re.IGNORECASE)


def _without(question: str, drop: list[re.Match[str]]) -> str:
    """``question`` with the dropped words (and the words attaching them) cut out and the spaces
    and punctuation they leave tidied."""
    out, pos = [], 0
    for m in drop:
        before = question[pos : m.start()]
        lead = _LEAD_IN.search(before)
        out.append(before[: lead.start()] if lead else before)
        pos = m.end()
    out.append(question[pos:])
    text = "".join(out)
    text = re.sub(r"(?<!\s)\s++([,.;:?!)])", r"\1", text)  # from a run's start only: linear
    text = re.sub(r"([,;:])(?:\s*[,;:])+", r"\1", text)
    text = re.sub(r"\(\s*\)", "", text)
    return re.sub(r"\s{2,}", " ", text).strip(" ,;:")
