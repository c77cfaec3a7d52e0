"""The retrieval contract's filters, compiled into SQL ``WHERE`` clauses, and its path patterns.

Pure functions: the clause texts are constants, every user value travels as a bound parameter,
and every pattern is LIKE-escaped, so ``%`` or ``_`` inside a path prefix match themselves.

Patterns (``exclude_like_patterns``, ``prefer_like_patterns``) are globs: ``*`` matches any run of
characters, ``?`` one character; everything else is literal, and a glob matches the whole path.
The exclusions filter in SQL (:func:`glob_pattern`, ``LIKE``); the preferences are a ranking signal
and match in Python (:class:`Glob`, the same rule, ``ranking.PathPreferences``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ragline.shared.config.settings import CodeSettings
from ragline.shared.sdk.contracts import SearchRequest

#: the layer ingestion stores test files in (``ingest/layers.py`` decides, by ``RAGLINE_CODE_TEST_GLOBS``):
#: a row is a test when it was stored there, so search and ingestion never judge a path differently
DEFAULT_TESTS_LAYER = CodeSettings.model_fields["tests_layer"].default


def like_escape(text: str) -> str:
    """Escape LIKE's wildcards and its escape character (Postgres' default escape is ``\\``)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def prefix_pattern(prefix: str) -> str:
    return like_escape(prefix) + "%"


def glob_pattern(glob: str) -> str:
    """``*`` → ``%``, ``?`` → ``_``; every other character, ``%`` and ``_`` included, is literal."""
    return "".join("%" if ch == "*" else "_" if ch == "?" else like_escape(ch) for ch in glob)


def glob_matches(path: str, glob: str) -> bool:
    """Whether ``path`` matches ``glob`` (:class:`Glob`; one glob against many paths: compile it once)."""
    return Glob(glob).matches(path)


class Glob:
    """A glob compiled to match paths as ``path LIKE glob_pattern(glob)`` does in Postgres (case and
    every character as written, ``?`` one character, the whole path), with no regex and no
    backtracking: the pieces between ``*`` have a fixed length; the first must start the path, the
    last end it, and each one between is taken at its leftmost place after the previous one (a
    later place never leaves more room for the rest), so a path is read once, whatever the glob."""

    __slots__ = ("first", "last", "middle", "size", "star")

    def __init__(self, glob: str) -> None:
        first, *rest = glob.split("*")
        self.star = bool(rest)
        self.first = _Piece(first)
        self.last = _Piece(rest[-1] if rest else "")
        self.middle = tuple(_Piece(p) for p in rest[:-1] if p)
        #: the fewest characters a matching path holds
        self.size = len(glob) - glob.count("*")

    def matches(self, path: str) -> bool:
        if not self.star:
            return len(path) == self.size and self.first.at(path, 0)
        end = len(path) - len(self.last.text)
        if len(path) < self.size or not (self.first.at(path, 0) and self.last.at(path, end)):
            return False
        at = len(self.first.text)
        for piece in self.middle:
            at = piece.find(path, at, end)
            if at < 0:
                return False
        return True


class _Piece:
    """The characters between two ``*`` of a glob (``?`` any one), matched at a place or found."""

    __slots__ = ("anchor", "done", "masks", "text", "wild")

    def __init__(self, text: str) -> None:
        self.text = text
        self.wild = 0  # a bit per "?" of the text
        self.masks: dict[str, int] = {}  # a bit per place of each other character
        for i, ch in enumerate(text):
            if ch == "?":
                self.wild |= 1 << i
            else:
                self.masks[ch] = self.masks.get(ch, 0) | 1 << i
        self.done = 1 << (len(text) - 1) if text else 0
        #: the longest run of characters without "?", and where it starts in the piece
        runs = text.split("?")
        longest = max(range(len(runs)), key=lambda k: len(runs[k]))
        self.anchor = (runs[longest], sum(len(r) + 1 for r in runs[:longest]))

    def at(self, path: str, i: int) -> bool:
        """Whether the piece matches ``path`` at ``i``."""
        if not self.wild:
            return path.startswith(self.text, i)
        if i + len(self.text) > len(path):
            return False
        return all(p == "?" or p == t for p, t in zip(self.text, path[i : i + len(self.text)], strict=True))

    def find(self, path: str, start: int, stop: int) -> int:
        """Where the leftmost match inside ``path[start:stop]`` ends, or -1. A literal piece is
        ``str.find``; one holding ``?`` is read in one pass by the shift-and automaton (bit k of the
        state: the piece's first k + 1 characters match the text ending here), from the first place
        its longest literal run is found."""
        if not self.wild:
            found = path.find(self.text, start, stop)
            return found + len(self.text) if found >= 0 else -1
        run, offset = self.anchor
        if run:  # no match starts before the first place its longest literal run fits (str.find)
            found = path.find(run, start + offset, stop - (len(self.text) - offset - len(run)))
            if found < 0:
                return -1
            start = found - offset
        state = 0
        for i in range(start, stop):
            state = ((state << 1) | 1) & (self.masks.get(path[i], 0) | self.wild)
            if state & self.done:
                return i + 1
        return -1


def normalize_path(path: str) -> str:
    p = path.strip().replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    return p


def clean_paths(paths: list[str]) -> list[str]:
    """Normalised, empty ones dropped, duplicates removed, order kept."""
    out: dict[str, None] = {}
    for p in paths:
        n = normalize_path(p)
        if n:
            out.setdefault(n, None)
    return list(out)


@dataclass
class CompiledFilters:
    """``where``: extra conditions ANDed after tenant and ACL, and their bound parameters."""

    where: list[str] = field(default_factory=list)
    params: dict[str, object] = field(default_factory=dict)

    def where_sql(self) -> str:
        return "".join(f" AND {w}" for w in self.where)


def compile_filters(req: SearchRequest) -> CompiledFilters:
    """The request's layers, included and excluded paths as SQL conditions (its path preferences
    are ranking signals, computed on the rows: ``ranking.PathPreferences``)."""
    f = CompiledFilters()
    if req.layers:
        f.where.append("c.layer = ANY(%(f_layers)s::text[])")
        f.params["f_layers"] = list(req.layers)
    include = [prefix_pattern(p) for p in req.path_prefixes if p]
    if include:
        f.where.append("c.path LIKE ANY(%(f_include)s::text[])")
        f.params["f_include"] = include
    exclude = [prefix_pattern(p) for p in req.exclude_path_prefixes if p]
    exclude += [glob_pattern(g) for g in req.exclude_like_patterns if g]
    if exclude:
        f.where.append("NOT (c.path LIKE ANY(%(f_exclude)s::text[]))")
        f.params["f_exclude"] = exclude
    return f


_TERM = re.compile(r"\w", re.UNICODE)
# a word may carry stress marks (U+0300, U+0301), as Russian Wikipedia text and questions often do
_WORD = re.compile(r"[\w\u0300\u0301]+", re.UNICODE)
_STRESS = re.compile(r"[\u0300\u0301]")


def has_terms(query: str) -> bool:
    """False when the text cannot yield a single lexeme (no word characters at all)."""
    return bool(_TERM.search(query or ""))


def cap_terms(query: str, max_terms: int) -> str:
    """The text up to its ``max_terms``-th distinct word (case-insensitive), the rest cut off.

    Each distinct term is one more posting list to read from the GIN index and one more lexeme
    to rank on every matching row, so a pasted page must not become a thousand-term query."""
    seen: set[str] = set()
    for m in _WORD.finditer(query or ""):
        key = _STRESS.sub("", m.group()).lower()
        if key in seen or key == "or":
            continue
        if len(seen) == max_terms:
            return query[: m.start()].rstrip(" \t\r\n-")
        seen.add(key)
    return query


def lexical_query(query: str, match: str = "any", max_terms: int | None = None) -> str:
    """The text handed to ``websearch_to_tsquery``, with at most ``max_terms`` distinct words.

    ``all``: the user's text as is (every term required; quotes and ``-`` work).
    ``any``: the words joined by ``or``, like BM25, so one missing word does not empty the result;
    a word with stress marks also matches without them ("госуда́рство" or "государство").
    """
    if max_terms is not None:
        query = cap_terms(query, max_terms)
    if match == "all":
        return query
    words: dict[str, None] = {}
    for w in _WORD.findall(query or ""):
        if w.lower() == "or":
            continue
        words.setdefault(w, None)
        bare = _STRESS.sub("", w)
        if bare and bare != w:
            words.setdefault(bare, None)
    return " or ".join(words)
