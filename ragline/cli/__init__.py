"""The ``ragline`` command line: one Typer app assembled from one sub-app per area.

| module | commands |
|---|---|
| ``stack`` | ``up``, ``down``, ``status``, ``migrate``, ``worker`` |
| ``ingest`` | ``ingest`` |
| ``lifecycle`` | ``acl set|sync``, ``reindex``, ``reembed``, ``errors``, ``retry-failed``, ``cancel`` |
| ``query`` | ``search``, ``ask``, ``eval``, ``schemas`` |
| ``demo`` | ``demo`` (what ``make run`` shows) |
| ``ops`` | ``metrics`` |
| ``config`` | ``config`` |

The CLI is the top layer: it may import ``ragline.ingest`` and ``ragline.query``; nothing imports it.
"""

from __future__ import annotations

import typer

from ragline.cli import config, demo, ingest, lifecycle, ops, query, stack

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="ragline: a RAG backend on Celery and pgvector"
)
for _sub in (stack, ingest, lifecycle, query, demo, ops, config):
    app.add_typer(_sub.app)
