"""`ragline search`, `ragline ask`, `ragline eval`, `ragline schemas`: the query side."""

from __future__ import annotations

import json
from pathlib import Path
from textwrap import shorten
from typing import Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ragline.cli.common import console, reload_app, send_and_wait, split_csv
from ragline.operations.snapshots import snapshot_ingest
from ragline.query.schemas import export
from ragline.shared.sdk.names import TASK_QUERY_ASK, TASK_QUERY_RETRIEVE

app = typer.Typer()

# the scope of a question or search, the same options on both (shared/sdk/client.py, scope_filters)
SOURCE = typer.Option(None, "--source", help="only this source (the first segment of every doc id)")
PREFIX = typer.Option(
    [], "--prefix", "--path-prefix", help="only paths with this prefix, inside --source if given (repeatable)"
)
EXCLUDE = typer.Option([], "--exclude", help="leave out paths with this prefix (repeatable)")
PREFER = typer.Option(
    [], "--prefer", help="rank paths with this prefix higher, e.g. docs/ over code (repeatable)"
)
LAYERS = typer.Option(
    [], "--layers", "--layer", help="only these layers, comma-separated or repeated (e.g. source,symbols)"
)


def scope(
    source: str | None, prefix: list[str], exclude: list[str], prefer: list[str], layers: list[str]
) -> dict:
    """The contract's filters for the scope options (the clients' own mapping)."""
    from ragline.shared.sdk.client import scope_filters  # start-up: Celery loads with the client

    out: dict = scope_filters(source, prefix, exclude, prefer)
    if layers:
        out["layers"] = [name for value in layers for name in split_csv(value)]
    return out


@app.command()
def search(
    query: str,
    tenant: str = typer.Option(..., "--tenant"),
    groups: str = typer.Option(..., "--groups", help="comma-separated ACL groups of the caller"),
    k: int = typer.Option(10, "--k"),
    mode: Literal["hybrid", "vector", "lexical", "lexical_code"] = typer.Option(
        "hybrid", "--mode", help="retrieval mode; lexical_code: lexical search of the source-code layer only"
    ),
    source: str | None = SOURCE,
    prefix: list[str] = PREFIX,
    exclude: list[str] = EXCLUDE,
    prefer: list[str] = PREFER,
    layers: list[str] = LAYERS,
    rerank: bool | None = typer.Option(
        None, "--rerank/--no-rerank", help="default: when a reranker is configured"
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Search through the query queue; prints hits with their scores."""
    payload = {
        "query": query,
        "tenant": tenant,
        "groups": split_csv(groups),
        "k": k,
        "mode": mode,
        "rerank": rerank,
        **scope(source, prefix, exclude, prefer, layers),
    }
    res = send_and_wait(TASK_QUERY_RETRIEVE, payload, 60)
    if as_json:
        print(json.dumps(res, ensure_ascii=False))
    elif res.get("ok") is False:
        console.print(f"[red]error:[/] {res['error']} {res.get('detail') or ''}")
    else:
        out = Console()
        for i, h in enumerate(res["hits"], start=1):
            out.print(
                f"[bold]{i}.[/] {h['doc_id']}#{h['chunk_no']} [dim]{h['heading']}[/] score={h['score']:.4f}\n"
                f"   {h['content'][:200]}"
            )
        timings = ", ".join(f"{k_}={v:.0f}ms" for k_, v in res["timings_ms"].items())
        out.print(
            f"[dim]{len(res['hits'])} hits, degraded={res['degraded']} {res['degraded_reasons'] or ''} "
            f"timings: {timings}[/]"
        )
    if res.get("ok") is False:
        raise typer.Exit(1)


@app.command()
def ask(
    question: str,
    tenant: str = typer.Option(..., "--tenant"),
    groups: str = typer.Option(..., "--groups", help="comma-separated ACL groups of the caller"),
    k: int = typer.Option(5, "--k", help="documents in the prompt"),
    mode: Literal["hybrid", "vector", "lexical", "lexical_code"] = typer.Option(
        "hybrid", "--mode", help="retrieval mode; lexical_code: lexical search of the source-code layer only"
    ),
    agentic: bool | None = typer.Option(None, "--agentic/--no-agentic"),
    expand: Literal["off", "section", "document"] | None = typer.Option(
        None,
        "--expand",
        help="also send the hits' sections or documents to the answer (RAGLINE_ANSWER_EXPAND)",
    ),
    source: str | None = SOURCE,
    prefix: list[str] = PREFIX,
    exclude: list[str] = EXCLUDE,
    prefer: list[str] = PREFER,
    layers: list[str] = LAYERS,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Ask a question through the query queue; prints the answer with [N] citations."""
    res = send_and_wait(
        TASK_QUERY_ASK,
        {
            "query": question,
            "tenant": tenant,
            "groups": split_csv(groups),
            "k": k,
            "mode": mode,
            "agentic": agentic,
            "expand": expand,
            **scope(source, prefix, exclude, prefer, layers),
        },
        120,
    )
    if as_json:
        print(json.dumps(res, ensure_ascii=False))
    else:
        print_answer(question, res)
    if res.get("ok") is False:
        raise typer.Exit(1)


def citation_line(c: dict) -> str:
    """``[1] docs/owasp.pdf · p. 11 · Внедрение › Как предотвратить``: where the source is, as a
    reader finds it (page, section or line span), not the chunk number. A result of a worker
    that predates locators falls back to the heading and chunk number."""
    source = c.get("path") or c["doc_id"]
    locator = c.get("locator") or ""
    heading = c.get("heading_path") or c.get("heading") or ""
    if not locator:
        locator = f"chunk {c['chunk_no']}"
    if locator.startswith(source + ":"):  # code: the locator is the path with its lines
        parts = [f"[{c['n']}] {locator}"]
        heading = symbol_path(heading, source)
    else:
        parts = [f"[{c['n']}] {source}"]
        if locator != source:
            parts.append(locator)
    if heading and not locator.startswith("§"):
        parts.append(heading)
    return " · ".join(parts)


def symbol_path(heading: str, path: str) -> str:
    """A code chunk's heading without its module (``pkg/hooks.py › Registry › run`` under the path
    ``r/pkg/hooks.py`` is ``Registry › run``): the path is already on the line."""
    parts = heading.split(" › ")
    if parts and parts[0] and (path == parts[0] or path.endswith("/" + parts[0])):
        parts = parts[1:]
    return " › ".join(parts)


def print_answer(question: str, res: dict) -> None:
    out = Console(highlight=False)
    out.rule(f"[bold]{escape(question)}")
    if "answer" not in res:
        out.print(f"[red]error:[/] {escape(str(res))}")
        return
    out.print(escape(res["answer"]))
    if res.get("reason"):
        out.print(f"[yellow]{escape(res['reason'])}[/]")
    for c in res["citations"]:
        out.print("  " + escape(citation_line(c)))
        if c.get("snippet"):
            out.print(f"      [dim]{escape(shorten(c['snippet'], 160))}[/]")
    if res.get("removed_links"):
        out.print(
            f"[yellow]{len(res['removed_links'])} link(s) to addresses not in the cited documents removed[/]"
        )
    timings = ", ".join(f"{k}={v:.0f}ms" for k, v in res["timings_ms"].items())
    out.print(f"[dim]degraded={res['degraded']} {res.get('degraded_reasons') or ''} timings: {timings}[/]")


def parse_weights(text: str) -> list[tuple[float, float]]:
    """``"1:1,1:0.5,1:0.3"`` → [(1.0, 1.0), (1.0, 0.5), (1.0, 0.3)] (vector:lexical)."""
    out = []
    for part in split_csv(text):
        v, _, lx = part.partition(":")
        out.append((float(v), float(lx)))
    return out


@app.command(name="eval")
def eval_cmd(
    queries: Path = typer.Argument(
        ...,
        exists=True,
        dir_okay=False,
        help='JSON lines {"query", "relevant"}; or {"query", "repo", "ref", "relevant"}: a code query set',
    ),
    corpus: Path | None = typer.Option(
        None,
        "--corpus",
        exists=True,
        dir_okay=False,
        help='JSON lines {"id", "title", "text"}; not for a code query set',
    ),
    k: int | None = typer.Option(
        None, "--k", help="retrieval: the cut-off of the metrics (10); --answers: documents in the prompt (5)"
    ),
    mode: Literal["hybrid", "vector", "lexical", "all"] = typer.Option(
        "hybrid", "--mode", help="retrieval mode, or all three (not with --answers)"
    ),
    rerank: bool = typer.Option(False, "--rerank", help="rerank with the configured reranker"),
    sweep: str = typer.Option(
        "",
        "--sweep-rrf",
        help='also score hybrid for RRF weights "wv:wl,..." '
        "(recomputed from the vector and lexical lists; never tune on a test split)",
    ),
    out: Path | None = typer.Option(None, "--out", help="write the full result (misses, settings) as JSON"),
    keep: bool = typer.Option(False, "--keep", help="keep the evaluation tenant"),
    as_json: bool = typer.Option(False, "--json"),
    include: list[str] = typer.Option(
        [], "--include", help="code query set: index only tracked files matching this glob (repeatable)"
    ),
    exclude: list[str] = typer.Option(
        [], "--exclude", help="code query set: leave out tracked files matching this glob (repeatable)"
    ),
    layers: str = typer.Option(
        "all,code",
        "--layers",
        help="code query set: layer variants, comma-separated: all (every layer), code (source and"
        " symbols), source (the source layer alone)",
    ),
    only: str = typer.Option(
        "",
        "--only",
        help="code query set: these query ids only; --answers: these ids or kinds (comma-separated)",
    ),
    parallel: int = typer.Option(
        2, "--parallel", min=1, help="code query set: repositories ingested at the same time"
    ),
    answers: bool = typer.Option(
        False,
        "--answers",
        help='answer quality: a graded set {"id", "question", "kind", "must_cite_any", "key_facts", ...}'
        " asked through the ask task (docs/evaluation.md)",
    ),
    tenant: str | None = typer.Option(None, "--tenant", help="--answers: the tenant to ask (else --corpus)"),
    groups: str = typer.Option("", "--groups", help="--answers: the caller's ACL groups (comma-separated)"),
    responses: Path | None = typer.Option(
        None,
        "--responses",
        exists=True,
        dir_okay=False,
        help='--answers: score these {"id", "response"} lines (run.sh, --save-answers) instead of asking',
    ),
    save_answers: Path | None = typer.Option(
        None,
        "--save-answers",
        dir_okay=False,
        help="--answers: append each response here as {id, response} (score.py reads it); a rerun"
        " asks only the questions not in it",
    ),
    judge: Literal["auto", "offline", "generator"] = typer.Option(
        "auto",
        "--judge",
        help="--answers: the generation metrics' judges; auto: the chat model too when RAGLINE_ANSWER_PROVIDER"
        " is one, offline: the offline judges only",
    ),
    show_failures: bool = typer.Option(
        False, "--show-failures", help="--answers: list the questions that were not right, and why"
    ),
    ask_timeout: float = typer.Option(180.0, "--ask-timeout", help="--answers: seconds per question"),
) -> None:
    """Retrieval quality: ingest CORPUS into a fresh tenant through the workers, run every query through
    the retrieval task; recall@k, MRR@k, nDCG@k (graded) and fail@20 per mode, and the misses.

    A code query set names a repository (a git bundle or a repository folder, relative to the query
    file) and a ref per query: each snapshot is ingested once through the git source into a tenant
    of its own (kept, so a rerun only queries), and file-level Acc@1/3/5/10, recall@10 and MRR are
    reported per mode (lexical and hybrid, each with and without the structural re-score, vector)
    and layer variant, with each structural signal measured alone and left out (docs/code.md).

    With --answers, QUERIES is a graded answer set (answers-dev's format): every question goes
    through the ask task over --tenant/--groups (or a --corpus ingested into a fresh tenant), and
    right / partial / wrong / no-answer, citations (doc and code lines), key facts, confident-wrong
    answers, calibration, cost and the generation metrics are reported per kind
    (docs/evaluation.md)."""
    from ragline.operations.eval import run_eval  # start-up: Celery and psycopg load only for eval
    from ragline.operations.eval_code import is_code_query_set

    if answers:
        from ragline.cli.eval_answers import answer_eval  # start-up: the scorer loads only for --answers

        answer_eval(
            queries,
            corpus=corpus,
            tenant=tenant,
            groups=split_csv(groups),
            k=k or 5,
            mode=mode,
            responses=responses,
            save_answers=save_answers,
            judge=judge,
            out=out,
            as_json=as_json,
            keep=keep,
            show_failures=show_failures,
            timeout=ask_timeout,
            only=split_csv(only),
        )
        return
    k = k or 10
    if is_code_query_set(queries):
        _code_eval(queries, mode, include, exclude, layers, split_csv(only), out, as_json, parallel)
        return
    if corpus is None:
        raise typer.BadParameter("--corpus is required for a query set that names no repository")

    modes = ["vector", "lexical", "hybrid"] if mode == "all" else [mode]
    if not set(modes) <= {"vector", "lexical", "hybrid"}:
        raise typer.BadParameter("mode must be hybrid, vector, lexical or all")
    reload_app()
    result = run_eval(
        queries,
        corpus,
        k=k,
        modes=modes,
        rerank=rerank,
        keep=keep,
        sweep=parse_weights(sweep) if sweep else None,
        progress=lambda msg: console.print(msg),
    )
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, ensure_ascii=False, indent=2))
    if as_json:
        print(json.dumps(result["modes"], ensure_ascii=False))
        return
    table = Table("mode", f"recall@{k}", f"MRR@{k}", f"nDCG@{k}", "fail@20", "n", "degraded")
    for m, r in result["modes"].items():
        table.add_row(
            m,
            f"{r[f'recall@{k}']:.3f}",
            f"{r[f'mrr@{k}']:.3f}",
            f"{r[f'ndcg@{k}']:.3f}",
            f"{r['fail@20']:.3f}",
            str(r["n"]),
            str(r["degraded"]),
        )
    for r in result["meta"].get("rrf_sweep", []):
        table.add_row(
            f"hybrid {r['rrf_weight_vector']:g}:{r['rrf_weight_lexical']:g}",
            f"{r[f'recall@{k}']:.3f}",
            f"{r[f'mrr@{k}']:.3f}",
            f"{r[f'ndcg@{k}']:.3f}",
            f"{r['fail@20']:.3f}",
            str(r["n"]),
            "-",
        )
    Console().print(table)
    for m, r in result["modes"].items():
        for miss in r["misses"][:10]:
            Console().print(
                f"[dim]{m} MISS[/] {miss['query']}  (want {', '.join(miss['relevant'])}; "
                f"got {', '.join(miss['top'])})"
            )


def _code_eval(
    queries: Path,
    mode: str,
    include: list[str],
    exclude: list[str],
    layers: str,
    only: list[str],
    out: Path | None,
    as_json: bool,
    parallel: int = 2,
) -> None:
    from ragline.operations.eval_code import (  # start-up: Celery and psycopg load only for eval
        ACC_AT,
        ingest_config_key,
        layer_variants,
        modes_for,
        read_code_queries,
        run_code_eval,
        task_search,
    )
    from ragline.shared.config.settings import get_settings

    rows = read_code_queries(queries)
    try:
        layer_variants(layers, get_settings())
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--layers'") from None
    if only:
        rows = [q for q in rows if q.id in set(only)]
        if not rows:
            raise typer.BadParameter(f"no query with id {', '.join(only)}", param_hint="'--only'")
    modes = modes_for(mode)
    reload_app()
    settings = get_settings()
    # lexical modes alone are measured as soon as a snapshot is stored, before its vectors are filled
    vectors = any(m.split("+")[0] in ("vector", "hybrid") for m in modes)
    result = run_code_eval(
        rows,
        snapshot_ingest(include, exclude, wait_vectors=vectors),
        task_search(),
        modes,
        layers,
        ingest_config_key(include, exclude, settings),
        progress=lambda msg: console.print(escape(msg)),
        settings=settings,
        parallel=parallel,
    )
    result["meta"].update(include=include, exclude=exclude, query_file=str(queries))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, ensure_ascii=False, indent=2))
    if as_json:
        print(json.dumps({k: result[k] for k in ("modes", "structure_ablation")}, ensure_ascii=False))
        return
    cols = [*(f"Acc@{k}" for k in ACC_AT), "recall@10", "MRR", "n"]
    for title, section in (
        ("mode [layers]", result["modes"]),
        ("structure on hybrid [layers]", result["structure_ablation"]),
    ):
        table = Table(title, *cols)
        for name, r in section.items():
            table.add_row(
                escape(name),
                *(f"{r[f'acc@{k}']:.3f}" for k in ACC_AT),
                f"{r['recall@10']:.3f}",
                f"{r['mrr']:.3f}",
                str(r["n"]),
            )
        Console().print(table)
    table = Table("held-out half: weights chosen on the other half [layers]", *cols)
    for variant, split in result.get("held_out", {}).items():
        for run in split["runs"]:
            on = run["reported_on"]
            for label, r in (
                (f"chosen on {run['chosen_on']}: {run['chosen']}", run["chosen_on_held_out_half"]),
                ("the defaults", run["configured_on_held_out_half"]),
                ("none (plain fusion)", run["none_on_held_out_half"]),
            ):
                table.add_row(
                    escape(f"{on}: {label} [{variant}]"),
                    *(f"{r[f'acc@{k}']:.3f}" for k in ACC_AT),
                    f"{r['recall@10']:.3f}",
                    f"{r['mrr']:.3f}",
                    str(r["n"]),
                )
    if result.get("held_out"):
        Console().print(table)
    _warn_degraded(result["modes"])


def _warn_degraded(modes: dict[str, dict]) -> None:
    """Name each mode whose searches fell back (a timed-out question embedding makes hybrid the
    lexical list): its numbers then mix in another mode's."""
    for name, r in modes.items():
        if r.get("degraded"):
            reasons = sorted({x for row in r["per_query"] for x in row.get("degraded", [])})
            console.print(
                f"[yellow]{escape(name)}: {r['degraded']} of {r['n']} searches degraded"
                f" ({escape('; '.join(reasons))}): those rows measured a fallback, not this mode"
                " (a loaded machine: raise RAGLINE_DEADLINES_QUERY_EMBED_TIMEOUT_S on the query workers)[/]"
            )


@app.command()
def schemas(folder: Path = typer.Argument(Path("docs/schemas"))) -> None:
    """Export the JSON Schema of the chat-backend contract (task payloads and results)."""
    for path in export(folder):
        console.print(f"wrote {path}")
