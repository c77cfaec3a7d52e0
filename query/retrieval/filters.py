"""The retrieval contract's filters, compiled into SQL ``WHERE`` clauses and ranking columns.

Pure functions: the clause texts are constants, every user value travels as a bound parameter,
and every pattern is LIKE-escaped, so ``%`` or ``_`` inside a path prefix match themselves.

Patterns (``exclude_like_patterns``, ``prefer_like_patterns``) are globs: ``*`` matches any run of
characters, ``?`` one character; everything else is literal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ragline.shared.config.settings import CodeSettings
from ragline.shared.sdk.contracts import SearchRequest

#: the layer ingestion stores test files in (``ingest/layers.py`` decides, by ``RAGLINE_CODE_TEST_GLOBS``):
#: a row is a test when it was stored there, so search and ingestion never judge a path differently
DEFAULT_TESTS_LAYER = CodeSettings.model_fields["tests_layer"].default
#: added to the fused score of a hit matching the request's ``prefer_path_prefixes`` /
#: ``prefer_like_patterns``, in RRF units (one rank near the top is ~0.0003): it lifts a preferred
#: hit over a few ranks, not over the whole list (0.2; a setting until 0.1)
PREFER_BONUS = 0.005
#: subtracted from the fused score of a test file's hit when the request sets ``prefer_non_tests``
TEST_PENALTY = 0.005


def like_escape(text: str) -> str:
    """Escape LIKE's wildcards and its escape character (Postgres' default escape is ``\\``)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def prefix_pattern(prefix: str) -> str:
    return like_escape(prefix) + "%"


def glob_pattern(glob: str) -> str:
    """``*`` → ``%``, ``?`` → ``_``; every other character, ``%`` and ``_`` included, is literal."""
    return "".join("%" if ch == "*" else "_" if ch == "?" else like_escape(ch) for ch in glob)


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
    """``where``: extra conditions ANDed after tenant and ACL; ``columns``: ranking columns."""

    where: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    params: dict[str, object] = field(default_factory=dict)

    def where_sql(self) -> str:
        return "".join(f" AND {w}" for w in self.where)

    def columns_sql(self) -> str:
        return "".join(f", {c}" for c in self.columns)


def compile_filters(
    req: SearchRequest,
    prefer_bonus: float,
    test_penalty: float,
    tests_layer: str = DEFAULT_TESTS_LAYER,
) -> CompiledFilters:
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
    prefer = [prefix_pattern(p) for p in req.prefer_path_prefixes if p]
    prefer += [glob_pattern(g) for g in req.prefer_like_patterns if g]
    if prefer:
        f.columns.append(
            "CASE WHEN c.path LIKE ANY(%(f_prefer)s::text[]) THEN %(f_bonus)s::float8 ELSE 0.0 END"
            " AS prefer_bonus"
        )
        f.params.update(f_prefer=prefer, f_bonus=prefer_bonus)
    else:
        f.columns.append("0.0::float8 AS prefer_bonus")
    if req.prefer_non_tests:
        f.columns.append(
            "CASE WHEN c.layer = %(f_tests)s THEN %(f_penalty)s::float8 ELSE 0.0 END AS test_penalty"
        )
        f.params.update(f_tests=tests_layer, f_penalty=test_penalty)
    else:
        f.columns.append("0.0::float8 AS test_penalty")
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
