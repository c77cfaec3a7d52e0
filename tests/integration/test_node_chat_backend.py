"""The JavaScript chat backend (examples/node_chat_backend, celery-node) against the real stack: a
producer in another language sends the documented JSON over Celery's protocol and gets the same
replies, tenant and ACL filters included, and its replies are deleted once read.

Skipped with the reason when ``node`` / ``npm`` are missing, or when ``npm ci`` cannot install the
locked packages (no registry and nothing in npm's cache)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import redis

from tests.integration.query_corpus import ISOLATION_DOCS, store_docs

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node_chat_backend"


@pytest.fixture(scope="module")
def backend(tmp_path_factory) -> Path:
    """The example with its locked dependencies installed, in a copy (the checkout gets no node_modules)."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node and npm are not installed: the JavaScript producer cannot run here")
    folder = tmp_path_factory.mktemp("node") / "backend"
    folder.mkdir()
    for name in ("package.json", "package-lock.json", "chat_backend.js"):
        shutil.copy(EXAMPLE / name, folder / name)
    out = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode != 0:
        pytest.skip(
            f"npm ci could not install celery-node (registry unreachable?): {out.stderr.strip()[-300:]}"
        )
    return folder


def _chat_url(stack) -> str:
    """The embedded Redis as the chat backend's own user, the one a JavaScript backend gets."""
    return stack.redis_role_url(stack.runtime()["redis_url"], "chat")


def _node(backend: Path, stack, *args: str) -> dict:
    env = {**os.environ, "REDIS_URL": _chat_url(stack), "RAGLINE_TIMEOUT_S": "60"}
    out = subprocess.run(
        ["node", "chat_backend.js", *args], cwd=backend, capture_output=True, text=True, timeout=180, env=env
    )
    assert out.returncode in (0, 1), out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, ISOLATION_DOCS, dim=384)
    return tenant


def test_search_and_ask_from_javascript(celery_worker, stack, backend, corpus):
    found = _node(
        backend,
        stack,
        "search",
        "изоляция арендаторов",
        "--tenant",
        corpus,
        "--groups",
        "g",
        "--mode",
        "lexical",
    )
    assert found["status"] == 200
    hits = found["reply"]["hits"]
    assert [h["doc_id"] for h in hits] == ["iso.md"]
    assert hits[0]["title"] == "Изоляция" and "span_start" in hits[0]  # the row contract's fields
    # logged in as the chat user, its ids carry the prefix the user's key patterns admit; the reply
    # was read once and deleted, as the Python clients do
    assert found["task_id"].startswith("chat-")
    assert (
        redis.Redis.from_url(stack.effective_redis_url()).exists(f"celery-task-meta-{found['task_id']}") == 0
    )

    answer = _node(
        backend,
        stack,
        "ask",
        "Как изолированы арендаторы?",
        "--tenant",
        corpus,
        "--groups",
        "g",
        "--mode",
        "lexical",
    )
    assert answer["status"] == 200
    assert answer["reply"]["citations"][0]["doc_id"] == "iso.md" and not answer["reply"]["no_answer"]

    # the tenant and ACL filters hold for this producer too: another group sees nothing
    other = _node(
        backend,
        stack,
        "search",
        "изоляция арендаторов",
        "--tenant",
        corpus,
        "--groups",
        "other",
        "--mode",
        "lexical",
    )
    assert other["status"] == 200 and other["reply"]["hits"] == []


def test_a_malformed_request_is_a_structured_error(celery_worker, stack, backend, corpus):
    bad = _node(backend, stack, "search", "x", "--tenant", corpus, "--groups", "g", "--k", "0")
    assert bad["status"] == 400 and bad["reply"]["ok"] is False and bad["reply"]["error"] == "invalid payload"


def test_the_http_backend_answers_and_maps_errors_to_statuses(celery_worker, stack, backend, corpus):
    import time
    import urllib.error
    import urllib.request

    from ragline.shared.stack.services import free_port

    port = free_port()
    env = {**os.environ, "REDIS_URL": _chat_url(stack), "PORT": str(port)}
    proc = subprocess.Popen(["node", "chat_backend.js"], cwd=backend, env=env, stderr=subprocess.PIPE)

    def post(path: str, body: dict) -> tuple[int, dict]:
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode())
        try:
            with urllib.request.urlopen(req, timeout=120) as res:
                return res.status, json.loads(res.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    try:
        for _ in range(600):  # until it listens
            try:
                post("/search", {"question": "x", "tenant": corpus, "groups": []})
                break
            except urllib.error.URLError:
                assert proc.poll() is None, proc.stderr.read().decode()
                time.sleep(0.1)
        status, reply = post(
            "/search",
            {"question": "изоляция арендаторов", "tenant": corpus, "groups": ["g"], "mode": "lexical"},
        )
        assert status == 200 and [h["doc_id"] for h in reply["hits"]] == ["iso.md"]
        status, reply = post("/search", {"question": "x", "tenant": corpus, "groups": ["g"], "k": 0})
        assert status == 400 and reply["error"] == "invalid payload"
    finally:
        proc.terminate()
        proc.wait(30)
