"""Markdown summary of ``bench/results/*.json`` for the README "Results" section.

    python -m bench.report            # prints the section body
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench import common


def _fmt(x: float) -> str:
    return f"{x:,.4g}" if abs(x) < 1000 else f"{x:,.0f}"


def summary(results: Path = common.RESULTS) -> str:
    out = []
    for path in sorted(results.glob("*.json")):
        d = json.loads(path.read_text())
        m = d["machine"]
        out.append(f"#### {d['title']}\n")
        out.append(f"![{d['benchmark']}](bench/results/{d['benchmark']}.png)\n")
        out.append("| target | measured | threshold | result |\n|---|---|---|---|")
        for t in d["targets"]:
            unit = f" {t['unit']}" if t["unit"] else ""
            out.append(f"| {t['name']} | {_fmt(t['measured'])}{unit} | {t['op']} {_fmt(t['threshold'])}{unit} |"
                       f" {'pass' if t['passed'] else '**FAIL**'} |")
        out.append(f"\n<sub>{m['started_at']}, {m['cpu_count']} × {m['cpu_model']}, load average at start"
                   f" {m['load_average_start'][0]} (shared with other test runs), PostgreSQL {m.get('postgres', '?')},"
                   f" pgvector {m.get('pgvector', '?')}; raw numbers in `bench/results/{path.name}`.</sub>\n")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(summary() + "\n")
