"""Producer roles: which tasks each role may send, and how a signed message's role is found (the
subject CN of the certificate that signed it). The worker-side refusal runs in
tests/integration/test_producer_roles.py."""

from __future__ import annotations

from pathlib import Path

from ragline.shared.sdk import names, signing
from tests.certs import self_signed


def _cert(folder: Path, cn: str) -> tuple[bytes, bytes]:
    key_file, cert_file = self_signed(folder, cn)
    return key_file.read_bytes(), cert_file.read_bytes()


def test_every_worker_task_is_named_and_builtins_belong_to_no_role():
    from ragline.shared.worker.celery_app import app

    app.loader.import_default_modules()
    for module in app.conf.include:
        __import__(module)
    ours = {name for name in app.tasks if name.startswith("ragline.")}
    assert ours == set(names.ALL_TASKS)
    builtins = {name for name in app.tasks if name.startswith("celery.")}
    assert "celery.group" in builtins and "celery.chain" in builtins
    for role, tasks in names.PRODUCER_ROLES.items():
        assert tasks <= set(names.ALL_TASKS), role
        assert not tasks & builtins, role
    # every task runs behind the role check, Celery's built-in canvas tasks included (a benchmark
    # module imported by another test may add a task of its own to the app: not a worker task)
    assert {app.tasks[n].Strategy for n in ours | builtins} == {"ragline.shared.sdk.signing:role_strategy"}


def test_a_chat_backend_may_ask_but_never_ingest_or_change_permissions():
    chat, relay = names.PRODUCER_ROLES["chat"], names.PRODUCER_ROLES["relay"]
    assert chat == {
        names.TASK_QUERY_RETRIEVE,
        names.TASK_QUERY_RERANK,
        names.TASK_QUERY_ASK,
        names.TASK_QUERY_SOURCES,
    }
    assert not chat & {names.TASK_INGEST_DOCUMENT, names.TASK_INGEST_BATCH, names.TASK_ACL_SYNC}
    assert relay == {names.TASK_INGEST_EVENT, names.TASK_ACL_SYNC}
    assert names.PRODUCER_ROLES["operator"] == set(names.ALL_TASKS)


def test_role_of_a_certificate_comes_from_its_common_name():
    assert signing.role_of_cn("ragline-chat") == "chat"
    assert signing.role_of_cn("ragline-worker") == "worker"
    assert signing.role_of_cn("ragline-root") == signing.NO_ROLE
    assert signing.role_of_cn("chat") == signing.NO_ROLE
    assert signing.role_of_cn("trusted") == signing.NO_ROLE


def test_signer_role_of_a_signed_body(tmp_path):
    from celery.security.certificate import Certificate, FSCertStore
    from celery.security.key import PrivateKey
    from celery.security.serialization import SecureSerializer

    store = tmp_path / "certs"
    store.mkdir()
    keys = {cn: _cert(store, cn) for cn in ("ragline-chat", "ragline-relay", "someone")}
    roles = signing.load_roles(str(store / "*.pem"))
    assert sorted(roles.by_signer.values()) == ["chat", signing.NO_ROLE, "relay"]
    for cn, expected in (("ragline-chat", "chat"), ("ragline-relay", "relay"), ("someone", "none")):
        key, pem = keys[cn]
        serializer = SecureSerializer(
            PrivateKey(key.decode()), Certificate(pem.decode()), FSCertStore(str(store / "*.pem")), "sha256"
        )
        body = serializer.serialize([[{"query": "q"}], {}, {}])
        assert serializer.deserialize(body) == [[{"query": "q"}], {}, {}]  # verifies in the store
        assert roles.signer_role(body) == expected
    assert roles.allowed("chat", names.TASK_QUERY_ASK)
    assert not roles.allowed("chat", names.TASK_INGEST_DOCUMENT)
    assert not roles.allowed(signing.NO_ROLE, names.TASK_QUERY_ASK)
    assert not roles.allowed("worker", "celery.group")
