"""`ragline demo`: what ``make run`` shows: ingest ragline's own repository (its docs and code) or a
folder, ask three questions, print cited answers (a code answer cites ``path:start-end``)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from ragline.cli.common import EXIT_FAILED, console, echo, reload_app, send_and_wait
from ragline.cli.ingest import settle_vanished_files
from ragline.cli.progress import tenant_awaiting, wait_for_documents, wait_for_vectors
from ragline.cli.query import print_answer
from ragline.cli.stack import components, down, stack_state, up
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk.names import TASK_QUERY_ASK

app = typer.Typer()

QUESTIONS = [
    "Какие очереди использует ragline и зачем нужен отдельный пул запросов?",
    "How does ragline keep tenants and ACL groups isolated?",
    "Where are permissions synced without re-embedding?",
]
#: the question about the code is asked of the source and symbol layers (the retrieval contract's
#: layer filter): its answer must cite ``path:start-end``, not the docs that describe the same thing;
#: the others, about the design, of the repository's documentation (the git source's own layer)
CODE_QUESTION = QUESTIONS[2]

#: what the demo indexes of a repository: ragline's docs and its ingestion package, which holds the
#: code the code question is about. Every chunk and symbol record is embedded on the local CPU (the
#: repository after it is stored, see RAGLINE_INGEST_DEFER_VECTORS), so the other packages (and tests,
#: deployment files) would triple a first `make run`; `ragline ingest .` indexes all of it.
REPOSITORY_INCLUDE = ["ingest/*", "docs/*.md", "README.md"]


@app.command()
def demo(
    docs: Path = typer.Argument(
        Path("."),
        exists=True,
        metavar="FOLDER",
        help="what to ingest: a git repository (ragline's own: its code and docs at HEAD) or a folder",
    ),
    tenant: str = typer.Option("demo", "--tenant"),
    start_stack: bool = typer.Option(
        False,
        "--start-stack/--no-start-stack",
        help="start the stack when it is not running and stop it at the end; a running stack is used"
        " and left running (what make run does)",
    ),
) -> None:
    """Ingest ragline's repository (or a folder) and ask three questions (make run).

    The questions are about ragline, so the default is its repository: a git repository is ingested
    through the git source (committed files at HEAD matching ingest/* docs/*.md README.md), so code
    answers cite their lines.

    Exits 1 when a document failed or a question got no cited answer.
    """
    docs = _what_to_ingest(docs)
    started = False
    if start_stack:
        state = stack_state(components(get_settings()))
        if state == "running":
            console.print("using the running stack; it stays up")
        else:  # a partly running stack was started by someone: it is completed, and left running
            up(wait=True)
            started = state == "stopped"
    try:
        failures = _demo(docs, tenant)
    finally:
        if started:
            down()
    if failures:
        raise typer.Exit(EXIT_FAILED)


def _what_to_ingest(docs: Path) -> Path:
    """``docs`` itself, except a copy of ragline without git history (an unpacked archive): the
    folder walk would take in ``.venv/`` and everything else lying there, so only its ``docs/``."""
    from ragline.ingest.git import is_repository

    if docs.is_dir() and not is_repository(docs) and (docs / "ragline" / "cli" / "demo.py").is_file():
        console.print(f"{docs.resolve()} is ragline without its git history: ingesting its docs/ only")
        return docs / "docs"
    return docs


def _demo(docs: Path, tenant: str) -> int:
    """Ingest, ask; the number of failed documents and of questions without a cited answer."""
    from ragline.ingest.enqueue import collect_files, enqueue_files  # start-up: Celery, psycopg load on use
    from ragline.ingest.git import is_repository
    from ragline.ingest.roots import grant_roots  # start-up: psycopg loads on use

    reload_app()
    t0 = time.perf_counter()
    grant_roots(tenant, [docs])  # workers read local files only below roots granted to the tenant
    code = docs.is_dir() and is_repository(docs)
    if code:
        s = _ingest_repository(docs, tenant)
    else:
        files = collect_files([docs])
        settle_vanished_files([docs], files, tenant, None)
        job_id = enqueue_files(files, tenant=tenant, acl=["public"])
        s = wait_for_documents(job_id, len(files), 3600)
    echo(
        f"ingested {s['documents']} documents, {s['chunks']} chunks, {s['embedded']} embedded"
        f" ({s.get('awaiting_vectors', 0)} awaiting vectors), "
        f"{s['skipped_unchanged']} unchanged, {s['failed']} failed in {time.perf_counter() - t0:.1f}s"
    )
    for e in s["errors"]:
        echo(f"failed: {e['doc_id']}: {e['error']}")
    failures = s["failed"]
    if not (code and tenant_awaiting(tenant)()):
        return failures + _ask(tenant, QUESTIONS, code)
    # answer at once from the lexical and structural search (each answer says "vectors pending"),
    # then each question again once the layers it is asked of have their vectors: the fill embeds
    # prose before code (docs/operations.md), so the questions about the design are answered with
    # their vectors before the code is embedded, and the code question when it is
    echo(f"first answers, {time.perf_counter() - t0:.0f}s after the start, while the vectors fill:")
    _ask(tenant, QUESTIONS, code)
    scopes: dict[tuple[str, ...], list[str]] = {}
    for q in QUESTIONS:
        scopes.setdefault(tuple(_layers(q)), []).append(q)
    for layers, questions in scopes.items():
        _wait_for_vectors(tenant, 3600, list(layers))
        left = tenant_awaiting(tenant)()
        still = f"; {left} rows of other layers still await theirs" if left else ""
        echo(
            f"the answers with every vector of {', '.join(layers)} in place,"
            f" {time.perf_counter() - t0:.0f}s after the start{still}:"
        )
        failures += _ask(tenant, questions, code)
    return failures


def _layers(question: str) -> list[str]:
    """The layers a question is asked of on a repository (:data:`CODE_QUESTION`): the code's, or the
    layer :func:`_ingest_repository`'s source stores the repository's other files in."""
    from ragline.ingest.sources import SourceSpec  # loaded by the ingest already

    code = get_settings().code
    if question == CODE_QUESTION:
        return [code.source_layer, code.symbols_layer]
    return [SourceSpec.model_fields["layer"].default]


def _ask(tenant: str, questions: list[str], code: bool) -> int:
    """Ask ``questions`` and print the answers (on a repository, each of its layers,
    :func:`_layers`); the number without a cited answer."""
    failures = 0
    for q in questions:
        payload: dict = {"query": q, "tenant": tenant, "groups": ["public"]}
        if code:
            payload["layers"] = _layers(q)
        res = send_and_wait(TASK_QUERY_ASK, payload, 120)
        print_answer(q, res)
        cited = res.get("citations") or []
        if q == CODE_QUESTION and code:  # the code question: a citation with its lines
            cited = [c for c in cited if c.get("start_line")]
        failures += int(not cited)
    return failures


def _wait_for_vectors(tenant: str, timeout_s: float, layers: list[str] | None = None) -> None:
    """Until the fill task has embedded the rows stored before their vectors (of ``layers`` only,
    when given): the code is searchable lexically at once, but the demo's answers are the hybrid
    ones, so it asks after; meanwhile a progress line (rows, rate, time left) at each change and
    every half minute."""
    awaiting = tenant_awaiting(tenant, layers)
    n = awaiting()
    if n:
        of = f" of {', '.join(layers)}" if layers else ""
        echo(f"searchable now (lexically); {n} rows{of} awaiting vectors, filled in the background:")
    if wait_for_vectors(awaiting, time.monotonic() + timeout_s, first=n):
        echo(
            f"vectors still being filled after {timeout_s:.0f}s: answers use the lexical search for those rows"
        )


def _ingest_repository(repo: Path, tenant: str) -> dict:
    """The repository as the git source ``ragline`` of the tenant, at HEAD (the path of `ragline ingest
    REPO`: a second run re-embeds nothing and ingests only what later commits changed)."""
    from ragline.ingest.events import sync_git_source  # start-up: Celery, psycopg load on use
    from ragline.ingest.sources import SourceSpec
    from ragline.shared.worker import db
    from ragline.shared.worker.celery_app import app as celery_app

    spec = SourceSpec(
        name="ragline",
        kind="git",
        tenant=tenant,
        acl=["public"],
        path=repo.expanduser().resolve(),
        ref="HEAD",
        include=REPOSITORY_INCLUDE,
    )
    with db.connection() as conn:
        out = sync_git_source(
            conn, spec, "HEAD", lambda n, p: celery_app.send_task(n, args=[p]), kind="ingest"
        )
        if not out["job_id"]:  # this commit is indexed already
            n = db.one(
                conn.execute(
                    "SELECT count(*) AS n FROM documents WHERE tenant = %s AND metadata->>'source' = 'ragline'"
                    " AND status = 'ready'",
                    (tenant,),
                )
            )["n"]
            return dict.fromkeys(("chunks", "embedded", "failed"), 0) | {
                "documents": n,
                "skipped_unchanged": n,
                "errors": [],
            }
    s = wait_for_documents(out["job_id"], out["enqueued"], 3600)
    return {**s, "skipped_unchanged": s["skipped_unchanged"] + out.get("unchanged", 0)}
