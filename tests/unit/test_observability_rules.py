"""deploy/grafana and deploy/prometheus: the dashboard and the alert rules name only metrics ragline
defines (a renamed metric fails here), every alert carries ``for:``, a severity and a runbook that
exists in docs/operations.md, the ACL-sync alert uses the documented bound, and promtool (Debian's
``prometheus`` package, installed by .ci/run) accepts the rules and their unit tests, in which each
alert fires on one synthetic series and stays silent on another. ``ragline metrics`` prints every
name whole."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from ragline.shared.worker import metrics

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "ragline-rules.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "ragline-rules.test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "ragline-dashboard.json"
OPERATIONS = REPO / "docs" / "operations.md"

PROMQL_WORDS = {
    "by", "without", "and", "or", "unless", "offset", "bool", "on", "ignoring", "group_left",
    "group_right", "inf", "nan",
}  # fmt: skip
#: series Prometheus itself adds to every scrape job
PROMETHEUS_SERIES = {"up"}
#: the issue's list: each must have at least one panel
REQUIRED_PANELS = {
    "rag_documents_processed_total",  # ingest throughput and failures
    "rag_embedder_429_total",
    "rag_embedder_retries_total",
    "rag_queue_depth",
    "rag_retrieval_latency_ms_bucket",
    "rag_rerank_latency_ms_bucket",
    "rag_query_degraded_total",
    "rag_rerank_degraded_total",
    "rag_acl_sync_lag_seconds_bucket",
    "rag_jobs_stuck_total",
}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exposed_names() -> dict[str, str]:
    """Series name -> metric type of everything the pools serve: shared/worker/metrics.py and the refused
    task counter of shared/sdk/signing.py (created on the worker side only)."""
    from ragline.shared.sdk.signing import _refused_counter

    objects = [v for v in vars(metrics).values() if isinstance(v, MetricWrapperBase)] + [_refused_counter()]
    out = {}
    for metric in objects:
        for family in metric.describe():
            for suffix in SUFFIXES[family.type]:
                out[family.name + suffix] = family.type
    return out


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression (with Grafana's ``$__…`` variables) selects."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, printf formats)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges and subqueries
    # grouping clauses go, so an aggregation is followed by its "(" like a function
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for m in re.finditer(r"(?<![\w$.])([a-zA-Z_:][\w:]*)(\s*\()?", expr):
        if not m.group(2) and m.group(1).lower() not in PROMQL_WORDS:
            names.add(m.group(1))
    return names


def dashboard_exprs() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]


def alert_rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    anchors = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            text = re.sub(r"[`*_]", "", m.group(1)).strip().lower()
            anchors.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text)))
    return anchors


def test_metric_names_of_an_expression():
    expr = (
        'histogram_quantile(0.95, sum by (le, provider) (rate(rag_x_bucket{a="b"}[$__rate_interval])))'
        " / on (job) group_left up and (sum(rate(rag_y_total[5m] offset 1h)) or vector(0)) > 0.1"
    )
    assert metric_names(expr) == {"rag_x_bucket", "up", "rag_y_total"}


def test_dashboard_names_only_metrics_ragline_defines():
    known = exposed_names()
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    used = set()
    for title, expr in exprs:
        names = metric_names(expr)
        assert names, f"panel {title!r} selects no series: {expr}"
        unknown = names - known.keys() - PROMETHEUS_SERIES
        assert not unknown, f"panel {title!r} names metrics ragline does not define: {sorted(unknown)}"
        used |= names
        if "histogram_quantile" in expr:
            assert all(n.endswith("_bucket") for n in names - PROMETHEUS_SERIES), title
            assert re.search(r"by \((le|le, \w+)\)", expr), f"{title}: a quantile must keep the le label"
    assert REQUIRED_PANELS <= used, sorted(REQUIRED_PANELS - used)


def test_dashboard_is_importable_json_on_a_chosen_prometheus():
    board = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"]
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]
    for p in board["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["description"], p["title"]
            assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24


def test_alert_rules_name_only_metrics_ragline_defines():
    known = exposed_names()
    for rule in alert_rules():
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        assert not names - known.keys() - PROMETHEUS_SERIES, (rule["alert"], names - known.keys())


def test_every_alert_has_a_duration_a_severity_and_a_runbook_in_the_operations_guide():
    rules = alert_rules()
    anchors = github_anchors(OPERATIONS.read_text())
    tested = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        c["alertname"] for t in tested for c in t["alert_rule_test"] if c["exp_alerts"]
    }  # fmt: skip
    silent = {c["alertname"] for t in tested for c in t["alert_rule_test"] if not c["exp_alerts"]}
    assert len(rules) >= 5
    for rule in rules:
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert {"summary", "description", "runbook_url"} <= rule["annotations"].keys(), name
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == "docs/operations.md" and anchor in anchors, f"{name}: no heading #{anchor}"
        assert name in fired and name in silent, f"{name}: promtool tests must show it fire and not fire"
    names = {r["alert"] for r in rules}
    for must in ("RaglineQueueBackingUp", "RaglineIngestErrorRate", "RaglineQueryErrorRate"):
        assert must in names
    assert {"RaglineJobStuck", "RaglineAclSyncLagHigh"} <= names


def test_acl_sync_alert_uses_the_documented_bound():
    documented = re.search(
        r"`rag_acl_sync_lag_seconds`[^\n]*alert when p99 > (\d+(?:\.\d+)?) s", OPERATIONS.read_text()
    )
    assert documented, "docs/operations.md no longer states the ACL-sync bound"
    (rule,) = [r for r in alert_rules() if r["alert"] == "RaglineAclSyncLagHigh"]
    expr = " ".join(rule["expr"].split())
    assert expr.startswith("histogram_quantile(0.99, sum by (le) (rate(rag_acl_sync_lag_seconds_bucket")
    assert expr.endswith(f"> {documented.group(1)}")


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (Debian package `prometheus`; .ci/run installs it)")
    return path


def test_promtool_checks_the_rules_and_runs_their_unit_tests():
    promtool = _promtool()
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in check.stdout
    unit = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent, capture_output=True, text=True
    )
    assert unit.returncode == 0 and "SUCCESS" in unit.stdout, unit.stdout + unit.stderr


def test_promtool_parses_every_dashboard_expression(tmp_path):
    """Each panel query, with Grafana's interval variables filled in, as a recording rule: promtool
    parses it as Prometheus would."""
    promtool = _promtool()
    rules = [
        {"record": f"ragline:panel_{i}", "expr": re.sub(r"\$__\w+", "5m", expr)}
        for i, (_, expr) in enumerate(dashboard_exprs())
    ]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# ------------------------------------------------------------------------------ `ragline metrics`
def snapshot_rows() -> list[dict]:
    """One row per metric ragline defines, shaped like ``ragline.cli.ops.summarize``'s."""
    rows = []
    for name, kind in sorted(exposed_names().items()):
        if kind == "histogram":
            if name.endswith("_bucket"):
                base = name.removesuffix("_bucket")
                rows.append(
                    {"pool": "control", "metric": base, "labels": {"path": "event", "outcome": "not_found"},
                     "type": "histogram", "count": 12.0, "sum": 30.0, "mean": 2.5}
                )  # fmt: skip
        else:
            rows.append(
                {"pool": "ingest", "metric": name, "labels": {"queue": "maintenance"}, "type": kind,
                 "value": 1234.0}
            )  # fmt: skip
    return rows


def assert_whole_names(text: str, rows: list[dict]) -> None:
    assert "…" not in text
    for row in rows:
        assert re.search(rf"(?<![\w]){re.escape(row['metric'])}(?![\w])", text), row["metric"]
    assert "1234" in text and "2.50" in text


def test_metrics_table_prints_every_name_and_label_whole():
    from ragline.cli.ops import render_lines

    rows = snapshot_rows()
    rows.append(
        {"pool": "ingest", "metric": "rag_embed_texts_total", "labels": {"provider": "local-e5"},
         "type": "counter", "value": 7.0}
    )  # fmt: skip
    lines = render_lines(rows)
    assert_whole_names("\n".join(lines), rows)
    # issue 52: "provider=lo cal-e5"; every label whole on one line
    for r in rows:
        for k, v in r["labels"].items():
            assert any(f"{k}={v}" in line.split() for line in lines), (k, v)


def test_ragline_metrics_command_prints_every_name_whole_when_piped(monkeypatch):
    from typer.testing import CliRunner

    from ragline.cli import app as cli
    from ragline.cli import ops

    rows = snapshot_rows()
    monkeypatch.setattr(ops, "summarize", lambda settings: rows)
    out = CliRunner().invoke(cli, ["metrics"], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    assert max(map(len, out.stdout.splitlines())) <= 80
    assert_whole_names(out.stdout, rows)
