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
    answers = {p.name for p in common.RESULTS.glob("eval-*.json") if _answer_result(p)}
    assert all(f"`{name}`" in block for name in answers)


def test_an_answer_eval_result_is_a_row_of_its_own(tmp_path):
    total = {
        "n": 40,
        "right": 10,
        "answerable": 36,
        "answerable_right": 9,
        "unanswerable": 4,
        "unanswerable_right": 1,
        "no_answer_on_answerable": 3,
        "confident_wrong": 25,
        "cited_ok_pct": 80.0,
        "mean_facts": 0.3,
        "faithfulness": 1.0,
        "context_precision": 0.7,
        "context_recall": None,
    }
    result = {"total": total, "by_kind": {}, "meta": {"generator": "extractive"}}
    (tmp_path / "eval-answers-x.json").write_text(json.dumps(result))
    block = eval_summary(tmp_path)
    row = next(line for line in block.splitlines() if "eval-answers-x.json" in line)
    assert (
        row
        == "| `eval-answers-x.json` | 10/40 | 9/36 | 1/4 | 3/36 | 25 | 80 | 0.300 | 1.000 | 0.700 | - | extractive |"
    )


def _answer_result(path) -> bool:
    d = json.loads(path.read_text())
    return isinstance(d.get("by_kind"), dict) and isinstance(d.get("total"), dict)


def _retrieval_result(path) -> bool:
    modes = json.loads(path.read_text()).get("modes")
    return isinstance(modes, dict) and any("ndcg@10" in m or "acc@1" in m for m in modes.values())
