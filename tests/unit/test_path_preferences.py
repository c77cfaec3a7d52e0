"""The request's path preferences match as the retrieval contract's globs do
(:func:`ragline.query.retrieval.filters.glob_matches`): ``*`` any run, ``?`` one character, every
other character literal, the whole path; and in time linear in the path, whatever the pattern
(it comes from the request). The same rule against Postgres' ``LIKE`` on the real database:
tests/integration/test_path_preferences.py."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragline.query.retrieval.filters import glob_matches

# the characters a glob treats specially, the ones LIKE or a regex would, and a multi-byte letter
ALPHABET = "ab/.*?%_\\[]я"


def reference(path: str, glob: str) -> bool:
    """The glob rule as a regex over trusted test data (the code under test uses none)."""
    parts = ("." if ch == "?" else ".*" if ch == "*" else re.escape(ch) for ch in glob)
    return re.fullmatch("".join(parts), path, re.S) is not None


@pytest.mark.parametrize(
    ("path", "glob", "matches"),
    [
        ("src/app/main.py", "*/main.py", True),
        ("main.py", "*/main.py", False),  # the "/" is literal
        ("docs/100%_done/a.md", "docs/100%*", True),
        ("docs/100x-done/a.md", "docs/100%*", False),  # "%" is a percent sign, not "anything"
        ("src/a_b.py", "src/a_b.py", True),
        ("src/aXb.py", "src/a_b.py", False),  # "_" is an underscore, not one character
        ("src/a[b].py", "src/a[b].py", True),  # no character classes
        ("src/ab.py", "src/a[b].py", False),
        ("C:\\x\\y", "C:\\*", True),  # a backslash is literal, not an escape
        ("tests/тест.py", "tests/????.py", True),  # "?" is one character, not one byte
        ("tests/тест.py", "tests/???.py", False),
        ("Docs/A.md", "docs/*", False),  # case as written
        ("", "*", True),
        ("", "", True),
        ("a", "", False),
        ("aa", "a*a", True),
        ("a", "a*a", False),  # the first and last pieces may not overlap
        ("abcabd", "*ab?*d", True),
        ("abcab", "*ab?*d", False),
        ("xaaab", "x**a?b", True),
    ],
)
def test_a_glob_matches_the_whole_path_with_only_star_and_question_mark_special(path, glob, matches):
    assert glob_matches(path, glob) is matches
    assert reference(path, glob) is matches


@settings(max_examples=3000, deadline=None)
@given(st.text(ALPHABET, max_size=14), st.text(ALPHABET, max_size=8))
def test_the_matcher_agrees_with_the_glob_rule(path, glob):
    assert glob_matches(path, glob) is reference(path, glob)


@settings(max_examples=500, deadline=None)
@given(st.text(ALPHABET, max_size=14), st.lists(st.text(ALPHABET, max_size=4), min_size=1, max_size=4))
def test_a_path_matches_the_glob_its_own_pieces_make(path, cuts):
    """Built to match: a glob of the path's own text with pieces replaced by ``*`` or ``?``."""
    glob, rest = "", path
    for cut in cuts:
        head, sep, rest = rest.partition(cut) if cut else ("", "", rest)
        glob += head.replace("*", "?") + ("*" if sep else "")
    glob += rest.replace("*", "?")
    assert glob_matches(path, glob)


def _slowest(path: str, globs: list[str], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for g in globs:
            glob_matches(path, g)
        best = min(best, time.perf_counter() - t)
    return best


def test_the_matcher_reads_a_path_in_linear_time_whatever_the_glob():
    """The inputs that make a backtracking matcher quadratic or worse (many pieces that almost
    match everywhere, ``?`` runs, a last piece that fails): eight times the path takes well under
    the 64 times a quadratic matcher would (judged by growth, not by a wall-clock threshold)."""

    def globs(n: int) -> list[str]:
        piece = "a" * (n // 64) + "?b"
        return [
            "*" + "*".join([piece] * 30) + "*",  # 30 pieces with "?" that never complete
            "*a" * (n // 4) + "b",  # many pieces, then a last piece that fails
            "*" + "a?" * (n // 4) + "b*",  # one long piece with "?" tried at every place
            "*" + "a" * (n // 2) + "b*",  # one long literal piece
            "?" * (n // 2) + "*" + "?" * (n // 2 - 1) + "b",
        ]

    short, long = 512, 4096
    t_short = _slowest("a" * short, globs(short))
    t_long = _slowest("a" * long, globs(long))
    assert t_long < 1.0
    assert t_long <= 32 * max(t_short, 1e-3), (t_short, t_long)
