"""`ragline ingest`."""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path

import typer

from ragline.cli.common import (
    EXIT_RUNNING,
    echo,
    fail,
    job_exit_code,
    plural,
    print_json,
    reload_app,
    split_csv,
    state_line,
    summary_details,
    summary_line,
)
from ragline.cli.progress import job_awaiting, wait_for_documents, wait_for_vectors

app = typer.Typer()

#: the keys of a job summary that ``ragline ingest --wait --json`` prints
SUMMARY_KEYS = (
    "documents",
    "chunks",
    "embedded",
    "awaiting_vectors",
    "skipped_unchanged",
    "acl_updated",
    "acl_ignored_stale",
    "failed",
    "errors",
    "visible_to_no_group",
)


def skipped_files(paths: list[Path], suffixes: set[str]) -> list[dict]:
    """Files inside the folders given that are not ingested, each with its reason: a folder is
    walked for the supported types only, and a user must see what was left out (a file given by
    name is always sent, and an unsupported one fails with its error)."""
    seen: dict[Path, dict] = {}
    for p in paths:
        p = p.expanduser().resolve()
        if not p.is_dir():
            continue
        for f in sorted(p.rglob("*")):
            if f.is_file() and f.suffix.lower() not in suffixes and f not in seen:
                seen[f] = {
                    "path": str(f),
                    "reason": f"unsupported file type {f.suffix or '(no extension)'}",
                }
    return list(seen.values())


def _skipped_lines(skipped: list[dict]) -> list[str]:
    """One line per reason: the file, or how many files with one of them (``--json`` lists all)."""
    by_reason: dict[str, list[str]] = {}
    for s in skipped:
        by_reason.setdefault(s["reason"], []).append(s["path"])
    return [
        f"skipped: {paths[0]}: {reason}"
        if len(paths) == 1
        else f"skipped: {len(paths)} files, {reason}, e.g. {paths[0]} (--json lists them all)"
        for reason, paths in by_reason.items()
    ]


@app.command()
def ingest(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(..., exists=True, help="files or folders"),
    tenant: str = typer.Option(..., "--tenant"),
    acl: str | None = typer.Option(
        None,
        "--acl",
        help="required: comma-separated groups that may read the documents; '' stores them visible to no group",
    ),
    source: str | None = typer.Option(
        None,
        "--source",
        help="doc ids are SOURCE/<path relative to the folder given>; default: the folder's name and a hash"
        " of its absolute path",
    ),
    wait: bool = typer.Option(
        False,
        "--wait/--no-wait",
        help="wait for the job and the vectors of its rows, with progress on stderr, then print its"
        " summary; exit 1 if a document failed, 3 on --timeout",
    ),
    lexical_ok: bool = typer.Option(
        False,
        "--lexical-ok",
        help="with --wait: return once the documents are stored and searchable lexically, without"
        " waiting for the vectors their rows await (filled in the background)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON document"),
    timeout: float = typer.Option(3600.0, help="seconds to wait with --wait"),
    ref: str = typer.Option("HEAD", "--ref", help="a git repository: the commit, branch or tag to index"),
    include: list[str] = typer.Option(
        [], "--include", help="a git repository: index only tracked files matching this glob (repeatable)"
    ),
    exclude: list[str] = typer.Option(
        [], "--exclude", help="a git repository: leave out tracked files matching this glob (repeatable)"
    ),
    bulk: bool = typer.Option(
        False,
        "--bulk",
        help="a large first load: drop the HNSW index, store without it, build it once at the end"
        " (vector search is exact meanwhile; needs --wait; docs/operations.md, Bulk loads)",
    ),
) -> None:
    """Ingest files and folders, in batch tasks of the ingest pool.

    A git repository (a folder with .git) is ingested as a git source: its tracked files at --ref,
    and again later only what changed since the commit indexed (docs/code.md).

    Documents are packed into batch tasks (RAGLINE_INGEST_BATCH_DOCS each) whose chunks share
    embedding requests. A folder is searched for the file types ragline parses (Markdown, HTML,
    reStructuredText, text, PDF, DOCX, source code); other files are listed as skipped. A document's id is
    SOURCE/<its path relative to the folder given> (a file given directly: relative to its own
    folder). Without --wait the command returns once the job is queued.
    """
    if acl is None:
        ctx.fail(  # a usage error (exit 2), like a missing argument
            "--acl is required: the comma-separated groups that may read these documents"
            " (--acl '' stores them visible to no group until `ragline acl set` gives them one)"
        )
    groups = split_csv(acl)
    if bulk and not wait:
        ctx.fail("--bulk needs --wait: the index is built once the load is done")
    from ragline.cli.index import bulk_window  # start-up: psycopg loads on use

    with bulk_window(f"ingest {tenant}") if bulk else nullcontext():
        _ingest(paths, tenant, groups, source, wait, as_json, timeout, ref, include, exclude, lexical_ok)


def _ingest(
    paths: list[Path],
    tenant: str,
    groups: list[str],
    source: str | None,
    wait: bool,
    as_json: bool,
    timeout: float,
    ref: str,
    include: list[str],
    exclude: list[str],
    lexical_ok: bool = False,
) -> None:
    from ragline.ingest.enqueue import (  # start-up: Celery, psycopg load on use
        SUFFIXES,
        collect_files,
        enqueue_files,
        stored_under_other_ids,
    )
    from ragline.ingest.git import is_repository
    from ragline.shared.config.settings import get_settings

    if any(p.is_dir() and is_repository(p) for p in paths):
        if len(paths) > 1:
            fail("a git repository is ingested on its own: give one repository per `ragline ingest`")
        ingest_repository(
            paths[0], tenant, groups, source, ref, wait, as_json, timeout, include, exclude, lexical_ok
        )
        return
    try:
        files = collect_files(paths, source)
    except ValueError as exc:  # an invalid --source name, or two files under one doc id
        raise typer.BadParameter(str(exc), param_hint="'--source'") from None
    skipped = skipped_files(paths, SUFFIXES)
    settle_vanished_files(paths, files, tenant, source)
    if not files:  # no job: one without documents would never finish
        if as_json:
            print_json({"job_id": None, "documents": 0, "skipped": skipped})
        else:
            for line in _skipped_lines(skipped):
                echo(line)
        fail(
            f"nothing to ingest in {', '.join(map(str, paths))}: no file of a supported type"
            f" ({', '.join(sorted(SUFFIXES))})"
        )
    reload_app()
    sources = [{"source": s, "folder": str(r)} for s, r in dict.fromkeys((f.source, f.root) for f in files)]
    duplicates = stored_under_other_ids(tenant, files)
    warnings = []
    if not groups:
        warnings.append(
            f"--acl is empty: the {len(files)} documents are stored visible to no group (no search or"
            " answer returns them) until `ragline acl set` gives them one"
        )
    if duplicates:
        d = duplicates[0]
        warnings.append(
            f"{len(duplicates)} of these files are already stored under another doc id (e.g. {d['doc_id']}"
            f" is also {d['also_stored_as']}: an ingest from before doc ids had a source prefix, or from"
            " another folder given), so answers may cite both; delete the old ids (docs/operations.md,"
            ' "Document ids")'
        )
    for w in warnings:
        typer.echo(f"warning: {w}", err=True)
    from ragline.ingest.roots import grant_roots  # start-up: psycopg loads on use

    grant_roots(tenant, paths)  # the operator's folders: workers read local files only below granted roots
    job_id = enqueue_files(files, tenant=tenant, acl=groups)
    extra = {"sources": sources, "duplicates": duplicates, "skipped": skipped, "warnings": warnings}
    skipped_lines = _skipped_lines(skipped)
    if not wait:
        if as_json:
            print_json({"job_id": job_id, "documents": len(files), **extra})
            return
        batch = get_settings().ingest.batch_docs
        echo(
            f"job {job_id}: {plural(len(files), 'document')} queued for the ingest pool in batch tasks of"
            f" up to {batch}"
            + (f", {len(skipped)} skipped" if skipped else "")
            + "; `ragline job "
            + job_id[:8]
            + "` shows its progress"
        )
        for s in sources:
            echo(f"source {s['source']}: doc ids {s['source']}/... from {s['folder']}")
        for line in skipped_lines:
            echo(line)
        return
    summary, code = wait_job(job_id, len(files), timeout, as_json, lexical_ok)
    out = {k: summary[k] for k in SUMMARY_KEYS}
    out["job_id"], out["state"] = job_id, summary["state"]
    out["vectors_filled"] = summary.get("vectors_filled", 0)
    out.update(extra)
    if as_json:
        print_json(out)
    else:
        echo(state_line(job_id, summary["state"]))
        echo(summary_line(summary) + (f"; {len(skipped)} files skipped" if skipped else ""))
        for line in summary_details(summary) + skipped_lines:
            echo(line)
    if code:
        raise typer.Exit(code)


def wait_job(job_id: str, total: int, timeout: float, as_json: bool, lexical_ok: bool) -> tuple[dict, int]:
    """``--wait``: the job's documents, then (unless ``lexical_ok``) the vectors their rows await
    (``RAGLINE_INGEST_DEFER_VECTORS``: a git source's code is stored searchable before it is
    embedded), both with progress on stderr; the summary and the exit code. Vectors still awaited
    at ``timeout`` exit 3, like a job still running: the fill goes on."""
    deadline = time.monotonic() + timeout
    summary = wait_for_documents(job_id, total, timeout, as_json)
    code = job_exit_code(summary["state"])
    if summary["state"] in ("queued", "running") or lexical_ok or not summary["awaiting_vectors"]:
        return summary, code
    left = wait_for_vectors(job_awaiting(job_id), deadline, as_json)
    summary["vectors_filled"] = summary["awaiting_vectors"] - left
    summary["awaiting_vectors"] = left
    return summary, code or (EXIT_RUNNING if left else 0)


def sync_line(name: str, out: dict) -> str:
    """One line for what ``sync_git_source`` did, whatever its outcome (pure): ``synced`` (files
    queued), ``ignored_duplicate`` (the commit is the one indexed: only permissions may change) or
    ``ignored_stale``; the counts it does not carry are 0."""
    head = f"source {name} at {out['commit'][:12]}"
    acl = f", {plural(out.get('acl_updated', 0), 'document')} given the new --acl"
    if out["outcome"] == "ignored_duplicate":
        return f"{head}: already indexed at this commit, no file queued{acl}"
    if out["outcome"] != "synced":
        recorded = out.get("recorded_commit")
        return f"{head}: {out['outcome']}" + (f" (the commit indexed is {recorded[:12]})" if recorded else "")
    return (
        f"job {out['job_id']}: {head}: {out.get('enqueued', 0)} files queued, {out.get('unchanged', 0)}"
        f" unchanged, {out.get('pruned', 0)} pruned, {out.get('skipped', 0)} skipped{acl}"
    )


def settle_vanished_files(paths: list[Path], files: list, tenant: str, source: str | None) -> None:
    """The folders given were listed again: the open errors of their files that are gone are settled
    (``ingest/vanished.py``), also when nothing is left to ingest in them."""
    from ragline.ingest.enqueue import default_source_name  # start-up: Celery, psycopg load on use
    from ragline.ingest.vanished import settle_folders

    folders = [p.expanduser().resolve() for p in paths if p.is_dir()]
    if not folders:
        return
    reload_app()
    names = {source or default_source_name(f) for f in folders}
    settle_folders(tenant, {n: {f.doc_id for f in files if f.source == n} for n in names})


def ingest_repository(
    repo: Path,
    tenant: str,
    groups: list[str],
    source: str | None,
    ref: str,
    wait: bool,
    as_json: bool,
    timeout: float,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    lexical_ok: bool = False,
) -> None:
    """`ragline ingest REPO`: the repository as a git source of the tenant (the same path as a push)."""
    from ragline.ingest.enqueue import check_source_name, default_source_name  # start-up: Celery loads on use
    from ragline.ingest.events import sync_git_source
    from ragline.ingest.roots import grant_roots
    from ragline.ingest.sources import SourceSpec, SourceUnavailable
    from ragline.shared.worker import db
    from ragline.shared.worker.celery_app import app as celery_app

    repo = repo.expanduser().resolve()
    try:
        name = check_source_name(source) if source else default_source_name(repo)
        spec = SourceSpec(
            name=name,
            kind="git",
            tenant=tenant,
            acl=groups,
            path=repo,
            ref=ref,
            include=include or [],
            exclude=exclude or [],
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc).splitlines()[-1], param_hint="'--source' / '--ref'") from None
    reload_app()
    grant_roots(tenant, [repo])  # workers read the repository's objects only below granted roots
    try:
        with db.connection() as conn:
            out = sync_git_source(
                conn, spec, ref, lambda n, payload: celery_app.send_task(n, args=[payload]), kind="ingest"
            )
    except (SourceUnavailable, RuntimeError) as exc:
        fail(f"cannot ingest {repo}: {exc}")
    skipped_lines = _skipped_lines(out.get("skipped_files") or [])
    if not wait or not out["job_id"]:
        if as_json:
            print_json(out)
        else:
            echo(sync_line(name, out))
            for line in skipped_lines:
                echo(line)
        return
    summary, code = wait_job(out["job_id"], out["enqueued"], timeout, as_json, lexical_ok)
    result = {k: summary[k] for k in SUMMARY_KEYS}
    result["vectors_filled"] = summary.get("vectors_filled", 0)
    # the files ingested report their own ACL outcomes; the unchanged ones got theirs from the sync
    result.update({k: v for k, v in out.items() if k != "acl_updated"}, state=summary["state"])
    result["acl_updated"] = summary["acl_updated"] + out.get("acl_updated", 0)
    if as_json:
        print_json(result)
    else:
        echo(state_line(out["job_id"], summary["state"]))
        echo(
            summary_line(summary) + f"; source {name} at {out['commit'][:12]}, {out.get('pruned', 0)} pruned,"
            f" {plural(out.get('acl_updated', 0), 'unchanged document')} given the new --acl"
            + (f", {out['skipped']} files skipped" if out.get("skipped") else "")
        )
        for line in summary_details(summary) + skipped_lines:
            echo(line)
    if code:
        raise typer.Exit(code)
