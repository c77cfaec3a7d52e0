"""Who sent a task message, as the worker verified it: the identity permission changes are kept under.

The worker's execution strategy (:func:`ragline.shared.sdk.signing.role_strategy`) writes the sender
into the message's headers before Celery builds the request, so a task reads it as
``self.request.ragline_sender`` (:func:`sender_of`). The value is never the producer's own:

* with signing on, it is the role of the certificate that signed the message (``relay``,
  ``operator``...), whatever header the producer sent;
* a message the worker itself signed (a retry, which Celery re-sends with the request's headers)
  keeps the sender its first delivery was stamped with, so a retried change stays its sender's;
* without signing it is always ``unsigned``: nobody's identity can be checked, and the Redis
  password alone lets its holder send anything as anyone (docs/operations.md, "Security model").

Dependency-free: the strategy runs in the consumer, the reader in the task.
"""

from __future__ import annotations

from typing import Any

#: the message header (and request attribute) holding the verified sender
HEADER = "ragline_sender"
#: the sender of every message on a stack without message signing
UNSIGNED = "unsigned"
#: the role whose messages are the workers' own (retries, fan-out, schedules)
WORKER = "worker"


def stamp(headers: dict[str, Any], signer_role: str | None) -> None:
    """Write the sender of a message into its ``headers`` in place (``signer_role`` None: unsigned)."""
    if signer_role is None:
        headers[HEADER] = UNSIGNED
    elif signer_role == WORKER and isinstance(headers.get(HEADER), str) and headers[HEADER]:
        return  # the worker's retry of a message whose sender was verified on its first delivery
    else:
        headers[HEADER] = signer_role


def sender_of(request: Any) -> str:
    """The verified sender of a running task: Celery sets a message's headers as request attributes
    and keeps them in ``request.headers`` (which ``Task.apply`` fills from its ``headers``, in
    process); ``UNSIGNED`` without either."""
    value = getattr(request, HEADER, None) or (getattr(request, "headers", None) or {}).get(HEADER)
    return value if isinstance(value, str) and value else UNSIGNED
