"""`ragline search`, `ragline ask`, `ragline eval`, `ragline schemas`: the query side."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ragline.cli.common import console, reload_app, send_and_wait, split_csv
from ragline.query.schemas import export
from ragline.shared.names import TASK_QUERY_ASK, TASK_QUERY_RETRIEVE

app = typer.Typer()


@app.command()
def search(
    query: str,
    tenant: str = typer.Option(..., "--tenant"),
    groups: str = typer.Option(..., "--groups", help="comma-separated ACL groups of the caller"),
    k: int = typer.Option(10, "--k"),
    mode: str = typer.Option("hybrid", "--mode", help="hybrid | vector | lexical"),
    path_prefix: list[str] = typer.Option(
        [], "--path-prefix", help="only paths with this prefix (repeatable)"
    ),
    layer: list[str] = typer.Option([], "--layer", help="only this layer (repeatable)"),
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
        "path_prefixes": path_prefix,
        "layers": layer,
        "rerank": rerank,
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
    mode: str = typer.Option("hybrid", "--mode"),
    agentic: bool | None = typer.Option(None, "--agentic/--no-agentic"),
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
        },
        120,
    )
    if as_json:
        print(json.dumps(res, ensure_ascii=False))
    else:
        print_answer(question, res)
    if res.get("ok") is False:
        raise typer.Exit(1)


def print_answer(question: str, res: dict) -> None:
    out = Console()
    out.rule(f"[bold]{question}")
    if "answer" not in res:
        out.print(f"[red]error:[/] {res}")
        return
    out.print(res["answer"])
    if res.get("reason"):
        out.print(f"[yellow]{res['reason']}[/]")
    for c in res["citations"]:
        out.print(f"  [{c['n']}] {c['path'] or c['doc_id']} › {c['heading']} (chunk {c['chunk_no']})")
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
    queries: Path = typer.Argument(..., exists=True, dir_okay=False, help='JSON lines {"query", "relevant"}'),
    corpus: Path = typer.Option(
        ..., "--corpus", exists=True, dir_okay=False, help='JSON lines {"id", "title", "text"}'
    ),
    k: int = typer.Option(10, "--k"),
    mode: str = typer.Option("hybrid", "--mode", help="hybrid | vector | lexical | all"),
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
) -> None:
    """Retrieval quality: ingest CORPUS into a fresh tenant through the workers, run every query through
    the retrieval task; recall@k, MRR@k, nDCG@k (graded) and fail@20 per mode, and the misses."""
    from ragline.query.eval import run_eval  # start-up: Celery and psycopg load only for eval

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


@app.command()
def schemas(folder: Path = typer.Argument(Path("docs/schemas"))) -> None:
    """Export the JSON Schema of the chat-backend contract (task payloads and results)."""
    for path in export(folder):
        console.print(f"wrote {path}")
