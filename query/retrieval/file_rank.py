"""Files ranked from chunk hits and the issue text: the answer to a localisation question is a file.

A file's first hit alone (the order the chunks came in) throws away most of the evidence a long
issue gives: a file with several matching chunks is likelier than one with a single lucky match,
and a traceback's frames point at a file more directly than any text similarity.
:func:`rank_files` aggregates, per file:

* **chunks**: the file's chunk scores, normalised by the best hit's, summed with diminishing
  weights (``decay`` to the power of the chunk's place in its file, the first ``depth`` chunks);
* **frame**: a traceback frame (``File ".../pkg/io/cards/card.py", line 12, in value``) is in
  the file, the deepest frame weighing most (the error is raised there; the outer frames are
  the user's and the callers' code).

Bonuses are in units of the best hit's score, so one set of weights applies to every retrieval
mode (RRF units, BM25 or a cosine similarity). Files no hit comes from are not invented: only the
candidates are re-ordered, and each single list's first files (below) are candidates too.

**The lexical list votes on the file order** (:func:`voted`). The code fusion weighs the lexical
list a tenth of the vector list per chunk; where the text model misses what the issue's words name,
that buries files the lexical list ranks first. The file order is therefore the hits' file order
fused, by reciprocal rank with equal weights, with the first files of the lexical list as a lexical
search orders them (structure on). No weight is fitted between the two, so there is none to carry
from one repository to another; docs/evaluation.md (the leave-one-repository-out table) has each
repository's numbers.

**Each list's first files keep a place.** Then the floors. The vector and the lexical list each rank
files their own way, and on a repository nobody tuned for either may be the better one (a general
text model misses the file whose definitions the issue names; the lexical list is misled by a
common word). Whatever the fusion's weights, the file list therefore keeps every single list's
first files within reach (:func:`rank_files`, :func:`with_floors`): with ``m`` lists (vector and
lexical: 2), the n-th file (from 1) of each is listed at place ``m·n + floor_slack`` at the latest
(``FileWeights.floor_slack``, 1), earlier where the voted order has it earlier. **The guarantee**,
for every ``k`` up to :data:`LEADS`: the first ``m·k + slack`` files listed hold the first ``k``
files of every list, so the file list's Acc@(2k+1) is at least each single list's Acc@k; with a
slack of 1 the voted order's first file keeps the first place; every place no floor claims is the
voted order's. Without the slack (``2k``, the least any list can promise, since the two lists'
first ``k`` files may all differ) both lists' first files could push it to third place. Left one
repository out, the folds choose slacks of 1 and 2 (docs/evaluation.md, "Each list's first files
keep a place"). Pure; the weights are the constant :data:`WEIGHTS` and their measurement is in
docs/evaluation.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TypeVar

from ragline.query.retrieval import structure
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import FileHit, Hit

#: a list's row: a hit, or a statement's row
Row = TypeVar("Row", bound=Hit | dict)

_FRAME = re.compile(r"""File\s+["']([^"'\n]+?\.py)["'],\s+line\s+\d+""")


@dataclass(frozen=True)
class FileWeights:
    """How a file's evidence adds up (bonuses in units of the best hit's score)."""

    decay: float = 0.0
    depth: int = 1
    frame: float = 0.0
    #: each single list's n-th file is listed within the first m·n + ``floor_slack`` files (m lists)
    floor_slack: int = 1

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    @property
    def is_first_hit(self) -> bool:
        """Whether these weights give the first-hit order (one chunk per file, no bonus)."""
        return (self.depth <= 1 or self.decay == 0) and not self.frame


#: the file ranking a code search uses (0.2; were settings until 0.1): a file scores its best hit plus
#: a quarter of each of its next two and its traceback frames; each weight chosen on one held-out half
#: of swe-loc-dev and reported on the other (docs/evaluation.md, "Code retrieval at scale"); an
#: evaluation measures others with ``dataclasses.replace(WEIGHTS, ...)``
WEIGHTS = FileWeights(decay=0.25, depth=3, frame=0.5)


def file_weights_from(settings: Settings) -> FileWeights:
    """:data:`WEIGHTS`, or the first-hit order while ``RAGLINE_CODE_FILE_RANK`` is off."""
    return WEIGHTS if settings.code.file_rank else FileWeights()


def frames(question: str) -> tuple[str, ...]:
    """The files of an issue text's traceback frames, outermost first, each once (pure)."""
    text = question.replace("\\", "/")
    return tuple(dict.fromkeys(m.group(1).lstrip("/").lower() for m in _FRAME.finditer(text)))


#: how many of each single list's first files the file list keeps a place for (the guarantee's
#: largest ``k``): the code evaluation scores up to Acc@10, which twice 5 covers, and 10 leaves
#: room for a caller reading deeper
LEADS = 10


@dataclass(frozen=True)
class FileScore:
    """A file's score and what it is made of (for the response and for measuring)."""

    path: str
    score: float
    chunks: float
    frame: float
    best: int | None  # the position of the file's first hit; None: none among the hits (a lead)
    #: placed by a single list's floor (:func:`with_floors`) above where the fused hits put it
    reserved: bool = False


def rank_files(
    hits: Iterable[Hit | dict],
    question: str,
    w: FileWeights,
    source: str = "",
    leads: Sequence[Sequence[Hit | dict]] = (),
) -> list[FileScore]:
    """The files of ``hits``, best first (pure). ``source`` is the git source's name, the prefix of
    the stored paths (``pkg/`` of ``pkg/pkg/io/cards/card.py``), left out of the paths
    returned and matched. ``leads``: each single list of the search (vector, lexical), in its
    order, whose first files keep a place (the module's docstring). With :class:`FileWeights` defaults
    and no leads the order is the first-hit order."""
    rows = [h if isinstance(h, Hit) else Hit.model_validate(h) for h in hits]
    if not rows:
        return []
    top = max((h.score for h in rows), default=0.0)
    scale = top if top > 0 else 1.0
    traceback = frames(question)

    def relative(path: str) -> str:
        return path[len(source) + 1 :] if source and path.startswith(source + "/") else path

    by_file: dict[str, list[tuple[int | None, Hit]]] = {}
    for pos, h in enumerate(rows):
        by_file.setdefault(relative(h.path), []).append((pos, h))
    out = [_file_score(path, items, traceback, w, scale) for path, items in by_file.items()]
    out.sort(key=(lambda f: f.best or 0) if w.is_first_hit else (lambda f: (-f.score, f.best or 0)))
    lists = [lead_files(rows_of, LEADS) for rows_of in leads]
    lists = [one for one in lists if one]
    if len(lists) < 2:  # one list alone is the fused order's own
        return out
    known = {f.path: f for f in out}
    floors: dict[str, tuple[int, FileScore]] = {}
    for one in lists:
        for n, row in enumerate(one, start=1):
            h = row if isinstance(row, Hit) else Hit.model_validate(row)
            path = relative(h.path)
            place = len(lists) * n - 1 + w.floor_slack  # 0-based: within the first m·n + slack
            if path not in floors or place < floors[path][0]:
                floors[path] = (place, known.get(path) or _file_score(path, [(None, h)], traceback, w, 0.0))
    _, lexical = lists
    vote = [relative(row.path if isinstance(row, Hit) else row["path"]) for row in lexical]
    return with_floors(voted(out, vote, {path: f for path, (_, f) in floors.items()}), floors)


#: the file-level fusion's RRF constant, the usual 60: the fused hits' file order and the lexical
#: list's vote weigh the same, and no weight between them is fitted (10, 60 and 120 order the
#: files of swe-loc-dev and astropy's issues alike: docs/evaluation.md)
FILE_RRF_K = 60


def voted(ranked: list[FileScore], vote: Sequence[str], extra: dict[str, FileScore]) -> list[FileScore]:
    """``ranked`` fused with the file order ``vote`` by reciprocal rank (pure): a file scores
    ``1 / (FILE_RRF_K + place)`` (from 1) in each of the two orders it is in, which becomes its
    ``score``; equal scores keep ``ranked``'s order, then ``vote``'s. A file only ``vote`` lists
    comes from ``extra``.

    Why a file-level vote: the code fusion weighs the lexical list a tenth of the vector list per
    chunk (the fusion's code policy), which suits a repository where the text model is strong and
    buries the files only the lexical list finds where it is not. Here the two orders weigh the
    same, so a file both rank fairly high beats one that a single order ranks first; the floors
    (:func:`with_floors`) still keep each single list's first files within reach."""
    score: dict[str, float] = {}
    for order in ([f.path for f in ranked], vote):
        for place, path in enumerate(dict.fromkeys(order), start=1):
            score[path] = score.get(path, 0.0) + 1.0 / (FILE_RRF_K + place)
    files = {f.path: f for f in ranked}
    files.update((p, extra[p]) for p in vote if p not in files and p in extra)
    position = {path: i for i, path in enumerate(files)}
    out = [replace(f, score=round(score[path], 8)) for path, f in files.items()]
    out.sort(key=lambda f: (-f.score, position[f.path]))
    return out


def lead_files(rows: Iterable[Row], n: int) -> list[Row]:
    """The first row of each of the first ``n`` files of ``rows``, in their order (pure): a single
    list's files the file list keeps a place for."""
    out: dict[str, Row] = {}
    for row in rows:
        path = row.path if isinstance(row, Hit) else row["path"]
        if path not in out:
            if len(out) == n:
                break
            out[path] = row
    return list(out.values())


def _file_score(
    path: str, items: list[tuple[int | None, Hit]], traceback: tuple[str, ...], w: FileWeights, scale: float
) -> FileScore:
    """One file's score from its hits and the issue's traceback frames (``traceback``; ``scale``: the best
    hit's score; 0 for a file that has no fused hit, whose chunks then count nothing and whose
    bonus is its own)."""
    scores = sorted((max(h.score, 0.0) / scale if scale else 0.0 for _, h in items), reverse=True)
    chunks = sum(s * w.decay**i for i, s in enumerate(scores[: max(1, w.depth)]))
    frame = 0.0
    for depth_no, f in enumerate(reversed(traceback)):  # the deepest frame first
        if structure.file_match(f, path) == 1.0:
            frame = max(frame, 0.5**depth_no)
    return FileScore(path, round(chunks + w.frame * frame, 8), chunks, frame, items[0][0])


def with_floors(ranked: list[FileScore], floors: dict[str, tuple[int, FileScore]]) -> list[FileScore]:
    """``ranked`` with each file of ``floors`` (path: its 0-based place at the latest, its score)
    listed no later than that place, and where ``ranked`` has it earlier, there (pure). Built place
    by place: the next of ``ranked``, unless the files still waiting for their floor would no longer
    fit (``j + 1`` of them due by a place only ``j`` places away): then the one whose floor comes
    first. Every floor is met whenever at most ``p + 1`` files have a floor at or before each place
    ``p`` (earliest deadline first), which :func:`rank_files`' floors ensure. A file moved up, or
    absent from ``ranked``, is marked ``reserved``."""
    out: list[FileScore] = []
    rest = list(ranked)
    pending = dict(floors)
    fused = {f.path: i for i, f in enumerate(ranked)}  # equal floors: the fused order first
    while rest or pending:
        waiting = sorted((place, fused.get(path, len(fused)), path) for path, (place, _) in pending.items())
        tight = any(place <= len(out) + j for j, (place, _, _) in enumerate(waiting))
        if waiting and (tight or not rest):
            path = waiting[0][2]
            _, f = pending.pop(path)
            moved = not (rest and rest[0].path == path)
            rest = [x for x in rest if x.path != path]
            out.append(replace(f, reserved=True) if moved else f)
        else:
            f = rest.pop(0)
            pending.pop(f.path, None)
            out.append(f)
    return out


def ranked_paths(
    hits: Iterable[Hit | dict],
    question: str,
    w: FileWeights,
    source: str = "",
    leads: Sequence[Sequence[Hit | dict]] = (),
) -> list[str]:
    """The file paths of :func:`rank_files`, best first."""
    return [f.path for f in rank_files(hits, question, w, source, leads)]


def response_files(
    hits: list[Hit], question: str, settings: Settings, leads: Sequence[Sequence[Hit]] = ()
) -> list[FileHit]:
    """The files a search response lists beside its hits (pure): :func:`rank_files` with the
    configured weights and the search's single lists' leads (``SearchResponse.list_leads``), when
    the file ranking is on and some hit is code (a prose search's "files" would be its documents
    again). The code evaluation scores this list, so what it measures is what a caller gets."""
    c = settings.code
    if not c.file_rank or not any(h.layer in c.layers for h in hits):
        return []
    return [
        FileHit(
            path=f.path,
            score=f.score,
            chunks=round(f.chunks, 8),
            frame=f.frame,
            first_hit=f.best,
            reserved=f.reserved,
        )
        for f in rank_files(hits, question, file_weights_from(settings), leads=leads)
    ]
