"""The ``ragline`` console script. Standard library only at import: a client-only install (without
the ``server`` extra) has the script but not Typer, Rich or the stack, and must say so in one line."""

from __future__ import annotations

import sys

SERVER_EXTRA = (
    "ragline: the command line needs the server extra ({} is not installed): pip install 'ragline[server]'"
)


def main() -> None:
    try:
        from ragline.cli import app  # a client-only install lacks the CLI's packages: reported below
    except ModuleNotFoundError as exc:
        if (exc.name or "ragline").partition(".")[0] == "ragline":
            raise  # a bug in ragline, not a missing extra
        sys.exit(SERVER_EXTRA.format(exc.name))
    from ragline.shared.config.settings import RenamedVariables, renamed_message

    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)
    except RenamedVariables as exc:  # an operator's deployment to fix, not a bug: no traceback
        for old, new in exc.renamed:
            print(f"error: {renamed_message(old, new)}", file=sys.stderr)
        sys.exit(2)
