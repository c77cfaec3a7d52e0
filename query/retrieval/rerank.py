"""Rerank fused candidates with a score threshold, falling back to the fused order when the
provider is slow or broken (worse than a rerank, better than an error).

The provider's answer is untrusted input: indexes must be integers naming a candidate, each at
most once; scores must be finite numbers. An empty result after the threshold is an honest
"no answer", not a reason to hand the generator weak documents.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from ragline.query.deadline import DeadlineExceeded, QuestionDeadlineExceeded, run_with_deadline
from ragline.shared.sdk.contracts import Hit
from ragline.shared.worker import metrics as m
from ragline.shared.worker.providers import Reranker
from ragline.shared.worker.timing import elapsed_ms

log = logging.getLogger(__name__)


def validate_ranked(raw: list[tuple[Any, Any]], n_candidates: int) -> tuple[list[tuple[int, float]], int]:
    """Valid ``(index, score)`` pairs sorted by score (the provider's order is not trusted), and
    how many were dropped."""
    seen: set[int] = set()
    good: list[tuple[int, float]] = []
    for index, score in raw:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_candidates:
            continue
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            continue
        if index in seen:
            continue
        seen.add(index)
        good.append((index, float(score)))
    good.sort(key=lambda t: -t[1])
    return good, len(raw) - len(good)


def document_text(h: Hit, max_chars: int | None = None) -> str:
    text = f"{h.heading}\n{h.content}" if h.heading else h.content
    return text if max_chars is None else text[:max_chars]


def bounded_inputs(hits: list[Hit], max_candidates: int, max_chars: int) -> tuple[list[Hit], list[str]]:
    """The candidates a reranker is sent (the first ``max_candidates``, in fused order) and their
    texts cut at ``max_chars``: the provider's time and cost grow with both, and a rerank request
    may carry a thousand hits of any length."""
    kept = hits[:max_candidates]
    return kept, [document_text(h, max_chars) for h in kept]


@dataclass
class RerankOutcome:
    hits: list[Hit]
    degraded: bool = False
    reasons: list[str] = field(default_factory=list)
    dropped: int = 0
    ms: float = 0.0


def fallback(hits: list[Hit], top_k: int, reason: str, detail: str) -> RerankOutcome:
    m.RERANK_DEGRADED.labels(reason=reason).inc()
    log.warning("rerank degraded to the fused order: %s", detail)
    return RerankOutcome(hits=hits[:top_k], degraded=True, reasons=[f"rerank: {detail}"])


def rerank_hits(
    reranker: Reranker,
    query: str,
    hits: list[Hit],
    top_k: int,
    threshold: float,
    timeout_s: float,
    max_candidates: int = 100,
    max_chars: int = 2000,
) -> RerankOutcome:
    """Top ``top_k`` candidates by the reranker's score, those below ``threshold`` dropped; only the
    first ``max_candidates`` are considered, each sent cut at ``max_chars`` (:func:`bounded_inputs`).

    A timeout or any provider error returns the fused order (no threshold: there are no scores)
    with ``degraded`` set and ``rag_rerank_degraded`` incremented.
    """
    if not hits:
        return RerankOutcome(hits=[])
    hits, texts = bounded_inputs(hits, max_candidates, max_chars)
    t0 = time.perf_counter()
    try:
        raw = run_with_deadline(reranker.rerank, timeout_s, query, texts, top_k)
    except DeadlineExceeded:
        out = fallback(hits, top_k, "timeout", f"timeout after {timeout_s * 1000:.0f} ms")
        out.ms = elapsed_ms(t0)
        return out
    except QuestionDeadlineExceeded:  # the fused order is all the question has time for
        out = fallback(hits, top_k, "deadline", "the question's deadline passed")
        out.ms = elapsed_ms(t0)
        return out
    except Exception as exc:  # the provider is down or answered garbage: keep serving
        out = fallback(hits, top_k, "error", f"{type(exc).__name__}")
        out.ms = elapsed_ms(t0)
        return out
    ranked, dropped = validate_ranked(raw if isinstance(raw, list) else [], len(hits))
    ms = elapsed_ms(t0)
    if dropped:
        log.warning("reranker returned %d invalid item(s) of %d", dropped, len(raw))
    if not ranked and hits:
        out = fallback(hits, top_k, "invalid", f"no valid index in {len(raw)} item(s)")
        out.ms, out.dropped = ms, dropped
        return out
    kept: list[Hit] = []
    for index, score in ranked:
        if score < threshold or len(kept) == top_k:
            break
        h = hits[index].model_copy()
        h.rerank_score = score
        h.score = score
        kept.append(h)
    return RerankOutcome(hits=kept, dropped=dropped, ms=ms)
