"""Is every sentence of an answer supported by the documents it cites? And how much should the
caller trust the answer? Pure functions; the generator call of the model judge is injected.

An answer is split into claims: its sentences, each with the ``[N]`` numbers it stands behind (its
own markers, else those of the next sentence that has some: the extractive generator writes one
marker after several sentences of one chunk). Three judges:

* ``structural`` (the extractive generator's answers): a claim is supported when its words, in
  order, are a span of a cited passage. The extractive generator only quotes, so this must hold
  for all its sentences; anything else is a bug, and is removed.
* ``lexical`` (offline, for a chat model's answers): most of the claim's topic stems and every
  number in it occur in the cited passages. Cheap and model-free; it catches sentences about
  something the cited documents do not mention, not a negation or a swapped relation of words
  they do mention.
* ``generator``: a second call to the chat model with the cited passages and the numbered claims
  (escaped, marked as data), answering JSON verdicts (:func:`parse_verdicts`).

Unsupported claims are removed; past ``max_unsupported_share`` the answer becomes no answer.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ragline.query.answer.citations import FENCED
from ragline.query.answer.extractive import (
    question_terms,
    stems,
)
from ragline.query.answer.prompt import judge_messages
from ragline.query.retrieval.language import passages_script, script_of
from ragline.shared.sdk.contracts import Hit

_MARKER = re.compile(r"\[(\d{1,3})\]")
_LEADING_MARKERS = re.compile(r"^(?:\s*\[\d{1,3}\])+")
_SENTENCE_END = re.compile(r"(?<=[.!?…])(?:\s*\[\d{1,3}\])*\s+(?=[\[«\"<(A-ZА-ЯЁ0-9]|&lt;)")
_WORD = re.compile(r"\w+", re.UNICODE)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")


@dataclass
class Claim:
    raw: str  # the sentence as written, with its own markers
    text: str  # without markers
    cites: list[int]  # its own markers, or those it inherits from the next cited sentence
    own: bool  # the markers are its own (not inherited)
    end: str = " "  # what separated it from the next claim in the answer (a space or a line break)
    code: bool = False  # a fenced code block: its text is the code inside the fence


@dataclass
class Verdict:
    supported: bool
    score: float | None = None  # the lexical judge's share of stems found
    why: str = ""


@dataclass
class Grounding:
    """The outcome of a check, for the response, the trace and the metrics."""

    judge: str
    claims: list[Claim]
    verdicts: list[Verdict]
    answer: str  # the answer without the unsupported claims
    removed: list[str] = field(default_factory=list)

    @property
    def support(self) -> float:
        """Share of supported claims (1.0 for an answer without claims)."""
        return sum(v.supported for v in self.verdicts) / len(self.verdicts) if self.verdicts else 1.0

    def trace(self) -> dict:
        return {
            "judge": self.judge,
            "sentences": len(self.claims),
            "unsupported": len(self.removed),
            "removed": self.removed,
            "support": round(self.support, 3),
            "verdicts": [
                {"cites": c.cites, "supported": v.supported}
                | ({"score": round(v.score, 3)} if v.score is not None else {})
                | ({"why": v.why} if v.why else {})
                for c, v in zip(self.claims, self.verdicts, strict=True)
            ],
        }


def _sentence_claims(text: str) -> list[Claim]:
    """The sentences of one line of prose, each with its own markers (none inherited yet)."""
    pieces: list[str] = []
    pos = 0
    for m in _SENTENCE_END.finditer(text):
        pieces.append(text[pos : m.end()].strip())
        pos = m.end()
    pieces.append(text[pos:].strip())
    # markers opening a sentence close the previous one ("… sentence. [1] Next …")
    merged: list[str] = []
    for p in pieces:
        lead = _LEADING_MARKERS.match(p)
        if lead and merged:
            merged[-1] += lead.group(0)
            p = p[lead.end() :].strip()
        if p:
            merged.append(p)
    claims: list[Claim] = []
    for p in merged:
        cites = list(dict.fromkeys(int(n) for n in _MARKER.findall(p)))
        text = re.sub(r"\s+", " ", _MARKER.sub("", p)).replace(" .", ".").replace(" ,", ",").strip()
        if not _WORD.search(text):
            if claims and cites:  # a stray marker on its own belongs to the sentence before
                claims[-1].cites += [n for n in cites if n not in claims[-1].cites]
                claims[-1].raw += " " + p
            continue
        claims.append(Claim(p, text, cites, bool(cites)))
    return claims


def split_claims(answer: str) -> list[Claim]:
    """The answer's claims with the passages each cites (see the module docstring): each line's
    sentences, and each fenced code block as one claim citing what the line announcing it cites
    ("… `path:12-20` [1]:" above the block)."""
    claims: list[Claim] = []
    pos = 0
    blocks = list(FENCED.finditer(answer))
    for k in range(len(blocks) + 1):
        end = blocks[k].start() if k < len(blocks) else len(answer)
        for line in answer[pos:end].split("\n"):
            if not _WORD.search(_MARKER.sub("", line)):
                if claims and _MARKER.search(line):  # markers on a line of their own close the claim above
                    last = claims[-1]
                    last.cites += [int(n) for n in _MARKER.findall(line) if int(n) not in last.cites]
                    last.own = True
                continue
            found = _sentence_claims(line)
            for c in found:
                c.end = " "
            if found:
                found[-1].end = "\n"
            claims += found
        if k < len(blocks):
            code = blocks[k].group(1)
            before = claims[-1] if claims and claims[-1].raw.rstrip().endswith(":") else None
            cites = list(before.cites) if before else []
            claims.append(Claim(blocks[k].group(0), code, cites, bool(cites), "\n", code=True))
            pos = blocks[k].end()
    inherited: list[int] = []
    for c in reversed(claims):
        if c.cites:
            inherited = c.cites
        else:
            c.cites = list(inherited)
    return claims


def _words(text: str) -> str:
    """The words of ``text`` for span matching, character references decoded: the answer reaches
    the check with its markup escaped for display (``&lt;Teleport>``, query/answer/sanitize.py) while the
    passage holds ``<Teleport>``; both sides are compared as read."""
    return " " + " ".join(_WORD.findall(html.unescape(text).lower())) + " "


def _cited(claim: Claim, passages: Sequence[str]) -> list[str]:
    return [passages[n - 1] for n in claim.cites if 1 <= n <= len(passages)]


def structural_verdicts(claims: list[Claim], passages: Sequence[str]) -> list[Verdict]:
    """Supported when the claim's words, in order, are a span of one of its cited passages."""
    out = []
    for c in claims:
        span = _words(c.text)
        ok = any(span in _words(p) for p in _cited(c, passages))
        out.append(Verdict(ok, why="" if ok else "not a span of the cited passages"))
    return out


def lexical_verdicts(claims: list[Claim], passages: Sequence[str], min_share: float) -> list[Verdict]:
    """Supported when at least ``min_share`` of the claim's topic stems and all of its numbers
    occur in its cited passages."""
    out = []
    for c in claims:
        cited = " ".join(_cited(c, passages))
        terms = question_terms(c.text)
        found = stems(cited)
        share = len(terms & found) / len(terms) if terms else 1.0
        numbers = set(_NUMBER.findall(c.text)) - set(_NUMBER.findall(cited))
        ok = bool(cited) and share >= min_share and not numbers
        why = (
            ""
            if ok
            else (
                "cites no passage"
                if not cited
                else ("numbers not in the cited passages" if numbers else "words not in the cited passages")
            )
        )
        out.append(Verdict(ok, share, why))
    return out


# ------------------------------------------------------------------------------ the model judge
_YES = {"true", "yes", "да", "supported", "1", "y"}
_NO = {"false", "no", "нет", "unsupported", "not supported", "0", "n"}
#: a line ``Claim 2: no`` (matched at a line's start, every run possessive: linear in the reply)
_LINE_VERDICT = re.compile(
    r"\s*+(?:(?:claim|утверждение)\s*+)?#?(\d{1,3})\s*+[:.)\-—]\s*+\**+\s*+"
    r"(not supported|unsupported|supported|yes|no|true|false|да|нет)",
    re.IGNORECASE,
)


def _truth(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().lower()
        return True if v in _YES else False if v in _NO else None
    return None


def parse_verdicts(text: str, n_claims: int) -> dict[int, bool]:
    """Verdicts by claim number (1-based) from the judge's reply: a JSON object (possibly in a code
    fence or with prose around it) ``{"verdicts": [{"i", "supported"}]}``, a bare JSON list of
    such objects or of booleans, or else lines like ``2: no``. Numbers outside 1..n_claims are
    ignored; raises ValueError when nothing usable is found."""
    found = _json_verdicts(_json_payload(text), n_claims) or _line_verdicts(text, n_claims)
    if not found:
        raise ValueError("the judge's reply holds no verdict")
    return found


def _json_payload(text: str) -> object:
    """The first of the reply's outermost ``{...}`` and ``[...]`` spans that parses as JSON, or None."""
    for a, b in ((text.find("{"), text.rfind("}")), (text.find("["), text.rfind("]"))):
        if 0 <= a < b:
            try:
                return json.loads(text[a : b + 1])
            except ValueError:
                continue
    return None


def _json_verdicts(data: object, n_claims: int) -> dict[int, bool]:
    """Verdicts from a parsed reply: ``{"verdicts" | "claims": [...]}`` or the list itself, of
    objects (``i`` / ``id`` / ``claim``, ``supported`` / ``verdict``) or of booleans."""
    if isinstance(data, dict):
        data = data.get("verdicts", data.get("claims"))
    found: dict[int, bool] = {}
    for k, item in enumerate(data if isinstance(data, list) else [], start=1):
        if isinstance(item, dict):
            i = item.get("i", item.get("id", item.get("claim", k)))
            ok = _truth(item.get("supported", item.get("verdict")))
        else:
            i, ok = k, _truth(item)
        if isinstance(i, int | str) and str(i).isdigit() and ok is not None and 1 <= int(i) <= n_claims:
            found[int(i)] = ok
    return found


def _line_verdicts(text: str, n_claims: int) -> dict[int, bool]:
    """Verdicts from lines like ``2: no`` (the first for each claim)."""
    found: dict[int, bool] = {}
    for m in filter(None, map(_LINE_VERDICT.match, text.splitlines())):
        i, ok = int(m.group(1)), _truth(m.group(2))
        if ok is not None and 1 <= i <= n_claims:
            found.setdefault(i, ok)
    return found


def generator_verdicts(
    claims: list[Claim],
    passages: Sequence[str],
    call: Callable[[str, list[dict]], str],
    min_share: float,
) -> list[Verdict]:
    """The chat model's verdicts; a claim it gives none for is judged lexically."""
    system, messages = judge_messages([(c.text, c.cites) for c in claims], passages)
    found = parse_verdicts(call(system, messages), len(claims))
    fallback = lexical_verdicts(claims, passages, min_share)
    return [
        Verdict(found[i], why="" if found[i] else "the judge found no support")
        if i in found
        else Verdict(fallback[i - 1].supported, fallback[i - 1].score, "no verdict from the judge: lexical")
        for i in range(1, len(claims) + 1)
    ]


def rebuild(claims: list[Claim], verdicts: list[Verdict]) -> tuple[str, list[str]]:
    """The answer of the supported claims (as written), and the removed claims' text. A kept
    claim that inherited its markers from a removed one gets them written after it."""
    kept: list[str] = []
    removed: list[str] = []
    for i, (c, v) in enumerate(zip(claims, verdicts, strict=True)):
        if not v.supported:
            removed.append(c.text)
            continue
        raw = c.raw
        if not c.own and c.cites:
            nxt = next((j for j in range(i + 1, len(claims)) if claims[j].own), None)
            # the sentence carrying the markers is gone, or a later kept sentence would not carry them
            if nxt is None or not verdicts[nxt].supported:
                raw += " " + "".join(f"[{n}]" for n in c.cites)
        kept.append(raw + c.end)
    return "".join(kept).strip(), removed


def check(
    answer: str,
    passages: Sequence[str],
    judge: str,
    min_share: float = 0.5,
    call: Callable[[str, list[dict]], str] | None = None,
    framing: Sequence[str] = (),
) -> Grounding:
    """Check ``answer`` against ``passages`` (``passages[n-1]`` is what [n] cites) with ``judge``
    (``structural``, ``lexical`` or ``generator`` — the last needs ``call(system, messages)``).

    ``framing``: lines the extractive generator wrote around its quotes (a code answer's place,
    "From the documentation (in Russian):"); they claim nothing about the documents, so they are
    not judged. Only the generator's own result names them: a chat model's text is all claims."""
    all_claims = split_claims(answer)
    own = {_words(_MARKER.sub("", f)) for f in framing}
    claims = [c for c in all_claims if _words(c.text) not in own]
    if judge == "structural":
        verdicts = structural_verdicts(claims, passages)
    elif judge == "lexical":
        verdicts = lexical_verdicts(claims, passages, min_share)
    elif judge == "generator":
        if call is None:
            raise ValueError("the generator judge needs a generator")
        verdicts = generator_verdicts(claims, passages, call, min_share) if claims else []
    else:
        raise ValueError(f"unknown judge {judge!r}")
    if all(v.supported for v in verdicts):
        return Grounding(judge, claims, verdicts, answer)
    judged, checked = iter(verdicts), {id(c) for c in claims}
    every = [next(judged) if id(c) in checked else Verdict(True, why="framing") for c in all_claims]
    text, removed = rebuild(all_claims, every)
    return Grounding(judge, claims, verdicts, text, removed)


# ---------------------------------------------------------------------------------- confidence
def _unit(score: float) -> float:
    """A rerank score in [0, 1]: Voyage's already is; a cross-encoder's logit goes through a sigmoid."""
    return score if 0.0 <= score <= 1.0 else 1.0 / (1.0 + math.exp(-score))


def retrieval_signal(question: str, cited: list[Hit]) -> float | None:
    """How well the cited chunks match the question, in [0, 1]: the share of the question's topic
    stems they contain, or their mean rerank score when a reranker scored them (whichever is
    higher: a paraphrase or a cross-lingual question shares few words but can rerank well).

    None when there is nothing to measure with: a question written in another script than the
    cited chunks (an English question over Russian documents) shares no words with them by
    construction, and without rerank scores a word count would call a good answer unsupported."""
    if not cited:
        return 0.0
    reranked = [_unit(h.rerank_score) for h in cited if h.rerank_score is not None]
    rerank = sum(reranked) / len(reranked) if reranked else None
    asked, written = script_of(question), passages_script([h.content for h in cited])
    if asked and written and asked != written:
        return rerank
    terms = question_terms(question)
    words: set[str] = set()
    for h in cited:
        words |= stems(h.content)
    coverage = len(terms & words) / len(terms) if terms else 0.0
    return max(coverage, rerank or 0.0)


def confidence(retrieval: float | None, support: float | None) -> float | None:
    """The answer's confidence in [0, 1]: the mean of the retrieval signal and the share of
    supported sentences; either alone when the other is missing; None when neither is known (the
    guardrail then has nothing to judge by and lets the answer through)."""
    known = [v for v in (retrieval, support) if v is not None]
    if not known:
        return None
    return round(max(0.0, min(1.0, sum(known) / len(known))), 3)


# ---------------------------------------------------------------------------- self-consistency
def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def agreement(a: str, b: str, doc_of: Callable[[int], str]) -> float:
    """How much two answers agree: half on the documents they cite, half on their claims' stems."""
    docs_a = {doc_of(n) for c in split_claims(a) for n in c.cites}
    docs_b = {doc_of(n) for c in split_claims(b) for n in c.cites}
    return 0.5 * _jaccard(docs_a, docs_b) + 0.5 * _jaccard(
        stems(_MARKER.sub("", a)), stems(_MARKER.sub("", b))
    )


def most_consistent(samples: list[str], doc_of: Callable[[int], str]) -> tuple[int, list[float]]:
    """The index of the sample agreeing most with the others (the first on a tie), and each
    sample's mean agreement."""
    if len(samples) == 1:
        return 0, [1.0]
    means = [
        sum(agreement(s, t, doc_of) for j, t in enumerate(samples) if j != i) / (len(samples) - 1)
        for i, s in enumerate(samples)
    ]
    best = max(range(len(samples)), key=lambda i: (means[i], -i))
    return best, [round(v, 3) for v in means]


# ------------------------------------------------------------------- confidence of a quoted answer
#: the fitted model: ``bench/answer_calibration.py`` writes it (docs/evaluation.md, "Confidence")
CONFIDENCE_MODEL = Path(__file__).with_name("confidence.json")
#: what the model reads of the searched scope beside the composer's features
#: (``extractive.FEATURES``): the share of its embeddable rows still awaiting their vectors, as it
#: bears on an answer quoting passages in another language than the question's (``a*b``: the product
#: of two features). Only the vector search finds across languages, and it saw only the rest of the
#: scope; docs/evaluation.md ("Scopes awaiting their vectors") has the measurement
SCOPE_FEATURES = ("awaiting*cross",)


def scope_features(vector_share: float) -> dict[str, float]:
    """The scope's features for ``vector_share``, the share of its embeddable rows the vector search
    saw (``Evidence.vector_share``): the rest the vector list, and with it ``hit_z``, could not see."""
    return {"awaiting": round(1.0 - vector_share, 6)}


def feature_value(features: dict[str, float | None], name: str) -> float | None:
    """The value of the model's feature ``name`` for these ``features``: a product ``a*b`` of two,
    unknown when either is; a feature not measured at all is 0 (an answer's scope fully embedded)."""
    value = 1.0
    for part in name.split("*"):
        v = features.get(part, 0.0)
        if v is None:
            return None
        value *= float(v)
    return value


@lru_cache(maxsize=1)
def confidence_model() -> dict:
    """The logistic model of an extractive answer being right (feature names, their means and
    scales, coefficients, intercept), fitted on questions held apart by source."""
    return json.loads(CONFIDENCE_MODEL.read_text(encoding="utf-8"))


def answer_probability(features: dict[str, float | None], model: dict | None = None) -> float:
    """The probability that an extractive answer with these ``features`` is right (the fitted
    logistic model): what ``RAGLINE_ANSWER_MIN_CONFIDENCE`` is compared with. A feature that is
    unknown for this answer (None: a relative one with nothing to compare against) takes the fit's
    mean, so it moves the probability neither way."""
    model = model or confidence_model()
    z = model["intercept"]
    for name, mean, scale, coef in zip(
        model["features"], model["mean"], model["scale"], model["coef"], strict=True
    ):
        value = feature_value(features, name)
        if value is not None:
            z += coef * (value - mean) / scale
    return round(1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z)))), 3)
