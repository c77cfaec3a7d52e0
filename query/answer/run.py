"""One question's way through the answer path: the run object and the stages it goes through.

A :class:`QuestionRun` holds what every stage of one question reads and adds to: the question, the
settings, the generator (resolved once, :func:`ragline.query.answer.generate.resolve`), why the
answer degraded (``reasons``), how long each stage took (``timings``) and what it decided
(``trace``). The run is the answer side's own: the search side of ``ask`` hands over a frozen
plan and its evidence (:mod:`ragline.query.plan`), which :meth:`QuestionRun.read` takes in, and
never sees the run; :func:`respond` then takes the hits through the answer stages, each a
function of the run:

context (:func:`context_stage`) → generation (:func:`generate_stage`, extractive when the chat model
fails) → self-consistency (:func:`self_consistency`) → links (:func:`links_stage`) → citations
(:func:`citations_stage`) → groundedness (:func:`grounding_stage`) → confidence
(:func:`confidence_stage`) → the answer with its citations.

A stage that finds the answer must not be returned raises :class:`Refused`; :func:`respond` turns
it into the no-answer response, whose text is the refusal of the question's language
(:mod:`ragline.query.answer.texts`) unless the stage wrote its own.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ragline.query.answer import grounding, texts
from ragline.query.answer.citations import (
    build_citations,
    cited_numbers,
    claims,
    invalid_citations,
    renumber,
)
from ragline.query.answer.context import Assembly, assemble, chunk_for, squeeze
from ragline.query.answer.generate import (
    AnswerGenerator,
    ChatGenerator,
    ExtractiveGenerator,
    Generated,
    resolve,
)
from ragline.query.answer.prompt import render_squeeze
from ragline.query.answer.sanitize import sanitize_links
from ragline.query.answer.stream import StreamInterrupted
from ragline.query.deadline import check
from ragline.query.plan import Evidence, QueryPlan, chat_for
from ragline.shared.config.settings import Settings, get_settings
from ragline.shared.sdk.contracts import AskResponse, Hit
from ragline.shared.worker import metrics as m
from ragline.shared.worker.providers import Generator
from ragline.shared.worker.timing import elapsed_ms

log = logging.getLogger(__name__)

#: why an answer without hits is none, unless the caller knows better
NOTHING_RELEVANT = "no document passed the relevance threshold"


@dataclass(frozen=True)
class AnswerPolicy:
    """How the stages treat the evidence: the algorithm's switches and thresholds, not a deployment's
    choice (the deployment's are settings: the generator, its token budget, whether to squeeze (a
    call per passage), which judge, the minimum confidence). The stages read :data:`POLICY` at each question; an evaluation varies a field with
    ``dataclasses.replace`` and sets the module's ``POLICY`` for its run."""

    #: a chat model reads neighbouring or overlapping chunks of one document as one passage (the
    #: extractive generator ranks sentences by their chunk's rank, so it always reads them unmerged)
    merge: bool = True
    #: the most relevant passages at both ends of the prompt, the weakest in the middle, where long
    #: contexts are read least carefully ("lost in the middle", Liu et al. 2023)
    reorder: bool = True
    #: with squeezing on, passages of more estimated tokens than this are squeezed
    squeeze_min_tokens: int = 400
    #: the lexical judge: the share of a sentence's topic stems its cited passages must hold
    grounding_min_share: float = 0.5
    #: more unsupported sentences than this share of the answer's: no answer at all
    max_unsupported_share: float = 0.5


POLICY = AnswerPolicy()


class Refused(Exception):
    """The answer must not be returned: ``reason`` (for operators, English), the text shown instead
    (None: the refusal of the question's language) and the response's other fields."""

    def __init__(self, reason: str, answer: str | None = None, **fields: object) -> None:
        super().__init__(reason)
        self.reason = reason
        self.answer = answer
        self.fields = fields


@dataclass
class QuestionRun:
    """The state of one question on the answer path (see the module docstring)."""

    question: str
    settings: Settings
    generator: AnswerGenerator
    t0: float = field(default_factory=time.perf_counter)
    #: why the configured chat model could not be built (the extractive generator answers instead)
    generator_error: Exception | None = None
    reasons: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    trace: dict = field(default_factory=dict)
    #: the evidence may not cover the question (the agentic budget ran out)
    partial: bool = False
    #: the share of the searched scope's embeddable rows the vector search saw (Evidence.vector_share)
    vector_share: float = 1.0

    @classmethod
    def start(cls, question: str, settings: Settings | None = None, t0: float | None = None) -> QuestionRun:
        """A run for ``question`` with the configured generator, built here and only here."""
        settings = settings or get_settings()
        generator, error = resolve(settings)
        run = cls(question, settings, generator, generator_error=error)
        if t0 is not None:
            run.t0 = t0
        return run

    @property
    def lang(self) -> str:
        """The language of the question: every text ragline writes itself is in it."""
        return texts.language_of(self.question)

    @property
    def chat(self) -> ChatGenerator | None:
        """The chat model for the free-form stages (squeeze, judge), None for the extractive one."""
        return self.generator if isinstance(self.generator, ChatGenerator) else None

    def chat_model(self, stage: str) -> Generator | None:
        """The chat model's completion for ``stage`` (the agentic planner), or None; when a
        configured one could not be built, the stage says so in ``reasons``."""
        return chat_for(stage, self.generator.completion, self.generator_error, self.reasons)

    def read(self, plan: QueryPlan, evidence: Evidence) -> None:
        """Take in what the search side decided and found: the question as planned (rewritten from
        the history), then the plan's and the evidence's degraded reasons, timings and trace."""
        self.question = plan.question
        self.reasons += [*plan.reasons, *evidence.reasons]
        self.vector_share = evidence.vector_share
        self.timings["transform"] = plan.elapsed_ms
        self.timings.update(evidence.timings)
        self.trace.update(plan.trace())
        self.trace.update(evidence.trace)

    def done(self, **fields: object) -> AskResponse:
        """The response, with the run's reasons, timings (and the total) and trace."""
        self.timings["total"] = elapsed_ms(self.t0)
        return AskResponse(
            degraded=bool(self.reasons),
            degraded_reasons=self.reasons,
            timings_ms=self.timings,
            trace=self.trace,
            partial=self.partial,
            **fields,  # type: ignore[arg-type]
        )

    def answer(self, hits: list[Hit], order: list[int] | None = None) -> Generated:
        """The generator's answer, the extractive one when the chat model fails or could not be
        built (its ``reasons`` say why). A stream that broke off after the reader saw part of it
        raises :class:`StreamInterrupted`: it is not replaced by another answer."""
        reasons: list[str] = []
        if self.generator_error is not None:
            reasons.append(f"generator: {type(self.generator_error).__name__}: {self.generator_error}")
        if self.chat is not None:
            try:
                return self.generator.answer(self.question, hits, self.partial, order)
            except StreamInterrupted:
                raise
            except Exception as exc:  # the chat model is down: the offline answer is better than none
                log.warning(
                    "generator %s failed, extractive answer: %s", self.generator.name, type(exc).__name__
                )
                reasons.append(f"generator: {type(exc).__name__}")
            out = ExtractiveGenerator().answer(self.question, hits)
        else:
            out = self.generator.answer(self.question, hits, self.partial, order)
        out.reasons = reasons + out.reasons
        return out


def respond(run: QuestionRun, hits: list[Hit], empty_reason: str = NOTHING_RELEVANT) -> AskResponse:
    """The answer stages over ``hits`` (shared by the plain and the agentic path), and the response."""
    try:
        if not hits:
            m.EMPTY_CONTEXT.inc()
            raise Refused(empty_reason)
        asm = context_stage(run, hits)
        hits = asm.hits()  # one per passage: [N] names passage N
        gen = generate_stage(run, hits, asm)
        answer = gen.text
        if (
            run.chat is not None
            and run.settings.answer.self_consistency > 1
            and gen.info["generator"] != "extractive"
        ):
            answer = self_consistency(run, hits, asm, answer, gen.info)
        if texts.is_refusal(answer) and not cited_numbers(answer):
            raise Refused("the generator found no answer")
        answer, removed = links_stage(run, answer, hits)
        citations_stage(run, answer, hits)
        answer, g = grounding_stage(run, answer, asm, gen)
        cited = [asm.passages[n - 1].as_hit(full=True) for n in cited_numbers(answer)]
        removed_sentences = g.removed if g else []
        conf = confidence_stage(run, gen, g, cited, hits, removed_sentences)
    except Refused as refused:
        return run.done(
            answer=refused.answer if refused.answer is not None else texts.no_answer(run.lang),
            citations=[],
            no_answer=True,
            reason=refused.reason,
            **refused.fields,
        )
    said = claims(answer)  # a merged passage's citation names the chunk holding what was said
    answer, order = renumber(answer)
    cite_hits = [chunk_for(asm.passages[n - 1], said.get(n, [])) for n in order]
    # the trace names the passages as the answer now does: the cited ones 1…k, then the others
    new = {old: i for i, old in enumerate(order + [p.n for p in asm.passages if p.n not in order], 1)}
    for doc in run.trace.get("answer_documents", []):
        doc["n"] = new.get(doc["n"], doc["n"])
    run.trace.get("answer_documents", []).sort(key=lambda d: d["n"])
    if "extractive" in run.trace:
        run.trace["extractive"]["quoted"] = sorted(new.get(n, n) for n in run.trace["extractive"]["quoted"])
    return run.done(
        answer=answer,
        citations=build_citations(answer, cite_hits, run.lang),
        no_answer=False,
        removed_links=removed,
        confidence=conf,
        removed_sentences=removed_sentences,
    )


def context_stage(run: QuestionRun, hits: list[Hit]) -> Assembly:
    """Merge, budget, order (and squeeze) the passages the generator reads (query/answer/context.py)."""
    a, policy = run.settings.answer, POLICY
    chat = run.chat
    t = time.perf_counter()
    # the extractive generator ranks sentences by their chunk's rank: it reads the chunks unmerged
    # (merged, a definition question over the Vue docs lost its definition)
    merge = policy.merge and chat is not None
    asm = assemble(hits, a.context_budget_tokens.get(a.provider, 0), merge, policy.reorder)
    run.timings["context"] = elapsed_ms(t)
    if chat is not None and a.context_squeeze:
        check("squeezing the context")
        t = time.perf_counter()
        _, errors = squeeze(asm, run.question, chat.call, policy.squeeze_min_tokens, render_squeeze)
        run.reasons += errors
        run.timings["squeeze"] = elapsed_ms(t)
        m.ANSWER_STAGE_LATENCY_MS.labels(stage="squeeze").observe(run.timings["squeeze"])
    m.ANSWER_STAGE_LATENCY_MS.labels(stage="context").observe(run.timings["context"])
    m.CONTEXT_MERGED_CHUNKS.inc(asm.merged)
    m.CONTEXT_DROPPED_CHUNKS.inc(len(asm.dropped))
    run.trace["context"] = asm.trace()
    run.trace["answer_documents"] = [
        {"n": p.n, "doc_id": p.doc_id, "chunk_no": p.hits[0].chunk_no, "chunks": [h.chunk_no for h in p.hits]}
        for p in asm.passages
    ]
    return asm


def generate_stage(run: QuestionRun, hits: list[Hit], asm: Assembly) -> Generated:
    """The answer (:meth:`QuestionRun.answer`), timed and traced; a stream the reader saw break off
    is retracted (:class:`Refused` with the interruption's text)."""
    t = time.perf_counter()
    try:
        gen = run.answer(hits, asm.order)
    except StreamInterrupted as exc:  # the reader saw part of an answer that broke off: retracted
        run.reasons.append(f"generator: {exc}")
        raise Refused(run.reasons[-1], answer=texts.say("interrupted", run.lang, why=str(exc))) from None
    run.reasons += gen.reasons
    if gen.extract is not None:
        run.trace["extractive"] = {
            "kind": gen.extract.kind,
            "quoted": sorted({n for n, _ in gen.extract.quoted}),
        }
    run.timings["generate"] = elapsed_ms(t)
    m.GENERATION_LATENCY_MS.labels(generator=gen.info["generator"]).observe(run.timings["generate"])
    run.trace["generator"] = gen.info
    return gen


def self_consistency(run: QuestionRun, hits: list[Hit], asm: Assembly, first: str, info: dict) -> str:
    """Sample more answers, keep the one agreeing most with the others (cited documents, claims)."""
    a = run.settings.answer
    check("self-consistency")
    t = time.perf_counter()
    samples, failed = [first], 0
    for _ in range(a.self_consistency - 1):
        more = run.answer(hits, asm.order)
        if more.reasons or more.info["generator"] == "extractive":  # a failed sample is not a vote
            failed += 1
            continue
        samples.append(more.text)
        info["input_tokens"] = info.get("input_tokens", 0) + more.info.get("input_tokens", 0)
        info["output_tokens"] = info.get("output_tokens", 0) + more.info.get("output_tokens", 0)
    n = len(asm.passages)
    best, agree = grounding.most_consistent(
        samples, lambda k: asm.passages[k - 1].doc_id if 1 <= k <= n else ""
    )
    run.timings["self_consistency"] = elapsed_ms(t)
    m.ANSWER_STAGE_LATENCY_MS.labels(stage="self_consistency").observe(run.timings["self_consistency"])
    run.trace["self_consistency"] = {
        "samples": len(samples),
        "failed": failed,
        "chosen": best,
        "agreement": agree,
        "extra_calls": a.self_consistency - 1,
    }
    return samples[best]


def links_stage(run: QuestionRun, answer: str, hits: list[Hit]) -> tuple[str, list[str]]:
    """Links and images only to URLs the cited documents contain (a poisoned document cannot make a
    chat UI fetch its URL); the URLs themselves may carry secrets, so only their count is logged."""
    cited = [hits[n - 1].content for n in cited_numbers(answer) if 1 <= n <= len(hits)]
    answer, removed = sanitize_links(answer, cited, run.lang)
    if removed:
        log.warning("answer: %d link(s) to URLs not in the cited documents removed", len(removed))
    return answer, removed


def invalid_answer(answer: str, n_documents: int) -> tuple[str | None, list[int]]:
    """Why an answer must not be returned (None when it may be), and the bad citation numbers."""
    bad = invalid_citations(answer, n_documents)
    if bad:
        return f"invalid citations {bad}: the answer cites documents that were not in the prompt", bad
    if not cited_numbers(answer):
        return "the answer cites no document", []
    return None, []


def citations_stage(run: QuestionRun, answer: str, hits: list[Hit]) -> None:
    """Refuses an answer that cites no document or one that was not in the prompt."""
    why, bad = invalid_answer(answer, len(hits))
    if why:
        log.warning("answer rejected (%s); %d chars not returned", why, len(answer))
        if bad:
            m.INVALID_CITATIONS.inc()
            run.trace["rejected_citations"] = bad
        raise Refused(why, answer=texts.say("rejected", run.lang, why=why))


def judge_of(mode: str, generator: str) -> str | None:
    """The groundedness judge for ``answer.grounding`` and the generator that wrote the answer."""
    if mode == "off":
        return None
    if generator == "extractive":
        return "structural"
    return None if mode == "auto" else mode


def grounding_stage(
    run: QuestionRun, answer: str, asm: Assembly, gen: Generated
) -> tuple[str, grounding.Grounding | None]:
    """Check every sentence against the passages it cites (query/answer/grounding.py): the answer
    without its unsupported sentences, and the check (None when off). Too many unsupported
    sentences, or none cited left: refused."""
    a, policy = run.settings.answer, POLICY
    judge = judge_of(a.grounding, gen.info["generator"])
    if judge is None:
        return answer, None
    framing = gen.extract.framing if gen.extract is not None else []
    chat = run.chat.call if run.chat is not None else None
    passages = [p.text for p in asm.passages]
    t = time.perf_counter()
    try:
        g = grounding.check(answer, passages, judge, policy.grounding_min_share, chat, framing)
    except Exception as exc:  # the judge failed or answered garbage: the offline judge still checks
        log.warning("groundedness judge failed, lexical check: %s", exc)
        run.reasons.append(f"grounding: {type(exc).__name__}: {exc}"[:200])
        g = grounding.check(answer, passages, "lexical", policy.grounding_min_share, framing=framing)
    run.timings["grounding"] = elapsed_ms(t)
    m.ANSWER_STAGE_LATENCY_MS.labels(stage="grounding").observe(run.timings["grounding"])
    if g.removed:
        m.UNGROUNDED_SENTENCES.labels(judge=g.judge).inc(len(g.removed))
    run.trace["grounding"] = g.trace()
    if not g.removed:
        return answer, g
    too_many = 1 - g.support > policy.max_unsupported_share or not cited_numbers(g.answer)
    m.UNGROUNDED_ANSWERS.labels(judge=g.judge, outcome="no_answer" if too_many else "trimmed").inc()
    if too_many:
        why = f"{len(g.removed)} of {len(g.claims)} sentences are not supported by the documents they cite"
        raise Refused(why, removed_sentences=g.removed)
    return g.answer, g


def confidence_stage(
    run: QuestionRun,
    gen: Generated,
    g: grounding.Grounding | None,
    cited: list[Hit],
    hits: list[Hit],
    removed_sentences: list[str],
) -> float | None:
    """The answer's confidence (recorded in the trace); an answer judged below the minimum is refused."""
    a = run.settings.answer
    conf, judged = confidence(run, gen, g, cited, hits)
    if conf is not None and judged and conf < a.min_confidence:
        m.LOW_CONFIDENCE_ANSWERS.inc()
        why = f"confidence {conf:.2f} is below the minimum {a.min_confidence:g}"
        raise Refused(why, confidence=conf, removed_sentences=removed_sentences)
    if conf is not None:
        m.ANSWER_CONFIDENCE.observe(conf)
    return conf


def confidence(
    run: QuestionRun, gen: Generated, g: grounding.Grounding | None, cited: list[Hit], hits: list[Hit]
) -> tuple[float | None, bool]:
    """(the answer's confidence, whether it may withhold the answer), recorded in the trace."""
    a = run.settings.answer
    ex = gen.extract
    if ex is not None:
        # an extractive answer only quotes (its support is 1.0 by construction): how far to trust
        # it is the fitted probability that what it quoted answers the question, in this scope
        features = ex.features | grounding.scope_features(run.vector_share)
        probability = grounding.answer_probability(features)
        run.trace["confidence"] = {
            "features": {k: None if v is None else round(v, 3) for k, v in features.items()},
            "confidence": probability,
            "min": a.min_confidence,
            "judged": True,
        }
        return probability, True
    signal = grounding.retrieval_signal(run.question, cited)
    conf = grounding.confidence(signal, g.support if g else None)
    # withheld only on evidence: a groundedness result or a reranker's scores; the share of the
    # question's words in the passages alone is reported, not trusted to refuse (a paraphrase shares few)
    judged = g is not None or any(h.rerank_score is not None for h in cited)
    run.trace["confidence"] = {
        "retrieval": None if signal is None else round(signal, 3),
        "support": round(g.support, 3) if g else None,
        "confidence": conf,
        "min": a.min_confidence,
        "judged": judged,
    }
    return conf, judged
