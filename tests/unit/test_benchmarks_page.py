"""docs/benchmarks.md's generated block is what bench/report.py makes of bench/results/*.json."""

from bench.report import END, PAGE, START, summary


def test_the_benchmarks_page_is_generated_from_the_results():
    text = PAGE.read_text(encoding="utf-8")
    assert text.count(START) == 1 and text.count(END) == 1
    block = text[text.index(START) + len(START) : text.index(END)]
    assert block.strip() == summary().strip(), "run `python -m bench.report --docs`"
    assert "](../bench/results/" in block  # images resolve from docs/
