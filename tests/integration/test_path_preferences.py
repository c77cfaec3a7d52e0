"""The request's path preferences, computed by the search's ranking policy from each row's path and
layer (``ranking.PathPreferences``), against the SQL expression every retrieval statement computed
them with until 0.2, evaluated by the real Postgres of the test stack: over a matrix of patterns and
paths (the characters LIKE, a regex and a glob treat specially, multi-byte letters, case), each
pair gets the same answer, so the rule cannot drift from the exclusions' ``LIKE`` unnoticed."""

from __future__ import annotations

import random

import pytest

from ragline.query.retrieval.filters import glob_matches, glob_pattern, prefix_pattern
from ragline.query.retrieval.ranking import PREFER_BONUS, TEST_PENALTY, PathPreferences
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.contracts import SearchRequest

#: the columns of 0.1's statements (``filters.compile_filters``), over a list of rows
OLD_COLUMNS = """
SELECT r.i,
       CASE WHEN r.path LIKE ANY(%(f_prefer)s::text[]) THEN %(f_bonus)s::float8 ELSE 0.0 END AS prefer_bonus,
       CASE WHEN r.layer = %(f_tests)s THEN %(f_penalty)s::float8 ELSE 0.0 END AS test_penalty
FROM unnest(%(paths)s::text[], %(layers)s::text[]) WITH ORDINALITY AS r(path, layer, i)
ORDER BY r.i
"""
#: each glob's LIKE pattern against each path
PAIRS = """
SELECT g.j, r.i, r.path LIKE g.pattern AS matches
FROM unnest(%(patterns)s::text[]) WITH ORDINALITY AS g(pattern, j),
     unnest(%(paths)s::text[]) WITH ORDINALITY AS r(path, i)
"""

ALPHABET = "ab/.*?%_\\[]яЁ"
PATHS = [
    "",
    "a",
    "src/app/main.py",
    "src/app/main_test.py",
    "src/app/mainXtest.py",
    "docs/100%_done/readme.md",
    "docs/100x-done/readme.md",
    "Docs/Guide.MD",
    "docs/guide.md",
    "tests/тест_клиента.py",
    "tests/Тест.py",
    "C:\\repo\\src\\a.py",
    "src/a[b].py",
    "src/ab.py",
    "src/a*b?.py",
    "web/docs/old/ё.md",
]
GLOBS = [
    "*",
    "?",
    "*/main.py",
    "*_test.py",
    "src/app/main?test.py",
    "docs/100%*",
    "docs/100_*",
    "docs/*.md",
    "docs/*.MD",
    "tests/????_*.py",
    "tests/?ест*",
    "C:\\*",
    "*\\src\\?.py",
    "src/a[b].py",
    "src/a*b?.py",
    "*/*/*",
    "**",
    "*a*a*a*",
    "web/docs/old/?.md",
]
PREFIXES = ["src/", "src/app/main_", "docs/100%_", "docs/100%", "C:\\", "tests/т", "Docs", "web/docs/old/ё"]


def _random_texts(rnd: random.Random, n: int, size: int) -> list[str]:
    return ["".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, size))) for _ in range(n)]


def test_the_glob_rule_is_postgres_like_of_the_translated_pattern(conn):
    rnd = random.Random(51)
    paths = PATHS + _random_texts(rnd, 80, 10)
    globs = GLOBS + _random_texts(rnd, 300, 6)
    rows = conn.execute(PAIRS, {"patterns": [glob_pattern(g) for g in globs], "paths": paths}).fetchall()
    assert len(rows) == len(paths) * len(globs)
    drift = [
        (globs[r["j"] - 1], paths[r["i"] - 1], r["matches"])
        for r in rows
        if glob_matches(paths[r["i"] - 1], globs[r["j"] - 1]) is not r["matches"]
    ]
    assert not drift, drift[:10]
    assert sum(r["matches"] for r in rows) > 500  # the matrix holds matches, not only misses


@pytest.mark.parametrize(
    ("prefixes", "globs", "non_tests"),
    [
        ([], [], False),
        ([], [], True),
        (PREFIXES, [], False),
        ([], GLOBS[2:], True),
        (PREFIXES[:3], GLOBS[4:9], True),
        (["", "src/"], ["", "*.md"], False),
    ],
)
def test_the_policy_s_bonus_and_penalty_are_the_old_columns(conn, prefixes, globs, non_tests):
    settings = get_settings()
    tests = settings.code.tests_layer
    req = SearchRequest(
        query="q",
        tenant="t",
        groups=["g"],
        prefer_path_prefixes=prefixes,
        prefer_like_patterns=globs,
        prefer_non_tests=non_tests,
    )
    layers = [tests if i % 3 == 0 else "docs" for i in range(len(PATHS))]
    prefer = [prefix_pattern(p) for p in prefixes if p] + [glob_pattern(g) for g in globs if g]
    old = conn.execute(
        OLD_COLUMNS,
        {
            "f_prefer": prefer,
            "f_bonus": PREFER_BONUS,
            "f_tests": tests if non_tests else None,
            "f_penalty": TEST_PENALTY,
            "paths": PATHS,
            "layers": layers,
        },
    ).fetchall()
    paths = PathPreferences.of(req, settings)
    new = [paths.signals({"path": p, "layer": layer}) for p, layer in zip(PATHS, layers, strict=True)]
    assert [{"prefer_bonus": r["prefer_bonus"], "test_penalty": r["test_penalty"]} for r in old] == new
