"""Grounded answers measured: does the groundedness check remove the sentences the cited documents
do not support, and keep the ones they do?

A fixed question set over ru-docs (``tests/data/grounding_ru_docs.jsonl``: questions, the document
that answers each, reference facts written from that document in other words, and one plausible
sentence the document does not support). The chat model is a scripted loopback server
(OpenAI-compatible ``/v1/chat/completions``): it reads the prompt, finds the passages of the
reference document and answers the reference facts citing them; in every ``inject_every``-th answer
it adds the unsupported sentence, citing the same passages. The script knows the answer key; the
judge does not: the numbers are for the offline **lexical** judge (query/answer/grounding.py), which sees
only the sentence and the passages it cites.

Reported: the share of injected sentences removed (catch rate), the share of reference facts
wrongly removed, answers turned into no answer, and the latency each answer stage adds. The
extractive generator (``make run``'s) is checked structurally on the same questions: every sentence
must be a span of its cited passage, and its answers with the default stages are compared with the
answers with every stage off.

    .venv/bin/python -m bench.grounding        # writes bench/results/grounding.json
"""

from __future__ import annotations

import html
import json
import re
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "data" / "grounding_ru_docs.jsonl"
RU_DOCS = REPO.parent / "shared" / "datasets" / "ru-docs"
#: the Markdown documents the questions are about (the PDF takes minutes to parse on 2 cores)
FILES = [
    "vue3-docs-ru/guide/reusability/plugins.md",
    "vue3-docs-ru/guide/essentials/computed.md",
    "vue3-docs-ru/guide/built-ins/suspense.md",
    "vue3-docs-ru/guide/extras/rendering-mechanism.md",
    "vue3-docs-ru/guide/extras/composition-api-faq.md",
    "owasp-asvs-4.0.3-ru/md/0x12-V4-Access-Control.md",
    "owasp-top10-2017-ru/md/0xa4-xxe.md",
    "owasp-top10-2017-ru/md/0xa1-injection.md",
]
_DOC_TAG = re.compile(r'<document index="(\d+)" doc_id="[^"]*" path="([^"]*)"')
_QUESTION = re.compile(r"<question>(.*?)</question>", re.S)
NO_ANSWER = "В базе знаний нет ответа на этот вопрос."


@dataclass(frozen=True)
class Case:
    q: str
    doc: str
    facts: tuple[str, ...]
    unsupported: str


def load_cases(path: Path = CASES) -> list[Case]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            out.append(Case(d["q"], d["doc"], tuple(d["facts"]), d["unsupported"]))
    return out


def injected(i: int, inject_every: int) -> bool:
    """Which answers carry the unsupported sentence: every ``inject_every``-th, from the first."""
    return inject_every > 0 and i % inject_every == 0


class ScriptedModel:
    """The loopback chat model's ``answer_fn``: the reference facts of the question in the prompt,
    each cited as the passage of the reference document; the unsupported sentence added (second)
    when the case is marked. No reference passage in the prompt: the no-answer text."""

    def __init__(self, cases: list[Case], inject_every: int) -> None:
        self.by_question = {c.q: (i, c) for i, c in enumerate(cases)}
        self.inject_every = inject_every

    def __call__(self, body: dict) -> str:
        user = body["messages"][-1]["content"]
        m = _QUESTION.search(user)
        if not m or html.unescape(m.group(1)) not in self.by_question:
            return NO_ANSWER
        i, case = self.by_question[html.unescape(m.group(1))]
        ns = sorted(int(k) for k, path in _DOC_TAG.findall(user) if html.unescape(path).endswith(case.doc))
        if not ns:
            return NO_ANSWER
        cite = "".join(f"[{n}]" for n in ns)  # every passage of the reference document
        said = [f"{f[:-1]} {cite}." for f in case.facts]
        if injected(i, self.inject_every):
            said.insert(1, f"{case.unsupported[:-1]} {cite}.")
        return " ".join(said)


def _strip(sentence: str) -> str:
    return re.sub(r"\s*\[\d+\]", "", sentence).strip()


def run_cases(tenant: str, cases: list[Case], chat_url: str, inject_every: int = 2, k: int = 5) -> dict:
    """Ask every case through ``service.ask`` (generator: the OpenAI-compatible server at
    ``chat_url``, lexical judge) and count what the check removed. Settings come from the
    environment; the caller points the generator at the scripted server."""
    from ragline.query import service
    from ragline.shared.sdk.contracts import AskRequest

    rows = []
    for i, case in enumerate(cases):
        t = time.perf_counter()
        res = service.ask(AskRequest(query=case.q, tenant=tenant, groups=["staff"], k=k))
        wall = (time.perf_counter() - t) * 1000
        # removed sentences are in the answer's display form (the sanitizer escapes "<"): compare as text
        removed = {_strip(html.unescape(s)) for s in res.removed_sentences}
        answered = (res.trace.get("generator") or {}).get("generator") == "openai" and (
            res.reason != "the generator found no answer"
        )
        rows.append(
            {
                "q": case.q,
                "answered": answered,
                "injected": injected(i, inject_every),
                "caught": answered and injected(i, inject_every) and _strip(case.unsupported) in removed,
                "facts": len(case.facts) if answered else 0,
                "facts_removed": sum(_strip(f) in removed for f in case.facts) if answered else 0,
                "no_answer": res.no_answer,
                "reason": res.reason,
                "confidence": res.confidence,
                "cites_reference_doc": any(c.path.endswith(case.doc) for c in res.citations),
                "timings_ms": res.timings_ms,
                "wall_ms": round(wall, 2),
            }
        )
    return summarize(rows)


def summarize(rows: list[dict]) -> dict:
    answered = [r for r in rows if r["answered"]]
    inj = [r for r in answered if r["injected"]]
    facts = sum(r["facts"] for r in answered)
    stages = {}
    for stage in ("context", "squeeze", "generate", "self_consistency", "grounding", "total"):
        vals = [r["timings_ms"][stage] for r in answered if stage in r["timings_ms"]]
        if vals:
            stages[stage] = {
                "median_ms": round(statistics.median(vals), 3),
                "max_ms": round(max(vals), 3),
                "n": len(vals),
            }
    return {
        "questions": len(rows),
        "answered": len(answered),
        "injected": len(inj),
        "caught": sum(r["caught"] for r in inj),
        "catch_rate": round(sum(r["caught"] for r in inj) / len(inj), 3) if inj else None,
        "facts": facts,
        "facts_wrongly_removed": sum(r["facts_removed"] for r in answered),
        "false_removal_rate": round(sum(r["facts_removed"] for r in answered) / facts, 3) if facts else None,
        "no_answer": sum(r["no_answer"] for r in answered),
        "latency": stages,
        "rows": rows,
    }


def extractive_check(tenant: str, cases: list[Case], k: int = 5) -> dict:
    """The extractive generator with the default stages: sentences the structural check rejected
    (must be 0), and answers that differ from the ones with every stage off."""
    import os

    from ragline.query import service
    from ragline.shared.config.settings import reset_settings
    from ragline.shared.sdk.contracts import AskRequest

    def answers() -> list[tuple[str, int]]:
        out = []
        for c in cases:
            res = service.ask(AskRequest(query=c.q, tenant=tenant, groups=["staff"], k=k))
            out.append((res.answer, (res.trace.get("grounding") or {}).get("unsupported", 0)))
        return out

    with_stages = answers()
    off = {  # the extractive generator reads its chunks unmerged either way (answer POLICY.merge)
        "RAGLINE_ANSWER_GROUNDING": "off",
        "RAGLINE_ANSWER_MIN_CONFIDENCE": "0",
    }
    saved = {key: os.environ.get(key) for key in off}
    os.environ.update(off)
    reset_settings()
    try:
        without = answers()
    finally:
        for key, v in saved.items():
            if v is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = v
        reset_settings()
    return {
        "questions": len(cases),
        "structural_violations": sum(u for _, u in with_stages),
        "answers_changed_by_stages": sum(a != b for (a, _), (b, _) in zip(with_stages, without, strict=True)),
        "changed": [
            {"q": c.q, "default": a, "stages_off": b}
            for c, (a, _), (b, _) in zip(cases, with_stages, without, strict=True)
            if a != b
        ],
    }


def ingest(tenant: str, files: list[str] = FILES, timeout: float = 600) -> None:
    """The files through the Celery ingest tasks (a worker must consume the ingest queue)."""
    from bench.common import wait_documents_ready
    from ragline.ingest.enqueue import collect_files, enqueue_files
    from ragline.ingest.roots import grant_roots

    wanted = {(RU_DOCS / f).resolve() for f in files}
    found = [f for f in collect_files([RU_DOCS]) if f.path.resolve() in wanted]
    if len(found) != len(files):
        raise RuntimeError(f"ru-docs: {len(found)} of {len(files)} files found under {RU_DOCS}")
    grant_roots(tenant, [RU_DOCS])
    enqueue_files(found, tenant=tenant, acl=["staff"])
    _, errors = wait_documents_ready(tenant, len(files), timeout)
    if errors:
        raise RuntimeError(f"ingest failed: {errors}")


def main(inject_every: int = 2) -> dict:
    from bench.common import embedded_stack, machine, settings_env, worker, write_json
    from ragline.query.answer import run as answer_run
    from ragline.shared.sdk.names import QUEUES
    from tests.loopback import LoopbackServer

    cases = load_cases()
    tenant = "bench-grounding"
    with embedded_stack(), worker(tuple(QUEUES)), LoopbackServer() as emb:
        desc = machine()
        # embeddings: hashed trigram vectors from the loopback server (no model download, fast);
        # what is measured is the check, not retrieval
        with settings_env(
            embed_provider="voyage", providers_voyage_base_url=emb.url + "/v1", providers_voyage_api_key="k"
        ):
            t = time.perf_counter()
            ingest(tenant)
            ingest_s = time.perf_counter() - t
            extractive = extractive_check(tenant, cases)
            with LoopbackServer(answer_fn=ScriptedModel(cases, inject_every)) as chat:
                chat_env = {
                    "answer_provider": "openai",
                    "providers_openai_base_url": chat.url,
                    "providers_openai_api_key": "k",
                }
                with settings_env(**chat_env, answer_grounding="lexical"):
                    lexical = run_cases(tenant, cases, chat.url, inject_every)
                unmerged = replace(answer_run.POLICY, merge=False)
                with (
                    settings_env(**chat_env, answer_grounding="off"),
                    mock.patch.object(answer_run, "POLICY", unmerged),
                ):
                    baseline = run_cases(tenant, cases, chat.url, inject_every)
        data = {
            "benchmark": "grounding",
            "title": "Groundedness check on ru-docs: scripted chat model, lexical judge",
            "params": {
                "cases": str(CASES.relative_to(REPO)),
                "files": FILES,
                "inject_every": inject_every,
                "k": 5,
                "judge": "lexical (offline, query/answer/grounding.py); the script knows the answer key, the judge"
                " sees only sentences and their cited passages",
                "embedder": "loopback hashed trigram vectors",
                "ingest_s": round(ingest_s, 1),
            },
            "lexical": lexical,
            "stages_off": {k: v for k, v in baseline.items() if k in ("answered", "no_answer", "latency")},
            "extractive": extractive,
            "machine": {**desc, "load_average_end": [round(x, 2) for x in __import__("os").getloadavg()]},
        }
    path = write_json(data)
    print(f"wrote {path}")
    print(
        json.dumps(
            {k: lexical[k] for k in lexical if k != "rows"} | {"extractive": extractive},
            ensure_ascii=False,
            indent=1,
        )
    )
    return data


if __name__ == "__main__":
    main()
