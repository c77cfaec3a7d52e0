"""What a worker decodes from the broker: JSON, and nothing else, inner and outer.

A producer's Redis user can push any bytes onto its queue, and a producer's signing key can sign any
body. Every decision ragline takes about a message (its signer's role, its canvas options, its
payload) is taken on the decoded message, so the decoding itself must not run anything or fail in a
way that stops the consumer. Three rules, each applied in one place:

* **No unsafe decoder exists in a worker** (:func:`unregister_unsafe_serializers`): pickle, YAML and
  msgpack are removed from kombu's serializer registry, not only disallowed, so no code path (a
  ``force=True`` decode, a consumer with its own ``accept``) can reach them.
* **The signed body is JSON** (:func:`register_json_auth`): Celery's ``auth`` serializer signs the
  inner body, but the inner content type travels beside the signature unsigned and Celery 5.x
  decodes the verified body with ``loads(..., force=True)``: whatever type the signer names, e.g.
  ``application/x-python-serialize``, is decoded. Ragline registers its own serializer under the
  ``auth`` name: the same wire format and signature check, then only ``application/json`` decoded.
* **A message is the shape a worker expects** before it reaches Celery: the transport envelope
  (:func:`envelope_problem`, checked by ``shared/worker/kombu_redis.py`` before kombu builds a
  message) and the task body (:func:`body_problem`, checked by the consumer's strategy,
  ``signing.role_strategy``). A message that fails either is dropped, logged and counted
  (``rag_tasks_refused``), never requeued.

Dependency-light like the rest of the SDK: kombu only; the signed serializer loads Celery's security
module (and cryptography) when signing is configured.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any

from kombu.exceptions import ContentDisallowed
from kombu.serialization import loads, registry

#: the one content type a worker decodes (outer on an unsigned stack, inner in the signed body)
JSON = "application/json"
#: kombu's serializers that decode to arbitrary objects or run code: never registered in a worker
UNSAFE_SERIALIZERS = ("pickle", "yaml", "msgpack")
#: the body encodings kombu's virtual transports write (``properties.body_encoding``)
BODY_ENCODINGS = (None, "base64", "utf-8")
#: how deeply a message may nest lists and objects: ragline's payloads nest a handful of levels, and
#: JSON that parses just under the interpreter's recursion limit fails later (re-encoded for the
#: ``unacked`` hash, pickled to a prefork child) where nothing catches it
MAX_DEPTH = 32


def too_deep(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests lists, tuples or mappings more than ``limit`` deep (iterative: no
    recursion of its own)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class InnerContentRefused(ContentDisallowed):
    """A signed body whose inner content type is not JSON (its signature may well be valid)."""


def unregister_unsafe_serializers() -> tuple[str, ...]:
    """Remove :data:`UNSAFE_SERIALIZERS` from kombu's registry (idempotent); the names removed."""
    removed = []
    for name in UNSAFE_SERIALIZERS:
        if name in registry.name_to_type:
            registry.unregister(name)
            removed.append(name)
    return tuple(removed)


def _json_only(content_type: str, content_encoding: str, body: bytes) -> object:
    if content_type != JSON:
        raise InnerContentRefused(f"signed body of content type {content_type!r}: only {JSON} is decoded")
    return loads(body, JSON, content_encoding or "utf-8", accept={JSON})


def register_json_auth(key: str, key_password: bytes | None, cert: str, store: str, digest: str) -> None:
    """Register the ``auth`` serializer as Celery's ``register_auth`` does (same wire format, same
    signature check), with the verified body decoded only when it is JSON (:func:`_json_only`).

    Upstream (``celery.security.serialization.SecureSerializer.deserialize``, Celery 5.4-5.7) decodes
    the verified body with ``loads(body, payload['content_type'], ..., force=True)``: the content type
    is not covered by the signature and ``force`` skips ``accept_content``. The shape this override
    relies on (``_unpack``'s fields, ``_cert_store[signer].verify``) is pinned by
    tests/unit/test_decode_gate.py."""
    from celery.security.certificate import Certificate, FSCertStore  # signing on: cryptography loads
    from celery.security.key import PrivateKey
    from celery.security.serialization import SecureSerializer
    from celery.security.utils import reraise_errors

    class JsonSecureSerializer(SecureSerializer):
        def deserialize(self, data):
            assert self._cert_store is not None
            with reraise_errors("Unable to deserialize: {0!r}", (Exception,)):
                payload = self._unpack(data)
                self._cert_store[payload["signer"]].verify(
                    payload["body"], payload["signature"], self._digest
                )
            return _json_only(payload["content_type"], payload["content_encoding"], payload["body"])

    s = JsonSecureSerializer(
        PrivateKey(key, password=key_password),
        Certificate(cert),
        FSCertStore(store),
        digest,
        serializer="json",
    )
    registry.register(
        "auth", s.serialize, s.deserialize, content_type="application/data", content_encoding="utf-8"
    )


def body_problem(payload: object) -> str | None:
    """Why a decoded task body is not one Celery can run, or ``None``: protocol 2's
    ``(args, kwargs, embed)`` or protocol 1's dict. A body kombu returned undecoded (a content type
    no decoder is registered for, such as ``application/data`` on an unsigned stack) is refused too."""
    if isinstance(payload, str | bytes | bytearray | memoryview):
        return "content_type"
    if too_deep(payload):
        return "invalid"
    if isinstance(payload, Mapping):
        args, kwargs = payload.get("args", ()), payload.get("kwargs", {})
        ok = isinstance(args, list | tuple) and isinstance(kwargs, Mapping | None)
        return None if ok else "invalid"
    if not (isinstance(payload, list | tuple) and len(payload) == 3):
        return "invalid"
    args, kwargs, embed = payload
    ok = isinstance(args, list | tuple) and isinstance(kwargs, Mapping) and isinstance(embed, Mapping | None)
    return None if ok else "invalid"


def envelope_problem(raw: object) -> str | None:
    """Why a decoded transport envelope (what kombu's Redis transport pushes: a JSON object with the
    body, its encoding, headers and properties) is not one kombu can turn into a message, or ``None``.
    Everything kombu's ``Message`` and its acknowledgement bookkeeping read is checked here, so none
    of it can raise in the consumer."""
    if not isinstance(raw, Mapping) or too_deep(raw):
        return "envelope"
    props, headers, body = raw.get("properties"), raw.get("headers"), raw.get("body")
    if not isinstance(props, Mapping) or not isinstance(headers, Mapping | None):
        return "envelope"
    info, tag = props.get("delivery_info"), props.get("delivery_tag")
    if not isinstance(info, Mapping) or not isinstance(tag, str) or not tag:
        return "envelope"
    if not all(isinstance(info.get(k), str) for k in ("exchange", "routing_key")):
        return "envelope"
    if not all(isinstance(raw.get(k), str | None) for k in ("content-type", "content-encoding")):
        return "envelope"
    if not isinstance(body, str | None) or props.get("body_encoding") not in BODY_ENCODINGS:
        return "envelope"
    if body and props.get("body_encoding") == "base64":
        try:
            base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            return "envelope"
    return None
