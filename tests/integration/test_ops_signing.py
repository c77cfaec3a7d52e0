"""Optional Celery message signing: a worker started with a key and a certificate store runs tasks signed
by a trusted key and refuses unsigned messages and messages signed by an unknown key. (What each
trusted key's role may send: tests/integration/test_producer_roles.py.)

Producers run in subprocesses: ``setup_security`` changes kombu's global serializer registry, which
must not leak into this test process (other tests send plain JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.certs import self_signed
from tests.pools import start_pool, wait_log

pytestmark = pytest.mark.slow

PRODUCER = """
import json, sys
from ragline.shared.worker.celery_app import app
from ragline.shared.sdk.names import TASK_QUERY_RETRIEVE
queue, tenant, wait = sys.argv[1], sys.argv[2], float(sys.argv[3])
r = app.send_task(TASK_QUERY_RETRIEVE, args=[{"query": "подпись", "tenant": tenant, "groups": ["g"],
                                               "mode": "lexical"}], queue=queue)
try:
    out = r.get(timeout=wait)
    print(json.dumps({"id": r.id, "result": out}))
except Exception as exc:
    print(json.dumps({"id": r.id, "error": type(exc).__name__}))
"""


def _produce(env: dict, queue: str, tenant: str, wait: float) -> dict:
    from ragline.shared.config.settings import get_settings
    from ragline.shared.stack.processes import child_env

    full = {**child_env(get_settings()), **env}
    out = subprocess.run(
        [sys.executable, "-c", PRODUCER, queue, tenant, str(wait)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_signed_worker_accepts_signed_and_refuses_unsigned_or_foreign(stack, tmp_path, tenant):
    from ragline.shared.worker.celery_app import app

    store = tmp_path / "certs"
    store.mkdir()
    key, cert = self_signed(store, "ragline-chat")  # the role that may send questions
    key.rename(tmp_path / "trusted.key")
    key = tmp_path / "trusted.key"
    rogue_dir = tmp_path / "rogue"
    rogue_dir.mkdir()
    rogue_key, rogue_cert = self_signed(rogue_dir, "ragline-chat")  # a role name proves nothing unsigned
    signed = {
        "RAGLINE_OPS_SIGNING_KEY_FILE": str(key),
        "RAGLINE_OPS_SIGNING_CERT_FILE": str(cert),
        "RAGLINE_OPS_SIGNING_CERT_STORE": str(store),
    }
    rogue = {
        "RAGLINE_OPS_SIGNING_KEY_FILE": str(rogue_key),
        "RAGLINE_OPS_SIGNING_CERT_FILE": str(rogue_cert),
        "RAGLINE_OPS_SIGNING_CERT_STORE": str(rogue_dir),
    }

    worker = start_pool(stack, "query", concurrency=1, env=signed)
    try:
        wait_log(worker, f"{worker.queue}@")  # pings are unsigned JSON here: the worker refuses them
        wait_log(worker, " ready.")
        ok = _produce(signed, worker.queue, tenant, 60)
        assert ok.get("result", {}).get("hits") == [], ok

        unsigned = _produce({}, worker.queue, tenant, 4)
        foreign = _produce(rogue, worker.queue, tenant, 4)
        assert unsigned.get("error") and foreign.get("error"), (unsigned, foreign)
        deadline = time.monotonic() + 10
        log = ""
        while time.monotonic() < deadline:
            log = worker.log_text()
            if "ContentDisallowed" in log and ("SecurityError" in log or "signature" in log.lower()):
                break
            time.sleep(0.3)
        assert "ContentDisallowed" in log, log[-3000:]  # plain JSON refused (tasks and control messages)
        assert "SecurityError" in log or "signature" in log.lower(), log[-3000:]  # unknown signer refused
        assert app.AsyncResult(unsigned["id"]).state == "PENDING"
        assert app.AsyncResult(foreign["id"]).state == "PENDING"
        assert worker.proc.poll() is None  # refusing messages never kills the worker
        again = _produce(signed, worker.queue, tenant, 60)
        assert again.get("result", {}).get("hits") == [], again
    finally:
        worker.stop()
