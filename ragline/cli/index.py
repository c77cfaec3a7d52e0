"""`ragline index status|rebuild|drop|defer|build`: the options and the output. What they do (the
concurrent builds and drops, the deferral windows of bulk loads) is :mod:`ragline.operations.index`;
the procedure is in docs/operations.md (Vector index and query planning, Bulk loads).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Literal

import typer

from ragline.cli.common import EXIT_FAILED, columns, connect, echo, fail, print_result
from ragline.operations.index import build_deferred, defer_index, drop_index, rebuild_index, status_info
from ragline.operations.index import bulk_window as _bulk_window
from ragline.shared.config.settings import get_settings

app = typer.Typer()
index_app = typer.Typer(
    no_args_is_help=True,
    help="The HNSW index of the chunks' embeddings: which kind it is, rebuilt or dropped concurrently.",
)
app.add_typer(index_app, name="index")

KindOption = Literal["vector", "halfvec"]


def _note(message: str) -> None:
    """Progress of a bulk load, on stderr: stdout stays the command's result (``--json``)."""
    typer.echo(message, err=True)


def bulk_window(reason: str, maintenance_work_mem: str | None = None) -> AbstractContextManager[dict]:
    """The deferral window of a bulk load (:func:`ragline.operations.index.bulk_window`), with the
    CLI's connection (a clear exit when Postgres is not there) and progress on stderr."""
    return _bulk_window(reason, connect, _note, maintenance_work_mem)


@index_app.command("defer")
def defer(
    reason: str = typer.Option("manual", "--reason", help="recorded with the window"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Drop the HNSW indexes for a bulk load (vector search is exact until `ragline index build`)."""
    settings = get_settings()
    with connect() as conn:
        res = defer_index(conn, reason, settings.vector.index, settings.embed.dim)
    line = (
        f"window {res['id']} opened; dropped {', '.join(res['dropped']) or 'no index'}"
        if res["opened"]
        else f"window {res['id']} ({res['reason']}) is already open"
    )
    print_result(res, as_json, [line, "vector search is exact until `ragline index build`"])


@index_app.command("build")
def build(
    maintenance_work_mem: str | None = typer.Option(
        None, "--maintenance-work-mem", help="for this build, e.g. 2GB (the graph should fit in it)"
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Build the configured kind's HNSW index after a bulk load and close the deferral window."""
    settings = get_settings()
    with connect() as conn:
        try:
            res = build_deferred(conn, settings.vector.index, settings.embed.dim, maintenance_work_mem)
        except Exception as exc:  # psycopg loads lazily; a failed build leaves only an invalid index
            fail(f"the index was not built: {str(exc).strip().splitlines()[0]}")
    if res["closed"] is None:
        line = "no deferral window is open"
    elif res["built"]:
        line = f"built {res['built']} in {res['build_s']:g} s; window {res['closed']} closed"
    else:
        line = f"a valid index was already there; window {res['closed']} closed"
    print_result(res, as_json, [line])


@index_app.command("status")
def status(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """Show the HNSW indexes of the chunks and whether RAGLINE_VECTOR_INDEX has its index (exit 1
    when it has not: the vector search would read whole tenants)."""
    settings = get_settings()
    with connect() as conn:
        info = status_info(conn, settings.vector.index, settings.embed.dim)
    rows = [
        (i["name"], i["kind"] or i["opclass"], "yes" if i["valid"] else "no", f"{i['bytes'] / 2**20:.1f} MiB")
        for i in info["indexes"]
    ]
    lines = [f"RAGLINE_VECTOR_INDEX={info['setting']} (dimension {info['dim']})"]
    lines += columns(("index", "kind", "valid", "size"), rows) if rows else ["no HNSW index on chunks"]
    print_result(info, as_json, lines + ([f"problem: {info['problem']}"] if info["problem"] else []))
    if info["problem"]:
        raise typer.Exit(EXIT_FAILED)


@index_app.command("rebuild")
def rebuild(
    kind: KindOption = typer.Option(..., "--type", help="the index's storage: vector or halfvec"),
    keep_old: bool = typer.Option(
        False, "--keep-old", help="keep the other kind's index (drop it later with `ragline index drop`)"
    ),
    maintenance_work_mem: str | None = typer.Option(
        None, "--maintenance-work-mem", help="for this build, e.g. 2GB (the graph should fit in it)"
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Build the HNSW index of one kind concurrently and drop the one it replaces; queries keep
    being answered throughout. Then set RAGLINE_VECTOR_INDEX to the same kind and restart the
    query pool."""
    settings = get_settings()
    with connect() as conn:
        try:
            res = rebuild_index(conn, kind, settings.embed.dim, keep_old, maintenance_work_mem)
        except Exception as exc:  # psycopg loads lazily; a failed build leaves only an invalid index
            fail(f"the {kind} index was not built: {str(exc).strip().splitlines()[0]}")
    lines = [f"built {res['built']} ({kind}) in {res['build_s']:g} s"]
    lines += [f"dropped {name}" for name in res["dropped"]]
    if settings.vector.index != kind:
        lines.append(f"now set RAGLINE_VECTOR_INDEX={kind} and restart the query pool")
    print_result(res, as_json, lines)


@index_app.command("drop")
def drop(
    kind: KindOption = typer.Option(..., "--type", help="the kind whose index to drop: vector or halfvec"),
    force: bool = typer.Option(False, "--force", help="drop it even if RAGLINE_VECTOR_INDEX uses it"),
) -> None:
    """Drop one kind's HNSW index concurrently (after a `rebuild --keep-old` and the switch)."""
    settings = get_settings()
    if kind == settings.vector.index and not force:
        fail(f"RAGLINE_VECTOR_INDEX={kind} uses this index; switch the setting first, or pass --force")
    with connect() as conn:
        names = drop_index(conn, kind, settings.embed.dim)
    for name in names:
        echo(f"dropped {name}")
    if not names:
        echo(f"no {kind} HNSW index")
