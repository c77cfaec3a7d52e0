"""A deprecated variable reaches the operator, and an invalid value names the variable that was set.

Python hides a DeprecationWarning by default, so a deprecated name in use is also logged (one
warning line per variable, once per process, at the start-up of every process that logs) and
``ragline config`` names it. A validation error names the variable the value was read from: the
old one when that is what the user wrote, the derived one otherwise.
"""

from __future__ import annotations

import io
import json
import logging
import os

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from ragline.cli.config import app as config_app
from ragline.shared.config import settings as settings_module
from ragline.shared.config.settings import DEPRECATED_NAMES, Settings, reset_settings
from ragline.shared.worker import logging_setup


@pytest.fixture(autouse=True)
def _clean(monkeypatch, tmp_path):
    """No ragline variable from the caller, no ``.env`` of the repository, nothing warned yet."""
    for name in list(os.environ):
        if name.upper().startswith("RAGLINE_") or name.upper() in ("DATABASE_URL", "REDIS_URL"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGLINE_SERVICES_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(settings_module, "_warned", set())
    monkeypatch.setattr(logging_setup, "_deprecations_logged", set())
    reset_settings()
    yield
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == "ragline-json"]:
        root.removeHandler(handler)
    reset_settings()


def _configure_twice() -> list[dict]:
    """Start-up logging, configured twice as a worker's parent and its reconfiguration would."""
    buf = io.StringIO()
    for _ in range(2):
        reset_settings()
        logging_setup.configure(level="INFO", json_output=True, stream=buf)
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def test_each_deprecated_variable_is_logged_once_by_name_never_by_value(monkeypatch, tmp_path):
    monkeypatch.setenv("RAGLINE_VOYAGE_API_KEY", "pa-old-name-secret-0123")  # a secret under its old name
    monkeypatch.setenv("RAGLINE_EMBEDDER", "ollama")
    monkeypatch.setenv("RAGLINE_EMBED_PROVIDER", "voyage")  # both set: the derived one wins
    (tmp_path / ".env").write_text("RAGLINE_RRF_K=61\n")  # an old name in .env counts too
    monkeypatch.setenv("RAGLINE_CHUNK_MAX_CHARS", "900")  # a derived name: not logged
    with pytest.warns(DeprecationWarning):
        lines = _configure_twice()
    notices = [line for line in lines if line.get("logger") == "ragline.settings"]
    assert [(n["level"], n["variable"], n["replacement"], n["ignored"]) for n in notices] == [
        ("warning", "RAGLINE_EMBEDDER", "RAGLINE_EMBED_PROVIDER", True),
        ("warning", "RAGLINE_RRF_K", "RAGLINE_FUSION_RRF_K", False),
        ("warning", "RAGLINE_VOYAGE_API_KEY", "RAGLINE_PROVIDERS_VOYAGE_API_KEY", False),
    ]
    assert notices[1]["event"] == "RAGLINE_RRF_K is deprecated: set RAGLINE_FUSION_RRF_K"
    # the values must not appear in what a notice says (its time stamp may hold any digits)
    text = json.dumps([{k: v for k, v in line.items() if k != "timestamp"} for line in notices])
    assert "pa-old-name-secret-0123" not in json.dumps(lines) and "ollama" not in json.dumps(lines)
    assert "61" not in text


def test_nothing_is_logged_when_only_derived_names_are_set(monkeypatch):
    monkeypatch.setenv("RAGLINE_EMBED_PROVIDER", "voyage")
    assert [line for line in _configure_twice() if line.get("logger") == "ragline.settings"] == []


def test_ragline_config_names_the_deprecated_variables_set(monkeypatch):
    monkeypatch.setenv("RAGLINE_QUERY_POOL", "solo")
    monkeypatch.setenv("RAGLINE_METRICS_PASSWORD", "metrics-old-name-pw")
    with pytest.warns(DeprecationWarning):
        result = CliRunner().invoke(config_app, [])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["workers"]["query_pool"] == "solo"  # stdout stays JSON
    assert result.stderr.splitlines() == [
        "warning: RAGLINE_METRICS_PASSWORD is deprecated: set RAGLINE_OPS_METRICS_PASSWORD",
        "warning: RAGLINE_QUERY_POOL is deprecated: set RAGLINE_WORKERS_QUERY_POOL",
    ]
    assert "metrics-old-name-pw" not in result.output


def test_ragline_config_says_nothing_more_without_deprecated_variables(monkeypatch):
    monkeypatch.setenv("RAGLINE_WORKERS_QUERY_POOL", "solo")
    result = CliRunner().invoke(config_app, [])
    assert result.exit_code == 0 and result.stderr == ""


# (variables set, in the environment or .env, an invalid value, the variable the error names)
INVALID = [
    ({"RAGLINE_QUERY_POOL": "gevent"}, "env", "RAGLINE_QUERY_POOL"),
    ({"RAGLINE_WORKERS_QUERY_POOL": "gevent"}, "env", "RAGLINE_WORKERS_QUERY_POOL"),
    (
        {"RAGLINE_QUERY_POOL": "solo", "RAGLINE_WORKERS_QUERY_POOL": "gevent"},
        "env",
        "RAGLINE_WORKERS_QUERY_POOL",
    ),
    ({"RAGLINE_EMBED_BATCH_SIZE": "129"}, "env", "RAGLINE_EMBED_BATCH_SIZE"),  # old and derived alike
    ({"RAGLINE_MULTI_QUERY": "6"}, "env", "RAGLINE_MULTI_QUERY"),
    ({"RAGLINE_MULTI_QUERY": "6"}, ".env", "RAGLINE_MULTI_QUERY"),
    ({"RAGLINE_TRANSFORM_MULTI_QUERY": "6"}, ".env", "RAGLINE_TRANSFORM_MULTI_QUERY"),
    ({"RAGLINE_LOG_JSON": "maybe"}, "env", "RAGLINE_LOG_JSON"),
    ({"RAGLINE_PURGE_SCHEDULE_S": "0"}, ".env", "RAGLINE_PURGE_SCHEDULE_S"),
]


@pytest.mark.parametrize(("variables", "where", "named"), INVALID, ids=[f"{r[2]}-{r[1]}" for r in INVALID])
def test_an_invalid_value_names_the_variable_set(monkeypatch, tmp_path, variables, where, named):
    if where == ".env":
        (tmp_path / ".env").write_text("".join(f"{k}={v}\n" for k, v in variables.items()))
    else:
        for key, value in variables.items():
            monkeypatch.setenv(key, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    (error,) = caught.value.errors()
    assert error["loc"] == (named,)
    message = str(caught.value)
    assert message.splitlines()[1] == named
    other_names = {new for old, new in DEPRECATED_NAMES.items() if old == named} | {
        old for old, new in DEPRECATED_NAMES.items() if new == named
    }
    assert not any(name in message for name in other_names)
