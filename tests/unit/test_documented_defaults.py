"""Every default the README and the docs state is the default of the setting it names.

A page's defaults table (between the ``documented-defaults`` markers: the README's, and every page
of docs/ that has one) names each setting by an
environment variable; the variable is resolved through the settings object itself, so a variable
that is no longer read fails here.
"""

import re
from pathlib import Path

import pytest

from ragline.shared.config.renamed import REMOVED, RENAMED
from ragline.shared.config.settings import Settings, env_name

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- documented-defaults:begin -->", "<!-- documented-defaults:end -->"
ROW = re.compile(r"^\| `(?P<variable>[A-Z0-9_]+)` \| `(?P<default>[^`]*)` \|")


def documented(path: Path = ROOT / "README.md") -> dict[str, str]:
    """``{variable: default as written}`` from the marked table of one page."""
    text = path.read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"{path.name}: the defaults markers, once each"
    block = text[text.index(BEGIN) : text.index(END)]
    rows = dict(m.group("variable", "default") for line in block.splitlines() if (m := ROW.match(line)))
    assert rows, f"{path.name}: no rows in the defaults table"
    return rows


def _fields() -> dict[str, tuple[str, str, object]]:
    """Every accepted environment variable -> (group, name, default)."""
    out = {}
    for group, name, field in Settings.iter_fields():
        for variable in Settings.env_names(group, name):
            out[variable] = (group, name, field.get_default(call_default_factory=True))
    return out


def _as_written(value: object) -> str:
    return str(value)


#: the pages with a defaults table: the README and each page of docs/ with the markers
PAGES = [ROOT / "README.md"] + sorted(
    p for p in (ROOT / "docs").glob("*.md") if BEGIN in p.read_text(encoding="utf-8")
)
ROWS = [(page, variable, written) for page in PAGES for variable, written in sorted(documented(page).items())]


@pytest.mark.parametrize(
    "page,variable,written", ROWS, ids=[f"{page.name}:{variable}" for page, variable, _ in ROWS]
)
def test_a_documented_default_is_the_settings_default(page, variable, written):
    fields = _fields()
    assert variable in fields, f"{page.name} names {variable}, which no setting reads"
    group, name, default = fields[variable]
    assert _as_written(default) == written, (
        f"{page.name} says {variable} defaults to {written!r}; settings.{group}.{name} defaults to {default!r}"
    )


def test_the_pages_name_each_setting_by_its_current_variable():
    old = {
        variable: RENAMED[variable] for page in PAGES for variable in documented(page) if variable in RENAMED
    }
    assert old == {}, f"pages document old names: {old}"


def test_the_architecture_page_states_its_defaults_in_a_checked_table():
    """docs/architecture.md names the settings whose defaults it relies on, not their numbers in
    prose (where a changed default would leave the page wrong), and its table is among those checked."""
    assert ROOT / "docs" / "architecture.md" in PAGES
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    prose = text[: text.index(BEGIN)] + text[text.index(END) :]
    for variable in documented(ROOT / "docs" / "architecture.md"):
        assert f"`{variable}`" in prose, f"the table lists {variable}, which the page does not refer to"
    assert not re.search(r"\bk\s*=\s*\d", prose), "the RRF constant stated in prose"


def test_the_fusion_defaults_are_documented():
    """The fusion a default search runs is the claim the README got wrong before: it must be stated,
    the methods as settings, the weights as the numbers of the constants the table names."""
    from ragline.query.retrieval.fusion import CODE, PROSE

    rows = documented()
    for setting in ("method", "method_code"):
        variable = env_name("fusion", setting)
        assert variable in rows, f"README's defaults table lacks {variable}"
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"lexical share {PROSE.convex_lexical:g}" in text and PROSE.normalization == "minmax"
    assert f"lexical weight {CODE.lexical_weight:g}" in text


def test_the_table_parser_reads_a_wrong_default_as_wrong(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        f"{BEGIN}\n| variable | default | meaning |\n|---|---|---|\n| `RAGLINE_RERANK_TOP_K` | `61` | x |\n{END}\n"
    )
    (group, name, default) = _fields()["RAGLINE_RERANK_TOP_K"]
    assert documented(page) == {"RAGLINE_RERANK_TOP_K": "61"} and _as_written(default) != "61"


# ------------------------------------------------------------------ every variable a page names
#: a variable as a page writes it
VARIABLE = re.compile(r"\bRAGLINE_[A-Z0-9_]*[A-Z0-9]\b")
#: the page that lists the old names on purpose (its tables are checked by tests/unit/test_upgrading.py)
OLD_NAMES_PAGE = ROOT / "docs" / "upgrading.md"
#: where the repository's own scripts read variables that are no setting (the benchmarks'
#: ``RAGLINE_BENCH_*``, the database roles script's passwords)
SCRIPTS = ("bench", "deploy", "examples")


def _script_texts() -> str:
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for folder in SCRIPTS
        for p in sorted((ROOT / folder).rglob("*"))
        if p.is_file() and p.suffix in {".py", ".sh", ".sql", ".yml", ".yaml", ".toml", ".env", ""}
    )


def unknown_variables(page: Path, scripts: str) -> dict[str, str]:
    """``{variable: why}`` for each variable ``page`` names that nothing reads: a renamed one (its new
    name), a removed one (what became of it), or one neither a setting nor a script reads."""
    known = set(_fields())
    out = {}
    for variable in VARIABLE.findall(page.read_text(encoding="utf-8")):
        if variable in known:
            continue
        if variable in RENAMED:
            out[variable] = f"renamed: {RENAMED[variable]}"
        elif variable in REMOVED:
            out[variable] = f"removed: {REMOVED[variable]}"
        elif re.search(rf"\b{variable}\b", scripts) is None:
            out[variable] = "no setting and no script of the repository reads it"
    return out


NAMING_PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md") if p != OLD_NAMES_PAGE)


@pytest.mark.parametrize("page", NAMING_PAGES, ids=[p.name for p in NAMING_PAGES])
def test_every_variable_a_page_names_is_read(page):
    """A command or a sentence of the docs that sets a variable sets one that is read: a renamed or
    removed variable stops the process (or does nothing), so a reproduce command naming one cannot
    reproduce anything."""
    assert unknown_variables(page, _script_texts()) == {}, f"{page.name} names variables nothing reads"


def test_a_page_naming_a_renamed_or_removed_variable_is_reported(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "RAGLINE_EMBEDDER=voyage RAGLINE_CODE_FILE_BONUS=0 RAGLINE_NOTHING_AT_ALL=1"
        " RAGLINE_BENCH_BULK_N=10 RAGLINE_EMBED_PROVIDER=voyage ragline up\n"
    )
    found = unknown_variables(page, _script_texts())
    assert set(found) == {"RAGLINE_EMBEDDER", "RAGLINE_CODE_FILE_BONUS", "RAGLINE_NOTHING_AT_ALL"}
    assert found["RAGLINE_EMBEDDER"] == "renamed: RAGLINE_EMBED_PROVIDER"
    assert found["RAGLINE_CODE_FILE_BONUS"].startswith("removed: now a constant")


# ------------------------------------------------------------------ every command a page shows
#: the info strings of a fenced block a reader runs in a shell
SHELL = {"", "bash", "sh", "shell", "console"}
#: an inline code span that is a command
INLINE_COMMAND = re.compile(r"`(ragline [^`\n]*)`")
#: a ``ragline`` command within a line: at its start, after an operator, or after variable assignments
COMMAND = re.compile(r"(?:^|&&|\|\||[;|(])\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*ragline\s+([^;|&#)]*)")


def shown_commands(text: str) -> list[str]:
    """The argument strings of the ``ragline`` commands a page shows: the lines of its shell blocks
    (continuations joined) and its inline code spans outside any block."""
    snippets: list[str] = []
    prose: list[str] = []
    fence: str | None = None  # the open block's info string
    for line in text.replace("\\\n", " ").splitlines():
        if line.lstrip().startswith("```"):
            fence = line.strip().strip("`").strip() if fence is None else None
        elif fence is None:
            prose.append(line)
        elif fence in SHELL:
            snippets.append(line)
    snippets += INLINE_COMMAND.findall("\n".join(prose))
    return [m.group(1) for snippet in snippets for m in COMMAND.finditer(snippet)]


def unknown_options(arguments: str) -> list[str]:
    """What of one command line the CLI does not have: a subcommand of a group, or an option."""
    import typer

    from ragline.cli import app

    cmd = typer.main.get_command(app)
    tokens = [t.strip("[]") for t in arguments.split()]
    path: list[str] = []
    while tokens and hasattr(cmd, "commands"):
        if tokens[0] not in cmd.commands:
            word = tokens[0]
            # a group's own options (``ragline mcp --http``) or a placeholder (``ragline COMMAND``)
            return (
                [] if word.startswith("-") or not word.islower() else [f"ragline {' '.join([*path, word])}"]
            )
        path.append(tokens.pop(0))
        cmd = cmd.commands[path[-1]]
    names = {name for p in cmd.params for name in (*p.opts, *p.secondary_opts)} | {"--help"}
    options = {t.split("=", 1)[0].rstrip(".,") for t in tokens if t.startswith("--")}
    return [f"ragline {' '.join(path)} {o}" for o in sorted(options - names)]


@pytest.mark.parametrize(
    "page", NAMING_PAGES + [OLD_NAMES_PAGE], ids=[p.name for p in [*NAMING_PAGES, OLD_NAMES_PAGE]]
)
def test_every_command_a_page_shows_exists(page):
    """A command a page shows (a reproduce command, a usage line) runs: its subcommands and options
    are the CLI's."""
    commands = shown_commands(page.read_text(encoding="utf-8"))
    assert commands or page.name not in {"README.md", "evaluation.md"}  # the reader finds them
    assert [u for arguments in commands for u in unknown_options(arguments)] == []


def test_a_shown_command_with_a_removed_option_is_reported():
    text = "```bash\nRAGLINE_SERVICES_HOME=/tmp/x ragline eval q.jsonl --sweep-rrf 1:1 --sweep-prf 3\nragline serve\n```\n"
    assert [u for a in shown_commands(text) for u in unknown_options(a)] == [
        "ragline eval --sweep-prf",
        "ragline serve",
    ]
