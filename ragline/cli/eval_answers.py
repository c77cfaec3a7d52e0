"""`ragline eval QUESTIONS.jsonl --answers`: the answer eval's command line (the scoring is
``ragline.operations.eval_answers``; this module asks, prints and writes)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from ragline.cli.common import console, reload_app

#: the per-kind table: (column, key of a summary, format)
COLUMNS = (
    ("n", "n", "d"),
    ("right", "right", "d"),
    ("partial", "partial", "d"),
    ("wrong", "wrong", "d"),
    ("no-ans", "no_answer", "d"),
    ("failed", "failed", "d"),
    ("conf-wrong", "confident_wrong", "d"),
    ("cited doc%", "cited_doc_pct", ".0f"),
    ("cited ok%", "cited_ok_pct", ".0f"),
    ("lines%", "cited_lines_pct", ".0f"),
    ("facts", "mean_facts", ".2f"),
    ("faithful", "faithfulness", ".2f"),
    ("relevance", "answer_relevance", ".2f"),
    ("ctx prec", "context_precision", ".2f"),
    ("ctx recall", "context_recall", ".2f"),
    ("ceiling", "ceiling", "d"),
    ("right/ceil%", "right_of_ceiling_pct", ".0f"),
    ("miss search", "miss_search", "d"),
    ("miss answer", "miss_answer", "d"),
    ("p50 ms", "latency_ms_p50", ".0f"),
    ("gen calls", "generator_calls_mean", ".1f"),
)


def _cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def summary_table(title: str, groups: dict[str, dict]) -> Table:
    table = Table(
        Column(title, no_wrap=True, min_width=12), *(Column(c, no_wrap=True) for c, _, _ in COLUMNS)
    )
    for name, s in groups.items():
        table.add_row(escape(str(name)), *(_cell(s.get(key), fmt) for _, key, fmt in COLUMNS))
    return table


def calibration_table(cal: dict[str, dict]) -> Table:
    table = Table("confidence", "answered", "right", "right share")
    for name, b in cal.items():
        table.add_row(name, str(b["n"]), str(b["right"]), _cell(b["right_share"], ".2f"))
    return table


def _judge_call(judge: str):
    """The chat-model judge's ``call(system, messages) -> text`` (None: offline judges only)."""
    from ragline.shared.config.settings import get_settings
    from ragline.shared.worker import providers

    if judge == "offline":
        return None
    generator = providers.get_generator() if get_settings().answer.provider != "extractive" else None
    if generator is None:
        if judge == "generator":
            raise typer.BadParameter(
                "--judge generator needs a chat generator (RAGLINE_ANSWER_PROVIDER)", param_hint="'--judge'"
            )
        return None
    return lambda system, messages: generator.generate(system, messages).text


@contextmanager
def _appending(path: Path | None) -> Iterator[Callable[[str, dict], None] | None]:
    """``save(id, response)`` appending ``{"id", "response"}`` lines to ``path`` (None: no saving)."""
    if path is None:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:

        def save(qid: str, response: dict) -> None:
            f.write(json.dumps({"id": qid, "response": response}, ensure_ascii=False) + "\n")
            f.flush()

        yield save


def answer_eval(
    questions_path: Path,
    *,
    corpus: Path | None,
    tenant: str | None,
    groups: list[str],
    k: int,
    mode: str,
    responses: Path | None,
    save_answers: Path | None,
    judge: str,
    out: Path | None,
    as_json: bool,
    keep: bool,
    show_failures: bool,
    timeout: float,
    only: list[str] = (),
) -> None:
    from ragline.operations import eval as retrieval_eval  # start-up: Celery and psycopg load only for eval
    from ragline.operations import eval_answers as ev
    from ragline.shared.config.settings import get_settings

    if mode == "all":
        raise typer.BadParameter(
            "--answers asks in one mode: hybrid, vector or lexical", param_hint="'--mode'"
        )
    try:
        questions = ev.read_jsonl(questions_path)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not ev.is_answer_set(questions):
        raise typer.BadParameter('--answers needs questions with "id" and "question"', param_hint="QUERIES")
    if only:
        questions = [q for q in questions if q["id"] in only or q.get("kind") in only]
        if not questions:
            raise typer.BadParameter(f"no question with id or kind {', '.join(only)}", param_hint="'--only'")
    if responses is None and tenant is None and corpus is None:
        raise typer.BadParameter("--answers needs --tenant and --groups (or --corpus, or --responses)")
    if tenant is not None and not groups:
        raise typer.BadParameter("--tenant needs --groups: the caller's ACL groups", param_hint="'--groups'")
    say = lambda msg: console.print(escape(msg))  # noqa: E731
    settings = get_settings()
    call = _judge_call(judge)
    live = responses is None
    if live or tenant is not None:
        reload_app()
    fresh = None
    try:
        if live and tenant is None:  # a JSON-lines corpus into a fresh tenant, like the retrieval eval
            fresh = tenant = retrieval_eval.fresh_tenant()
            groups = [retrieval_eval.EVAL_GROUP]
            summary = retrieval_eval.ingest_corpus(retrieval_eval.read_jsonl(corpus), tenant)
            say(
                f"ingested {summary['documents']} documents, {summary['chunks']} chunks,"
                f" {summary['failed']} failed"
            )
        latency: dict[str, float] = {}
        if live:
            done = ev.read_answers(save_answers) if save_answers and save_answers.is_file() else {}
            done = {qid: r for qid, r in done.items() if not ev.is_error(r)}  # errors are asked again
            if done:
                say(f"{len(done)} answers already in {save_answers}, asking the rest")
            with _appending(save_answers) as save:
                answers, latency = ev.ask_all(
                    questions, ev.task_ask(tenant, groups, k, mode, timeout), done, say, save
                )
        else:
            answers = ev.read_answers(responses)
        lookup = ev.chunk_lookup(tenant, groups) if tenant is not None else None
        result = ev.score(questions, answers, ev.contexts(answers, lookup), latency, call)
    finally:
        if fresh and not keep:
            retrieval_eval.drop_tenant(fresh)
    result["meta"] = {
        "questions": str(questions_path),
        "responses": str(responses) if responses else None,
        "corpus": str(corpus) if corpus else None,
        "tenant": tenant,
        "groups": groups,
        "k": k,
        "mode": mode,
        "generator": settings.answer.provider,
        "judge": "generator" if call else "offline",
        "embedder": settings.embed.model_name,
        "answer_min_confidence": settings.answer.min_confidence,
        "reranker": settings.rerank.provider,
    }
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, ensure_ascii=False, indent=1))
    if as_json:
        print(
            json.dumps(
                {k_: result[k_] for k_ in ("total", "by_kind", "by_lang", "calibration", "warnings")},
                ensure_ascii=False,
            )
        )
        return
    show = Console(width=max(Console().width, 240))  # the per-kind table has 22 columns
    show.print(summary_table("kind", result["by_kind"]))
    show.print(summary_table("language", result["by_lang"]))
    show.print(summary_table("total", {"all": result["total"]}))
    show.print(calibration_table(result["calibration"]))
    t = result["total"]
    show.print(
        f"right: {t['right']}/{t['n']} = {t['right_pct']}%  (answerable {t['answerable_right']}/{t['answerable']},"
        f" unanswerable honest no-answer {t['unanswerable_right']}/{t['unanswerable']});"
        f" no_answer on answerable {t['no_answer_on_answerable']}/{t['answerable']};"
        f" confident_wrong (confidence >= {ev.CONFIDENT}) {t['confident_wrong']};"
        f" judge: {result['meta']['judge']}"
    )
    for w in result["warnings"]:
        console.print(f"[yellow]{escape(w)}[/]")
    if show_failures:
        for r in result["questions"]:
            if not r["right"]:
                where = (
                    f"  ctx facts {r['ctx_facts']} doc {r['ctx_doc']}: {r['miss']}'s miss"
                    if r.get("miss")
                    else ""
                )
                show.print(
                    f"{r['id']:14} {r['kind']:13} {escape(ev.failure_reason(r))}  cited: {escape(', '.join(r['cited'][:3]))}"
                    + where
                )
