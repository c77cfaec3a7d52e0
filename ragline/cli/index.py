"""`ragline index status|rebuild|drop`: the HNSW index of the chunks' embeddings, and changing its
storage (``vector`` or ``halfvec``) while the query pool keeps answering.

Every build and drop is ``CONCURRENTLY``: writers and readers of ``chunks`` are never locked out;
a build only waits for the transactions already running and then takes as long as a plain one
(the session's ``maintenance_work_mem`` should hold the graph, ``--maintenance-work-mem``). A build
that fails or is interrupted leaves an invalid index under the building name, which the next
rebuild drops first. The procedure, and which setting goes with which index, are in
docs/operations.md (Vector index and query planning).
"""

from __future__ import annotations

import time
from typing import Literal

import typer

from ragline.cli.common import EXIT_FAILED, columns, connect, echo, fail, print_result
from ragline.query.vector_index import BUILDING, INDEX_NAMES, definition, hnsw_indexes, kind_of, problem_with
from ragline.shared.settings import get_settings

app = typer.Typer()
index_app = typer.Typer(
    no_args_is_help=True,
    help="The HNSW index of the chunks' embeddings: which kind it is, rebuilt or dropped concurrently.",
)
app.add_typer(index_app, name="index")

KindOption = Literal["vector", "halfvec"]


def status_info(conn, kind: str, dim: int) -> dict:
    """The HNSW indexes with the kind each serves, the configured kind, and the mismatch if any."""
    indexes = hnsw_indexes(conn)
    for i in indexes:
        i["kind"] = kind_of(i, dim)
    return {"setting": kind, "dim": dim, "indexes": indexes, "problem": problem_with(indexes, kind, dim)}


def replaced_by(indexes: list[dict], kind: str, dim: int, keep_old: bool) -> list[str]:
    """The indexes a new ``kind`` index replaces (pure): those of the same kind or name, and unless
    ``keep_old`` the other kind's; an HNSW index on anything else is not ours to drop."""
    return [
        i["name"]
        for i in indexes
        if i["name"] == INDEX_NAMES[kind]
        or kind_of(i, dim) == kind
        or (not keep_old and (kind_of(i, dim) is not None or i["name"] in INDEX_NAMES.values()))
    ]


def rebuild_index(
    conn, kind: str, dim: int, keep_old: bool = False, maintenance_work_mem: str | None = None
) -> dict:
    """Build ``kind``'s index concurrently under a building name, drop the replaced indexes
    concurrently (the same kind's always, the other kind's unless ``keep_old``), then give it its
    kind's name. ``conn`` must be in autocommit mode (no ``CONCURRENTLY`` inside a transaction)."""
    before = [i for i in hnsw_indexes(conn) if i["name"] != BUILDING]
    conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {BUILDING}")
    if maintenance_work_mem:
        conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
    t = time.perf_counter()
    conn.execute(definition(kind, dim, BUILDING))
    build_s = round(time.perf_counter() - t, 2)
    replaced = replaced_by(before, kind, dim, keep_old)
    for name in replaced:
        conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
    conn.execute(f"ALTER INDEX {BUILDING} RENAME TO {INDEX_NAMES[kind]}")
    return {"built": INDEX_NAMES[kind], "kind": kind, "build_s": build_s, "dropped": replaced}


def drop_index(conn, kind: str, dim: int) -> list[str]:
    """Drop every HNSW index of ``kind`` concurrently; the names dropped."""
    names = [i["name"] for i in hnsw_indexes(conn) if kind_of(i, dim) == kind]
    for name in names:
        conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
    return names


@index_app.command("status")
def status(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """Show the HNSW indexes of the chunks and whether RAGLINE_VECTOR_INDEX has its index (exit 1
    when it has not: the vector search would read whole tenants)."""
    settings = get_settings()
    with connect() as conn:
        info = status_info(conn, settings.retrieval.vector_index, settings.embed.dim)
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
    if settings.retrieval.vector_index != kind:
        lines.append(f"now set RAGLINE_VECTOR_INDEX={kind} and restart the query pool")
    print_result(res, as_json, lines)


@index_app.command("drop")
def drop(
    kind: KindOption = typer.Option(..., "--type", help="the kind whose index to drop: vector or halfvec"),
    force: bool = typer.Option(False, "--force", help="drop it even if RAGLINE_VECTOR_INDEX uses it"),
) -> None:
    """Drop one kind's HNSW index concurrently (after a `rebuild --keep-old` and the switch)."""
    settings = get_settings()
    if kind == settings.retrieval.vector_index and not force:
        fail(f"RAGLINE_VECTOR_INDEX={kind} uses this index; switch the setting first, or pass --force")
    with connect() as conn:
        names = drop_index(conn, kind, settings.embed.dim)
    for name in names:
        echo(f"dropped {name}")
    if not names:
        echo(f"no {kind} HNSW index")
