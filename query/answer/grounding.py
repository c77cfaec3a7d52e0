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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ragline.query.answer.citations import FENCED
from ragline.query.answer.code_answer import holds
from ragline.query.answer.extractive import (
    code_stems,
    mentions,
    question_terms,
    stems,
    topic_specific_terms,
    topic_terms,
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
_LINE_VERDICT = re.compile(
    r"(?:^|\n)\s*(?:claim\s*|утверждение\s*)?#?(\d{1,3})\s*[:.)\-—]\s*\**\s*"
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
    found: dict[int, bool] = {}
    data: object = None
    start, end = text.find("{"), text.rfind("}")
    list_start, list_end = text.find("["), text.rfind("]")
    for a, b in ((start, end), (list_start, list_end)):
        if 0 <= a < b:
            try:
                data = json.loads(text[a : b + 1])
                break
            except ValueError:
                continue
    if isinstance(data, dict):
        data = data.get("verdicts", data.get("claims"))
    if isinstance(data, list):
        for k, item in enumerate(data, start=1):
            if isinstance(item, dict):
                i = item.get("i", item.get("id", item.get("claim", k)))
                ok = _truth(item.get("supported", item.get("verdict")))
            else:
                i, ok = k, _truth(item)
            if isinstance(i, int | str) and str(i).isdigit() and ok is not None and 1 <= int(i) <= n_claims:
                found[int(i)] = ok
    if not found:
        for m in _LINE_VERDICT.finditer(text):
            i, ok = int(m.group(1)), _truth(m.group(2))
            if ok is not None and 1 <= i <= n_claims:
                found.setdefault(i, ok)
    if not found:
        raise ValueError("the judge's reply holds no verdict")
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
#: the share of an answer's quoted text whose passages must hold a specific term of the question
TOPIC_SHARE = 0.25
#: an extractive answer's confidence lies in [FLOOR, FLOOR + SPAN] (:func:`relevance_confidence`)
CONFIDENCE_FLOOR = 0.1
CONFIDENCE_SPAN = 0.7
#: how much the cited passages' vector similarity to the question counts beside word coverage
SIMILARITY_WEIGHT = 0.8
#: the coverage an answer quoting a definition of the subject asked about is given at least
DEFINED_COVERAGE = 0.75
_VERSION = re.compile(r"^v?\d+(?:\.\d+)+$")


@dataclass
class Relevance:
    """How well an extractive answer's quotes answer the question (each in [0, 1], None when it
    cannot be measured) and the confidence made of them."""

    coverage: float | None  # the question's topic stems in the quotes and their headings
    topic: float  # the question's specific terms in the cited passages
    missing: list[str]
    similarity: float | None  # the best cited passage's vector similarity to the question
    confidence: float

    def trace(self) -> dict:
        return {
            "coverage": None if self.coverage is None else round(self.coverage, 3),
            "topic": round(self.topic, 3),
            "missing_terms": self.missing,
            "similarity": None if self.similarity is None else round(self.similarity, 3),
            "confidence": self.confidence,
        }


def extractive_relevance(
    question: str,
    quoted: list[tuple[int, str]],
    hits: Sequence[Hit],
    defined: bool = False,
    collection: Iterable[str] = (),
) -> Relevance:
    """The confidence of an extractive answer from the relevance of what it quoted (it only
    quotes, so the share of supported sentences says nothing): the question's topic stems found
    in the quotes and their passages' headings, the question's specific terms found in the cited
    passages (an answer about a neighbouring topic lacks the name or version asked about), and
    the cited passages' vector similarity to the question (the only measure across languages).
    ``collection``: the names of the collection asked about (and its edition) that retrieval
    searched within (``SearchResponse.corpus_names``): every passage it found is about them."""
    cited = sorted({n for n, _ in quoted if 1 <= n <= len(hits)})
    if not cited:
        return Relevance(0.0, 0.0, [], None, 0.0)
    passages = [hits[n - 1] for n in cited]
    said = " ".join(q for _, q in quoted)
    around = " ".join(f"{h.heading} {h.path} {h.doc_id}" for h in passages)
    known = {c.lower() for c in collection}
    terms = [t for t in topic_specific_terms(question, list(hits)) if t.lower() not in known]
    # each quote counts by its length: a long code block from a file about something else is not
    # made relevant by a short sentence that names the topic
    weight: dict[int, int] = {}
    for n, q in quoted:
        if 1 <= n <= len(hits):
            weight[n] = weight.get(n, 0) + len(q)
    total = sum(weight.values()) or 1
    held: dict[str, float] = {t: 0.0 for t in terms}  # the share of the quoted text whose passage holds t
    for n, w in weight.items():
        h = hits[n - 1]
        text = f"{h.content} {h.context} {h.heading} {h.path} {h.doc_id}"
        for t in terms:
            if holds(text, t):  # the code answer's own reading: "CA" is held by REQUESTS_CA_BUNDLE
                held[t] += w / total
    # a comparison quotes each side from its own passage: a term held by a quarter of the quoted
    # text is the answer's topic; less is a mention beside an answer about something else
    present = {t: min(1.0, share / TOPIC_SHARE) for t, share in held.items()}
    # the edition a question names ("по ASVS 4.0.3") is written in its corpus's preface, not in
    # each chapter: a version another passage of the cited sources holds is the corpus's, and a
    # version none of them holds ("ASVS 5.0") is another edition's
    sources = {h.doc_id.split("/", 1)[0] for h in passages}
    for t in terms:
        if present[t] < 1.0 and _VERSION.match(t):
            if any(h.doc_id.split("/", 1)[0] in sources and mentions(h.content, t) for h in hits):
                present[t] = 1.0
    missing = [t for t in terms if present[t] < 1.0]
    topic = sum(present.values()) / len(terms) if terms else 1.0
    sims = [1.0 - h.vector_distance for h in passages if h.vector_distance is not None]
    similarity = max(sims) if sims else None
    asked, written = script_of(question), passages_script([h.content for h in passages])
    coverage = None
    if not (asked and written and asked != written):
        # the question's topic in what was quoted, and in the passages it was quoted from (a
        # quote answers a part; the passage holding the rest is still the place to read on)
        wanted = topic_terms(question, list(passages))
        quoted_stems = code_stems(said) | stems(around)
        passage_stems = quoted_stems | code_stems(" ".join(h.content for h in passages))
        if wanted:
            coverage = 0.5 * (len(wanted & quoted_stems) + len(wanted & passage_stems)) / len(wanted)
        else:
            coverage = 0.0
        if defined:  # a sentence defining the subject asked about was quoted: the question's core
            coverage = max(coverage, DEFINED_COVERAGE)
    return Relevance(coverage, topic, missing, similarity, relevance_confidence(coverage, topic, similarity))


def relevance_confidence(coverage: float | None, topic: float, similarity: float | None) -> float:
    """The confidence of an extractive answer: its coverage of the question (the vector similarity
    where words cannot be compared), scaled down by every specific term of the question its
    passages lack, then mapped onto ``[FLOOR, FLOOR + SPAN]``.

    Calibrated on answers-dev (docs/evaluation.md, "The offline answer"): word coverage tells a
    quote about the question's topic from one about another (those fall below the minimum 0.4),
    not a quote of the right chapter from one of its neighbour, so it never reaches 1.0; only a
    quote covering nearly all of the question, or a definition of its subject with the rest of it,
    reaches 0.7."""
    # a paraphrase shares few words with the question but is near it in the embedding; the
    # similarity alone never makes an answer confident (its weight keeps it below 0.7)
    near = SIMILARITY_WEIGHT * _similarity_unit(similarity) if similarity is not None else 0.0
    base = max(coverage, near) if coverage is not None else _similarity_unit(similarity)
    raw = max(0.0, min(1.0, base * topic * topic))
    return round(CONFIDENCE_FLOOR + CONFIDENCE_SPAN * raw, 3)


def _similarity_unit(similarity: float | None) -> float:
    """A cosine similarity of multilingual-e5 (question to passage, about 0.75 for unrelated text
    and 0.9 for the answer) on [0, 1]."""
    if similarity is None:
        return 0.5
    return max(0.0, min(1.0, (similarity - 0.75) / 0.15))
