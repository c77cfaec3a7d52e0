"""Optional Celery message signing (``celery.security``) with producer roles.

Every task message is signed with the producer's private key and workers accept only messages whose
signature verifies against a trusted certificate in the store. Off unless
``RAGLINE_SIGNING_KEY_FILE`` is set (see docs/operations.md, "Secrets and producer roles").

A valid signature is not enough: each certificate names a producer role in its subject CN
(``ragline-chat``, ``ragline-relay``, ``ragline-operator``, ``ragline-worker``) and a role may send only
its tasks (``names.PRODUCER_ROLES``): a chat backend's key cannot send an ingest or ACL task. The
worker checks the role in the task's execution strategy (:func:`role_strategy`, the ``Strategy`` of
``RaglineTask``), in the consumer, before the task is reserved: a refused message is rejected
without requeue, its caller gets a failed result saying why, the refusal is logged with the task
name and role and counted in ``rag_tasks_refused``, and the worker keeps consuming. A signal such as
``task_prerun`` runs too late (in the pool, after the task was accepted) and cannot skip the task.

The signature covers the message body (the payload), not its headers, where Celery keeps the task
name: the role is checked against the name the worker is about to run, so a signed payload re-sent
under another task name is judged by the name it is sent under.

Task messages use the ``auth`` serializer (JSON inside, signed); results and events stay JSON,
which is why ``result_accept_content`` and ``event_serializer`` are set explicitly. With signing on,
remote control (``celery inspect``, ``control.ping``) is refused too: control messages are JSON.

A producer-only install (the chat backend's) has neither prometheus-client nor, unless signing is
used, cryptography: both load only where used.
"""

from __future__ import annotations

import glob
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from celery import Celery
from celery.exceptions import ImproperlyConfigured, SecurityError

from ragline.shared import sender
from ragline.shared.names import PRODUCER_ROLES, ROLE_PREFIX
from ragline.shared.settings import Settings

log = logging.getLogger("ragline.signing")

NO_ROLE = "none"


@dataclass(frozen=True)
class Roles:
    """Which role each trusted certificate signs for: certificate id (Celery's ``issuer serial``, the
    ``signer`` field of a signed message) to role, read from the store's certificates."""

    by_signer: dict[str, str]

    def allowed(self, role: str, task: str) -> bool:
        return task in PRODUCER_ROLES.get(role, ())

    def signer_role(self, body: bytes | str) -> str:
        """The role of the certificate that signed ``body`` (an ``auth``-serialized message body)."""
        from celery.security.serialization import SecureSerializer  # signing on: cryptography loads

        signer = SecureSerializer()._unpack(body)["signer"]
        signer = signer.decode() if isinstance(signer, bytes) else signer
        return self.by_signer.get(signer, NO_ROLE)


#: the roles of this process's certificate store, once signing is configured
_roles: Roles | None = None


def role_of_cn(common_name: str) -> str:
    """``ragline-chat`` -> ``chat``; a name that is not a known role -> ``none`` (may send nothing)."""
    role = common_name.removeprefix(ROLE_PREFIX) if common_name.startswith(ROLE_PREFIX) else ""
    return role if role in PRODUCER_ROLES else NO_ROLE


def load_roles(store_glob: str) -> Roles:
    """The role of every certificate the store holds (the same files Celery's store reads)."""
    from celery.security.certificate import Certificate  # signing on: cryptography loads
    from cryptography import x509  # signing on only
    from cryptography.x509.oid import NameOID  # signing on only

    by_signer = {}
    for path in sorted(glob.glob(store_glob)):
        pem = Path(path).read_bytes()
        cert = x509.load_pem_x509_certificate(pem)
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        cn = str(names[0].value) if names else ""
        by_signer[Certificate(pem).get_id()] = role_of_cn(cn)
    return Roles(by_signer)


def configure_signing(app: Celery, settings: Settings) -> bool:
    """Switch ``app`` to signed task messages when a key is configured; return whether it did."""
    global _roles
    if not settings.ops.signing_key_file:
        return False
    if not (settings.ops.signing_cert_file and settings.ops.signing_cert_store):
        raise ImproperlyConfigured(
            "message signing needs RAGLINE_SIGNING_KEY_FILE, RAGLINE_SIGNING_CERT_FILE"
            " and RAGLINE_SIGNING_CERT_STORE"
        )
    store = settings.ops.signing_cert_store
    store_glob = str(store / "*.pem") if store.is_dir() else str(store)
    app.conf.update(
        security_key=str(settings.ops.signing_key_file),
        security_certificate=str(settings.ops.signing_cert_file),
        security_cert_store=store_glob,
        security_digest="sha256",
        task_serializer="auth",
        accept_content=["auth"],
        result_serializer="json",
        result_accept_content=["json"],
        event_serializer="json",
    )
    app.setup_security(allowed_serializers=["json"], serializer="json")  # registers "auth" itself
    _roles = load_roles(store_glob)
    return True


# ------------------------------------------------------------------------------------ worker side
@lru_cache(maxsize=1)
def _refused_counter():
    from prometheus_client import Counter  # worker side only: a producer install has no prometheus-client

    return Counter(
        "rag_tasks_refused",
        "Task messages a worker refused before running them: unsigned, bad signature, or a producer"
        " role that may not send the task",
        ["task", "role", "reason"],
    )


def _count(task: str, role: str, reason: str) -> None:
    try:
        _refused_counter().labels(task=task, role=role, reason=reason).inc()
    except Exception:  # a metrics problem never stops the refusal
        log.exception("could not count a refused task")


def role_strategy(task, app, consumer, **kwargs):
    """Celery's default execution strategy behind the producer-role check (a task's ``Strategy``).

    Without signing this is Celery's strategy itself, the sender stamped ``unsigned``. With signing, every message is decoded (the
    signature verified) before the check; unsigned or badly signed messages are counted and then
    refused by Celery as before (``ContentDisallowed`` rejects, a bad signature is acknowledged and
    dropped), a message whose signer's role may not send this task is refused here, and the others
    run with the signer's role stamped as their sender (:mod:`ragline.shared.sender`)."""
    from celery.worker.strategy import default  # worker side: the consumer's own machinery

    handle = default(task, app, consumer, **kwargs)
    roles = _roles
    name = task.name
    if roles is None:

        def unsigned(message, body, ack, reject, callbacks, **kw):
            sender.stamp(message.headers, None)  # whatever the producer claimed
            return handle(message, body, ack, reject, callbacks, **kw)

        return unsigned

    def checked(message, body, ack, reject, callbacks, **kw):
        from kombu.exceptions import ContentDisallowed  # worker side, with Celery

        try:
            message.payload  # noqa: B018  decodes and verifies once; Celery's handler reuses the result
        except ContentDisallowed:
            _count(name, NO_ROLE, "unsigned")
            raise
        except Exception:
            _count(name, NO_ROLE, "signature")
            raise
        try:
            role = roles.signer_role(message.body)
        except Exception:  # a verified body always unpacks; refuse rather than guess
            log.exception("could not read the signer of %s", name)
            role = NO_ROLE
        if not roles.allowed(role, name):
            _refuse(app, consumer, message, name, role)
            return None
        sender.stamp(message.headers, role)  # the verified sender, for the task (shared/sender.py)
        return handle(message, body, ack, reject, callbacks, **kw)

    return checked


def _refuse(app, consumer, message, name: str, role: str) -> None:
    """Reject a message its signer's role may not send: dropped, not requeued, never retried; the
    caller's result says why (no callbacks run), the log and ``rag_tasks_refused`` record it."""
    from ragline.shared.logging_setup import get_logger  # worker side: structlog

    task_id = (message.headers or {}).get("id")
    get_logger("ragline.signing").warning(
        "task refused", task=name, role=role, task_id=task_id, reason="role may not send this task"
    )
    _count(name, role, "role")
    try:
        message.reject_log_error(log, consumer.connection_errors, requeue=False)
    finally:
        if task_id:
            try:
                app.backend.mark_as_failure(
                    task_id,
                    SecurityError(f"producer role {role!r} may not send {name}"),
                    call_errbacks=False,
                )
            except Exception:  # the backend is down: the message is refused all the same
                log.exception("could not record the refusal of %s", task_id)
