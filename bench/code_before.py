"""The file ranking as it was before each single list's first files kept a place, to measure against.

Until commit 15d373c the file list kept a place only for the lexical list's first two files (the
"lexical reserve": the n-th within n + 3 places). Its module is read from git at
:data:`BEFORE_FLOORS` (15d373c's parent) and run on today's hits, so a comparison holds the
retrieval fixed and differs in the file ranking alone: the evaluation scores it beside the default
(:mod:`bench.code_eval_inprocess`) and the latency bench swaps it into the search
(:mod:`bench.code_search_latency`).
"""

from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from ragline.shared.sdk.contracts import FileHit, Hit

BEFORE_FLOORS = "2667d7d0d84543ab90d504ab8a7055274006e6e6"
#: the file ranking's settings at that commit (RAGLINE_CODE_FILE_RANK_*: decay, depth, frame bonus,
#: lexical reserve and slack)
WEIGHTS = {"decay": 0.25, "depth": 3, "frame": 0.5, "reserve": 2, "reserve_slack": 3}
ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> types.ModuleType:
    """``query/retrieval/<name>.py`` at :data:`BEFORE_FLOORS`, imported under a name of its own."""
    path = f"query/retrieval/{name}.py"
    source = subprocess.run(
        ["git", "show", f"{BEFORE_FLOORS}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    mod = types.ModuleType(f"ragline.query.retrieval.{name}_before_floors")
    sys.modules[mod.__name__] = mod  # dataclasses resolve the module's annotations through it
    exec(compile(source, f"{BEFORE_FLOORS[:7]}:{path}", "exec"), mod.__dict__)
    return mod


@cache
def module() -> types.ModuleType:
    """The file ranking at :data:`BEFORE_FLOORS`, reading the issue text with the structure module
    of the same commit (what it names, paths, definitions), whatever today's has become."""
    mod = _load("file_rank")
    mod.structure = _load("structure")
    return mod


def rank(hits: Sequence[Hit | dict], question: str, source: str, lexical: Sequence[Hit | dict]) -> list:
    """The old :func:`rank_files` with its default weights; ``lexical``: the lexical list (its
    first files are what the reserve keeps)."""
    old = module()
    return old.rank_files(hits, question, old.FileWeights(**WEIGHTS), source, lexical=lexical)


def ranked_paths(
    hits: Sequence[Hit | dict], question: str, source: str, lexical: Sequence[Hit | dict]
) -> list[str]:
    return [f.path for f in rank(hits, question, source, lexical)]


def lexical_leads(leads: Sequence[Sequence[Hit]]) -> Sequence[Hit]:
    """The lexical list's lead rows out of a response's ``list_leads`` (vector, lexical): none
    unless both lists ran, as the old search sent them."""
    return leads[1] if len(leads) == 2 else ()


def response_files(hits: list[Hit], question: str, lexical: Sequence[Hit]) -> list[FileHit]:
    """What the old search answered as its ``files``."""
    return [
        FileHit(
            path=f.path,
            score=f.score,
            chunks=round(f.chunks, 8),
            path_match=f.path_match,
            frame=f.frame,
            imports=f.imports,
            definition=round(f.definition, 8),
            first_hit=f.best,
            reserved=f.reserved,
        )
        for f in rank(hits, question, "", lexical)
    ]


def checkout() -> str:
    """The commit of the code measured, ``+ changes`` when the package's folders differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout

    dirty = git("status", "--porcelain", "--", "ingest", "query", "shared", "ragline").strip()
    return git("rev-parse", "HEAD").strip() + (" + changes" if dirty else "")
