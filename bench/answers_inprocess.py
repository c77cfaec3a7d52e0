"""The answer path in process, over retrieval cached per question: iterate on the answer composer and
fit its confidence without a Celery round trip or a second search per question.

    RAGLINE_SERVICES_HOME=/tmp/rl-answers python -m bench.answers_inprocess QUESTIONS.jsonl \
        --tenant xq --groups dev --cache /tmp/xq-hits.json --out /tmp/xq-answers.jsonl

The first run of a set searches each question as ``ragline.query.service.ask`` does (transforms,
router, retrieval, rerank, expansion: the real function, in this process, against the running
stack's database) and records the hits the answer stages read; later runs read them from
``--cache`` and run only the answer stages (:func:`ragline.query.answer.run.respond`). Each response
is written as ``{"id", "response"}`` (the format of ``score.py`` and ``ragline eval --answers
--responses``), with the retrieval's trace kept for the confidence features.
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
from pathlib import Path

from ragline.operations.eval_answers import aggregate, read_jsonl, score_one
from ragline.query import service
from ragline.query.answer import generate
from ragline.query.answer import run as answer_run
from ragline.shared.sdk.contracts import AskRequest, Hit
from ragline.shared.worker import providers


def search_hits(question: str, tenant: str, groups: list[str]) -> dict:
    """The hits ``service.ask`` hands to the answer stages, and the retrieval trace."""
    seen: dict = {}
    real = service.respond

    def record(run: answer_run.QuestionRun, hits: list[Hit], empty_reason: str = answer_run.NOTHING_RELEVANT):
        seen["hits"] = [h.model_dump(mode="json") for h in hits]
        seen["question"] = run.question
        seen["trace"] = {k: run.trace.get(k) for k in ("retrieved", "reranked", "corpus_names")}
        seen["empty_reason"] = empty_reason
        seen["vector_share"] = run.vector_share
        return run.done(answer="", citations=[], no_answer=True)  # answered from the record, once

    service.respond = record
    try:
        service.ask(AskRequest(query=question, tenant=tenant, groups=groups))
    finally:
        service.respond = real
    return seen


def answer(cached: dict) -> dict:
    """The answer stages over the cached hits, timed."""
    run = answer_run.QuestionRun.start(cached["question"])
    run.trace.update({k: v for k, v in cached["trace"].items() if v is not None})
    run.vector_share = cached.get("vector_share", 1.0)
    hits = [Hit(**h) for h in cached["hits"]]
    t = time.perf_counter()
    resp = answer_run.respond(run, hits, cached["empty_reason"]).model_dump(mode="json")
    resp["timings_ms"]["answer_in_process"] = (time.perf_counter() - t) * 1000
    return resp


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("questions", type=Path)
    ap.add_argument("--tenant", required=True)
    ap.add_argument("--groups", required=True)
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vectors", type=Path, help="a pickle of the sentence vectors, read and extended")
    ap.add_argument("--cached-only", action="store_true", help="answer only the questions already searched")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="empty the sentence vectors before each question: time its first visit, not a warm worker's",
    )
    args = ap.parse_args()
    if args.vectors and args.vectors.exists():
        # a pickle written before the cache was per embedder is keyed by text alone: the current one's
        of = generate.embedder_key(providers.get_embedder())
        stored = pickle.loads(args.vectors.read_bytes())
        generate._SENTENCE_VECTORS.update(
            ((*of, k) if isinstance(k, str) else k, v) for k, v in stored.items()
        )
    questions = read_jsonl(args.questions)
    cache = json.loads(args.cache.read_text()) if args.cache.exists() else {}
    if args.cached_only:
        questions = [q for q in questions if q["id"] in cache]
    groups = args.groups.split(",")
    for i, q in enumerate(questions):
        if q["id"] not in cache:
            cache[q["id"]] = search_hits(q["question"], args.tenant, groups)
            if i % 20 == 0:
                args.cache.write_text(json.dumps(cache, ensure_ascii=False))
    args.cache.write_text(json.dumps(cache, ensure_ascii=False))
    rows = []
    with args.out.open("w", encoding="utf-8") as f:
        for q in questions:
            if args.cold:
                generate._SENTENCE_VECTORS.clear()
            resp = answer(cache[q["id"]])
            f.write(json.dumps({"id": q["id"], "response": resp}, ensure_ascii=False) + "\n")
            rows.append({**score_one(q, resp), "answer_ms": resp["timings_ms"]["answer_in_process"]})
    if args.vectors:
        args.vectors.write_bytes(pickle.dumps(generate._SENTENCE_VECTORS))
    print(json.dumps(summary(questions, rows), ensure_ascii=False))


def summary(questions: list[dict], rows: list[dict]) -> dict:
    """The scorer's totals, and right / partial / no-answer / confident-wrong by kind."""
    out: dict = {"all": dict(aggregate(rows))}
    ms = sorted(r["answer_ms"] for r in rows)
    if ms:
        out["answer_ms"] = {"p50": round(ms[len(ms) // 2], 1), "p95": round(ms[int(0.95 * len(ms)) - 1], 1)}
    for kind in sorted({q["kind"] for q in questions}):
        mine = [r for q, r in zip(questions, rows, strict=True) if q["kind"] == kind]
        out[kind] = {
            "n": len(mine),
            "right": sum(r["right"] for r in mine),
            "partial": sum(r["partial"] for r in mine),
            "no_answer": sum(r["no_answer"] for r in mine),
            "confident_wrong": sum(r["confident_wrong"] for r in mine),
        }
    return out


if __name__ == "__main__":
    main()
