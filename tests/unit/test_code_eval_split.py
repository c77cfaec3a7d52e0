"""The held-out split of the code evaluation: weights chosen on one half of the issues are
reported on the other, so a number tuned on a query is never reported for it."""

from __future__ import annotations

from ragline.operations.eval_code import CodeQuery, CodeReport, Snapshot, held_out, split_halves

IDS = [
    "psf__requests-863",
    "psf__requests-1142",
    "psf__requests-2317",
    "pallets__flask-4045",
    "pallets__flask-5063",
]


def rows(ranks: dict[str, int | None]) -> list[dict]:
    """Per-query rows as the evaluation records them, from the gold file's rank per query."""
    report = CodeReport("x")
    for qid, rank in ranks.items():
        files = [f"other{i}.py" for i in range(10)]
        if rank is not None:
            files.insert(rank - 1, "gold.py")
        report.add(CodeQuery(qid, "q", Snapshot(__file__, "r"), ("gold.py",)), files)
    return report.rows


def test_every_repository_is_in_both_halves_in_issue_order():
    first, second = split_halves(IDS + ["psf__requests-863"])
    assert first == ["pallets__flask-4045", "psf__requests-863", "psf__requests-2317"]
    assert second == ["pallets__flask-5063", "psf__requests-1142"]


def test_weights_chosen_on_one_half_are_reported_on_the_other():
    first, second = split_halves(IDS)
    variants = {
        "none": rows(dict.fromkeys(IDS, 3)),
        "configured": rows(dict.fromkeys(IDS, 2)),
        # the best on the first half only: first on its queries, missing on the others
        "overfit": rows({i: 1 if i in first else None for i in IDS}),
    }
    out = held_out(variants, IDS)
    a, b = out["runs"]
    assert (a["chosen_on"], a["chosen"], b["chosen_on"], b["chosen"]) == ("A", "overfit", "B", "configured")
    assert a["chosen_on_choosing_half"]["mrr"] == 1.0 and a["chosen_on_choosing_half"]["n"] == len(first)
    # what choosing on A is worth on B: nothing, where the defaults give 1/2 and plain fusion 1/3
    assert a["chosen_on_held_out_half"]["mrr"] == 0.0 and a["chosen_on_held_out_half"]["n"] == len(second)
    assert a["configured_on_held_out_half"]["mrr"] == 0.5
    assert a["none_on_held_out_half"]["mrr"] == 0.333
    assert b["chosen_on_held_out_half"]["mrr"] == 0.5


def test_a_degraded_search_is_counted_and_named_in_its_row():
    """A hybrid search whose question embedding timed out answers with the lexical list: the row
    keeps the reason and the mode's summary counts it, so a table never passes such a fallback off
    as the mode it asked for."""
    from pathlib import Path

    from ragline.operations.eval_code import run_code_eval

    snap = Snapshot(Path("requests.bundle"), "r")
    queries = [CodeQuery(f"psf__requests-{n}", f"question {n}", snap, ("gold.py",)) for n in (1, 2, 3)]

    def search(query, tenant, mode, layers, structural):
        slow = mode == "hybrid" and query == "question 2"
        return {
            "hits": [{"doc_id": "d", "chunk_no": 0, "path": "requests/gold.py", "score": 1.0}],
            "degraded_reasons": ["embedder: timeout after 3s"] if slow else [],
        }

    result = run_code_eval(
        queries,
        lambda s, c, n: {"tenant": "t", "commit": "c" * 40},
        search,
        ["lexical", "hybrid"],
        "code",
        ablate=False,
    )
    hybrid, lexical = result["modes"]["hybrid [code]"], result["modes"]["lexical [code]"]
    assert (hybrid["degraded"], lexical["degraded"]) == (1, 0)
    rows = {r["id"]: r for r in hybrid["per_query"]}
    assert rows["psf__requests-2"]["degraded"] == ["embedder: timeout after 3s"]
    assert "degraded" not in rows["psf__requests-1"] and "degraded" not in rows["psf__requests-3"]
    assert hybrid["acc@1"] == 1.0  # the fallback's rows still count; the count says how many


def test_the_ablation_candidates_are_both_whole_lists_with_their_ranks():
    """A chunk only the lexical list found, which the structural search cut under a small lexical
    weight, is a candidate with its lexical rank; a chunk both lists found has both ranks; the named
    files' rank comes from the structural search."""
    from ragline.operations.eval_code import ablation_candidates

    def hit(doc, **ranks):
        return {"doc_id": doc, "chunk_no": 0, "path": f"r/{doc}.py", "score": 0.5, **ranks}

    vector = [hit("a", vector_rank=1), hit("b", vector_rank=2)]
    lexical = [hit("c", lexical_rank=1), hit("a", lexical_rank=2)]
    structural = [hit("a", vector_rank=1, lexical_rank=2), hit("b", vector_rank=2), hit("n", named_rank=1)]
    got = {
        h.doc_id: (h.vector_rank, h.lexical_rank, h.named_rank)
        for h in ablation_candidates(vector, lexical, structural)
    }
    assert got == {"a": (1, 2, None), "b": (2, None, None), "c": (None, 1, None), "n": (None, None, 1)}
