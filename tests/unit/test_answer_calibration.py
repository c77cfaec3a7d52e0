"""The confidence fit's transfer report (bench/answer_calibration.py): each source is predicted by a
model that never saw it, so a feature whose level is one corpus's habit shows as confident-wrong."""

from __future__ import annotations

import numpy as np

from bench.answer_calibration import held_out


def rows_and_data(flip: str = ""):
    rng = np.random.default_rng(7)
    rows, x, y = [], [], []
    for set_no, sources in enumerate((("a", "b", "c"), ("d",))):
        for source in sources:
            for _ in range(40):
                label = int(rng.random() < 0.5)
                feature = label + rng.normal(0, 0.5)
                if source == flip:
                    label = 1 - label
                rows.append({"source": source, "set": set_no, "answerable": True, "y": label})
                x.append([feature])
                y.append(label)
    return rows, np.array(x), np.array(y, dtype=float)


def test_a_source_is_predicted_by_a_model_that_never_saw_it():
    rows, x, y = rows_and_data()
    same = held_out(rows, x, y, 0.5)
    assert [r["n"] for r in same] == [120, 40]
    assert same[1]["confident_wrong"] <= 4  # the feature means the same everywhere: it transfers
    # a corpus where the feature means the opposite: held out, its answers are read by the other
    # sources' model, confidently and wrongly
    rows, x, y = rows_and_data(flip="d")
    flipped = held_out(rows, x, y, 0.5)
    assert flipped[1]["confident_wrong"] >= 10 and flipped[1]["right"] <= 10
