"""Each component's Redis user against the real embedded Redis (``shared/sdk/redis_acl.py``).

A private embedded Redis is started exactly as ``ragline up`` starts it (``services.start_redis``:
its ``redis.conf`` with one user per role), seeded before every cell with a message in each queue, a
pending result and an answer stream of another producer, and then every role tries every attack.
A cell's outcome is what the attack achieved, judged from the seeded state (a secret read, a queue
or result changed, the keyspace gone), not from the error it got: an attack Redis answers with a
type error (``GETDEL`` on a queue) is as harmless as one it refuses.

With one password for every component (the stack before per-role users) every attack succeeds for
every component; ``test_one_password_lets_every_component_do_everything`` keeps that baseline.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from ragline.shared.config.settings import Settings
from ragline.shared.sdk import redis_acl
from ragline.shared.sdk.names import answer_stream_key
from ragline.shared.stack import services
from ragline.shared.worker import credentials

SECRET = "question text of another tenant: the secret"
#: the seeded results and streams: a chat backend's, a relay's and an operator's (no prefix)
VICTIMS = {"chat": "chat-1111", "relay": "relay-2222", "operator": "3333"}
QUEUE_NAMES = ("ingest", "query", "acl", "maintenance")


def _other(role: str) -> str:
    """Whose result an attacker reads: the other producer's, or a chat backend's for the rest."""
    return {"chat": "relay", "relay": "chat"}.get(role, "chat")


class Cell:
    def __init__(self, name: str, act: Callable[[redis.Redis, str], object], harm: Callable[..., bool]):
        self.name, self.act, self.harm = name, act, harm


def _result(victim: str) -> str:
    return f"celery-task-meta-{VICTIMS[victim]}"


def _stream(victim: str) -> str:
    return answer_stream_key(VICTIMS[victim])


def _leaks(value: object) -> bool:
    return SECRET in repr(value)


def _changed(admin: redis.Redis, key: str) -> bool:
    """Whether the seeded value of ``key`` is gone or altered."""
    kind = admin.type(key)
    if kind == b"list":
        return admin.lrange(key, 0, -1) != [SECRET.encode()]
    if kind == b"string":
        return admin.get(key) != SECRET.encode()
    if kind == b"stream":
        return admin.xlen(key) != 1
    return True


def _cells() -> list[Cell]:
    out = []
    for q in QUEUE_NAMES:
        out.append(
            Cell(f"read queue {q} (LRANGE)", lambda r, _, q=q: r.lrange(q, 0, -1), lambda v, a, _: _leaks(v))
        )
        out.append(
            Cell(
                f"take from queue {q} (LPOP)",
                lambda r, _, q=q: r.lpop(q),
                lambda v, a, _, q=q: _changed(a, q),
            )
        )
        out.append(
            Cell(
                f"delete queue {q} (DEL)", lambda r, _, q=q: r.delete(q), lambda v, a, _, q=q: _changed(a, q)
            )
        )
        out.append(
            Cell(
                f"push to queue {q} (LPUSH)",
                lambda r, _, q=q: r.lpush(q, "forged"),
                lambda v, a, _, q=q: _changed(a, q),
            )
        )
        out.append(
            Cell(
                f"empty queue {q} with a producer's delete (GETDEL, XTRIM)",
                lambda r, _, q=q: (r.getdel(q), r.xtrim(q, maxlen=0)),
                lambda v, a, _, q=q: _changed(a, q),
            )
        )
    out += [
        Cell(
            "read another producer's result (GET)",
            lambda r, role: r.get(_result(_other(role))),
            lambda v, a, role: _leaks(v),
        ),
        Cell(
            "delete another producer's result (GETDEL)",
            lambda r, role: r.getdel(_result(_other(role))),
            lambda v, a, role: _changed(a, _result(_other(role))),
        ),
        Cell(
            "read an operator's result (GET, no prefix)",
            lambda r, role: r.get(_result("operator")),
            lambda v, a, role: _leaks(v),
        ),
        Cell(
            "forge another producer's result (SET)",
            lambda r, role: r.set(_result(_other(role)), "forged"),
            lambda v, a, role: _changed(a, _result(_other(role))),
        ),
        Cell(
            "forge a result of its own role (SET)",
            lambda r, role: r.set(_result(role if role in ("chat", "relay") else "chat"), "forged"),
            lambda v, a, role: _changed(a, _result(role if role in ("chat", "relay") else "chat")),
        ),
        Cell(
            "publish a forged result to a waiting client (PUBLISH)",
            lambda r, role: r.publish(_result(_other(role)), "forged"),
            lambda v, a, role: isinstance(v, int),
        ),
        Cell(
            "read another producer's answer stream (XREAD)",
            lambda r, role: r.xread({_stream(_other(role)): "0-0"}),
            lambda v, a, role: _leaks(v),
        ),
        Cell(
            "forge an answer stream entry (XADD)",
            lambda r, role: r.xadd(_stream(_other(role)), {"type": "answer", "data": "forged"}),
            lambda v, a, role: _changed(a, _stream(_other(role))),
        ),
        Cell(
            "list every key (KEYS *)",
            lambda r, role: r.keys("*"),
            lambda v, a, role: isinstance(v, list) and len(v) > 0,
        ),
        Cell("flush the broker (FLUSHALL)", lambda r, role: r.flushall(), lambda v, a, role: a.dbsize() == 0),
        Cell(
            "read the server's configuration (CONFIG GET)",
            lambda r, role: r.config_get("dir"),
            lambda v, a, role: bool(v),
        ),
        Cell(
            "give itself every right (ACL SETUSER)",
            lambda r, role: r.execute_command("ACL", "SETUSER", role, "+@all", "~*"),
            lambda v, a, role: v in (b"OK", "OK", True),
        ),
    ]
    return out


CELLS = _cells()

#: what each component may do, written out on its own (not derived from redis_acl.ROLES): the
#: attacks that succeed. Workers and the operator are trusted with every queue and result; no role
#: may flush, list every key, reconfigure or change users.
#: a producer's own deleting commands on a queue: a type error for every user, whatever its rights
HARMLESS = {c.name for c in CELLS if "GETDEL, XTRIM" in c.name}
TRUSTED = {
    c.name
    for c in CELLS
    if not c.name.startswith(("list every key", "flush", "read the server's", "give itself"))
} - HARMLESS
ALLOWED: dict[str, set[str]] = {
    "worker": TRUSTED,
    "operator": TRUSTED,
    # a producer pushes onto its own queue only; it reads and deletes results of its own role (a
    # second chat backend's included: they share the user), never writes one
    "chat": {"push to queue query (LPUSH)"},
    "relay": {"push to queue acl (LPUSH)"},
    "metrics": set(),
    "flower": set(),
}


def private_redis(**values: object) -> Iterator[tuple[Settings, str]]:
    """A private embedded Redis started by ``services.start_redis`` (the real ``redis.conf``), with
    settings ``values`` (e.g. ``services_redis_maxmemory_mb``)."""
    home = Path(tempfile.mkdtemp(prefix="rl-acl-")) / "home"
    settings = Settings(services_home=home, **values)
    base = services.start_redis(settings)
    try:
        yield settings, base
    finally:
        services.stop_redis(settings)
        shutil.rmtree(home.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def acl_redis() -> Iterator[tuple[Settings, str]]:
    yield from private_redis()


def _client(settings: Settings, base: str, role: str) -> redis.Redis:
    return redis.Redis.from_url(settings.redis_role_url(base, role), socket_timeout=5)


def _seed(admin: redis.Redis) -> None:
    for key in list(admin.scan_iter(count=1000)):
        admin.delete(key)
    for q in QUEUE_NAMES:
        admin.lpush(q, SECRET)
    for victim in VICTIMS:
        admin.set(_result(victim), SECRET)
        admin.xadd(_stream(victim), {"type": "answer", "data": SECRET})


def _attack(admin: redis.Redis, attacker: redis.Redis, role: str, cell: Cell) -> bool:
    """Whether ``cell``'s attack achieved anything for ``role``."""
    _seed(admin)
    try:
        value = cell.act(attacker, role)
    except redis.exceptions.ResponseError:  # refused (NOPERM), a type error, a renamed command
        value = None
        if cell.name.startswith("publish"):
            return False
    return bool(cell.harm(value, admin, role))


def _admin(settings: Settings, base: str) -> redis.Redis:
    """The worker's user: every key and channel (it cannot flush, so a flushed keyspace is an attack)."""
    return _client(settings, base, "worker")


@pytest.mark.parametrize("role", list(redis_acl.ROLES))
def test_each_component_can_do_only_its_own_part(acl_redis, role):
    settings, base = acl_redis
    admin, attacker = _admin(settings, base), _client(settings, base, role)
    outcome = {cell.name: _attack(admin, attacker, role, cell) for cell in CELLS}
    succeeded = {name for name, harmed in outcome.items() if harmed}
    assert succeeded == ALLOWED[role], {
        "unexpectedly possible": sorted(succeeded - ALLOWED[role]),
        "unexpectedly refused": sorted(ALLOWED[role] - succeeded),
    }


def test_a_producer_reads_and_deletes_results_of_its_own_role(acl_redis):
    """What stays possible, and is documented: producers of one role share a user, so a chat
    backend that learns another chat backend's task id can read or delete its pending result."""
    settings, base = acl_redis
    admin = _admin(settings, base)
    for role in ("chat", "relay"):
        _seed(admin)
        attacker = _client(settings, base, role)
        assert attacker.get(_result(role)) == SECRET.encode()
        assert attacker.getdel(_result(role)) == SECRET.encode() and not admin.exists(_result(role))
        found = attacker.xread({_stream(role): "0-0"})
        assert SECRET.encode() in found[0][1][0][1][b"data"]
        attacker.xtrim(_stream(role), maxlen=0, approximate=False)
        assert admin.xlen(_stream(role)) == 0


def _auth(port: int, *args: str) -> bytes:
    """``AUTH`` on a raw connection: its reply line (redis-py retries a failed authentication)."""
    request = b"*%d\r\n" % (len(args) + 1) + b"$4\r\nAUTH\r\n"
    request += b"".join(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        return sock.makefile("rb").readline().rstrip(b"\r\n")


def test_no_login_without_a_role(acl_redis):
    """The default user is off: a password alone (``AUTH <password>``) logs in as nobody, and a
    role's password opens no other role."""
    settings, base = acl_redis
    port = int(base.rsplit(":", 1)[1].split("/")[0])
    passwords = credentials.redis_passwords(settings, create=False)
    assert set(passwords) == set(redis_acl.ROLES)
    assert len(set(passwords.values())) == len(passwords)  # one password each
    for role, secret in passwords.items():
        assert _auth(port, secret).startswith(b"-WRONGPASS")
        assert _auth(port, "default", secret).startswith(b"-WRONGPASS")
        other = next(r for r in redis_acl.ROLES if r != role)
        assert _auth(port, other, secret).startswith(b"-WRONGPASS")
        assert _auth(port, role, secret) == b"+OK"


def test_one_password_lets_every_component_do_everything(acl_redis):
    """The baseline the roles close: every component logged in with the one password of the stack
    before per-role users (``requirepass``, the same commands renamed away) succeeds at every
    attack but reading the configuration, and the type errors no role gets past."""
    settings, _ = acl_redis
    port, proc = _former_single_password(settings)
    try:
        one = redis.Redis(port=port, password="one-password", socket_timeout=5)
        outcome = {cell.name: _attack(one, one, "chat", cell) for cell in CELLS}
    finally:
        proc.terminate()
        proc.wait(10)
    blocked = {name for name, harmed in outcome.items() if not harmed}
    assert blocked == {"read the server's configuration (CONFIG GET)", *HARMLESS}, blocked


def _former_single_password(settings: Settings) -> tuple[int, subprocess.Popen]:
    """A redis-server configured as the stack was before per-role users: ``requirepass`` and the
    same renamed commands; its port and process."""
    folder = settings.home_dir / "former"
    credentials.private_dir(folder)
    conf = folder / "redis.conf"
    conf.write_text(
        'requirepass "one-password"\n'
        + "".join(f'rename-command {c} ""\n' for c in services.DISABLED_REDIS_COMMANDS)
    )
    port = services.free_port()
    argv = [str(services.redis_server_binary()), str(conf), "--port", str(port), "--save", ""]
    proc = subprocess.Popen(
        [*argv, "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while True:
        try:
            redis.Redis(port=port, password="one-password", socket_timeout=1).ping()
            return port, proc
        except redis.exceptions.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
