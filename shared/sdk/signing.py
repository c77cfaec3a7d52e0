"""Optional Celery message signing (``celery.security``) with producer roles.

Every task message is signed with the producer's private key and workers accept only messages whose
signature verifies against a trusted certificate in the store. Off unless
``RAGLINE_OPS_SIGNING_KEY_FILE`` is set (see docs/operations.md, "Secrets and producer roles").

A valid signature is not enough: each certificate names a producer role in its subject CN
(``ragline-chat``, ``ragline-relay``, ``ragline-operator``, ``ragline-worker``) and a role may send only
its tasks (``names.PRODUCER_ROLES``): a chat backend's key cannot send an ingest or ACL task. The
worker checks the role in the task's execution strategy (:func:`role_strategy`, the ``Strategy`` of
``RaglineTask``), in the consumer, before the task is reserved: a refused message is rejected
without requeue, its caller gets a failed result saying why, the refusal is logged with the task
name and role and counted in ``rag_tasks_refused``, and the worker keeps consuming. A signal such as
``task_prerun`` runs too late (in the pool, after the task was accepted) and cannot skip the task.

The task name is not all a message asks for: Celery's canvas options (``link``, ``link_error``, a
chain, a chord, a group, in the body's ``embed`` or in the headers) make the worker send further tasks
itself, signed with the worker's key, once the message's own task has run. So the one admission
decision (:func:`refusal`) also refuses every message that carries any of them (:func:`canvas_options`)
unless its signer's role is a canvas role (``names.CANVAS_ROLES``: operator, worker). That check runs
with signing off too: an unsigned message cannot prove a worker sent it, and no ragline flow sends a
canvas.

The signature covers the message body (the payload and the embedded canvas options), not its
headers, where Celery keeps the task name: the role is checked against the name the worker is about
to run, so a signed payload re-sent under another task name is judged by the name it is sent under,
and canvas options are looked for in the headers as well as in the body.

Task messages use the ``auth`` serializer (JSON inside, signed); results and events stay JSON,
which is why ``result_accept_content`` and ``event_serializer`` are set explicitly. With signing on,
remote control (``celery inspect``, ``control.ping``) is refused too: control messages are JSON.

A producer-only install (the chat backend's) has neither prometheus-client nor, unless signing is
used, cryptography: both load only where used.
"""

from __future__ import annotations

import glob
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from celery import Celery
from celery.exceptions import ImproperlyConfigured, SecurityError

from ragline.shared.config.settings import Settings
from ragline.shared.sdk import decode_gate, sender
from ragline.shared.sdk.names import ALL_TASKS, CANVAS_ROLES, PRODUCER_ROLES, ROLE_PREFIX

log = logging.getLogger("ragline.signing")

NO_ROLE = "none"

#: the request fields through which a message makes a worker send, or complete, other tasks:
#: ``callbacks`` (``link``) run on success, ``errbacks`` (``link_error``) on failure, ``chain`` is the
#: rest of a chain, ``chord`` a chord's body (sent when the last member of ``group`` finishes);
#: ``group`` / ``group_index`` / ``taskset`` (protocol 1) join the message to a group's or chord's
#: counting, ``replaced_task_nesting`` marks a task replaced inside a canvas, and ``stamped_headers`` /
#: ``stamps`` are carried into every task a canvas sends. A worker reads them from the body's embed
#: and from the headers (protocol 2) or from the body itself (protocol 1 and hybrid messages).
CANVAS_FIELDS = (
    "callbacks",
    "errbacks",
    "chain",
    "chord",
    "group",
    "group_index",
    "taskset",
    "replaced_task_nesting",
    "stamped_headers",
    "stamps",
)


@dataclass(frozen=True)
class Roles:
    """Which role each trusted certificate signs for: certificate id (Celery's ``issuer serial``, the
    ``signer`` field of a signed message) to role, read from the store's certificates."""

    by_signer: dict[str, str]

    def allowed(self, role: str, task: str) -> bool:
        """Whether ``role`` may send ``task`` without canvas options (:func:`refusal`)."""
        return refusal(role, task, ()) is None

    def signer_role(self, body: bytes | str) -> str:
        """The role of the certificate that signed ``body`` (an ``auth``-serialized message body)."""
        from celery.security.serialization import SecureSerializer  # signing on: cryptography loads

        signer = SecureSerializer()._unpack(body)["signer"]
        signer = signer.decode() if isinstance(signer, bytes) else signer
        return self.by_signer.get(signer, NO_ROLE)


def canvas_options(payload: object, headers: Mapping | None) -> tuple[str, ...]:
    """The canvas options (:data:`CANVAS_FIELDS`) a decoded task message carries, wherever a worker
    could read them: the headers, the embed of a protocol 2 body ``(args, kwargs, embed)``, the body
    of a protocol 1 or hybrid message (a dict). Any value but an empty one counts (``None``, ``0``,
    ``[]``, ``{}`` are what Celery sends without canvas). An embed that is not a mapping counts as
    ``embed``: Celery would fail on it, and nothing unreadable is let through."""
    sources: list[Mapping] = [headers or {}]
    if isinstance(payload, Mapping):
        sources.append(payload)
    elif isinstance(payload, list | tuple) and len(payload) > 2:
        embed = payload[2]
        if isinstance(embed, Mapping):
            sources.append(embed)
        elif embed:
            return ("embed",)
    return tuple(f for f in CANVAS_FIELDS if any(src.get(f) for src in sources))


def refusal(role: str | None, task: str, canvas: Sequence[str]) -> str | None:
    """Why a worker refuses a message, or ``None`` to run it: the one admission decision.

    ``role`` is the signer's role, ``None`` with signing off; ``task`` the name the worker would run;
    ``canvas`` the message's :func:`canvas_options`. ``"role"``: the role may not send the task.
    ``"canvas"``: the message carries canvas options and its sender is not a canvas role (every
    task a canvas names would be sent by the worker with its own key), or it is unsigned and names
    one of Celery's built-in tasks (``celery.group``, ``celery.chord_unlock``...), which send the
    signatures in their arguments; signed, those belong to no role."""
    if role is not None and task not in PRODUCER_ROLES.get(role, ()):
        return "role"
    if role is None and task not in ALL_TASKS:  # Celery's built-ins send the signatures they are given
        return "canvas"
    if canvas and role not in CANVAS_ROLES:
        return "canvas"
    return None


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
            "message signing needs RAGLINE_OPS_SIGNING_KEY_FILE, RAGLINE_OPS_SIGNING_CERT_FILE"
            " and RAGLINE_OPS_SIGNING_CERT_STORE"
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
    # ...whose verified body Celery decodes whatever its unsigned content type: ours decodes only JSON
    decode_gate.register_json_auth(
        Path(settings.ops.signing_key_file).read_text(),
        app.conf.security_key_password,
        Path(settings.ops.signing_cert_file).read_text(),
        store_glob,
        app.conf.security_digest,
    )
    _roles = load_roles(store_glob)
    return True


# ------------------------------------------------------------------------------------ worker side
@lru_cache(maxsize=1)
def _refused_counter():
    from prometheus_client import Counter  # worker side only: a producer install has no prometheus-client

    return Counter(
        "rag_tasks_refused",
        "Messages a worker dropped or refused before running them: undecodable or not JSON, unsigned, bad signature, a producer"
        " role that may not send the task, or canvas options from a sender that may not send them",
        ["task", "role", "reason"],
    )


def count_refused(task: str, role: str, reason: str) -> None:
    """One more ``rag_tasks_refused``; a metrics problem never stops the refusal."""
    try:
        _refused_counter().labels(task=task, role=role, reason=reason).inc()
    except Exception:
        log.exception("could not count a refused task")


def role_strategy(task, app, consumer, **kwargs):
    """Celery's default execution strategy behind the decode gate and the admission check (a task's
    ``Strategy``).

    Every message is decoded first (with signing on, its signature verified, and only a JSON body
    decoded: :mod:`ragline.shared.sdk.decode_gate`) and its body checked for the shape Celery runs. A
    message that fails any of it (unsigned on a signed stack, a bad signature, a content type other
    than JSON, a body that does not decode or is not a task body) is dropped here: acknowledged, never
    requeued, logged (``message dropped``, with the exception) and counted in ``rag_tasks_refused``
    by reason; the worker keeps consuming. A message :func:`refusal` refuses (its signer's role may
    not send this task, or it carries canvas options and its sender is no canvas role) is refused
    next, before Celery's handler sees it. The others run with their verified sender stamped
    (:mod:`ragline.shared.sdk.sender`): the signer's role, or ``unsigned`` without signing, whatever
    header the producer sent."""
    from celery.worker.strategy import default  # worker side: the consumer's own machinery

    handle = default(task, app, consumer, **kwargs)
    roles = _roles
    name = task.name

    def checked(message, body, ack, reject, callbacks, **kw):
        from kombu.exceptions import ContentDisallowed  # worker side, with Celery

        try:
            payload = message.payload  # decodes (and verifies) once; Celery's handler reuses it
        except decode_gate.InnerContentRefused as exc:
            return _drop(consumer, message, name, "content_type", exc)
        except ContentDisallowed as exc:
            return _drop(consumer, message, name, "unsigned" if roles is not None else "content_type", exc)
        except Exception as exc:
            return _drop(consumer, message, name, "signature" if roles is not None else "decode", exc)
        problem = decode_gate.body_problem(payload)
        if problem is not None:
            return _drop(consumer, message, name, problem, None)
        role = None
        if roles is not None:
            try:
                role = roles.signer_role(message.body)
            except Exception:  # a verified body always unpacks; refuse rather than guess
                log.exception("could not read the signer of %s", name)
                role = NO_ROLE
        canvas = canvas_options(payload, message.headers)
        reason = refusal(role, name, canvas)
        if reason is not None:
            _refuse(app, consumer, message, name, role, reason, canvas)
            return None
        sender.stamp(message.headers, role)  # the verified sender, for the task (shared/sdk/sender.py)
        return handle(message, body, ack, reject, callbacks, **kw)

    return checked


def _drop(consumer, message, name: str, reason: str, exc: BaseException | None) -> None:
    """Acknowledge a message the decode gate refused without running or requeueing it; logged and
    counted. No result is written: nothing in an undecodable message names a caller to trust."""
    import structlog  # worker side: the server extra's structured logs

    info = getattr(message, "delivery_info", None) or {}
    structlog.get_logger("ragline.signing").warning(
        "message dropped",
        task=name,
        reason=reason,
        queue=info.get("routing_key"),
        task_id=(getattr(message, "headers", None) or {}).get("id"),
        content_type=getattr(message, "content_type", None),
        error=f"{type(exc).__name__}: {str(exc)[:300]}" if exc is not None else None,
    )
    count_refused(name, NO_ROLE, reason)
    message.reject_log_error(log, consumer.connection_errors, requeue=False)


def _refuse(
    app, consumer, message, name: str, role: str | None, reason: str, canvas: Sequence[str] = ()
) -> None:
    """Reject a message :func:`refusal` refused: dropped, not requeued, never retried; the caller's
    result says why (no callbacks or errbacks run: the refusal is the message's only outcome), the
    log and ``rag_tasks_refused`` record it."""
    import structlog  # worker side: the server extra's structured logs

    shown = role or NO_ROLE
    if reason == "role":
        why = f"producer role {shown!r} may not send {name}"
    elif role is None and not canvas:
        why = f"an unsigned message may not send Celery's canvas task {name}"
    elif role is None:
        why = f"an unsigned message may not carry canvas options ({', '.join(canvas)}) with {name}"
    else:
        why = f"producer role {shown!r} may not send canvas options ({', '.join(canvas)}) with {name}"
    task_id = (message.headers or {}).get("id")
    structlog.get_logger("ragline.signing").warning(
        "task refused", task=name, role=shown, task_id=task_id, reason=why, canvas=list(canvas)
    )
    count_refused(name, shown, reason)
    try:
        message.reject_log_error(log, consumer.connection_errors, requeue=False)
    finally:
        if task_id:
            try:
                app.backend.mark_as_failure(task_id, SecurityError(why), call_errbacks=False)
            except Exception:  # the backend is down: the message is refused all the same
                log.exception("could not record the refusal of %s", task_id)
