"""Path globs: one matching rule for every decision ingestion makes from a path in a repository.

A git source's include and exclude globs and the default skip list (``ingest/git.py``) and the test
globs that send a source file to the tests layer (``ingest/layers.py``, ``RAGLINE_CODE_TEST_GLOBS``)
all match here, so a glob means the same wherever it is written. A pattern with a ``/`` matches the
whole path, one without matches the file name; ``*`` also crosses ``/`` and a leading ``**/`` may
match nothing. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase


def glob_match(path: str, pattern: str) -> bool:
    """Whether ``path`` (inside its repository, ``/``-separated) matches ``pattern``."""
    if "/" not in pattern.rstrip("/"):
        return fnmatchcase(path.rsplit("/", 1)[-1], pattern)
    if pattern.endswith("/"):
        pattern += "*"
    if fnmatchcase(path, pattern):
        return True
    return pattern.startswith("**/") and fnmatchcase(path, pattern[3:])


def matches_any(path: str, patterns: Iterable[str]) -> bool:
    return any(glob_match(path, g) for g in patterns)
