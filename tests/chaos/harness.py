"""Helpers of the chaos suite: a deterministic corpus, jobs sent to a test pool's queue, the chunk rows
that define "the same final state", and the results table written to bench/results/chaos.json."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ragline.ingest.roots import grant_roots
from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT
from ragline.shared.worker import db, jobs

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "chaos.json"

_WORDS = (
    "очередь индексации воркер документ фрагмент эмбеддинг поиск ответ арендатор доступ группа "
    "задача сервер база данных вектор индекс модель запрос цитата заголовок раздел абзац"
).split()


def paragraph(seed: int, words: int = 60) -> str:
    out = []
    x = seed * 7919 + 13
    for i in range(words):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(_WORDS[x % len(_WORDS)])
        if i % 12 == 11:
            out[-1] += "."
    text = " ".join(out)
    return text[0].upper() + text[1:] + f" Номер {seed}."


def make_corpus(folder: Path, docs: int, sections: int, paras: int = 2, prefix: str = "doc") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    offset = (
        sum(prefix.encode()) * 100_000
    )  # another prefix, other texts: nothing comes from the embedding cache
    for d in range(docs):
        parts = [f"# Документ {prefix} {d}\n"]
        for s in range(sections):
            parts.append(f"\n## Раздел {s}\n")
            parts += [paragraph(offset + d * 1000 + s * 10 + p) + "\n" for p in range(paras)]
        f = folder / f"{prefix}-{d:02d}.md"
        f.write_text("\n".join(parts), encoding="utf-8")
        files.append(f)
    return files


def send_job(
    app, queue: str, files: list[Path], tenant: str, acl: tuple[str, ...] = ("staff",)
) -> tuple[str, list[str]]:
    """One job, one ingest task per file, all on ``queue``; returns (job_id, task ids). The files'
    folders are granted to the tenant first, as ``ragline ingest`` does: workers read no other path."""
    grant_roots(tenant, sorted({f.parent for f in files}))
    with db.connection() as conn:
        job_id = jobs.create_job(conn, "ingest", tenant, [f.name for f in files], {"chaos": True})
    ids = []
    for f in files:
        payload = {
            "tenant": tenant,
            "doc_id": f.name,
            "uri": str(f),
            "path": f.name,
            "acl": list(acl),
            "version": 1,
            "job_id": job_id,
        }
        ids.append(app.send_task(TASK_INGEST_DOCUMENT, args=[payload], queue=queue).id)
    return job_id, ids


def wait_job(job_id: str, timeout: float = 300) -> dict:
    summary = jobs.wait_for_job(job_id, timeout, poll_s=0.2)
    assert summary["state"] not in jobs.ACTIVE_STATES, f"job {job_id} still running: {summary}"
    return summary


def chunk_rows(tenant: str) -> list[tuple[str, int, str]]:
    """(doc_id, chunk_no, content_hash) of every chunk with an embedding, duplicates kept."""
    with db.connection() as c:
        rows = c.execute(
            "SELECT doc_id, chunk_no, content_hash FROM chunks WHERE tenant = %s"
            " AND embedding IS NOT NULL ORDER BY doc_id, chunk_no",
            (tenant,),
        ).fetchall()
    return [(r["doc_id"], r["chunk_no"], r["content_hash"]) for r in rows]


def compare(actual: list[tuple], reference: list[tuple]) -> dict:
    """Lost / duplicated / unexpected rows of a faulted run against a clean run of the same corpus."""
    a, r = set(actual), set(reference)
    return {
        "rows": len(actual),
        "reference_rows": len(reference),
        "lost": len(r - a),
        "duplicated": len(actual) - len(a),
        "unexpected": len(a - r),
    }


def wait_state(app, task_id: str, states: set[str], timeout: float = 120, poll: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = app.AsyncResult(task_id)
        if res.state in states:
            return res
        time.sleep(poll)
    raise AssertionError(f"task {task_id} never reached {states}")


def peak_rss_mb(pid: int) -> float:
    """Peak resident set (VmHWM) of a live process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


@dataclass
class FaultResult:
    fault: str
    tasks_affected: int
    recovered: int
    lost: int
    duplicated: int
    time_to_recover_s: float | None
    failures_recorded: int = 0
    notes: str = ""
    extra: dict = field(default_factory=dict)


def record(section: str, rows: list) -> None:
    """Merge one section (list of results) into bench/results/chaos.json, keyed by section name."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(RESULTS.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        data = {}
    data[section] = [asdict(r) if hasattr(r, "__dataclass_fields__") else r for r in rows]
    data.setdefault("_meta", {})["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    data["_meta"]["cpus"] = os.cpu_count()
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False))
    tmp.replace(RESULTS)


def markdown_table(path: Path = RESULTS) -> str:
    """The fault table of docs/reliability.md, from bench/results/chaos.json."""
    data = json.loads(path.read_text())
    lines = [
        "| fault | tasks affected | recovered | lost | duplicated | time to recover (s) | failures recorded |",
        "|---|---|---|---|---|---|---|",
    ]
    for section, rows in data.items():
        if section.startswith(("_", "bad_input", "attacks", "acl_reingest", "redos")):
            continue
        for r in rows:
            lines.append(
                f"| {r['fault']} | {r['tasks_affected']} | {r['recovered']} | {r['lost']} | {r['duplicated']} "
                f"| {'-' if r['time_to_recover_s'] is None else r['time_to_recover_s']} | {r['failures_recorded']} |"
            )
    bad = [r for r in data.get("bad_input_documents", []) if "case" in r]
    if bad:
        lines += ["", "| bad input | result | peak RSS (MB) |", "|---|---|---|"]
        for r in bad:
            result = r["status"] + (f": {r['error'][:90]}" if r.get("error") else f", {r['chunks']} chunks")
            lines.append(f"| {r['case']} | {result.replace('|', '/')} | {r['peak_rss_mb']} |")
    attacks = (
        data.get("attacks_input", [])
        + data.get("attacks_answers", [])[-1:]  # its summary
        + data.get("attacks_local_files", [])
        + data.get("attacks_git", [])
    )
    if attacks:
        lines += ["", "| attack | result | peak RSS (MB) |", "|---|---|---|"]
        for r in attacks:
            result = r["status"] + (f": {r['error'][:100]}" if r.get("error") else "")
            lines.append(f"| {r['attack']} | {result.replace('|', '/')} | {r.get('peak_rss_mb') or ''} |")
    redos = data.get("redos", [])
    if redos:
        lines += [
            "",
            f"ReDoS: {len(redos)} worst-case 4,000-character questions (entry point x shape) on a threads "
            f"pool: slowest {max(r['hostile_s'] for r in redos)} s, the other tenant's slowest search "
            f"meanwhile {max(r['other_tenant_search_s'] for r in redos)} s; "
            + ", ".join(f"{n} {res}" for res, n in sorted(Counter(r["result"] for r in redos).items()))
            + ".",
        ]
    matrix = data.get("acl_reingest_matrix", [])
    if matrix:
        right = sum(r["on_new_acl"] == r["documents"] for r in matrix)
        lines += [
            "",
            f"Re-ingest with another ACL, every entry point x content x direction: {right} of "
            f"{len(matrix)} cells leave every document on the new ACL; texts re-embedded for "
            f"ACL-only changes: {sum(r['texts_embedded'] for r in matrix if r['content'] == 'unchanged')}.",
        ]
    return "\n".join(lines)


def write_docs(page: Path = RESULTS.parents[2] / "docs" / "reliability.md") -> None:
    """Rewrite the generated block of docs/reliability.md (between its chaos-table markers)."""
    text = page.read_text()
    head, rest = text.split("<!-- chaos-table", 1)
    marker, _, tail = rest.partition("-->\n")
    _, end, after = tail.partition("<!-- /chaos-table -->")
    page.write_text(f"{head}<!-- chaos-table{marker}-->\n{markdown_table()}\n{end}{after}")


if __name__ == "__main__":
    import sys

    write_docs() if "--docs" in sys.argv else print(markdown_table())


def task_resources(log: str) -> dict[str, dict]:
    """The ``task_resources`` records (peak RSS, CPU time) a worker logged, by task id."""
    out = {}
    for line in log.splitlines():
        if '"task_resources"' in line:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            out[rec["task_id"]] = rec
    return out
