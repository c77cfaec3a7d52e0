"""`ragline acl set|sync`, `reindex`, `reembed`, `errors`, `retry-failed`, `cancel`: the document lifecycle."""

from __future__ import annotations

import textwrap
import time
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path

import typer
from pydantic import ValidationError

from ragline.cli.common import (
    EXIT_FAILED,
    columns,
    connect,
    echo,
    iso,
    job_exit_code,
    plural,
    print_json,
    print_result,
    reload_app,
    split_csv,
    state_line,
    summary_details,
    summary_line,
)
from ragline.cli.progress import fill_rates, vector_rows
from ragline.operations import acl as acl_ops
from ragline.shared.sdk.contracts import AclSyncItem
from ragline.shared.sdk.names import QUEUES, TASK_INGEST_REEMBED

app = typer.Typer()
acl_app = typer.Typer(no_args_is_help=True, help="Set one document's groups, or sync a JSONL file.")
app.add_typer(acl_app, name="acl")


def acl_report(out: dict) -> list[str]:
    """The readable summary of an ACL command: counts, then every item that was not found."""
    n, c, i = out["documents_updated"], out["chunks_updated"], out["items"]
    lines = [
        f"{n} document{'s' * (n != 1)} updated ({c} chunk{'s' * (c != 1)}) of {i} change{'s' * (i != 1)}"
        + (f", {out['pending']} kept for documents not ingested yet" if out.get("pending") else "")
        + (
            f", {out['ignored_stale']} ignored as stale (not newer than that producer's last change)"
            if out["ignored_stale"]
            else ""
        )
        + (f", {out['forced']} forced" if out.get("forced") else "")
    ]
    for st in out.get("stale", [])[:20]:
        lines.append(
            f"ignored: tenant {st['tenant']!r}: document {st['doc_id']!r}: version {st['version']} is not"
            f" newer than the last change applied from {st['producer']!r} ({st['last_version']});"
            " --force applies it anyway"
        )
    for t in out.get("unknown_tenants", []):
        lines.append(f"not found: tenant {t!r} has no documents (misspelt?)")
    shown = [nf for nf in out.get("not_found", []) if nf["tenant"] not in out.get("unknown_tenants", [])]
    for nf in shown[:20]:
        target = (
            f"document {nf['doc_id']!r}" if "doc_id" in nf else f"no document under {nf['path_prefix']!r}"
        )
        lines.append(f"not found: tenant {nf['tenant']!r}: {target}")
    if len(shown) > 20:
        lines.append(f"... and {len(shown) - 20} more not found (--json lists them all)")
    return lines


def send_acl(items: list[AclSyncItem], timeout: float, pending: bool, force: bool) -> dict:
    """The operator's changes through the operations layer, on the broker ``ragline up`` started;
    a refused batch is a bad parameter."""
    from ragline.shared.sdk.client import RaglineError  # start-up: Celery loads only for commands that send

    reload_app()
    try:
        return acl_ops.sync(items, timeout, missing="pending" if pending else "report", force=force)
    except RaglineError as exc:  # a reply {"ok": false}: the control pool refused a batch
        raise typer.BadParameter(f"rejected: {exc.detail}") from None


def finish_acl_command(out: dict, as_json: bool) -> None:
    """Print the result (JSON or readable lines); exit 1 when something was not found or a change
    was ignored as stale: the operator asked for permissions the documents do not have."""
    print_result(out, as_json, acl_report(out))
    if out.get("not_found") or out.get("ignored_stale"):
        raise typer.Exit(EXIT_FAILED)


FORCE_HELP = (
    "apply the change even when it is not newer than the operator's last change of the document"
    " (an older --version, or a clock set back); logged and counted as forced"
)


PENDING_HELP = (
    "keep permissions for documents not ingested yet (their first ingest keeps them) instead of"
    " reporting them as not found"
)


@acl_app.command("set")
def acl_set(
    doc_id: str = typer.Argument(...),
    tenant: str = typer.Option(..., "--tenant"),
    acl: str = typer.Option(..., "--acl", help="comma-separated groups; an empty string revokes every group"),
    version: str | None = typer.Option(
        None,
        metavar="INTEGER|ISO-8601",
        help="the operator's own version of this change: an integer, or a time such as"
        " 2026-11-30T12:00:00Z (taken as Unix nanoseconds); compared only with the operator's earlier"
        " versioned changes of the document. Default: the time. Either way the server's clock orders"
        " it against every other producer's changes",
    ),
    pending: bool = typer.Option(False, "--pending", help=PENDING_HELP),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    as_json: bool = typer.Option(False, "--json"),
    timeout: float = typer.Option(60.0),
) -> None:
    """Replace one document's groups, in place (no re-embedding).

    The document and its chunks get the new ACL at once. An unknown document or tenant is reported
    as not found (exit 1); a change ignored as stale says why (exit 1), --force applies it.
    """
    try:
        item = AclSyncItem(
            tenant=tenant,
            doc_id=doc_id,
            acl=split_csv(acl),
            version=version,
            ts=time.time(),
            producer=acl_ops.OPERATOR,
        )
    except ValidationError as exc:
        raise typer.BadParameter(exc.errors()[0]["msg"], param_hint="'--version'") from None
    finish_acl_command(send_acl([item], timeout, pending, force), as_json)


@acl_app.command("sync")
def acl_sync(
    file: Path = typer.Argument(
        ...,
        exists=True,
        dir_okay=False,
        help="JSONL: {tenant, doc_id|path_prefix, acl, version?|ts?, producer?} per line",
    ),
    pending: bool = typer.Option(False, "--pending", help=PENDING_HELP),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    as_json: bool = typer.Option(False, "--json"),
    timeout: float = typer.Option(600.0),
) -> None:
    """Apply a JSONL file of permission changes, in batches.

    A line's version (an integer, or an ISO 8601 time) or time orders it only against the same
    producer's changes (default producer: operator). Unknown documents, path prefixes and tenants
    are reported as not found (exit 1), stale changes with the version they did not exceed (exit
    1); the rest is applied.
    """
    with file.open(encoding="utf-8") as fh:
        try:
            items = acl_ops.read_operator_file(fh, now=time.time())
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    t0 = time.perf_counter()
    out = send_acl(items, timeout, pending, force)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    finish_acl_command(out, as_json)


@app.command()
def reindex(
    source: list[str] = typer.Option(None, "--source", help="only this source (repeatable)"),
    wait: bool = typer.Option(
        False,
        "--wait/--no-wait",
        help="wait until every enqueued document is processed; exit 1 if one failed, 3 on --timeout",
    ),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON document"),
    timeout: float = typer.Option(3600.0, help="seconds to wait with --wait"),
) -> None:
    """Reindex the configured sources (RAGLINE_LIFECYCLE_SOURCES) now.

    New and changed documents are enqueued, vanished ones deleted: what beat runs on schedule.
    """
    from ragline.ingest.control.tasks import run_reindex  # start-up: Celery, psycopg, httpx load on use
    from ragline.shared.worker import jobs  # start-up: psycopg loads only for commands that use it

    reload_app()
    try:
        out = run_reindex(source or None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if wait and out.get("job_id"):
        summary = jobs.wait_for_job(out["job_id"], timeout)
        out["state"] = summary["state"]
        out["summary"] = {
            k: summary[k]
            for k in (
                "documents",
                "done",
                "skipped_unchanged",
                "acl_updated",
                "failed",
                "chunks",
                "embedded",
                "errors",
            )
        }
        out["summary"]["visible_to_no_group"] = summary["visible_to_no_group"]  # a source without 'acl'
    print_result(out, as_json, reindex_report(out))
    if wait and out.get("job_id"):
        code = job_exit_code(out["state"])
    else:  # not waited for: only a reindex that could not start is a failure
        code = EXIT_FAILED if out.get("state") == "failed" else 0
    if any("error" in r for r in out.get("sources", {}).values()):
        code = code or EXIT_FAILED  # a source that could not be listed
    if code:
        raise typer.Exit(code)


def reindex_report(res: dict) -> list[str]:
    """Readable lines of a reindex: one per source, then the job's summary when it was waited for."""
    lines = [
        (f"job {res['job_id']}: {res.get('state')}" if res.get("job_id") else "nothing to do")
        + f"; {res.get('listed', 0)} listed, {res.get('new', 0)} new, {res.get('changed', 0)} changed,"
        f" {res.get('unchanged', 0)} unchanged, {res.get('pruned', 0)} deleted (vanished),"
        f" {res.get('enqueued', 0)} enqueued"
    ]
    for name, r in res.get("sources", {}).items():
        if "error" in r:
            lines.append(f"source {name}: error: {r['error']}")
        else:
            lines.append(
                f"source {name}: {r.get('listed', 0)} listed, {r.get('enqueued', 0)} enqueued,"
                f" {r.get('pruned', 0)} deleted"
            )
    if "summary" in res:
        s = res["summary"]
        lines[0] = state_line(res["job_id"], res["state"])
        lines.append(summary_line(s))
        lines += summary_details(s)
    return lines


@app.command()
def errors(
    tenant: str | None = typer.Option(None, "--tenant"),
    limit: int = typer.Option(100),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List documents whose last ingest failed.

    Each with the stage and the error.

    An error stays open until the document is stored again (ragline retry-failed) or deleted.
    """
    from ragline.shared.worker import jobs  # start-up: psycopg loads only for commands that use it

    with connect() as conn:
        rows = jobs.open_errors(conn, tenant, limit)
    if as_json:
        print_json(rows)
        return
    if not rows:
        echo("no open errors")
        return
    table = [
        (iso(datetime.fromisoformat(r["created_at"])), r["tenant"], r["doc_id"], r["stage"], r["error"][:200])
        for r in rows
    ]
    for line in columns(("when (UTC)", "tenant", "doc_id", "stage", "error"), table):
        echo(line)


@app.command("retry-failed")
def retry_failed(
    tenant: str | None = typer.Option(None, "--tenant"),
    acl: str = typer.Option("", "--acl", help="groups for documents whose ACL is unknown (never stored)"),
    wait: bool = typer.Option(
        False, "--wait/--no-wait", help="wait for the documents; exit 1 if one failed again, 3 on --timeout"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON document"),
    timeout: float = typer.Option(3600.0, help="seconds to wait with --wait"),
) -> None:
    """Ingest every document with an open error again.

    Its errors resolve once it is stored. A document whose groups were never stored needs --acl.
    """
    from ragline.ingest.retry import enqueue_retries  # start-up: Celery and psycopg load on use
    from ragline.shared.worker import jobs  # start-up: psycopg loads only for commands that use it

    reload_app()
    out = enqueue_retries(tenant, split_csv(acl))
    if wait and out.get("job_id"):
        summary = jobs.wait_for_job(out["job_id"], timeout)
        out.update(state=summary["state"], done=summary["done"], failed=summary["failed"])
    lines = [
        (f"job {out['job_id']}: " if out.get("job_id") else "")
        + f"{plural(out['requeued'], 'document')} requeued, {len(out['skipped'])} skipped"
    ]
    if out.get("state"):
        lines = [
            state_line(out["job_id"], out["state"]),
            lines[0] + f"; {out['done']} stored, {out['failed']} failed",
        ]
    lines += [f"skipped: {s['tenant']}: {s['doc_id']}: {s['reason']}" for s in out["skipped"]]
    print_result(out, as_json, lines)
    if out.get("state"):
        code = job_exit_code(out["state"])
        if code:
            raise typer.Exit(code)


@app.command()
def reembed(
    tenant: str | None = typer.Option(None, "--tenant", help="only this tenant's chunks"),
    wait: bool = typer.Option(False, "--wait/--no-wait", help="wait until every chunk is re-embedded"),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON document"),
    timeout: float = typer.Option(24 * 3600.0, help="seconds to wait with --wait"),
    bulk: bool = typer.Option(
        False,
        "--bulk",
        help="drop the HNSW index, re-embed without it, build it once at the end (vector search is"
        " exact meanwhile; needs --wait; for a fast embedder and most of the corpus)",
    ),
) -> None:
    """Re-embed every chunk not on the configured model.

    Runs in the background on the ingest pool; chunks keep serving their old vectors until then.
    """
    if bulk and not wait:
        raise typer.BadParameter("--bulk needs --wait: the index is built once the re-embedding is done")
    from ragline.cli.index import bulk_window  # start-up: psycopg loads on use

    with bulk_window("reembed" + (f" {tenant}" if tenant else "")) if bulk else nullcontext():
        _reembed(tenant, wait, as_json, timeout)


def _reembed(tenant: str | None, wait: bool, as_json: bool, timeout: float) -> None:
    from ragline.shared.sdk.celery_base import read_once
    from ragline.shared.worker.celery_app import app  # start-up: Celery loads only for commands that send

    reload_app()
    res = app.send_task(TASK_INGEST_REEMBED, args=[{"tenant": tenant} if tenant else {}])
    if not wait:
        print_result(
            {"task_id": res.id}, as_json, [f"re-embedding queued (task {res.id}); `ragline status` shows it"]
        )
        return
    done = read_once(res, timeout)
    line = (
        f"re-embedding {done.get('state')}: {done.get('reason')}"
        if done.get("reason")
        else f"re-embedding {done.get('state')}: {plural(done.get('chunks', 0), 'chunk')} to"
        f" {done.get('model')}, {done.get('embedded', 0)} texts embedded (job {done.get('job_id')})"
    )
    print_result(done, as_json, [line])


@app.command()
def cancel(job_id: str = typer.Argument(..., metavar="JOB_ID")) -> None:
    """Cancel a queued or running job.

    Its remaining documents are skipped; a re-embedding stops between batches. Exits 1 when the job
    is not queued or running.
    """
    from ragline.shared.worker import jobs  # start-up: psycopg loads only for commands that use it

    with connect() as conn:
        found = jobs.find_jobs(conn, job_id)
        ok = len(found) == 1 and jobs.cancel_job(conn, found[0])
    echo(f"job {found[0]} cancelled" if ok else f"job {job_id} is not queued or running")
    if not ok:
        raise typer.Exit(EXIT_FAILED)


def clip(text: str, width: int) -> str:
    """``text`` on one line, shortened at a word boundary with an ellipsis (never cut mid-word)."""
    return textwrap.shorten(text, width, placeholder=" …")


def one_line(exc: Exception) -> str:
    """Why a part of the stack did not answer, whole (it says what to do), on one line."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def lifecycle_status(settings) -> dict:
    """Queue depths, running jobs, recent jobs and open errors for ``ragline status``."""
    import psycopg  # start-up: psycopg loads only for commands that use it
    from psycopg.rows import dict_row  # start-up: psycopg loads only for commands that use it

    from ragline.shared.worker import jobs, pending_vectors  # start-up: psycopg loads on use
    from ragline.shared.worker.metrics_server import queue_depths  # start-up: prometheus_client loads on use

    out: dict = {}
    try:
        out["queues"] = queue_depths(QUEUES, settings.effective_redis_url())
    except Exception as exc:  # the broker is down: status still answers
        out["queues"] = {"error": one_line(exc)}
    try:  # a short-lived connection with a connect timeout: status must answer when Postgres is down
        with psycopg.connect(
            settings.effective_database_url(), connect_timeout=3, row_factory=dict_row
        ) as conn:
            out["running_jobs"] = jobs.running_jobs(conn)
            out["recent_jobs"] = jobs.recent_jobs(conn, 5)
            out["recent_errors"] = jobs.open_errors(conn, None, 10)
            vectors = pending_vectors.counts_by_tenant(
                conn, pending_vectors.VectorBudget.from_settings(settings)
            )
            out["awaiting_vectors"], out["lexical_only_rows"] = vectors["awaiting"], vectors["lexical_only"]
            if vectors["awaiting"]:  # rows per second, as the fill recorded them
                out["vector_fill_rates"] = fill_rates(settings.effective_redis_url())
            from ragline.operations.index import open_deferral

            out["index_deferral"] = open_deferral(conn)
    except Exception as exc:
        out["jobs_error"] = one_line(exc)
    return out


def lifecycle_rows(info: dict) -> list[tuple[str, str]]:
    """Table rows for the human-readable ``ragline status``."""
    queues = info.get("queues", {})
    rows = (
        [("queues", str(queues["error"]))]
        if "error" in queues
        else [(f"queue {q}", f"{n} waiting") for q, n in queues.items()]
    )
    if "jobs_error" in info:
        rows.append(("jobs", info["jobs_error"]))
    for j in info.get("running_jobs", []):
        rows.append(
            (
                f"job {j['id'][:8]} {j['kind']}",
                f"{j['state']} {j['done']}/{j['total']} done,"
                f" {j['failed']} failed, heartbeat {str(j['heartbeat_at'])[:19]}",
            )
        )
    for e in info.get("recent_errors", [])[:5]:
        rows.append((f"error {e['doc_id']}"[:60], f"tenant {e['tenant']}: {clip(e['error'], 100)}"))
    rows += vector_rows(info.get("awaiting_vectors", {}), info.get("vector_fill_rates", {}))
    for tenant, n in info.get("lexical_only_rows", {}).items():
        rows.append(
            (
                f"lexical only {tenant}"[:60],
                f"{n} rows never embedded by the embedding budget (RAGLINE_INGEST_LEXICAL_ONLY_LAYERS):"
                " searchable lexically and structurally",
            )
        )
    if info.get("index_deferral"):
        w = info["index_deferral"]
        rows.append(
            (
                "HNSW index",
                f"deferred by a bulk load ({w['reason']}, window {w['id']}, since"
                f" {str(w['started_at'])[:19]}): vector search is exact until `ragline index build`",
            )
        )
    return rows
