"""Redis ACL users, one per component: what each may do on the broker, declared once.

Every component used to share one Redis password, so the holder of a chat backend's Redis URL could
read every queued message and stored result (questions, inline documents, ACL changes, answers with
cited chunk text), forge a result another client waits for, delete queued permission changes and
flush the broker. :data:`ROLES` gives each component a Redis user of its own; the embedded Redis's
``redis.conf`` (``shared/stack/services.py``), ``ragline redis-acl`` (the ``ACL SETUSER`` lines for an
external Redis) and the tests all read it.

Redis 6.2 (the embedded server) has no read/write key permissions: a user's commands apply to every
key its patterns match. So a producer's commands are chosen to be harmless on the keys it must
reach but not consume: it reads and deletes its results with ``GET``/``GETDEL`` (a queue is a list:
``GETDEL`` on it is a type error) and its answer streams with ``XREAD``/``XTRIM`` (the same on a
list); it has no ``DEL``, ``LPOP``, ``LRANGE``, ``SET``, ``XADD`` or ``PUBLISH`` at all. Its one
command that creates a key, ``LPUSH``, is granted for its queue's name alone (``+lpush|<queue>``, a
rule on the command's first argument, which Redis 6.2 and 7 both apply): a producer cannot grow a
never-expiring list under its result or answer-stream patterns, nor put a list where the worker
will ``XADD`` an answer stream.

What is left is its queue itself, which it must be able to fill. Redis has no per-user memory
quota, so the server's ``maxmemory`` bounds it, with :data:`MAXMEMORY_POLICY`.

"Its results": a producer whose URL names a role with :attr:`RedisRole.owns_results` sends its
tasks with ids ``<role>-<uuid>`` (:func:`task_id`), and the worker writes a task's result and answer
stream under its id, so the role's key patterns match exactly its own. A producer that picks
another id only hides its own answer from itself. Producers of one role share one user: a chat
backend can still read or delete another chat backend's pending result if it learns its id.

Dependency-free (the standard library and the names module), like :mod:`ragline.shared.sdk.names`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

from ragline.shared.config.redis_roles import DEFAULT_ROLE, ROLE_NAMES, RoleName
from ragline.shared.sdk.names import ANSWER_STREAM_PREFIX, QUEUES

#: the key (and channel) prefix of Celery's Redis result backend
RESULT_KEY_PREFIX = "celery-task-meta-"


def queue_keys(queue: str) -> tuple[str, ...]:
    """The Redis keys of a Celery queue: the list itself, and kombu's priority lists
    (``<queue>\\x06\\x16<n>``: the two separator bytes matched by ``??``)."""
    return (queue, f"{queue}??[0-9]")


@dataclass(frozen=True)
class RedisRole:
    """One Redis user: its commands, key patterns (``~``) and channel patterns (``&``)."""

    name: str
    who: str
    commands: tuple[str, ...]
    keys: tuple[str, ...]
    channels: tuple[str, ...]
    #: its tasks get ids ``<role>-<uuid>``, so its key patterns name its own results
    owns_results: bool = False
    #: kombu transport options of its processes (``broker_transport_options``)
    transport_options: tuple[tuple[str, str], ...] = ()

    @property
    def id_prefix(self) -> str:
        return f"{self.name}-" if self.owns_results else ""

    def rules(self) -> list[str]:
        """The ACL rules after ``user <name> on >password``, reset first (nothing inherited)."""
        return [
            "resetkeys",
            "resetchannels",
            "-@all",
            *self.commands,
            *CONNECT,
            *(f"~{k}" for k in self.keys),
            *(f"&{c}" for c in self.channels),
        ]


#: every user: ``CLIENT SETINFO``, which redis-py sends on connecting (a Redis before 7.2 answers it
#: with an error that redis-py ignores; denied, it would fill the ACL log, where intruders show)
CONNECT = ("+client|setinfo",)


def _own(role: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A producer role's result keys, answer streams and result channels."""
    keys = (f"{RESULT_KEY_PREFIX}{role}-*", f"{ANSWER_STREAM_PREFIX}{role}-*")
    return keys, (f"{RESULT_KEY_PREFIX}{role}-*",)


#: the server's eviction policy past ``maxmemory``: only keys with a TTL are evicted, least recently
#: used first. Results and answer streams carry one (``result_expires``, the stream's ``EXPIRE``);
#: queues, the ``unacked`` bookkeeping and kombu's bindings carry none, so no queued message is ever
#: evicted: with nothing left to evict, a write is refused with an OOM error its sender sees. LRU
#: rather than ``volatile-ttl``: the workers' liveness heartbeats (``shared/worker/redelivery.py``)
#: carry the shortest TTLs and are refreshed every few seconds, so by TTL they would go first (their
#: owner's messages restored while it runs), by recent use last; an abandoned result goes first.
MAXMEMORY_POLICY = "volatile-lru"


def producer_commands(queue: str) -> tuple[str, ...]:
    """The commands of a producer that sends tasks to ``queue`` and reads its own replies once: push
    a message onto ``queue`` and no other key (LPUSH), wait for the reply on its result channel
    (SUBSCRIBE) and read it (GET), delete it as it reads it (GETDEL), read and empty an answer
    stream (XREAD, XTRIM). Nothing here can take a message off a queue, read a queue, write a
    result, or create any key but ``queue``."""
    return (f"+lpush|{queue}", *_PRODUCER_READS)


_PRODUCER_READS = (
    "+ping",
    "+subscribe",
    "+unsubscribe",
    "+get",
    "+getdel",
    "+xread",
    "+xtrim",
)

#: the commands no ragline user is given: flushing, scanning every key name, reconfiguring,
#: replicating, debugging, shutting down, changing users (``@dangerous`` and ``@admin``), beyond the
#: commands the embedded Redis renames away (``services.DISABLED_REDIS_COMMANDS``)
DENIED = ("-@dangerous", "-@admin")

#: the fanout exchanges Flower binds its queues to: task events, remote control, its replies
_FLOWER_EXCHANGES = ("celeryev", "celery.pidbox", "reply.celery.pidbox")

#: kombu's bookkeeping of unacknowledged messages, of Flower's own: every kombu consumer sweeps the
#: workers' (``unacked``: their messages whole) back into their queues, and Flower's reply consumer
#: would read and write it; its own keys stay empty (its replies need no acknowledgement)
_FLOWER_QOS = (
    ("unacked_key", "flower.unacked"),
    ("unacked_index_key", "flower.unacked_index"),
    ("unacked_mutex_key", "flower.unacked_mutex"),
)

_CHAT_KEYS, _CHAT_CHANNELS = _own("chat")
_RELAY_KEYS, _RELAY_CHANNELS = _own("relay")

ROLES: dict[str, RedisRole] = {
    role.name: role
    for role in (
        RedisRole(
            "worker",
            "worker pools (ingest, query, control) and beat",
            ("+@all", *DENIED),
            ("*",),
            ("*",),
        ),
        RedisRole(
            "operator",
            "the ragline CLI on an admin host (ingest, permissions, status, inspect)",
            # BGREWRITEAOF drops deleted messages and results from the append-only file on demand
            ("+@all", *DENIED, "+bgrewriteaof"),
            ("*",),
            ("*",),
        ),
        RedisRole(
            "chat",
            "a chat backend (RaglineClient asking): pushes questions, reads its own answers",
            producer_commands("query"),
            ("query", *_CHAT_KEYS),
            _CHAT_CHANNELS,
            owns_results=True,
        ),
        RedisRole(
            "relay",
            "an event relay / connector: pushes document events and ACL syncs, reads its own results",
            producer_commands("acl"),
            ("acl", *_RELAY_KEYS),
            _RELAY_CHANNELS,
            owns_results=True,
        ),
        RedisRole(
            "metrics",
            "the metrics servers (rag_queue_depth): the length of each queue",
            ("+ping", "+llen"),
            tuple(k for q in QUEUES for k in queue_keys(q)),
            (),
        ),
        RedisRole(
            "flower",
            "Flower: task events, and workers' replies to its inspect and control broadcasts",
            (
                "+ping",
                "+llen",
                "+psubscribe",
                "+punsubscribe",
                "+subscribe",
                "+unsubscribe",
                "+publish",
                "+brpop",
                "+sadd",
                "+smembers",
                "+srem",
                "+del",
                "+multi",
                "+exec",
                "+evalsha",
                "+eval",
                "+script|load",
                "+script|exists",
                "+time",
                "+zadd",
                "+zrangebyscore",
                "+zrem",
                "+zrange",
                "+exists",
                "+set",
                "+get",
            ),
            (
                # its own event receiver's and reply queues (kombu's fanout queues, empty lists)
                "celeryev.*",
                "*.reply.celery.pidbox",
                "*.reply.celery.pidbox??[0-9]",
                *(
                    f"_kombu.binding{kind}.{exchange}"
                    for kind in ("", "_permanent")
                    for exchange in _FLOWER_EXCHANGES
                ),
                "_kombu.binding_deadlines",
                *(key for _, key in _FLOWER_QOS),
            ),
            ("/0.celeryev/*", "/0.celery.pidbox"),
            transport_options=_FLOWER_QOS,
        ),
    )
}

# the names are the configuration's (the setting that chooses one): the same roles, in this order
if tuple(ROLES) != ROLE_NAMES:  # pragma: no cover - a role added to one of the two only
    raise RuntimeError(f"redis_roles.ROLE_NAMES {ROLE_NAMES} differs from ROLES {tuple(ROLES)}")
__all__ = ["DEFAULT_ROLE", "ROLES", "RedisRole", "RoleName"]


def role_of_url(url: str | None) -> RedisRole | None:
    """The role a Redis URL logs in as: its user name when that names a role, else None (a URL
    without a user, today's one-password Redis, or a user ragline does not know)."""
    if not url:
        return None
    try:
        user = urlsplit(url).username
    except ValueError:
        return None
    return ROLES.get(user or "")


def transport_options(url: str | None) -> dict[str, str]:
    """The kombu transport options of a process logged in with ``url`` (:attr:`RedisRole.transport_options`)."""
    role = role_of_url(url)
    return dict(role.transport_options) if role else {}


def may_broadcast(url: str | None) -> bool:
    """Whether a process logged in with ``url`` may publish Celery's remote-control broadcasts
    (``revoke``): a user with every channel, or a URL without a known user."""
    role = role_of_url(url)
    return role is None or "*" in role.channels


def task_id(url: str | None) -> str:
    """A new task id for a producer logged in with ``url``: ``<role>-<uuid>`` for a role that
    reads only its own results, a bare uuid otherwise."""
    role = role_of_url(url)
    return f"{role.id_prefix if role else ''}{uuid.uuid4()}"


def reply_channel(url: str | None) -> str:
    """A channel of its own that an asyncio client keeps subscribed (inside its role's channel
    patterns, so the role may subscribe to it)."""
    return f"{RESULT_KEY_PREFIX}{task_id(url)}-anchor"


def conf_users(passwords: dict[str, str]) -> list[list[str]]:
    """The ``user`` directives of ``redis.conf``, one argument list per user (passwords by role):
    the default user off, then every role."""
    users = [["user", "default", "off", "resetkeys", "resetchannels", "-@all"]]
    for role in ROLES.values():
        users.append(["user", role.name, "on", f">{passwords[role.name]}", *role.rules()])
    return users


def password_variable(role: str) -> str:
    """The environment variable of a deployment that holds ``role``'s password (compose, k8s)."""
    return f"REDIS_{role.upper()}_PASSWORD"


def aclfile_template() -> str:
    """A Redis ACL file of every user with ``@<password_variable>@`` in place of each password,
    which a deployment's Redis fills from its environment at start (``deploy/redis/users.acl.in``)."""
    users = conf_users({role: f"@{password_variable(role)}@" for role in ROLES})
    return "".join(" ".join(user) + "\n" for user in users)


def setuser_commands(passwords: dict[str, str] | None = None) -> list[list[str]]:
    """``ACL SETUSER`` argument lists for an external Redis, one per role (``<password-of-ROLE>``
    placeholders unless given), and the default user disabled last."""
    out = []
    for role in ROLES.values():
        secret = (passwords or {}).get(role.name, f"<password-of-{role.name}>")
        out.append(["ACL", "SETUSER", role.name, "reset", "on", f">{secret}", *role.rules()])
    out.append(["ACL", "SETUSER", "default", "off"])
    return out


#: the generated block of docs/operations.md ("Redis users per component")
DOC_BEGIN = "<!-- redis-acl:begin (generated: ragline redis-acl --markdown) -->"
DOC_END = "<!-- redis-acl:end -->"


def markdown() -> str:
    """The table of every role's rights for docs/operations.md, between :data:`DOC_BEGIN` and
    :data:`DOC_END`."""

    def code(items: tuple[str, ...]) -> str:
        return " ".join("`" + i.replace("|", "\\|") + "`" for i in items) or "-"

    rows = [
        DOC_BEGIN,
        "",
        "| user | who | commands | keys | channels |",
        "| --- | --- | --- | --- | --- |",
    ]
    for role in ROLES.values():
        cmds = code(tuple(c for c in role.commands if c not in CONNECT))
        rows.append(f"| `{role.name}` | {role.who} | {cmds} | {code(role.keys)} | {code(role.channels)} |")
    return "\n".join([*rows, "", DOC_END])
