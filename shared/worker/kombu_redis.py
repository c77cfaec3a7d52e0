"""Patches of kombu's Redis transport for worker processes: one Redis client per channel, no message
lost when the broker goes away between handing it out and recording it as unacked, and no consumer
stopped by bytes on a queue that are not a message or by a broker past ``maxmemory``.

**Junk on a queue.** A producer's Redis user may ``LPUSH`` anything onto its queue. kombu's
``Channel._brpop_read`` decodes what ``BRPOP`` returned with ``json.loads`` and builds a message of it
without a guard: a 16-byte non-JSON push (or JSON that is not a kombu envelope) raised out of the
worker's event loop and ended it ("Unrecoverable error: JSONDecodeError"). :func:`gate_deliveries`
wraps kombu's own ``_brpop_read``: the channel's client hands it each ``BRPOP`` reply only after
the item went through :func:`ragline.shared.sdk.decode_gate.envelope_problem`; an item that is not
a message is dropped (it is already off the queue and in no ``unacked`` hash, so nothing brings it
back), logged (``broker item dropped``, its queue and size, never its bytes) and counted in
``rag_tasks_refused`` (``task="-"``, ``reason`` ``not_json`` or ``envelope``), and kombu's read
sees an empty reply, as after a ``BRPOP`` timeout, so the worker reads the next one. A message
published to a fanout exchange (remote control, by the ``flower`` user among others) is checked
the same way before kombu delivers it.

**Lost deliveries.** kombu takes a message off its queue with ``BRPOP`` and then, in a second
round trip, records it in the ``unacked`` hash (``QoS.append``), where ``acks_late`` and
``shared/worker/redelivery.py`` can bring it back. When Redis stops between the two, the message is off
the queue and in no hash: the consumer reconnects and nothing ever runs it, although its sender
was told it was sent. :func:`requeue_lost_deliveries` closes that window: a delivery whose
``QoS.append`` fails on a connection error is pushed back onto its queue (kombu's own restore,
marked redelivered) by a thread that retries until Redis answers again, and the error still
reaches kombu, which reconnects as before. A worker that exits while Redis is still down loses
the message it holds (logged at ERROR with the task id).

**A full broker.** Past ``maxmemory`` with nothing left to evict (``redis_acl.MAXMEMORY_POLICY``:
a producer filled its queue), ``QoS.append`` is refused with an OOM error after ``BRPOP`` took the
message; raised, it ended the worker and lost the message. The message runs instead, without its
``unacked`` record (logged at ERROR with the task id).

**Client reuse.** kombu 5.x's Redis transport wraps every publish, ack and unacked-bookkeeping call in
``Channel.conn_or_acquire()``, which constructs a new ``redis.Redis`` each time. With redis-py 7
that constructor fills a case-insensitive dict of a few hundred response callbacks, which makes it
the largest single cost of the query pool's consumer thread (task events, acks), and every
``send_task`` of a producer pays it too. A ``redis.Redis`` over a connection pool is thread-safe
(each command borrows a pooled connection), so one client per channel and pool is enough: it is
rebuilt when kombu replaces the channel's pool (reconnect after a broker restart).

All patch private methods, so they are applied only in worker processes (``worker_init``, see
``celery_app``), never in a producer that imports the client; client reuse only for the kombu releases
it was written against (:data:`KOMBU_VERSIONS`), elsewhere kombu runs unpatched. The measurement that
justified it is in docs/architecture.md ("Performance notes").
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import kombu
from kombu.exceptions import OperationalError
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads
from redis.exceptions import OutOfMemoryError
from tenacity import Retrying, retry_if_exception_type, wait_exponential

from ragline.shared.sdk import decode_gate, signing
from ragline.shared.worker.logging_setup import get_logger

log = logging.getLogger(__name__)

#: kombu releases whose ``Channel.conn_or_acquire`` / ``_create_client`` this was written against
KOMBU_VERSIONS = ((5, 3), (5, 7))


def kombu_supported(version: str) -> bool:
    """Whether ``version`` (e.g. ``"5.7.0"``) is a kombu release the patch was written for."""
    try:
        major_minor = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return KOMBU_VERSIONS[0] <= major_minor <= KOMBU_VERSIONS[1]


def reuse_clients() -> bool:
    """Patch ``kombu.transport.redis.Channel.conn_or_acquire`` once; False if kombu has no such method."""
    if not kombu_supported(kombu.__version__):
        log.info("kombu %s is outside %s: Redis clients are not reused", kombu.__version__, KOMBU_VERSIONS)
        return False
    channel_cls = getattr(kombu_redis, "Channel", None)
    if (
        channel_cls is None
        or not hasattr(channel_cls, "conn_or_acquire")
        or not hasattr(channel_cls, "_create_client")
    ):
        return False
    if getattr(channel_cls.conn_or_acquire, "ragline_reuse", False):
        return True  # already patched

    @contextmanager
    def conn_or_acquire(self, client=None) -> Iterator[object]:
        if client:
            yield client
            return
        pool = self.pool
        cached = self.__dict__.get("_ragline_client")
        if cached is None or cached[0] is not pool:
            cached = (pool, self._create_client())
            self.__dict__["_ragline_client"] = cached
        yield cached[1]

    conn_or_acquire.__doc__ = (
        "One cached client per channel and connection pool (ragline.shared.worker.kombu_redis)."
    )
    conn_or_acquire.ragline_reuse = True
    channel_cls.conn_or_acquire = conn_or_acquire
    return True


#: task ids of deliveries held until Redis answers again (logged if the worker exits first)
_held: set[str] = set()
_held_lock = threading.Lock()


def _task_id(payload: dict) -> str:
    headers = payload.get("headers") if isinstance(payload, dict) else None
    return str((headers or {}).get("id") or "?")


def requeue(broker: kombu.Connection, payload: dict, exchange: str, routing_key: str) -> None:
    """Push a delivered but unrecorded message back onto its queue once Redis answers: kombu's
    own restore (``_do_restore_message``: its queue by the exchange's bindings, at the end
    ``BRPOP`` takes next, marked redelivered), on a fresh connection to ``broker`` each attempt
    (the consumer's channel is closed by then), retried with backoff until it succeeds. Blocks;
    :func:`requeue_lost_deliveries` runs it on a thread."""
    with broker.clone() as probe:
        errors = (OperationalError, *probe.connection_errors)
    for attempt in Retrying(
        retry=retry_if_exception_type(errors), wait=wait_exponential(multiplier=0.2, max=2), reraise=True
    ):
        with attempt, broker.clone() as conn:
            conn.ensure_connection(max_retries=1)
            channel = conn.channel()
            try:
                with channel.conn_or_acquire() as client, client.pipeline() as pipe:
                    channel._do_restore_message(payload, exchange, routing_key, pipe, leftmost=False)
                    pipe.execute()
            finally:
                channel.close()


def _requeue_in_background(broker: kombu.Connection, payload: dict, exchange: str, routing_key: str) -> None:
    task_id = _task_id(payload)
    with _held_lock:
        _held.add(task_id)
    log.warning("broker lost while recording delivery of task %s: requeued once Redis answers", task_id)

    def run() -> None:
        try:
            requeue(broker, payload, exchange, routing_key)
            log.warning("task %s requeued after the broker came back", task_id)
        except Exception:
            log.exception("could not requeue task %s", task_id)
        finally:
            with _held_lock:
                _held.discard(task_id)

    threading.Thread(target=run, name=f"ragline-requeue-{task_id}", daemon=True).start()


@atexit.register
def _report_held() -> None:
    with _held_lock:
        for task_id in sorted(_held):
            log.error("worker exits with task %s not requeued (Redis did not answer): it is lost", task_id)


def requeue_lost_deliveries() -> bool:
    """Patch ``kombu.transport.redis.QoS.append`` once (see the module docstring); False if kombu
    has no such method."""
    qos_cls = getattr(kombu_redis, "QoS", None)
    channel_cls = getattr(kombu_redis, "Channel", None)
    if qos_cls is None or not hasattr(qos_cls, "append") or not hasattr(channel_cls, "_do_restore_message"):
        return False
    if getattr(qos_cls.append, "ragline_requeue", False):
        return True
    original = qos_cls.append

    def append(self, message, delivery_tag):
        try:
            return original(self, message, delivery_tag)
        except OutOfMemoryError:
            # Redis is past maxmemory with nothing left to evict (a queue filled by a producer): the
            # message, already taken off its queue, runs without its unacked record rather than
            # ending the consumer (which would lose it all the same)
            log.error("broker out of memory: task %s runs without its unacked record", _task_id(message._raw))
            return virtual.QoS.append(self, message, delivery_tag)  # kombu's in-process bookkeeping
        except tuple(self.channel.connection_errors):
            info = message.delivery_info
            broker = self.channel.connection.client.clone()  # the consumer's broker, password included
            _requeue_in_background(broker, message._raw, info["exchange"], info["routing_key"])
            raise

    append.__doc__ = (
        "kombu's QoS.append; a delivery it cannot record is requeued (ragline.shared.worker.kombu_redis)."
    )
    append.ragline_requeue = True
    append.__wrapped__ = original
    qos_cls.append = append
    return True


def _item_problem(item: bytes) -> str | None:
    """Why ``item`` is no kombu message, or None: ``not_json`` (not UTF-8 JSON) or ``envelope``
    (JSON that is no kombu message, :func:`decode_gate.envelope_problem`)."""
    try:
        raw = loads(bytes_to_str(item))
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError; "[" nested 100,000 deep
        return "not_json"
    return decode_gate.envelope_problem(raw)


def _drop_item(queue: str, item: bytes, reason: str) -> None:
    """Log (queue, reason, size: never the bytes) and count an item that is not a message."""
    get_logger("ragline.broker").warning("broker item dropped", queue=queue, reason=reason, size=len(item))
    signing.count_refused("-", signing.NO_ROLE, reason)


def _checked_replies(parse_response):
    """``parse_response`` of a channel's client (redis-py's) with each ``BRPOP`` reply checked: an
    item that is not a message is dropped (:func:`_drop_item`) and the reply read as empty."""

    def checked(connection, command_name, **options):
        reply = parse_response(connection, command_name, **options)
        if command_name != "BRPOP" or not reply:
            return reply
        dest, item = reply
        reason = _item_problem(item)
        if reason is None:
            return reply
        queue = bytes_to_str(dest).rsplit(kombu_redis.Channel.sep, 1)[0]  # its name, less a priority
        _drop_item(queue, item, reason)
        return None

    checked.ragline_gate = True
    return checked


def _brpop_read(self, **options):
    """kombu's own ``Channel._brpop_read``, its client's ``BRPOP`` reply checked first
    (:func:`_checked_replies`, set once per client: kombu makes a new one when it reconnects). The
    item is decoded twice, here and by kombu; wrapping kombu's read rather than copying it keeps
    what each release adds around the read (5.7's re-auth flush) without following it here."""
    client = self.client
    if not getattr(client.parse_response, "ragline_gate", False):
        client.parse_response = _checked_replies(client.parse_response)
    return _brpop_read.__wrapped__(self, **options)


def _deliver_fanout_message(self, message, exchange):
    """kombu's fanout delivery (remote control, events) with the decoded item checked first: its
    own reader skips what is not JSON but delivers any JSON, and a non-message ended the worker."""
    problem = decode_gate.envelope_problem(message)
    if problem is not None:
        get_logger("ragline.broker").warning("broker item dropped", exchange=exchange, reason=problem)
        signing.count_refused("-", signing.NO_ROLE, problem)
        return True
    return _deliver_fanout_message.__wrapped__(self, message, exchange)


def _receive_one(self, c):
    """kombu's fanout read, whose own guard catches ``ValueError`` only: JSON nested deeper than
    the interpreter's recursion limit raised ``RecursionError`` out of the event loop."""
    try:
        return _receive_one.__wrapped__(self, c)
    except RecursionError:
        get_logger("ragline.broker").warning("broker item dropped", reason="not_json")
        signing.count_refused("-", signing.NO_ROLE, "not_json")
        raise kombu_redis.Empty() from None


def gate_deliveries() -> bool:
    """Patch ``kombu.transport.redis.Channel._brpop_read`` once (see the module docstring); False
    for a kombu release outside :data:`KOMBU_VERSIONS` (logged: junk on a queue would stop it)."""
    channel_cls = getattr(kombu_redis, "Channel", None)
    if not kombu_supported(kombu.__version__) or not hasattr(channel_cls, "_brpop_read"):
        log.error(
            "kombu %s is outside %s: junk on a queue can stop this worker", kombu.__version__, KOMBU_VERSIONS
        )
        return False
    if getattr(channel_cls._brpop_read, "ragline_gate", False):
        return True
    _brpop_read.ragline_gate = True
    _brpop_read.__wrapped__ = channel_cls._brpop_read
    channel_cls._brpop_read = _brpop_read
    if hasattr(channel_cls, "_deliver_fanout_message"):  # kombu 5.7; 5.3 delivers inline (unguarded)
        _deliver_fanout_message.__wrapped__ = channel_cls._deliver_fanout_message
        channel_cls._deliver_fanout_message = _deliver_fanout_message
    _receive_one.__wrapped__ = channel_cls._receive_one
    channel_cls._receive_one = _receive_one
    return True
