"""docs/benchmarks.md and docs/evaluation.md: their generated blocks are what bench/report.py makes of
bench/results/*.json."""

import json

from bench import common
from bench.report import END, EVAL_END, EVAL_PAGE, EVAL_START, PAGE, START, eval_summary, summary


def test_the_benchmarks_page_is_generated_from_the_results():
    text = PAGE.read_text(encoding="utf-8")
    assert text.count(START) == 1 and text.count(END) == 1
    block = text[text.index(START) + len(START) : text.index(END)]
    assert block.strip() == summary().strip(), "run `python -m bench.report --docs`"
    assert "](../bench/results/" in block  # images resolve from docs/


def test_the_evaluation_page_lists_every_kept_eval_result():
    text = EVAL_PAGE.read_text(encoding="utf-8")
    assert text.count(EVAL_START) == 1 and text.count(EVAL_END) == 1
    block = text[text.index(EVAL_START) + len(EVAL_START) : text.index(EVAL_END)]
    assert block.strip() == eval_summary().strip(), "run `python -m bench.report --docs`"
    retrieval = {p.name for p in common.RESULTS.glob("eval-*.json") if _retrieval_result(p)}
    assert retrieval and all(f"`{name}`" in block for name in retrieval)


def _retrieval_result(path) -> bool:
    modes = json.loads(path.read_text()).get("modes")
    return isinstance(modes, dict) and any("ndcg@10" in m or "acc@1" in m for m in modes.values())
