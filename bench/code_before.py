"""The file ranking as it was before the lexical list's vote on the file order, to measure against.

Until the vote (:func:`ragline.query.retrieval.file_rank.voted`) the file list was the fused hits'
file order with each single list's first files floored within 2n + 1 places, the lexical list in
its raw order (no structure). Its module is read from git at :data:`BEFORE` and run on today's
hits, so a comparison holds the retrieval fixed and differs in the file ranking alone: the
evaluation scores it beside the default (:mod:`bench.code_eval_inprocess`) and the latency bench
swaps it into the search (:mod:`bench.code_search_latency`).
"""

from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from ragline.shared.sdk.contracts import FileHit, Hit

#: the last commit before the vote
BEFORE = "10005b36ed774ff5fe4d84a0feecc316548f40c9"
#: the name the evaluation and the docs' tables give this file ranking
LABEL = "before the vote (the floors alone)"
ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> types.ModuleType:
    """``query/retrieval/<name>.py`` at :data:`BEFORE`, imported under a name of its own."""
    path = f"query/retrieval/{name}.py"
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    mod = types.ModuleType(f"ragline.query.retrieval.{name}_before_vote")
    sys.modules[mod.__name__] = mod  # dataclasses resolve the module's annotations through it
    exec(compile(source, f"{BEFORE[:7]}:{path}", "exec"), mod.__dict__)
    return mod


@cache
def module() -> types.ModuleType:
    """The file ranking at :data:`BEFORE` (its weights were :data:`file_rank.WEIGHTS` there)."""
    return _load("file_rank")


@cache
def structure_module() -> types.ModuleType:
    """The structural ranking at :data:`BEFORE` (its name matching, ``spells``, scanned every window of
    the question's words)."""
    return _load("structure")


def rank(
    hits: Sequence[Hit | dict], question: str, source: str, leads: Sequence[Sequence[Hit | dict]]
) -> list:
    """The old :func:`rank_files` with its shipped weights; ``leads``: the vector and the raw
    lexical list, in their order (their first files are what the floors keep)."""
    old = module()
    return old.rank_files(hits, question, old.WEIGHTS, source, leads)


def ranked_paths(
    hits: Sequence[Hit | dict], question: str, source: str, leads: Sequence[Sequence[Hit | dict]]
) -> list[str]:
    return [f.path for f in rank(hits, question, source, leads)]


def response_files(hits: list[Hit], question: str, leads: Sequence[Sequence[Hit]]) -> list[FileHit]:
    """What the old search answered as its ``files``."""
    return [
        FileHit(
            path=f.path,
            score=f.score,
            chunks=round(f.chunks, 8),
            frame=f.frame,
            first_hit=f.best,
            reserved=f.reserved,
        )
        for f in rank(hits, question, "", leads)
    ]


def checkout() -> str:
    """The commit of the code measured, ``+ changes`` when the package's folders differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout

    dirty = git("status", "--porcelain", "--", "ingest", "query", "shared", "ragline").strip()
    return git("rev-parse", "HEAD").strip() + (" + changes" if dirty else "")
