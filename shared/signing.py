"""Optional Celery message signing (``celery.security``): every task message is signed with the
producer's private key and workers accept only messages whose signature verifies against a trusted
certificate in the store. Off unless ``RAGLINE_SIGNING_KEY_FILE`` is set (see docs/operations.md).

Task messages use the ``auth`` serializer (JSON inside, signed); results and events stay JSON,
which is why ``result_accept_content`` and ``event_serializer`` are set explicitly.
"""

from __future__ import annotations

from celery import Celery
from celery.exceptions import ImproperlyConfigured

from ragline.shared.settings import Settings


def configure_signing(app: Celery, settings: Settings) -> bool:
    """Switch ``app`` to signed task messages when a key is configured; return whether it did."""
    if not settings.ops.signing_key_file:
        return False
    if not (settings.ops.signing_cert_file and settings.ops.signing_cert_store):
        raise ImproperlyConfigured(
            "message signing needs RAGLINE_SIGNING_KEY_FILE, RAGLINE_SIGNING_CERT_FILE"
            " and RAGLINE_SIGNING_CERT_STORE"
        )
    store = settings.ops.signing_cert_store
    app.conf.update(
        security_key=str(settings.ops.signing_key_file),
        security_certificate=str(settings.ops.signing_cert_file),
        security_cert_store=str(store / "*.pem") if store.is_dir() else str(store),
        security_digest="sha256",
        task_serializer="auth",
        accept_content=["auth"],
        result_serializer="json",
        result_accept_content=["json"],
        event_serializer="json",
    )
    app.setup_security(allowed_serializers=["json"], serializer="json")  # registers "auth" itself
    return True
