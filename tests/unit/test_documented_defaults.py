"""Every default the README states is the default of the setting it names.

The README's defaults table (between the ``documented-defaults`` markers) names each setting by an
environment variable; the variable is resolved through the settings object itself, so a variable
that is no longer read fails here.
"""

import re
from pathlib import Path

import pytest

from ragline.shared.config.renamed import RENAMED
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


@pytest.mark.parametrize("variable,written", sorted(documented().items()))
def test_readme_default_is_the_settings_default(variable, written):
    fields = _fields()
    assert variable in fields, f"README names {variable}, which no setting reads"
    group, name, default = fields[variable]
    assert _as_written(default) == written, (
        f"README says {variable} defaults to {written!r}; settings.{group}.{name} defaults to {default!r}"
    )


def test_the_readme_names_each_setting_by_its_current_variable():
    old = {variable: RENAMED[variable] for variable in documented() if variable in RENAMED}
    assert old == {}, f"README documents old names: {old}"


def test_the_fusion_defaults_are_documented():
    """The fusion a default search runs is the claim the README got wrong before: it must be stated."""
    rows = documented()
    for setting in ("method", "method_code", "convex_weight_lexical", "rrf_k"):
        variable = env_name("fusion", setting)
        assert variable in rows, f"README's defaults table lacks {variable}"


def test_the_table_parser_reads_a_wrong_default_as_wrong(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        f"{BEGIN}\n| variable | default | meaning |\n|---|---|---|\n| `RAGLINE_FUSION_RRF_K` | `61` | x |\n{END}\n"
    )
    (group, name, default) = _fields()["RAGLINE_FUSION_RRF_K"]
    assert documented(page) == {"RAGLINE_FUSION_RRF_K": "61"} and _as_written(default) != "61"
