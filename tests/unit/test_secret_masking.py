"""One masking for every output: each form a password can be written in (URL user info, with an
unencoded "@", percent-encoded, a ``password=`` query parameter, a libpq ``password=`` keyword,
quoted or not) is masked in ``ragline config``, ``ragline status`` and the logs, and so is the
password of a configured URL wherever else its value turns up."""

from __future__ import annotations

import io
import json
import logging
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from ragline.shared.config.settings import reset_settings
from ragline.shared.worker import credentials, logging_setup

#: form -> (setting variable, value, the password as a client decodes it, the pieces of it that
#: must never be shown)
FORMS = {
    "url": (
        "RAGLINE_SERVICES_DATABASE_URL",
        "postgresql://rag:Hx7plainKs2@db:5432/ragline",
        "Hx7plainKs2",
        ["Hx7plainKs2"],
    ),
    "url, unencoded @": (
        "RAGLINE_SERVICES_DATABASE_URL",
        "postgresql://rag:Hx7first@Ks2second@db:5432/ragline",
        "Hx7first@Ks2second",
        ["Hx7first", "Ks2second"],
    ),
    "url, percent-encoded": (
        "RAGLINE_SERVICES_REDIS_URL",
        f"redis://:{quote('Hx7enc@/Ks2', safe='')}@cache:6379/0",
        "Hx7enc@/Ks2",
        ["Hx7enc", "Ks2", quote("Hx7enc@/Ks2", safe="")],
    ),
    "redis ?password=": (
        "RAGLINE_SERVICES_REDIS_URL",
        "redis://cache:6379/0?password=Hx7queryKs2",
        "Hx7queryKs2",
        ["Hx7queryKs2"],
    ),
    "libpq URL &password=": (
        "RAGLINE_SERVICES_DATABASE_URL",
        "postgresql:///ragline?host=/tmp/pg&password=Hx7pgqueryKs2&sslmode=disable",
        "Hx7pgqueryKs2",
        ["Hx7pgqueryKs2"],
    ),
    "libpq key=value": (
        "RAGLINE_SERVICES_DATABASE_URL",
        "host=db dbname=ragline user=rag password=Hx7kv&Ks2 connect_timeout=3",
        "Hx7kv&Ks2",
        ["Hx7kv", "Ks2"],
    ),
    "libpq key = 'quoted'": (
        "RAGLINE_SERVICES_QUERY_DATABASE_URL",
        r"host=db user=q password = 'Hx7 quoted\'Ks2' dbname=ragline",
        "Hx7 quoted'Ks2",
        ["Hx7", "Ks2"],
    ),
}


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGLINE_SERVICES_HOME", str(tmp_path / "home"))

    def use(variable: str, value: str) -> None:
        monkeypatch.setenv(variable, value)
        reset_settings()

    yield use
    monkeypatch.undo()
    reset_settings()


def _assert_masked(text: str, pieces: list[str]) -> None:
    for piece in pieces:
        assert piece not in text, (piece, text)
    assert credentials.MASK in text


@pytest.mark.parametrize("form", FORMS)
def test_config_output_masks_every_form(env, form):
    from ragline.cli import app as cli

    variable, value, _, pieces = FORMS[form]
    env(variable, value)
    out = CliRunner().invoke(cli, ["config"])
    assert out.exit_code == 0, out.output
    _assert_masked(out.output, pieces)
    json.loads(out.output)  # still one JSON document


@pytest.mark.parametrize("form", FORMS)
def test_status_masks_every_form_in_error_texts(env, monkeypatch, form):
    """What a driver's error quotes: the URL itself, or its password alone."""
    from ragline.cli import app as cli
    from ragline.cli import stack

    variable, value, bare, pieces = FORMS[form]
    env(variable, value)
    monkeypatch.setattr(
        stack,
        "lifecycle_status",
        lambda settings: {
            "queues": {"error": f"ConnectionError: cannot reach {value}"},
            "jobs_error": f"OperationalError: password {bare!r} refused",
        },
    )
    for args in (["status", "--json"], ["status"]):
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 4, out.output  # no stack runs here: status says so (exit codes)
        assert "ConnectionError" in out.output and "OperationalError" in out.output, out.output
        _assert_masked(out.output, pieces)


@pytest.mark.parametrize("form", FORMS)
def test_logs_mask_every_form(env, form):
    variable, value, bare, pieces = FORMS[form]
    env(variable, value)
    buf = io.StringIO()
    logging_setup.configure(level="INFO", json_output=True, stream=buf)
    try:
        logging.getLogger("kombu.connection").warning("cannot connect to %s", value)
        logging_setup.get_logger("ragline.x").info("connecting", dsn=value, detail=f"with {bare}")
        try:
            raise RuntimeError(f"connection to {value} failed")
        except RuntimeError:
            logging.getLogger("celery.worker").exception("broker down")
    finally:
        root = logging.getLogger()
        for h in [h for h in root.handlers if h.get_name() == "ragline-json"]:
            root.removeHandler(h)
    text = buf.getvalue()
    assert len(text.splitlines()) == 3
    _assert_masked(text, pieces)


@pytest.mark.parametrize("form", FORMS)
def test_every_form_gives_up_its_password(form):
    _, value, bare, _ = FORMS[form]
    assert bare in credentials.passwords_in(value)


def test_urls_without_a_password_are_shown_as_they_are():
    for url in (
        "postgresql://postgres@/ragline?host=/tmp/x",
        "redis://127.0.0.1:6379/0",
        "https://host:8080/a@b",
        "host=/tmp/pg dbname=ragline user=ragline_query passfile=/home/x/secrets/query",
    ):
        assert credentials.mask_text(url) == url
