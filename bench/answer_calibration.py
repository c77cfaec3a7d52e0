"""Fit the extractive answer's confidence: a logistic model of "this answer is right" over the
composer's features (``query/answer/extractive.py``, ``FEATURES``), fitted on one half of the
questions and reported on the other, written as data next to the code
(``query/answer/confidence.json``), with its reliability table and plot for docs/evaluation.md.

    python -m bench.answer_calibration \
        QUESTIONS.jsonl ANSWERS.jsonl [QUESTIONS2.jsonl ANSWERS2.jsonl ...] --write

ANSWERS come from ``bench/answers_inprocess.py`` run with ``RAGLINE_ANSWER_MIN_CONFIDENCE=0`` (every
question answered, so each answer's features and verdict are known), over fully embedded scopes and
over scopes of which a share of the rows awaits its vectors (``bench/answers_awaiting.py``): the
model also reads the scope's ``awaiting`` share as it bears on quotes in another language than the
question's (``grounding.SCOPE_FEATURES``), and the result reports each share's answers on the report
half under the model shipped before and the one fitted (``by_awaiting``, written into
docs/evaluation.md with the reliability table). An answerable question is labelled 1 when its answer
is right, an unanswerable one 0 (any answer to it is wrong). The halves
are split by source: a question's article (XQuAD: the paragraph's article; an unanswerable question:
the article it asks about; answers-dev: its document's top folder), hashed, so no paragraph of the
report half was seen by the fit. The minimum confidence is then the probability that maximises the
fit half's right answers (an answer below it is refused: right for an unanswerable question).
Each input set is also predicted one source at a time by models fitted on every other source
(``held_out_by_source``): what the confidence does on a corpus it was not fitted on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from bench.report import EVAL_PAGE, update_page
from ragline.operations.eval_answers import read_jsonl, score_one
from ragline.query.answer.extractive import FEATURES
from ragline.query.answer.grounding import CONFIDENCE_MODEL, SCOPE_FEATURES, answer_probability, feature_value
from ragline.shared.config.settings import get_settings

RESULTS = Path(__file__).with_name("results")
#: the block of docs/evaluation.md that :func:`tables` writes
DOCS_MARKERS = ("<!-- answer-calibration:start -->", "<!-- answer-calibration:end -->")
BUCKETS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0001)
#: what the model reads: the composer's features and the searched scope's
NAMES = (*FEATURES, *SCOPE_FEATURES)
#: a confidence at least this high on a wrong answer counts as confidently wrong
CONFIDENT = 0.7
#: the shares of a scope's rows awaiting vectors that ``bench/answers_awaiting.py`` is run with
LEVELS = (0.0, 0.25, 0.5, 0.75)
#: the L2 penalty of the fit (standardised features): small, the features are few
L2 = 1.0


def source_of(q: dict) -> str:
    """The unit the halves are split by: the article or document folder the question is about."""
    if q.get("must_cite_any"):
        doc = q["must_cite_any"][0]
        return doc.rsplit("_p", 1)[0] if doc.startswith("xquad/") else "/".join(doc.split("/")[:2])
    return q.get("evidence", "").split(" ", 1)[0] or q["id"]


def half(q: dict) -> int:
    return hashlib.sha256(source_of(q).encode()).digest()[0] % 2


def rows_of(pairs: list[tuple[Path, Path]]) -> list[dict]:
    out = []
    for set_no, (qpath, apath) in enumerate(pairs):
        answers = {r["id"]: r["response"] for r in read_jsonl(apath)}
        for q in read_jsonl(qpath):
            resp = answers.get(q["id"])
            feats = (((resp or {}).get("trace") or {}).get("confidence") or {}).get("features")
            if resp is None or feats is None:
                continue  # no extractive answer at all (nothing retrieved): nothing to calibrate
            verdict = score_one(q, {**resp, "no_answer": False, "confidence": None})
            label = int(bool(q["answerable"]) and verdict["right"])
            out.append(
                {
                    "id": q["id"],
                    "kind": q["kind"],
                    "answerable": q["answerable"],
                    "half": half(q),
                    "source": source_of(q),
                    "set": set_no,
                    "x": {f: feature_value(feats, f) for f in {*NAMES, *FEATURES, "awaiting"}},
                    "y": label,
                }
            )
    return out


def fit(x: np.ndarray, y: np.ndarray, l2: float = L2, steps: int = 50) -> tuple[np.ndarray, float]:
    """Logistic regression by Newton's method with an L2 penalty (intercept unpenalised)."""
    xb = np.hstack([np.ones((len(x), 1)), x])
    w = np.zeros(xb.shape[1])
    penalty = np.eye(xb.shape[1]) * l2
    penalty[0, 0] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-xb @ w))
        grad = xb.T @ (p - y) + penalty @ w
        hess = xb.T @ (xb * (p * (1 - p))[:, None]) + penalty
        w -= np.linalg.solve(hess, grad)
    return w[1:], float(w[0])


def predict(model: dict, x: np.ndarray) -> np.ndarray:
    z = model["intercept"] + ((x - np.array(model["mean"])) / np.array(model["scale"])) @ np.array(
        model["coef"]
    )
    return 1.0 / (1.0 + np.exp(-z))


def right_at(rows: list[dict], p: np.ndarray, threshold: float) -> int:
    """Right answers when those below ``threshold`` are refused."""
    return sum(
        bool((r["answerable"] and r["y"] and pi >= threshold) or (not r["answerable"] and pi < threshold))
        for r, pi in zip(rows, p, strict=True)
    )


def reliability(rows: list[dict], p: np.ndarray) -> list[dict]:
    out = []
    for lo, hi in zip(BUCKETS, BUCKETS[1:], strict=False):
        inside = [r["y"] for r, pi in zip(rows, p, strict=True) if lo <= pi < hi]
        out.append(
            {
                "bucket": f"{lo:.1f}-{min(hi, 1.0):.1f}",
                "n": len(inside),
                "right_share": round(sum(inside) / len(inside), 3) if inside else None,
                "mean_confidence": round(float(np.mean([pi for pi in p if lo <= pi < hi])), 3)
                if inside
                else None,
            }
        )
    return out


def plot(table: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    pts = [(t["mean_confidence"], t["right_share"], t["n"]) for t in table if t["n"]]
    ax.plot([0, 1], [0, 1], "--", color="grey", label="perfect calibration")
    ax.plot([a for a, _, _ in pts], [b for _, b, _ in pts], "o-", label="report half")
    for a, b, n in pts:
        ax.annotate(str(n), (a, b), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.set_xlabel("confidence (predicted probability of a right answer)")
    ax.set_ylabel("share right")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def standardised_fit(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """The model's data: the features' means and scales over ``x``, the fitted coefficients."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    coef, intercept = fit((x - mean) / scale, y)
    return {
        "mean": mean.round(6).tolist(),
        "scale": scale.round(6).tolist(),
        "coef": coef.round(6).tolist(),
        "intercept": round(intercept, 6),
    }


def held_out(rows: list[dict], x: np.ndarray, y: np.ndarray, threshold: float) -> list[dict]:
    """Each input set's answers predicted by models that did not see their source (one article or
    document folder left out at a time, every other question of every set fitted): how the
    confidence transfers to a corpus it was not fitted on. Per set: right at ``threshold`` and the
    answers at :data:`CONFIDENT` or more that are wrong."""
    p = np.zeros(len(rows))
    sources = np.array([r["source"] for r in rows])
    for source in sorted(set(sources)):
        out = sources == source
        model = standardised_fit(x[~out], y[~out])
        p[out] = predict(model, x[out])
    report = []
    for set_no in sorted({r["set"] for r in rows}):
        mine = [i for i, r in enumerate(rows) if r["set"] == set_no]
        report.append(
            {
                "set": set_no,
                "n": len(mine),
                "right": right_at([rows[i] for i in mine], p[mine], threshold),
                "confident_wrong": int(sum(p[i] >= CONFIDENT and not rows[i]["y"] for i in mine)),
            }
        )
    return report


def by_awaiting(rows: list[dict], models: dict[str, tuple[dict, np.ndarray]]) -> list[dict]:
    """The report half's answers by the share of their scope awaiting vectors (the nearest of the
    simulated shares, :data:`LEVELS`: a search's filters move its scope's share a little), all of
    them and split by whether they quote another language than the question's, under each of
    ``models`` (name: (model, its probabilities)): the share right, the mean confidence, the answers
    at :data:`CONFIDENT` or more that are wrong, and the right ones when those below the model's
    minimum are refused (a refused unanswerable question is right)."""
    share = np.array([r["x"]["awaiting"] or 0.0 for r in rows])
    level = np.array(LEVELS)[np.abs(share[:, None] - np.array(LEVELS)[None, :]).argmin(axis=1)]
    cross = np.array([bool(r["x"]["cross"]) for r in rows])
    out = []
    for at in sorted(set(level)):
        for quotes, among in (
            ("all", level == at),
            ("same", (level == at) & ~cross),
            ("other", (level == at) & cross),
        ):
            mine = [int(i) for i in np.flatnonzero(among)]
            if not mine:
                continue
            line: dict[str, Any] = {
                "awaiting": float(at),
                "quotes": quotes,
                "n": len(mine),
                "right_share": round(float(np.mean([rows[i]["y"] for i in mine])), 3),
            }
            for name, (model, p) in models.items():
                line[name] = {
                    "mean_confidence": round(float(np.mean(p[mine])), 3),
                    "confident_wrong": int(sum(p[i] >= CONFIDENT and not rows[i]["y"] for i in mine)),
                    "right": right_at([rows[i] for i in mine], p[mine], model["min_confidence"]),
                }
            out.append(line)
    return out


def calibrate(
    rows: list[dict], names: tuple[str, ...], threshold: float, before: dict | None = None
) -> dict[str, Any]:
    """The model over the features ``names`` fitted on half 0, its minimum confidence (the threshold
    maximising the fit half's right answers), its report on half 1 (and by awaiting share beside the
    model shipped ``before``), and each input set predicted with its sources held out
    (:func:`held_out`, refused below ``threshold``: the deployed minimum)."""
    x = np.array([[np.nan if r["x"][f] is None else r["x"][f] for f in names] for r in rows], dtype=float)
    x = np.where(np.isnan(x), np.nanmean(x, axis=0), x)  # an unknown feature takes its mean, as at run time
    y = np.array([r["y"] for r in rows], dtype=float)
    train = np.array([r["half"] == 0 for r in rows])
    model = {"features": list(names), **standardised_fit(x[train], y[train])}
    p = predict(model, x)
    fit_rows = [r for r, t in zip(rows, train, strict=True) if t]
    thresholds = np.round(np.arange(0.05, 0.95, 0.01), 2)
    best = max(thresholds, key=lambda t: right_at(fit_rows, p[train], t))
    model["min_confidence"] = float(best)
    report = [r for r, t in zip(rows, train, strict=True) if not t]
    pr = p[~train]
    by_kind: dict[str, dict] = {}
    for r, pi in zip(report, pr, strict=True):
        k = by_kind.setdefault(r["kind"], {"n": 0, "right": 0, "confident_wrong": 0})
        k["n"] += 1
        answered = pi >= best
        k["right"] += int((r["answerable"] and r["y"] and answered) or (not r["answerable"] and not answered))
        k["confident_wrong"] += int(answered and not r["y"] and pi >= CONFIDENT)
    models = {"fitted": (model, pr)}
    if before is not None:
        old = np.array([answer_probability(r["x"], before) for r in report])
        models = {"before": (before, old), **models}
    return {
        "model": model,
        "by_awaiting": by_awaiting(report, models),
        "n_fit": int(train.sum()),
        "n_report": int((~train).sum()),
        "report_right": int(right_at(report, pr, best)),
        "by_kind": by_kind,
        "reliability": reliability(report, pr),
        "held_out_by_source": held_out(rows, x, y, threshold),
    }


QUOTES = {"all": "all", "same": "the question's language", "other": "another language"}


def tables(result: dict) -> str:
    """docs/evaluation.md's generated block: the report half's reliability, and its answers by the
    share of the scope awaiting vectors under the model shipped before the fit and the fitted one."""
    lines = [
        f"Reliability on the report half ({result['n_fit']} answers fitted, {result['n_report']} reported,"
        f" {result['report_right']} right at the fit half's threshold {result['model']['min_confidence']:g}):",
        "",
        "| confidence | answers | right share | mean confidence |",
        "|---|---|---|---|",
        *(
            f"| {t['bucket']} | {t['n']} | {t['right_share']} | {t['mean_confidence']} |"
            for t in result["reliability"]
            if t["n"]
        ),
    ]
    shares = result.get("by_awaiting", [])
    if shares and "before" in shares[0]:
        lines += [
            "",
            "By the share of the scope's rows awaiting vectors (report half; right = right when the answers"
            f" below the model's own minimum are refused; confident-wrong: wrong at {CONFIDENT} or more):",
            "",
            "| awaiting | quotes | answers | right share | mean confidence before / fitted"
            " | confident-wrong before / fitted | right before / fitted |",
            "|---|---|---|---|---|---|---|",
            *(
                f"| {s['awaiting']:g} | {QUOTES[s['quotes']]} | {s['n']} | {s['right_share']} |"
                f" {s['before']['mean_confidence']} / {s['fitted']['mean_confidence']} |"
                f" {s['before']['confident_wrong']} / {s['fitted']['confident_wrong']} |"
                f" {s['before']['right']} / {s['fitted']['right']} |"
                for s in shares
            ),
        ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help="QUESTIONS.jsonl ANSWERS.jsonl pairs")
    ap.add_argument("--write", action="store_true", help="write the models, the results and the plot")
    args = ap.parse_args()
    pairs = list(zip(args.files[::2], args.files[1::2], strict=True))
    rows = rows_of(pairs)
    threshold = get_settings().answer.min_confidence
    result: dict[str, Any] = {
        "inputs": [[str(a), str(b)] for a, b in pairs],
        **calibrate(rows, NAMES, threshold, json.loads(CONFIDENCE_MODEL.read_text(encoding="utf-8"))),
    }
    print(json.dumps(result, indent=1))
    if args.write:
        CONFIDENCE_MODEL.write_text(json.dumps(result["model"], indent=1) + "\n", encoding="utf-8")
        (RESULTS / "answer-calibration.json").write_text(
            json.dumps(result, indent=1) + "\n", encoding="utf-8"
        )
        plot(result["reliability"], Path(__file__).parents[1] / "docs" / "img" / "answer-calibration.png")
        update_page(EVAL_PAGE, tables(result), *DOCS_MARKERS)


if __name__ == "__main__":
    main()
