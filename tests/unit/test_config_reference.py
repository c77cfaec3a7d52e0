"""docs/configuration.md lists every setting; `ragline config` never prints a secret."""

from pathlib import Path

from ragline.cli.config import BEGIN, END, effective, reference_markdown
from ragline.shared.config.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_reference_table_in_docs_is_current():
    text = DOC.read_text()
    current = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert current == reference_markdown(), (
        "run `ragline config --markdown` and paste it into docs/configuration.md"
    )
    for group, name, _field in Settings.iter_fields():
        assert f"`{group}.{name}`" in current
        assert all(f"`{variable}`" in current for variable in Settings.env_names(group, name))


def test_effective_settings_mask_secrets(monkeypatch):
    monkeypatch.setenv("RAGLINE_PROVIDERS_VOYAGE_API_KEY", "pa-very-secret-key")
    shown = effective(Settings())
    assert shown["providers"]["voyage_api_key"] == "***"
    assert "pa-very-secret-key" not in str(shown)


def test_every_setting_says_what_it_means():
    """The generated reference is the only place the meanings are written, so each field carries one."""
    undescribed = [
        f"{group}.{name}" for group, name, field in Settings.iter_fields() if not field.description
    ]
    assert undescribed == [], f"settings without Field(description=...): {undescribed}"
