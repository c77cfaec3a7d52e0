"""Nothing a user reads tells them to set a variable that is no longer read.

The old names are the settings' own table (:data:`ragline.shared.config.renamed.RENAMED`), so a name
added to it later is caught without touching this test. Read are the pages and deployment files an
operator copies from (docs/, deploy/, examples/, README.md, the Makefile) and every string literal of
the code (error messages, CLI help, docstrings) but the table itself. A line that says it is about
old names (``deprecated``, ``old``, ``older``, ``renamed``: the upgrade note) may name one.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from ragline.shared.config.renamed import RENAMED

ROOT = Path(__file__).resolve().parents[2]
READ_BY_OPERATORS = ("docs/", "deploy/", "examples/", "README.md", "Makefile")
CODE = ("shared/", "ingest/", "query/", "ragline/", "bench/", "examples/")
_DEPRECATED = re.compile(
    r"(?<![A-Z0-9_])(" + "|".join(sorted(map(re.escape, RENAMED), key=len, reverse=True)) + r")(?![A-Z0-9_])"
)
_COMPATIBILITY_NOTE = re.compile(r"\b(deprecated|old|older|renamed)\b", re.IGNORECASE)


def _tracked(*prefixes: str) -> list[str]:
    """The repository's text files under ``prefixes``."""
    out = subprocess.run(["git", "ls-files", *prefixes], cwd=ROOT, capture_output=True, text=True, check=True)
    return [path for path in out.stdout.splitlines() if _is_text(ROOT / path)]


def _is_text(path: Path) -> bool:
    try:
        path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return True


def offending_lines(text: str) -> list[str]:
    """The lines of ``text`` that name a deprecated variable outside a compatibility note (pure)."""
    return [
        line.strip()
        for line in text.splitlines()
        if _DEPRECATED.search(line) and not _COMPATIBILITY_NOTE.search(line)
    ]


def code_strings(source: str) -> list[str]:
    """Every string literal of a module (f-string parts included) (pure)."""
    return [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_the_check_sees_an_old_name_and_lets_a_compatibility_note_pass():
    assert offending_lines("set `RAGLINE_EMBEDDER=voyage`") == ["set `RAGLINE_EMBEDDER=voyage`"]
    assert offending_lines("set RAGLINE_EMBED_PROVIDER=voyage; RAGLINE_EMBEDDER_X is not a setting") == []
    assert offending_lines("the old name `RAGLINE_EMBEDDER` is still read") == []
    strings = code_strings('x = 1\nraise ValueError(f"{n} pages (RAGLINE_PDF_MAX_PAGES)")\n')
    assert [line for s in strings for line in offending_lines(s)] == ["pages (RAGLINE_PDF_MAX_PAGES)"]


@pytest.mark.parametrize("path", [p for p in _tracked(*READ_BY_OPERATORS) if p != "docs/upgrading.md"])
def test_operator_files_name_the_derived_variables(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    assert offending_lines(text) == [], (
        f"{path}: name the derived variables (shared/config/renamed.py maps old to new)"
    )


@pytest.mark.parametrize(
    "path", [p for p in _tracked(*CODE) if p.endswith(".py") and p != "shared/config/renamed.py"]
)
def test_code_strings_name_the_derived_variables(path):
    found = [
        line for s in code_strings((ROOT / path).read_text(encoding="utf-8")) for line in offending_lines(s)
    ]
    assert found == [], f"{path}: name the derived variables (shared/config/renamed.py maps old to new)"
