"""The code evaluation per repository, and the weights chosen leaving one repository out.

Reads the JSON of code evaluations (``ragline eval <instances.jsonl> --mode all``, or
:mod:`bench.code_eval_inprocess`: ``modes`` with per-query rows, ``lexical_weight_per_query`` with
the rows of every lexical weight the eval re-fused the same candidates with, ``file_rank_per_query``
with the default's file list re-ranked), one per query set, merged into one set of repositories,
and prints Markdown: every mode x every repository (file Acc@1 / Acc@5 / Acc@10, MRR) with the
default's file list without the single lists and before the vote, a baseline run's default beside it, and
for each repository left out in turn the weight the other repositories choose with the left-out
repository's own numbers at that weight (never the fitted ones). ``--docs FILE`` writes the tables
between the markers ``<!-- code-loro:start -->`` and ``<!-- code-loro:end -->`` of FILE, so the
docs' table is this script's output.

    python -m bench.code_loro bench/results/eval-swe-loc-dev-vote.json --docs docs/evaluation.md
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

from ragline.operations.eval_code import repository_of

MODES = ("lexical", "lexical+structure", "vector", "hybrid", "hybrid+structure")
#: what a left-out repository's weight is chosen by on the others (pooled over their issues), in order
SELECT_BY = ("acc@5", "acc@10", "mrr")
START, END = "<!-- code-loro:start -->", "<!-- code-loro:end -->"
#: the default's file list re-ranked on the same hits, shown beside the modes: the fused hits' files
#: alone, and the file ranking before the vote (bench/code_before.py)
FILE_VARIANTS = ("the fused hits' files alone (no vote, no floors)", "before the vote (the floors alone)")
_WEIGHT = re.compile(r"^configured, lexical weight ([0-9.]+) \[(\w+)\]$")


def _mean(rows: list[dict], key: str) -> float:
    return statistics.fmean(r[key] for r in rows) if rows else 0.0


def by_repository(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(repository_of(r["id"]).split("__")[-1], []).append(r)
    return dict(sorted(out.items()))


def cell(rows: list[dict]) -> str:
    """Acc@1 / Acc@5 / Acc@10, MRR."""
    return (
        " / ".join(f"{_mean(rows, k):.3f}" for k in ("acc@1", "acc@5", "acc@10"))
        + f", {_mean(rows, 'mrr'):.3f}"
    )


def mode_table(result: dict, variant: str, baseline: dict | None) -> list[str]:
    """Every mode x every repository (and all issues), Acc@1 / Acc@5 / Acc@10, MRR."""
    modes = {
        m: result["modes"][f"{m} [{variant}]"]["per_query"]
        for m in MODES
        if f"{m} [{variant}]" in result["modes"]
    }
    variants = result.get("file_rank_per_query", {}).get(f"hybrid+structure [{variant}]", {})
    for label in FILE_VARIANTS:
        if label in variants:
            modes[f"hybrid+structure, {label}"] = variants[label]
    if baseline and f"hybrid+structure [{variant}]" in baseline["modes"]:
        modes["hybrid+structure, before"] = baseline["modes"][f"hybrid+structure [{variant}]"]["per_query"]
    repos = list(by_repository(next(iter(modes.values()))))
    head = ["mode", *(f"{r} ({len(by_repository(next(iter(modes.values())))[r])})" for r in repos), "all"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rows in modes.items():
        grouped = by_repository(rows)
        lines.append("| " + " | ".join([name, *(cell(grouped.get(r, [])) for r in repos), cell(rows)]) + " |")
    return lines


#: the single lists a default is held against, each as the search answers it alone
SINGLE = ("lexical", "lexical+structure", "vector")
AT = ("acc@1", "acc@3", "acc@5", "acc@10")


def best_single_table(result: dict, variant: str) -> list[str]:
    """Per repository (and all issues): the default's Acc@k beside the best single list's at each k
    (the best of :data:`SINGLE` at that k, which may be a different list at each k), and whether the
    default is at least as good at every k."""
    rows = {
        m: result["modes"].get(f"{m} [{variant}]", {}).get("per_query", [])
        for m in (*SINGLE, "hybrid+structure")
    }
    default = rows.pop("hybrid+structure")
    if not default or not all(rows.values()):
        return ["(this result lacks a mode)"]
    lines = [
        "| repository | default: Acc@1 / 3 / 5 / 10 | best single list at each k | ≥ at every k |",
        "|---|---|---|---|",
    ]
    grouped = {m: by_repository(r) for m, r in rows.items()}
    for repo, mine in [*by_repository(default).items(), ("all", default)]:
        singles = [r if repo == "all" else grouped[m].get(repo, []) for m, r in rows.items()]
        best = [max(_mean(r, k) for r in singles) for k in AT]
        own = [_mean(mine, k) for k in AT]
        holds = all(a >= b - 1e-9 for a, b in zip(own, best, strict=True))
        lines.append(
            f"| {repo} | {' / '.join(f'{v:.3f}' for v in own)} | {' / '.join(f'{v:.3f}' for v in best)} "
            f"| {'yes' if holds else 'no'} |"
        )
    return lines


def lexical_weights(result: dict, variant: str) -> dict[float, list[dict]]:
    """Per-query rows of the default re-fused at each lexical weight (the eval's re-fusions)."""
    out: dict[float, list[dict]] = {}
    for name, rows in result.get("lexical_weight_per_query", {}).items():
        m = _WEIGHT.match(name)
        if m and m.group(2) == variant:
            out[float(m.group(1))] = rows
    return out


def file_variants(
    result: dict, variant: str, prefix: str, off: float | None = None
) -> dict[float, list[dict]]:
    """Per-query rows of the default's file list at each value of one file weight (the labels
    ``prefix`` + value; ``off``: the configured file ranking counts as that value)."""
    labels = result.get("file_rank_per_query", {}).get(f"hybrid+structure [{variant}]", {})
    out = {off: labels["configured"]} if off is not None and "configured" in labels else {}
    for label, rows in labels.items():
        if label.startswith(prefix):
            out[float(label[len(prefix) :])] = rows
    return out


def leave_one_out(weights: dict[float, list[dict]], lexical_rows: list[dict]) -> tuple[list[str], dict]:
    """For each repository: the weight the others choose (:data:`SELECT_BY`, pooled over their
    issues; the smaller value wins a tie: a weight that changes nothing stays off) and the left-out repository's numbers at it, beside its
    lexical list."""
    if not weights:
        return ["(no per-query rows for these weights in this result)"], {}
    lexical = by_repository(lexical_rows)
    repos = list(by_repository(next(iter(weights.values()))))
    lines = [
        "| left out | weight chosen on the others | default, left out: Acc@1 / Acc@5 / Acc@10, MRR | lexical list | ≥ lexical at 5 and 10 |",
        "|---|---|---|---|---|",
    ]
    summary: dict = {"repositories": {}}
    for left in repos:

        def score(w: float, left: str = left) -> tuple:
            rows = [r for r in weights[w] if repository_of(r["id"]).split("__")[-1] != left]
            return (*(round(_mean(rows, k), 6) for k in SELECT_BY), -w)

        chosen = max(weights, key=score)
        rows = by_repository(weights[chosen])[left]
        lex = lexical.get(left, [])
        holds = all(_mean(rows, k) >= _mean(lex, k) for k in ("acc@5", "acc@10"))
        lines.append(f"| {left} | {chosen:g} | {cell(rows)} | {cell(lex)} | {'yes' if holds else 'no'} |")
        summary["repositories"][left] = {
            "weight": chosen,
            **{k: round(_mean(rows, k), 3) for k in ("acc@1", "acc@5", "acc@10", "mrr")},
            "holds": holds,
        }
    per_repo = summary["repositories"].values()
    summary["mean_acc@5"] = round(statistics.fmean(r["acc@5"] for r in per_repo), 3)
    summary["mean_acc@10"] = round(statistics.fmean(r["acc@10"] for r in per_repo), 3)
    lines.append(
        f"| mean over the left-out repositories | | Acc@5 {summary['mean_acc@5']:.3f}, Acc@10 {summary['mean_acc@10']:.3f} | | |"
    )
    return lines, summary


def merge(results: list[dict]) -> dict:
    """Several eval results (query sets of different repositories) as one: the per-query rows of
    every mode, lexical weight and file variant that all of them measured."""
    out: dict = {"modes": {}, "lexical_weight_per_query": {}, "file_rank_per_query": {}}
    for key in ("modes", "lexical_weight_per_query"):
        for name in set.intersection(*(set(r.get(key, {})) for r in results)):
            rows = [
                row
                for r in results
                for row in (r[key][name]["per_query"] if key == "modes" else r[key][name])
            ]
            out[key][name] = {"per_query": rows} if key == "modes" else rows
    for name in set.intersection(*(set(r.get("file_rank_per_query", {})) for r in results)):
        labels = set.intersection(*(set(r["file_rank_per_query"][name]) for r in results))
        out["file_rank_per_query"][name] = {
            label: [row for r in results for row in r["file_rank_per_query"][name][label]] for label in labels
        }
    metas = [r.get("meta", {}) for r in results]
    out["meta"] = {
        "queries": sum(m.get("queries", 0) for m in metas),
        "loads": [m["load_average"]["before_queries"][0] for m in metas if m.get("load_average")],
        "vectors": {t: v for m in metas for t, v in (m.get("vectors") or {}).items() if v},
    }
    return out


def _load(meta: dict) -> str:
    loads = meta.get("loads")
    return "–".join(f"{x:.1f}" for x in sorted({min(loads), max(loads)})) if loads else "not recorded"


def _vectors(meta: dict) -> str:
    """Rows embedded of the rows the budget embeds, per repository over its stored snapshots
    (``meta.vectors``)."""
    repos: dict[str, list[int]] = {}
    for tenant, v in meta.get("vectors", {}).items():
        r = repos.setdefault(tenant.removeprefix("code-").rsplit("-", 2)[0], [0, 0, 0])
        r[0], r[1], r[2] = r[0] + v["embedded"], r[1] + v["rows"], r[2] + 1
    parts = [f"{name} {e:,} / {n:,} ({k} snapshots)" for name, (e, n, k) in sorted(repos.items())]
    return "; ".join(parts) if parts else "not recorded"


def render(result: dict, variant: str, baseline: dict | None, source: str) -> str:
    lexical_rows = result["modes"][f"lexical [{variant}]"]["per_query"]
    loro, _ = leave_one_out(lexical_weights(result, variant), lexical_rows)
    slack, _ = leave_one_out(file_variants(result, variant, "configured, floor slack "), lexical_rows)
    meta = result.get("meta", {})
    return "\n".join(
        [
            f"Generated by `python -m bench.code_loro` from {source} (layers `{variant}`, "
            f"{meta.get('queries', '?')} issues, load average {_load(meta)}). Rows with their vector "
            f"when searched, of those the fill embeds, per repository: {_vectors(meta)}.",
            "",
            "File Acc@1 / Acc@5 / Acc@10, MRR per repository (issues in brackets):",
            "",
            *mode_table(result, variant, baseline),
            "",
            "The default against its best single list (lexical, lexical + structure or vector, whichever",
            "is best at each k), per repository:",
            "",
            *best_single_table(result, variant),
            "",
            "The lexical RRF weight of code fusion chosen leaving one repository out (on the other",
            "repositories' issues, by Acc@5, then Acc@10, then MRR), reported on the repository left out:",
            "",
            *loro,
            "",
            "Where the single lists' files are floored (`FileWeights.floor_slack`: the n-th file of each",
            "within the first 2n + slack), chosen the same way:",
            "",
            *slack,
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, nargs="+", help="eval results, one per query set")
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--variant", default="code", help="the layer variant (the eval's --layers)")
    ap.add_argument("--docs", type=Path, help="write between the code-loro markers of this file")
    args = ap.parse_args()
    result = merge([json.loads(p.read_text()) for p in args.results])
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    text = render(result, args.variant, baseline, ", ".join(f"`{p}`" for p in args.results))
    if args.docs:
        doc = args.docs.read_text()
        a, b = doc.index(START) + len(START), doc.index(END)
        args.docs.write_text(doc[:a] + "\n" + text + "\n" + doc[b:])
    print(text)


if __name__ == "__main__":
    main()
