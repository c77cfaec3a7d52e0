"""k. Where ingestion's time goes on a real corpus: the share of wall time per stage (load, parse,
chunk, contextualize, embed, store) and per layer (source chunks, symbol records, tests, docs).

Each corpus is ingested the way ``ragline ingest REPO`` does it: the git source (``sync_git_source``)
plans the batches, the ingest pool's own batch task runs each of them (in this process, so the
pipeline's ``rag_ingest_stage_seconds`` histogram is read directly), and the fill task embeds what
was stored before its vectors (source code, by default) until none is left. The embedder is the
local multilingual-e5 on this machine's CPU: the budget the issue asks about. The numbers are the
histogram's own sums, per stage and layer; what no stage accounts for (git, job bookkeeping,
planning) is reported as ``other``.

Corpora: ``ragline`` is ``make run``'s (this repository at HEAD, the demo's include globs);
``astropy`` is the ~790-file repository of ``swe-loc-large-dev`` at its first instance's commit,
every file the git source takes. On astropy the fill can take an hour on two cores: ``fill_rows``
caps the rows embedded per layer, and the layer's embed time is then its measured seconds per row
times its rows (``embed_extrapolated`` says so).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench import common

NAME = "ingest_stages"
TITLE = "Where ingestion's time goes: share of wall time per stage and per layer on real repositories"
ROOT = Path(__file__).resolve().parents[1]
LARGE = ROOT / "../shared/datasets/swe-loc-large-dev"
SMOKE = {"corpora": ["ragline"], "include": ["ingest/clone_guard.py"]}
STAGES = ("load", "parse", "chunk", "contextualize", "embed", "store")


def stage_sums() -> dict[tuple[str, str], float]:
    """The histogram's ``_sum`` per (stage, layer), as this process has recorded them."""
    from ragline.shared.worker.metrics import INGEST_STAGE_SECONDS

    out = {}
    for metric in INGEST_STAGE_SECONDS.collect():
        for s in metric.samples:
            if s.name.endswith("_sum"):
                out[(s.labels["stage"], s.labels["layer"])] = s.value
    return out


def delta(after: dict, before: dict) -> dict[tuple[str, str], float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def shares(seconds: dict[tuple[str, str], float], wall_s: float) -> dict:
    """Seconds and share of the wall time per stage, per layer, and per (stage, layer) (pure)."""
    by_stage: dict[str, float] = {}
    by_layer: dict[str, float] = {}
    for (stage, layer), v in seconds.items():
        by_stage[stage] = by_stage.get(stage, 0.0) + v
        by_layer[layer] = by_layer.get(layer, 0.0) + v
    accounted = sum(seconds.values())
    other = max(0.0, wall_s - accounted)

    def table(d: dict[str, float]) -> dict:
        return {k: {"s": round(v, 2), "share": round(v / wall_s, 4)} for k, v in sorted(d.items())}

    return {
        "wall_s": round(wall_s, 2),
        "accounted_share": round(accounted / wall_s, 4) if wall_s else 0.0,
        "by_stage": table({**by_stage, "other": other}),
        "by_layer": table(by_layer),
        "by_stage_layer": {f"{s}/{lay}": round(v, 2) for (s, lay), v in sorted(seconds.items())},
    }


def _repository(corpus: str, workdir: Path) -> tuple[Path, str, list[str]]:
    """(repository, commit, include globs) of a corpus."""
    from ragline.cli.demo import REPOSITORY_INCLUDE
    from ragline.ingest import git

    if corpus == "ragline":  # a clone of this checkout at HEAD, as `make run` ingests a fresh clone
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dest = workdir / "ragline.git"
        if not (dest / "HEAD").is_file():  # a worktree is refused as a source: its repository, cloned
            subprocess.run(["git", "clone", "--quiet", "--bare", str(ROOT), str(dest)], check=True)
        return dest, git.resolve_commit(dest, head), list(REPOSITORY_INCLUDE)
    first = json.loads((LARGE / "instances.jsonl").read_text().splitlines()[0])
    dest = workdir / "astropy.git"
    if not (dest / "HEAD").is_file():
        git.sync_clone(str((LARGE / first["bundle"]).resolve()), dest)
    return dest, git.resolve_commit(dest, first["ref"]), []


def _fill(tenant: str, fill_rows: int | None) -> dict:
    """Embed the rows stored before their vectors: all (the fill task's own loop), or at most
    ``fill_rows`` per layer (the same embedding function, a layer at a time)."""
    from ragline.ingest.reembed import embed_rows, run_fill
    from ragline.shared.worker import db
    from ragline.shared.worker.pending_vectors import PREDICATE, VectorBudget
    from ragline.shared.worker.providers import get_embedder

    budget = VectorBudget.from_settings().params()
    with db.connection() as conn:
        pending = {
            r["layer"]: r["n"]
            for r in conn.execute(
                f"SELECT c.layer, count(*) AS n FROM chunks c WHERE {PREDICATE} AND c.tenant = %(tenant)s GROUP BY 1",
                {"tenant": tenant, **budget},
            ).fetchall()
        }
    if fill_rows is None:
        while run_fill()["more"]:
            pass
        return {"pending_rows": pending, "embedded_rows": pending}
    embedder = get_embedder()
    done = {}
    with db.connection() as conn:
        for layer in pending:
            rows = conn.execute(
                f"SELECT c.id, c.tenant, c.doc_id, c.layer, c.content, c.context, c.content_hash FROM chunks c"
                f" WHERE {PREDICATE} AND c.tenant = %(tenant)s AND c.layer = %(layer)s ORDER BY c.id LIMIT %(n)s",
                {"tenant": tenant, "layer": layer, "n": fill_rows, **budget},
            ).fetchall()
            conn.commit()
            done[layer] = embed_rows(conn, embedder, rows)[0]
    return {"pending_rows": pending, "embedded_rows": done}


def ingest_corpus(corpus: str, workdir: Path, fill_rows: int | None, include: list[str] | None) -> dict:
    from ragline.ingest import tasks  # noqa: F401  (registers the ingest pool's tasks)
    from ragline.ingest.events import sync_git_source
    from ragline.ingest.roots import grant_roots
    from ragline.ingest.sources import SourceSpec
    from ragline.shared.worker import db, jobs
    from ragline.shared.worker.celery_app import app

    repo, commit, globs = _repository(corpus, workdir)
    tenant = f"bench-stages-{corpus}-{int(time.time())}"
    grant_roots(tenant, [repo], granted_by="bench")
    spec = SourceSpec(
        name=corpus, kind="git", tenant=tenant, acl=["bench"], path=repo, ref=commit, include=include or globs
    )
    before = stage_sums()
    t0 = time.perf_counter()
    with db.connection() as conn:
        # each batch task runs here, as the ingest pool runs it (the fill it sends is run below)
        out = sync_git_source(conn, spec, commit, lambda n, p: app.tasks[n].apply(args=[p]), kind="ingest")
    ingest_s = time.perf_counter() - t0
    with db.connection() as conn:
        summary = jobs.job_summary(conn, out["job_id"]) if out.get("job_id") else {}
    t1 = time.perf_counter()
    fill = _fill(tenant, fill_rows)
    fill_s = time.perf_counter() - t1
    seconds = delta(stage_sums(), before)
    wall = ingest_s + fill_s
    extrapolated = {}
    if fill_rows is not None:  # the layers' whole embed time from their measured seconds per row
        for layer, n in fill["pending_rows"].items():
            done = fill["embedded_rows"].get(layer, 0)
            # a deferred layer's rows all wait for the fill: its embed seconds are the sample's
            measured = seconds.get(("embed", layer), 0.0)
            if done and n > done:
                extra = measured / done * (n - done)
                extrapolated[layer] = round(extra, 2)
                seconds[("embed", layer)] = seconds.get(("embed", layer), 0.0) + extra
                wall += extra
    with db.connection() as conn:
        rows = {
            r["layer"]: r["n"]
            for r in conn.execute(
                "SELECT layer, count(*) AS n FROM chunks WHERE tenant = %s GROUP BY 1", (tenant,)
            ).fetchall()
        }
    return {
        "commit": commit,
        "documents": summary.get("documents"),
        "failed": summary.get("failed", 0),
        "rows_by_layer": rows,
        "ingest_s": round(ingest_s, 2),
        "fill_s": round(fill_s, 2),
        "fill": fill,
        "embed_extrapolated_s": extrapolated,
        **shares(seconds, wall),
    }


def run(
    out_dir: Path = common.RESULTS,
    corpora: list[str] | None = None,
    fill_rows: int | None = None,
    include: list[str] | None = None,
) -> dict:
    from ragline.shared.worker import db

    corpora = corpora or os.environ.get("RAGLINE_BENCH_STAGES_CORPORA", "ragline,astropy").split(",")
    large_fill = int(os.environ.get("RAGLINE_BENCH_STAGES_FILL_ROWS", "400"))
    with db.connection() as c:
        desc = common.machine(c)
    raw: dict = {}
    data: dict = {}
    with tempfile.TemporaryDirectory(prefix="rl-stages-") as tmp:
        for corpus in corpora:  # the result is written after each corpus: a long one loses nothing
            common.checkpoint()
            rows = fill_rows if fill_rows is not None else (large_fill if corpus == "astropy" else None)
            raw[corpus] = ingest_corpus(corpus, Path(tmp), rows, include)
            data = _write(out_dir, raw, desc, corpora, fill_rows, large_fill)
    return data


def _write(
    out_dir: Path, raw: dict, desc: dict, corpora: list[str], fill_rows: int | None, large_fill: int
) -> dict:
    targets = []
    for corpus, r in raw.items():
        targets.append(
            common.Target(
                f"{corpus}: wall time the stages account for",
                r["accounted_share"],
                ">=",
                0.8,
                note="the rest is git, jobs, planning",
            )
        )
        targets.append(common.Target(f"{corpus}: documents failed", r["failed"] or 0, "<=", 0))
    params = {
        "corpora": corpora,
        "embedder": "local multilingual-e5-small on this machine's CPU (the default)",
        "fill_rows_per_layer": {
            c: (fill_rows if fill_rows is not None else (large_fill if c == "astropy" else "all"))
            for c in corpora
        },
        "path": "sync_git_source -> ragline.ingest.batch run in process -> the fill task's embedding",
    }
    notes = [
        "seconds are the pipeline's rag_ingest_stage_seconds sums; an embedding request or a store"
        " transaction shared by several layers is split between them by their rows",
        "astropy: the fill embeds fill_rows rows per layer; each layer's embed time is its measured"
        " seconds per row times its rows (embed_extrapolated_s), and the wall time includes that",
    ]
    data = common.result(NAME, TITLE, params, raw, targets, desc, notes)
    common.write_json(data, out_dir)
    common.bar_plot(
        out_dir / f"{NAME}.png",
        "Share of ingestion wall time per stage",
        {
            c: {s: r["by_stage"].get(s, {}).get("share", 0.0) for s in (*STAGES, "other")}
            for c, r in raw.items()
        },
        "share of wall time",
        targets,
    )
    return data
