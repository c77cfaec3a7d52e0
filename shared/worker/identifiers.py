"""Identifier-aware lexical terms for code: one tokenizer for what is indexed and what is asked.

Questions about code name identifiers (``getUserName``, ``register_hook``, ``HTTPAdapter.send``)
that a natural-language text-search configuration cannot see: Postgres' parser cuts
``register_hook`` at the underscore and keeps ``getUserName`` as one word, and no configuration
splits camelCase. So the terms are computed here, in Python, for both sides: the ingest pipeline
writes a chunk's terms as a ``tsvector`` literal (``chunks.code_tsv``, migration 0008) and the
query side sends a question's terms as a ``tsquery`` literal. Both literals are cast, never parsed
by a text-search configuration, so the two sides always agree.

An identifier yields itself whole (lower case, dots kept: ``httpadapter.send``), each dotted
component whole, and the parts of each component split at underscores, camelCase humps and
digits (``http``, ``adapter``, ``send``). English stop words, one-letter parts and the keywords
every file repeats are dropped. Definition names and path segments carry weight ``A``, the rest of
a chunk's identifiers the default weight ``D``, so a chunk that defines ``register_hook`` ranks
above one that only calls it.

Pure functions, no dependencies: the ingest and the query layers both import this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

#: a dotted identifier: ``a``, ``a_b``, ``A.b.C``
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
#: humps of one component: ``HTTPAdapter`` -> HTTP, Adapter; ``getUserName2`` -> get, User, Name, 2
_HUMP = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

#: Postgres keeps at most 256 positions per lexeme and none above 16383
MAX_POSITIONS = 255
MAX_POSITION = 16383
MAX_LEXEME = 200

STOP_WORDS = frozenset(
    """
    a an and are as at be been but by can could did do does for from had has have how if in into is it
    its of on or so than that the their then there these they this those to was were what when where
    which while who why will with would you your we our not no yes all any each
    def class return self cls this new var let const function func fn pub public private protected
    static void int str bool none null nil true false import package end begin elif else
    """.split()
)


def component_parts(component: str) -> list[str]:
    """The lower-case parts of one identifier component (underscores, camelCase, digits)."""
    out: list[str] = []
    for piece in component.split("_"):
        out.extend(h.lower() for h in _HUMP.findall(piece))
    return out


_parts = component_parts


def _keep(term: str) -> bool:
    return len(term) > 1 and term not in STOP_WORDS and not term.isdigit()


def identifier_terms(text: str) -> Iterator[list[str]]:
    """For each identifier in ``text``, in order: its terms (whole, components, parts), deduplicated.

    An identifier all of whose terms are stop words yields nothing.
    """
    for match in _IDENT.finditer(text):
        word = match.group(0).strip(".")
        terms: dict[str, None] = {}
        components = word.split(".")
        if len(components) > 1:
            terms[word.lower()] = None
        for comp in components:
            whole = comp.strip("_").lower()
            if whole:
                terms[whole] = None
            parts = _parts(comp)
            if len(parts) > 1:
                terms.update(dict.fromkeys(parts))
        kept = [t[:MAX_LEXEME] for t in terms if _keep(t)]
        if kept:
            yield kept


def path_terms(path: str) -> list[str]:
    """Terms of a file path: each directory and the file's name and stem, with their parts."""
    segments = [s for s in path.replace("\\", "/").split("/") if s]
    if not segments:
        return []
    *dirs, name = segments
    stem = name.rsplit(".", 1)[0] if "." in name.strip(".") else name
    out: dict[str, None] = {}
    if stem != name and _keep(name.lower()):
        out[name.lower()[:MAX_LEXEME]] = None
    for seg in [*dirs, stem]:
        for terms in identifier_terms(seg.replace("-", "_")):
            out.update(dict.fromkeys(terms))
    return list(out)


def _quote(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def code_tsvector(content: str, names: Iterable[str] = (), path: str = "") -> str:
    """A ``tsvector`` literal of a code chunk: ``names`` (definition names, dotted symbol paths) and
    the ``path``'s terms at weight A, every identifier of ``content`` at the default weight.
    Identifiers are numbered in order; an identifier's terms share its position."""
    positions: dict[str, list[int]] = {}
    weights: dict[str, str] = {}
    pos = 0

    def add(terms: list[str], weight: str) -> None:
        nonlocal pos
        pos = min(pos + 1, MAX_POSITION)
        for t in terms:
            seen = positions.setdefault(t, [])
            if len(seen) < MAX_POSITIONS and (not seen or seen[-1] != pos):
                seen.append(pos)
            if weight == "A":
                weights[t] = "A"

    for name in names:
        for terms in identifier_terms(name):
            add(terms, "A")
    if path:
        terms = path_terms(path)
        if terms:
            add(terms, "A")
    for terms in identifier_terms(content):
        add(terms, "D")
    return " ".join(
        f"{_quote(t)}:" + ",".join(f"{p}{weights.get(t, '')}" for p in ps) for t, ps in positions.items()
    )


def code_terms(question: str, max_terms: int = 32) -> list[str]:
    """The terms of the identifiers in ``question`` (at most ``max_terms``, every identifier whole
    before any of their parts), as :func:`code_tsvector` writes them."""
    groups = list(identifier_terms(question))
    terms: dict[str, None] = {}
    for group in groups:
        terms.setdefault(group[0], None)
    for group in groups:
        terms.update(dict.fromkeys(group))
    return list(terms)[:max_terms]


def or_tsquery(terms: Iterable[str]) -> str:
    """A ``tsquery`` literal OR-ing ``terms`` as they are (no text-search configuration); '' for none."""
    return " | ".join(_quote(t) for t in terms)


def code_tsquery(question: str, max_terms: int = 32) -> str:
    """A ``tsquery`` literal OR-ing :func:`code_terms`; '' when the question names no identifier
    (the caller runs no code search)."""
    return or_tsquery(code_terms(question, max_terms))


def whole_tsquery(question: str, max_terms: int = 32) -> str:
    """A ``tsquery`` literal OR-ing the identifiers of ``question`` as written (``httpadapter.send``,
    ``register_hook``), for a second rank: Postgres' ranks know no term rarity, so without it a short
    chunk matching the parts would outrank the one matching the whole name."""
    whole = dict.fromkeys(group[0] for group in identifier_terms(question))
    return or_tsquery(list(whole)[:max_terms])
