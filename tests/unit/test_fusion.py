from query.fusion import rrf


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
