from ragline.query.fusion import rrf


def test_rrf_sums_reciprocal_ranks_with_k():
    fused = dict(rrf({"a": ["x", "y"], "b": ["y", "z"]}, k=60))
    assert fused["y"] == 1 / 62 + 1 / 61
    assert fused["x"] == 1 / 61
    assert fused["z"] == 1 / 62


def test_rrf_order_and_weights():
    order = [d for d, _ in rrf({"a": ["x", "y"], "b": ["y", "z"]}, k=60)]
    assert order == ["y", "x", "z"]
    weighted = [d for d, _ in rrf({"a": ["x"], "b": ["z"]}, k=60, weights={"a": 0.5, "b": 1.0})]
    assert weighted == ["z", "x"]


def test_rrf_ties_break_by_best_rank_then_first_seen():
    order = [d for d, _ in rrf({"a": ["p", "q"], "b": ["q", "p"]}, k=60)]
    assert order == ["p", "q"]


def _row(doc: str, n: int = 0, **kw) -> dict:
    return {
        "doc_id": doc,
        "chunk_no": n,
        "path": f"{doc}.md",
        "layer": "docs",
        "heading_path": "",
        "content": doc,
        "context": "",
        "page": None,
        "metadata": {},
        "prefer_bonus": 0.0,
        "test_penalty": 0.0,
        "distance": 0.1,
        "rank": 0.5,
        **kw,
    }


def test_fuse_scores_rows_then_builds_only_the_kept_hits():
    from ragline.query.retrieve import fuse
    from ragline.shared.settings import Settings

    s = Settings(rrf_weight_vector=1.0, rrf_weight_lexical=1.0)
    vector = [_row("a", distance=0.1), _row("b", distance=0.2), _row("t", distance=0.3, test_penalty=1.0)]
    lexical = [_row("b", rank=0.9), _row("c", rank=0.4, prefer_bonus=0.5)]
    hits = fuse(vector, lexical, s, limit=3)
    assert [h.doc_id for h in hits] == ["c", "b", "a"]  # bonus lifts c; b is in both lists; t penalised out
    c, b, a = hits
    assert (b.vector_rank, b.vector_distance, b.lexical_rank, b.lexical_score) == (2, 0.2, 1, 0.9)
    assert (a.vector_rank, a.lexical_rank, c.vector_rank, c.lexical_rank) == (1, None, None, 2)
    assert b.fused_score == round(1 / 62 + 1 / 61, 8) and b.score == b.fused_score
    assert c.score == round(1 / 62 + 0.5, 8) and c.prefer_bonus == 0.5
    everything = fuse(vector, lexical, s, limit=10)
    assert everything[-1].doc_id == "t" and everything[-1].score < 0
