"""An invalid value names the variable that was set, in the environment or ``.env``: the error must
point at the line an operator has to fix, not at a field path they never wrote."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from ragline.shared.config.settings import Settings, reset_settings


@pytest.fixture(autouse=True)
def _clean(monkeypatch, tmp_path):
    """No ragline variable from the caller, no ``.env`` of the repository."""
    for name in list(os.environ):
        if name.upper().startswith("RAGLINE_") or name.upper() in ("DATABASE_URL", "REDIS_URL"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGLINE_SERVICES_HOME", str(tmp_path / "home"))
    reset_settings()
    yield
    reset_settings()


# (variables set, in the environment or .env, an invalid value, the variable the error names)
INVALID = [
    ({"RAGLINE_WORKERS_QUERY_POOL": "gevent"}, "env", "RAGLINE_WORKERS_QUERY_POOL"),
    ({"RAGLINE_EMBED_BATCH_SIZE": "129"}, "env", "RAGLINE_EMBED_BATCH_SIZE"),
    ({"RAGLINE_TRANSFORM_MULTI_QUERY": "6"}, "env", "RAGLINE_TRANSFORM_MULTI_QUERY"),
    ({"RAGLINE_TRANSFORM_MULTI_QUERY": "6"}, ".env", "RAGLINE_TRANSFORM_MULTI_QUERY"),
    ({"RAGLINE_OPS_LOG_JSON": "maybe"}, "env", "RAGLINE_OPS_LOG_JSON"),
    ({"RAGLINE_LIFECYCLE_PURGE_SCHEDULE_S": "0"}, ".env", "RAGLINE_LIFECYCLE_PURGE_SCHEDULE_S"),
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


def test_a_keyword_override_is_named_by_its_field_not_by_a_variable(monkeypatch):
    monkeypatch.setenv("RAGLINE_WORKERS_QUERY_POOL", "solo")
    with pytest.raises(ValidationError) as caught:
        Settings(workers_query_pool="gevent")
    (error,) = caught.value.errors()
    assert error["loc"] == ("workers", "query_pool")
