"""Structural ranking of code hits: the retrieval contract's signals beside text similarity; pure.

The retrieval contract (``prefer_bonus``, ``test_penalty``, ``layer_rank``, ``lexical_rank``,
``structural_rank``, ``distance``) ranks code by where it sits as well as by what it says. Its
signals, per hit, from the question (read once per search, :func:`named` and :func:`question_words`)
and the candidate set:

* **named files** (the contract's exact-file path): the chunks of the files the question names,
  read by the retrieval task (:func:`named_file_patterns`), join the candidates as a third RRF list
  (:func:`with_named`), so a file a traceback names is a candidate even when neither retriever
  found it;
* **file named**: the question names the hit's file: a path (``pkg/sessions.py``), a
  traceback line (``File ".../site-packages/pkg/sessions.py", line 335, in request``), or a
  bare file name (``sessions.py``, half the bonus: many folders hold a ``utils.py``);
* **spelled**: the hit defines a name the question spells in words, its parts in order
  ("the default headers" and ``default_headers``, "resolve redirects" and ``resolve_redirects``):
  a question in prose names a function by what it is called more often than by its identifier,
  and the vector list ranks the words around the name, not the name;
* **related code**: a document among the candidates whose front matter says which files it
  describes (``related_code``) lifts those files' hits;
* **layer rank**: :data:`LAYER_ORDER` (source, symbols, docs, tests, by the settings' layer names), never SQL literals:
  a key of the contract's order, reported on every re-scored hit.

:func:`rescore` adds the bonuses (in RRF units, :data:`WEIGHTS`) to each hit's
fused score: the default hybrid's re-score. :func:`contract_order` is the contract's lexicographic
order (``ordering: "contract"``). Which signals help, by how much, is measured on swe-loc-dev
(docs/evaluation.md, "Code retrieval (swe-loc-dev)"); the variants measured are
:mod:`ragline.operations.code_ablations`'s.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from ragline.query.retrieval.fusion import FusionPolicy
from ragline.shared.config.settings import CodeSettings
from ragline.shared.sdk.contracts import Hit
from ragline.shared.worker.identifiers import STOP_WORDS, component_parts

#: file extensions a question's path may end with (code, config and docs of a repository)
FILE_EXTENSIONS = frozenset(
    """py pyi pyx js mjs cjs jsx ts mts cts tsx go java rs c h cc cpp cxx hpp hh hxx cs rb php kt kts
    sh bash sql toml yaml yml ini cfg proto gradle scala swift lua pl r md rst txt html json xml""".split()
)
#: a path starts where a run of path characters and slashes does, its leading slashes left out (one
#: attempt per run: tried from each "+", "@" or "/" of a run, a long run would be rescanned once per
#: character)
_PATH = re.compile(
    r"(?<![\w.+@/-])/*((?:[A-Za-z]:)?(?:[\w.+@-]+/)*[\w.+@-]*[A-Za-z0-9_]\.([A-Za-z][A-Za-z0-9]{0,4}))\b"
)
_IDENT = re.compile(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(\()?")
#: receivers that say nothing about where a method is defined (``self.send``: some class's ``send``)
_RECEIVERS = ("self.", "cls.", "this.")
_TRACE_FRAME = re.compile(r"line \d+, in ([A-Za-z_][A-Za-z0-9_]*)")
_BACKTICKS = re.compile(r"`([^`\n]{1,120})`")
#: only searched for: two capitals before a small letter are as good as more, and linear
_CAMEL = re.compile(r"[a-z0-9][A-Z]|[A-Z]{2}[a-z]")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+|\bwww\.\S+", re.IGNORECASE)
#: a dotted name ending in one of these is a host or a page (``httpbin.org``), not a symbol
_NOT_SYMBOL_ENDINGS = frozenset("com org net io me dev edu gov local html htm".split())


@dataclass(frozen=True)
class Named:
    """What a question names: files (normalised, ``/``-separated), identifiers (dotted) and the
    modules its dotted names spell (``pkg.io.cards.card.Card`` names ``pkg/io/cards/card``)."""

    files: tuple[str, ...] = ()
    identifiers: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()


@dataclass(frozen=True)
class Weights:
    """Bonuses in RRF units (one rank near the top of a fused list is ~0.0003), and the RRF weight of
    the named files' list (``named``: applied by :func:`with_named` at retrieval, by :func:`refuse`
    when an evaluation varies it)."""

    file: float = 0.0
    related: float = 0.0
    named: float = 0.0
    spelled: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


#: how many chunks of the files a question names join the candidates (the contract's exact-file path,
#: nearest to the question first; :func:`with_named`): a traceback names a handful of files, and a
#: file's first chunks by distance hold what the question is about
NAMED_FILES = 20

#: the retrieval contract's order of layers (lower first) by what they hold: a repository's source,
#: its symbol records, documents (the default layer), its tests; a layer of none of these ranks after
#: them (:func:`layer_ranks` names them as the settings do)
LAYER_ORDER = ("source", "symbols", "docs", "tests")


#: the weights a search ranks code with (0.2; were settings until 0.1). An evaluation measures others
#: with ``dataclasses.replace`` on the search's :class:`~ragline.query.retrieval.ranking.RankingPolicy`
#: (:mod:`ragline.operations.code_ablations`). file, related, named: measured on swe-loc-dev;
#: spelled: chosen on answers-dev, checked on swe-loc-dev (docs/evaluation.md, "Code retrieval
#: (swe-loc-dev)")
WEIGHTS = Weights(file=0.004, related=0.004, named=0.25, spelled=0.006)


def _looks_like_code(word: str, call: bool, quoted: bool) -> bool:
    """An identifier a question names on purpose: dotted, snake_case, camelCase, called, or quoted."""
    bare = word.strip("_")
    if len(bare) < 2 or any(len(part) < 2 for part in word.split(".")):
        return False  # "e.g", "i.e"
    return quoted or call or "." in word or "_" in bare or bool(_CAMEL.search(word))


@functools.lru_cache(maxsize=512)
def named(question: str) -> Named:
    """The files and identifiers ``question`` names (pure). A search reads it once, into its
    :class:`~ragline.query.retrieval.ranking.RankingPolicy`; memoised for the evaluations, which
    build a policy for the same question per variant they measure (up to ~0.15 ms for a sentence of
    prose). ``Named`` is frozen: no caller can change the shared one."""
    text = question.replace("\\", "/")
    files: dict[str, None] = {}
    for m in _PATH.finditer(text):
        if m.group(2).lower() in FILE_EXTENSIONS:
            files.setdefault(m.group(1).lstrip("/").lower(), None)
    idents: dict[str, None] = {}
    modules: dict[str, None] = {}
    quoted = {q.strip() for q in _BACKTICKS.findall(text)}
    for m in _IDENT.finditer(_URL.sub(" ", text)):
        word = m.group(1)
        if "." in word and word.rsplit(".", 1)[1].lower() in _NOT_SYMBOL_ENDINGS:
            continue
        word = next((word[len(r) :] for r in _RECEIVERS if word.startswith(r)), word)
        for module in _modules_of(word):  # ``ascii.rst`` is a module as well as a file name
            modules.setdefault(module, None)
        if word.lower() in files or any(f.endswith("/" + word.lower()) for f in files):
            continue
        if _looks_like_code(word, bool(m.group(2)), word in quoted):
            idents.setdefault(word, None)
    for m in _TRACE_FRAME.finditer(text):
        if m.group(1) != "module":
            idents.setdefault(m.group(1), None)
    return Named(tuple(files), tuple(idents), tuple(modules))


#: a token starts where a run of its characters does (the same tokens as from any position, where
#: a run without a letter or digit would be rescanned from each of its characters)
_TOKENS = re.compile(r"(?<![A-Za-z0-9_.])[A-Za-z0-9_.]*[A-Za-z0-9]")


def question_words(question: str) -> list[str]:
    """The words the question writes as words, lower-cased, in order (``User-Agent`` is two);
    a name it writes as code (``default_headers``, ``Session.request``, ``maxRetries``) is an
    empty word between them, since it is an identifier the question names (:func:`named`), not
    words that spell one. What a spelled name is looked for in (:func:`spells`)."""
    words = []
    for m in _TOKENS.finditer(_URL.sub(" ", question)):
        token = m.group().lstrip("._")
        code = "_" in token or "." in token or bool(_CAMEL.search(token))
        words.append("" if code or not token[:1].isalpha() else token.lower())
    return words


def spells(words: Sequence[str], symbol: str) -> bool:
    """Whether the question's ``words`` spell the name of ``symbol`` (its last dotted component):
    all its parts, in order, as consecutive words, the last one in the singular or the plural
    ("default headers" spells ``default_headers``, "proxy header" ``proxy_headers``, "resolve the
    redirects" neither). A name of fewer than two parts
    that are no stop words is never spelled: "session" names no definition, every file says it."""
    name = symbol.rsplit(".", 1)[-1]
    parts = component_parts(name)
    if sum(1 for p in parts if len(p) > 2 and p not in STOP_WORDS) < 2:
        return False
    k, head = len(parts), tuple(parts[:-1])
    i = -1
    # each place the name's first part is written, found by list.index (a search runs this for every
    # definition of every candidate, twice: the hits and the lexical list's file order)
    while (i := _index(words, head[0], i + 1)) >= 0 and i + k <= len(words):
        last = words[i + k - 1]
        if tuple(words[i : i + k - 1]) == head and parts[-1] in (last, last + "s", last.removesuffix("s")):
            return True
    return False


def _index(words: Sequence[str], word: str, start: int) -> int:
    """The first place of ``word`` in ``words`` from ``start``, or -1."""
    try:
        return words.index(word, start)
    except ValueError:
        return -1


def spelled_definitions(words: Sequence[str], symbols: list[str]) -> int:
    """How many of ``symbols`` (a chunk's definitions) the question's ``words`` spell."""
    return sum(1 for s in symbols if spells(words, s)) if words and symbols else 0


def _modules_of(identifier: str) -> list[str]:
    """The modules a dotted name may spell, as paths: each run of its leading lower-case parts, two
    or more (``pkg.utils.get_auth`` is ``pkg/utils`` or the function's own
    ``pkg/utils/get_auth``; ``pkg.units.Quantity.to`` is ``pkg/units``;
    ``Table.read`` and ``card.py`` are none)."""
    lower = []
    for part in identifier.split("."):
        if part != part.lower() or len(part) < 2:
            break
        lower.append(part)
    if lower and (lower[-1] in _NOT_SYMBOL_ENDINGS or lower[-1] == "py"):
        lower.pop()
    return ["/".join(lower[:j]) for j in range(2, len(lower) + 1)]


def module_match(module: str, path: str) -> bool:
    """Whether ``path`` is the module ``module`` (``pkg/io/cards`` names
    ``pkg/io/cards/__init__.py``; a module path matches as a suffix of two or more components)."""
    stem = "/" + path.lower().rsplit(".", 1)[0].removesuffix("/__init__")
    return stem.endswith("/" + module)


def path_named(n: Named, path: str) -> float:
    """How plainly the question names the file at ``path``: 1 for its path (two or more trailing
    components) or its dotted module, 0.5 for its bare file name, else 0."""
    named = max((file_match(f, path) for f in n.files), default=0.0)
    return max(named, 1.0 if any(module_match(m, path) for m in n.modules) else 0.0)


def file_match(named_file: str, path: str) -> float:
    """How well a named file matches a hit's path: 1 for two or more trailing path components in
    common (or the whole named path), 0.5 for the file name alone, else 0."""
    a = [p for p in named_file.lower().split("/") if p]
    b = [p for p in path.lower().split("/") if p]
    common = 0
    while common < min(len(a), len(b)) and a[-1 - common] == b[-1 - common]:
        common += 1
    if common == 0:
        return 0.0
    if common >= 2 or (common == len(a) and len(a) > 1):
        return 1.0
    return 0.5


def named_file_patterns(files: tuple[str, ...] | list[str], limit: int = 20) -> list[str]:
    """``LIKE`` patterns for the stored paths of the files a question names: a named path's last two
    components as a path suffix (a traceback's ``.../site-packages/pkg/sessions.py`` is
    ``pkg/sessions.py`` in the repository), a bare file name as the last component."""
    out: dict[str, None] = {}
    for f in files:
        parts = [p for p in f.split("/") if p]
        if not parts:
            continue
        tail = "/".join(parts[-2:])
        escaped = tail.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        out.setdefault("%/" + escaped, None)
        if len(parts) > 1:
            out.setdefault(escaped, None)
    return list(out)[:limit]


def file_names(files: tuple[str, ...] | list[str], limit: int = 20) -> list[str]:
    """The lower-cased file names (last components) of the named files: what the indexed
    ``chunks.file_name`` column (migration 0010) holds for their chunks."""
    return list(dict.fromkeys(p.rsplit("/", 1)[-1].lower() for p in files if p.strip("/")))[:limit]


def with_named(hits: list[Hit], named: list[Hit], weight: float, policy: FusionPolicy) -> list[Hit]:
    """The candidates with the chunks of named files as a third RRF list of ``weight``: a chunk
    already among them gains the policy's RRF term for its rank, a new one enters with that alone.
    Each carries its ``named_rank``; the order is left to :func:`rescore`."""
    by_key = {(h.doc_id, h.chunk_no): i for i, h in enumerate(hits)}
    out = list(hits)
    for rank, h in enumerate(named, start=1):
        gain = round(policy.rank_term(weight, rank), 8)
        i = by_key.get((h.doc_id, h.chunk_no))
        if i is None:
            base = h.prefer_bonus - h.test_penalty
            out.append(
                h.model_copy(update={"score": round(base + gain, 8), "fused_score": gain, "named_rank": rank})
            )
            by_key[(h.doc_id, h.chunk_no)] = len(out) - 1
        else:
            old = out[i]
            out[i] = old.model_copy(
                update={
                    "score": round(old.score + gain, 8),
                    "fused_score": round((old.fused_score or 0.0) + gain, 8),
                    "named_rank": rank,
                }
            )
    return out


def layer_ranks(code: CodeSettings) -> dict[str, int]:
    """Each layer's rank in :data:`LAYER_ORDER`, by the layer names the settings give the roles."""
    names = {
        "source": code.source_layer,
        "symbols": code.symbols_layer,
        "docs": "docs",
        "tests": code.tests_layer,
    }
    ranks: dict[str, int] = {}
    for rank, role in enumerate(LAYER_ORDER):
        ranks.setdefault(names[role], rank)
    return ranks


def layer_rank(layer: str, ranks: Mapping[str, int]) -> int:
    """A layer's rank (lower first); a layer not listed ranks after every listed one."""
    return ranks.get(layer, max(ranks.values(), default=-1) + 1)


@dataclass(frozen=True)
class Signals:
    file: float = 0.0
    related: float = 0.0
    layer_rank: int = 0
    spelled: float = 0.0

    def bonus(self, w: Weights) -> float:
        return w.file * self.file + w.related * self.related + w.spelled * self.spelled


def signals(hits: list[Hit], n: Named, words: Sequence[str], ranks: Mapping[str, int]) -> list[Signals]:
    """Each hit's structural signals from what the question names (``n``), the words it writes
    (``words``, :func:`question_words`) and the whole candidate set (``related_code`` of documents
    among the candidates applies to the files they name)."""
    related = {f for h in hits for f in (h.metadata.get("related_code") or []) if isinstance(f, str)}
    out = []
    for h in hits:
        symbols = [s for s in h.metadata.get("symbols") or [] if isinstance(s, str)]
        out.append(
            Signals(
                file=path_named(n, h.path),
                related=float(any(file_match(f, h.path) == 1.0 for f in related)),
                layer_rank=layer_rank(h.layer, ranks),
                spelled=float(spelled_definitions(words, symbols) > 0),
            )
        )
    return out


def rescore(
    hits: list[Hit], n: Named, words: Sequence[str], w: Weights, ranks: Mapping[str, int]
) -> list[Hit]:
    """Hits re-sorted by fused score plus their structural bonus (stable: equal scores keep their
    order); each hit carries its ``structural_score`` and ``layer_rank``."""
    scored = []
    for pos, (h, s) in enumerate(zip(hits, signals(hits, n, words, ranks), strict=True)):
        bonus = round(s.bonus(w), 8)
        scored.append((round(h.score + bonus, 8), pos, replace_hit(h, bonus, s.layer_rank)))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [h.model_copy(update={"score": score}) for score, _, h in scored]


def replace_hit(h: Hit, structural: float, rank: int) -> Hit:
    return h.model_copy(update={"structural_score": structural, "layer_rank": rank})


def contract_order(
    hits: list[Hit], n: Named, words: Sequence[str], w: Weights, ranks: Mapping[str, int]
) -> list[Hit]:
    """The retrieval contract's order: ``prefer_bonus`` (desc), ``test_penalty`` (asc), ``layer_rank``
    (asc), ``lexical_rank`` (asc, hits the lexical list missed last), structural score (desc),
    vector distance (asc, missing last). ``score`` keeps the fused score."""
    keyed = []
    for pos, (h, s) in enumerate(zip(hits, signals(hits, n, words, ranks), strict=True)):
        structural = round(s.bonus(w), 8)
        key = (
            -h.prefer_bonus,
            h.test_penalty,
            s.layer_rank,
            h.lexical_rank if h.lexical_rank is not None else float("inf"),
            -structural,
            h.vector_distance if h.vector_distance is not None else float("inf"),
            pos,
        )
        keyed.append((key, replace_hit(h, structural, s.layer_rank)))
    keyed.sort(key=lambda t: t[0])
    return [h for _, h in keyed]
