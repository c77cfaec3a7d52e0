"""The names of the Redis users (one per component) and the URL a process logs in with.

The configuration's part of ``shared/sdk/redis_acl.py``, which declares what each user may do: the
settings choose a user by name (``RAGLINE_SERVICES_REDIS_ROLE``) and build the embedded Redis's URL
from its generated password, and the configuration imports nothing of ragline.
"""

from __future__ import annotations

from typing import Literal, get_args
from urllib.parse import quote, urlsplit

#: the Redis users, one per component (their rights: ``shared/sdk/redis_acl.py``)
RoleName = Literal["worker", "operator", "chat", "relay", "metrics", "flower"]
ROLE_NAMES: tuple[str, ...] = get_args(RoleName)

#: the role of a process that sets none: the CLI
DEFAULT_ROLE = "operator"


def secret_name(role: str) -> str:
    """The secrets file of the embedded Redis user ``role`` in ``<home>/secrets/``: ``redis`` for the
    operator's (``RAGLINE_SERVICES_REDIS_PASSWORD`` sets it), ``redis-<role>`` for the others."""
    return "redis" if role == DEFAULT_ROLE else f"redis-{role}"


def has_credentials(url: str) -> bool:
    """Whether a Redis URL names its user or password (one an older ``ragline up`` wrote carries
    its single password: it is used as it is until the stack restarts)."""
    parts = urlsplit(url)
    return parts.username is not None or parts.password is not None


def role_url(base: str, role: str, password: str) -> str:
    """``base`` (a Redis URL without credentials) logged in as ``role``; a ``base`` that carries
    credentials is returned as it is (:func:`has_credentials`)."""
    if has_credentials(base):
        return base
    parts = urlsplit(base)
    return parts._replace(netloc=f"{role}:{quote(password, safe='')}@{parts.netloc}").geturl()
