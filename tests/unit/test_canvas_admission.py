"""Canvas options in task messages: every form Celery can put on the wire (``link``, ``link_error``,
chain, chord, group, nested, stamped, replaced, the same options written into the headers or into a
protocol 1 body) × every sender (the four roles, a certificate without a role, an unsigned stack),
through the worker's one admission decision (``signing.refusal`` over ``signing.canvas_options``) and
through the strategy that applies it (``signing.role_strategy``). The end-to-end escalation with real
certificates and workers is tests/integration/test_canvas_escalation.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from celery import Celery, chain, chord, group

from ragline.shared.sdk import names, signing

RETRIEVE, INGEST, ACL = names.TASK_QUERY_RETRIEVE, names.TASK_INGEST_DOCUMENT, names.TASK_ACL_SYNC
QUESTION = {"query": "q", "tenant": "acme", "groups": ["staff"]}
DOC = {"tenant": "acme", "doc_id": "evil.md", "fmt": "md", "content": "# x\n", "acl": ["staff"]}
WIDEN = {"items": [{"tenant": "acme", "doc_id": "exec.md", "acl": ["staff"]}]}

#: every sender: ``None`` is an unsigned stack (signing off)
SENDERS = ("chat", "relay", "operator", "worker", signing.NO_ROLE, None)
#: a task each sender may send on its own, so that only the canvas options can refuse it
OWN_TASK = {
    "chat": RETRIEVE,
    "relay": names.TASK_INGEST_EVENT,
    "operator": RETRIEVE,
    "worker": RETRIEVE,
    signing.NO_ROLE: RETRIEVE,
    None: RETRIEVE,
}


def _app() -> Celery:
    """A producer app that never connects: every message it would publish is captured instead."""
    app = Celery("canvas-test", broker="memory://", backend="cache+memory://", set_as_current=False)
    app.conf.task_always_eager = False
    sent: list[tuple[dict, object]] = []

    def capture(producer, name, message, **kwargs):
        # what the worker decodes: the JSON of the body, the headers as sent (plus any extra headers)
        headers = {**message.headers, **(kwargs.get("headers") or {})}
        sent.append((headers, json.loads(json.dumps(message.body))))

    app.amqp.send_task_message = capture
    app.sent = sent  # type: ignore[attr-defined]
    return app


def _sig(app: Celery, task: str, payload: dict, **options):
    return app.signature(task, args=[payload], immutable=True, **options)


#: each canvas form, a function of a fresh producer app and the sender's own task ``outer`` (what
#: the sender may send), with an ingest or ACL task the worker would send afterwards
FORM_FUNCS: dict[str, Callable[[Celery, str], None]] = {}


def _form(fn):
    FORM_FUNCS[fn.__name__] = fn
    return fn


@_form
def link(app, outer):
    _sig(app, outer, QUESTION).apply_async(link=_sig(app, INGEST, DOC))


@_form
def link_error(app, outer):
    _sig(app, outer, QUESTION).apply_async(link_error=_sig(app, ACL, WIDEN))


@_form
def links(app, outer):  # several callbacks at once
    _sig(app, outer, QUESTION).apply_async(link=[_sig(app, INGEST, DOC), _sig(app, ACL, WIDEN)])


@_form
def chained(app, outer):
    chain(_sig(app, outer, QUESTION), _sig(app, INGEST, DOC), _sig(app, ACL, WIDEN)).apply_async()


@_form
def chorded(app, outer):
    chord([_sig(app, outer, QUESTION), _sig(app, outer, QUESTION)], _sig(app, ACL, WIDEN)).apply_async()


@_form
def grouped(app, outer):
    group(_sig(app, outer, QUESTION), _sig(app, outer, QUESTION)).apply_async()


@_form
def nested_link_in_chain(app, outer):
    inner = chain(_sig(app, outer, QUESTION), _sig(app, INGEST, DOC))
    _sig(app, outer, QUESTION).apply_async(link=inner)


@_form
def nested_group_member_with_link(app, outer):
    member = _sig(app, outer, QUESTION).set(link=_sig(app, INGEST, DOC))
    group(member, _sig(app, outer, QUESTION)).apply_async()


@_form
def nested_chord_in_chain(app, outer):
    chain(
        _sig(app, outer, QUESTION), chord([_sig(app, outer, QUESTION)], _sig(app, INGEST, DOC))
    ).apply_async()


@_form
def stamped(app, outer):
    sig = _sig(app, outer, QUESTION)
    sig.stamp(tag="x")
    sig.apply_async()


@_form
def replaced(app, outer):
    _sig(app, outer, QUESTION).apply_async(replaced_task_nesting=1)


@_form
def callbacks_in_headers(app, outer):  # the headers are not signed: options there count as much
    _sig(app, outer, QUESTION).apply_async(headers={"callbacks": [dict(_sig(app, INGEST, DOC))]})


@_form
def chain_in_headers(app, outer):
    _sig(app, outer, QUESTION).apply_async(headers={"chain": [dict(_sig(app, ACL, WIDEN))]})


@_form
def protocol_1_body(app, outer):  # a hybrid message: Celery reads the canvas from the (signed) body
    app.sent.append(
        (
            {},
            {
                "task": outer,
                "id": "p1",
                "args": [QUESTION],
                "kwargs": {},
                "callbacks": [dict(_sig(app, INGEST, DOC))],
            },
        )
    )


@_form
def protocol_1_taskset(app, outer):
    app.sent.append(({}, {"task": outer, "id": "p1", "args": [QUESTION], "kwargs": {}, "taskset": "g1"}))


FORMS = tuple(FORM_FUNCS)


def _messages(form: str, outer: str) -> list[tuple[str, dict, object]]:
    """(task name, headers, decoded body) of every message ``form`` puts on the wire."""
    app = _app()
    FORM_FUNCS[form](app, outer)
    return [(h.get("task") or b["task"], h, b) for h, b in app.sent]


def _decide(role, task, headers, body):
    return signing.refusal(role, task, signing.canvas_options(body, headers))


@pytest.mark.parametrize("role", SENDERS, ids=lambda r: str(r))
@pytest.mark.parametrize("form", FORMS)
def test_every_canvas_form_is_refused_unless_a_worker_or_operator_signed_it(form, role):
    outer = OWN_TASK[role]
    messages = _messages(form, outer)
    assert messages, form
    ours = [(t, h, b) for t, h, b in messages if t == outer]
    assert ours, [t for t, _, _ in messages]  # the sender's own, allowed task carries the canvas
    for task, headers, body in messages:
        decision = _decide(role, task, headers, body)
        if role in names.CANVAS_ROLES:
            # everything a worker or operator may send runs; Celery's built-ins belong to no role
            assert decision == (None if task in names.ALL_TASKS else "role"), (task, headers)
        elif role == signing.NO_ROLE:
            assert decision == "role", task
        else:
            assert decision == "canvas", (task, signing.canvas_options(body, headers))
    if role not in names.CANVAS_ROLES and role != signing.NO_ROLE:
        # the outer task is one the sender may send: only its canvas options refuse it
        assert all(_decide(role, t, {}, [b[0], {}, {}]) is None for t, _, b in ours if isinstance(b, list))


@pytest.mark.parametrize("role", SENDERS, ids=lambda r: str(r))
def test_a_message_without_canvas_runs_for_every_role_that_may_send_its_task(role):
    app = _app()
    _sig(app, OWN_TASK[role], QUESTION).apply_async(queue="query", expires=30, countdown=0)
    app.send_task(OWN_TASK[role], args=[QUESTION], argsrepr="{}", task_id="chosen")
    for headers, body in app.sent:
        assert signing.canvas_options(body, headers) == ()
        assert _decide(role, OWN_TASK[role], headers, body) == ("role" if role == signing.NO_ROLE else None)


def test_each_canvas_form_carries_the_options_it_should():
    """The forms above really put canvas on the wire, in the fields the worker reads."""
    found = {}
    for form in FORMS:
        fields = set()
        for _task, headers, body in _messages(form, RETRIEVE):
            fields |= set(signing.canvas_options(body, headers))
        found[form] = fields
    assert "callbacks" in found["link"] and "callbacks" in found["links"]
    assert "errbacks" in found["link_error"]
    assert "chain" in found["chained"]
    assert {"chord", "group"} <= found["chorded"]
    assert "group" in found["grouped"]
    assert "callbacks" in found["nested_link_in_chain"]
    assert {"group", "callbacks"} <= found["nested_group_member_with_link"]
    assert "chain" in found["nested_chord_in_chain"]
    assert {"stamped_headers", "stamps"} & found["stamped"]
    assert found["replaced"] == {"replaced_task_nesting"}
    assert "callbacks" in found["callbacks_in_headers"] and "chain" in found["chain_in_headers"]
    assert found["protocol_1_body"] == {"callbacks"} and found["protocol_1_taskset"] == {"taskset"}


def test_unreadable_embed_and_celery_builtins_on_an_unsigned_stack_are_refused():
    assert signing.canvas_options([[QUESTION], {}, ["not", "a", "mapping"]], {}) == ("embed",)
    assert signing.canvas_options([[QUESTION], {}, None], {}) == ()
    assert signing.canvas_options([[QUESTION], {}], {"group": None, "stamps": {}}) == ()
    for builtin in ("celery.group", "celery.chain", "celery.chord", "celery.chord_unlock", "celery.map"):
        assert signing.refusal(None, builtin, ()) == "canvas"
        for role in ("chat", "relay", "operator", "worker", signing.NO_ROLE):
            assert signing.refusal(role, builtin, ()) == "role"
    for task in names.ALL_TASKS:
        assert signing.refusal(None, task, ()) is None  # an unsigned stack runs every ragline task


# ------------------------------------------------------------------------ through the strategy
class _Message:
    """A decoded message as the consumer hands it to a strategy."""

    def __init__(self, headers: dict, payload: object) -> None:
        self.headers, self.payload, self.body = headers, payload, b"signed"
        self.rejected: list[bool] = []

    def reject_log_error(self, logger, errors, requeue=False):
        self.rejected.append(requeue)


class _SignedBy(signing.Roles):
    """The store's roles, every message signed by the one certificate ``signer``."""

    def signer_role(self, body) -> str:
        return self.by_signer["signer"]


@pytest.mark.parametrize("role", SENDERS, ids=lambda r: str(r))
def test_the_strategy_refuses_canvas_before_celery_sees_the_message(role, monkeypatch):
    """role_strategy: refused messages are rejected without requeue, their result fails with the
    reason, they are counted; everything else reaches Celery's own handler untouched."""
    handled, failed, counted = [], [], []
    monkeypatch.setattr(
        "celery.worker.strategy.default", lambda *a, **k: lambda *args, **kw: handled.append(args)
    )
    roles = None if role is None else _SignedBy({"signer": role})
    monkeypatch.setattr(signing, "_roles", roles)
    monkeypatch.setattr(signing, "count_refused", lambda task, r, reason: counted.append((task, r, reason)))
    backend = SimpleNamespace(mark_as_failure=lambda tid, exc, call_errbacks: failed.append((tid, str(exc))))
    app, consumer = SimpleNamespace(backend=backend), SimpleNamespace(connection_errors=())
    outer = OWN_TASK[role]
    strategy = signing.role_strategy(SimpleNamespace(name=outer), app, consumer)

    expected_refusals = 0
    for form in FORMS:
        for task, headers, body in _messages(form, outer):
            if task != outer:
                continue
            msg = _Message({**headers, "id": f"{form}-id"}, body)
            strategy(msg, None, None, None, None)
            if role in names.CANVAS_ROLES:
                assert not msg.rejected
            else:
                expected_refusals += 1
                assert msg.rejected == [False], form
                assert failed[-1][0] == f"{form}-id"
    plain = _Message({"id": "plain", "task": outer}, [[QUESTION], {}, {"callbacks": None, "chain": None}])
    strategy(plain, None, None, None, None)
    assert bool(plain.rejected) is (role == signing.NO_ROLE)
    reason = "role" if role == signing.NO_ROLE else "canvas"
    assert len(counted) == expected_refusals + (role == signing.NO_ROLE)
    assert {c[2] for c in counted} <= {reason}
    if role not in names.CANVAS_ROLES and role != signing.NO_ROLE:
        assert all("canvas options" in why for _, why in failed), failed[:2]
        assert handled and len(handled) == 1  # only the plain message reached Celery
    if role in names.CANVAS_ROLES:
        assert not failed and len(handled) > len(FORMS)
