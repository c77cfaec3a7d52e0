"""The decode gate's rules (shared/sdk/decode_gate.py): only JSON is decoded, inner and outer.

Serializer registration is process-global (kombu's registry), so the cases that register or remove
serializers run in a subprocess. A pickle that would run creates a marker directory: its absence is
the proof it did not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragline.shared.sdk import decode_gate
from tests.certs import self_signed

#: builds a signed body whose inner content type is pickle and a JSON one; ``MODE`` decides who
#: decodes them: upstream's ``register_auth``, or ragline's ``configure_signing``
SIGNED = """
import json, os, pickle, sys
from pathlib import Path
from celery.security.certificate import Certificate
from celery.security.key import PrivateKey
from celery.security.serialization import SecureSerializer
from celery.security.utils import get_digest_algorithm
from kombu.serialization import loads

key_file, cert_file, store, marker, mode = sys.argv[1:]

class Mkdir:
    def __reduce__(self):
        return (os.mkdir, (marker,))

if mode == "upstream":
    from celery.security.serialization import register_auth
    register_auth(Path(key_file).read_text(), None, Path(cert_file).read_text(), store, "sha256")
else:
    from celery import Celery
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.signing import configure_signing
    assert configure_signing(Celery("t", set_as_current=False), get_settings())
key, cert = PrivateKey(Path(key_file).read_text()), Certificate(Path(cert_file).read_text())
digest = get_digest_algorithm("sha256")

def signed(inner, content_type, encoding, signed_inner=None):
    return SecureSerializer()._pack(inner, content_type, encoding, signer=cert.get_id(),
                                    signature=key.sign(signed_inner or inner, digest))

out = {}
for name, inner, ctype, enc in (
    ("pickle", pickle.dumps(Mkdir()), "application/x-python-serialize", "binary"),
    ("json", b'[[1], {}, null]', "application/json", "utf-8"),
    ("tampered", b'[[2], {}, null]', "application/json", "utf-8"),
):
    body = signed(inner, ctype, enc, b'[[1], {}, null]' if name == "tampered" else None)
    try:
        out[name] = {"value": repr(loads(body, "application/data", "utf-8", accept={"application/data"}))}
    except Exception as exc:
        out[name] = {"error": type(exc).__name__, "cause": type(exc.args[0]).__name__ if exc.args else ""}
out["ran"] = os.path.exists(marker)
print(json.dumps(out))
"""


def _signed(tmp_path: Path, mode: str) -> dict:
    store = tmp_path / "certs"
    store.mkdir()
    key, cert = self_signed(store, "ragline-chat")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RAGLINE_SERVICES_HOME": str(tmp_path / "home"),
        "RAGLINE_OPS_SIGNING_KEY_FILE": str(key),
        "RAGLINE_OPS_SIGNING_CERT_FILE": str(cert),
        "RAGLINE_OPS_SIGNING_CERT_STORE": str(store),
    }
    marker = tmp_path / "pickle-ran"
    out = subprocess.run(
        [sys.executable, "-c", SIGNED, str(key), str(cert), str(store / "*.pem"), str(marker), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_upstream_auth_serializer_still_unpickles_what_its_signer_labels_pickle(tmp_path):
    """Pins upstream's shape: Celery's own ``auth`` serializer decodes a validly signed body whose
    (unsigned) inner content type is pickle, and runs it. When this fails, upstream checks the inner
    content type itself and ``decode_gate.register_json_auth`` can go."""
    out = _signed(tmp_path, "upstream")
    assert out["ran"] is True
    assert "[[1], {}, None]" in out["json"]["value"]


def test_ragline_auth_serializer_decodes_only_json_and_runs_nothing(tmp_path):
    """configure_signing's ``auth``: a validly signed pickle is refused before decoding (marker
    absent), a signed JSON body decodes, a tampered one fails its signature check."""
    out = _signed(tmp_path, "ragline")
    assert out["ran"] is False
    assert out["pickle"]["error"] == "InnerContentRefused"
    assert "[[1], {}, None]" in out["json"]["value"]
    assert out["tampered"]["error"] == "DecodeError" and out["tampered"]["cause"] == "SecurityError"


WORKER_REGISTRY = """
import json, os, pickle, sys
from celery import signals
from kombu.serialization import loads, registry
import ragline.shared.worker.celery_app  # connects the worker_init handlers
marker = sys.argv[1]
class Mkdir:
    def __reduce__(self):
        return (os.mkdir, (marker,))
signals.worker_init.send(sender=None)
body = pickle.dumps(Mkdir())
try:
    got = loads(body, "application/x-python-serialize", "binary", force=True)
    result = type(got).__name__
except Exception as exc:
    result = type(exc).__name__
print(json.dumps({"names": sorted(registry.name_to_type), "forced": result, "ran": os.path.exists(marker)}))
"""


def test_a_worker_process_has_no_unsafe_decoder(tmp_path):
    """After ``worker_init`` no pickle, YAML or msgpack decoder exists: even kombu's ``force=True``
    (what Celery's auth serializer uses) hands back the bytes undecoded."""
    marker = tmp_path / "pickle-ran"
    out = subprocess.run(
        [sys.executable, "-c", WORKER_REGISTRY, str(marker)],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAGLINE_SERVICES_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert not set(decode_gate.UNSAFE_SERIALIZERS) & set(got["names"]), got
    assert "json" in got["names"]
    assert got["forced"] == "bytes" and got["ran"] is False


ENVELOPE = {
    "body": "W1tdLCB7fSwgbnVsbF0=",
    "content-encoding": "utf-8",
    "content-type": "application/json",
    "headers": {"task": "x", "id": "1"},
    "properties": {
        "delivery_info": {"exchange": "query", "routing_key": "query"},
        "body_encoding": "base64",
        "delivery_tag": "tag",
    },
}


def _without(d: dict, path: tuple[str, ...]) -> dict:
    out = json.loads(json.dumps(d))
    target = out
    for k in path[:-1]:
        target = target[k]
    del target[path[-1]]
    return out


def _with(d: dict, path: tuple[str, ...], value: object) -> dict:
    out = json.loads(json.dumps(d))
    target = out
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return out


@pytest.mark.parametrize(
    "raw",
    [
        ["a", "list"],
        "a string",
        None,
        42,
        _without(ENVELOPE, ("properties",)),
        _without(ENVELOPE, ("properties", "delivery_tag")),
        _without(ENVELOPE, ("properties", "delivery_info")),
        _without(ENVELOPE, ("properties", "delivery_info", "routing_key")),
        _with(ENVELOPE, ("properties", "delivery_tag"), 7),
        _with(ENVELOPE, ("properties", "delivery_tag"), ""),
        _with(ENVELOPE, ("properties", "body_encoding"), "rot13"),
        _with(ENVELOPE, ("body",), "%%% not base64"),
        _with(ENVELOPE, ("body",), ["x"]),
        _with(ENVELOPE, ("headers",), "x"),
        _with(ENVELOPE, ("content-type",), 5),
        _with(ENVELOPE, ("properties",), []),
        _with(ENVELOPE, ("headers",), {"x": json.loads("[" * 40 + "]" * 40)}),
    ],
)
def test_an_envelope_kombu_cannot_build_a_message_of_is_refused(raw):
    assert decode_gate.envelope_problem(raw) == "envelope"


def test_a_kombu_envelope_passes():
    assert decode_gate.envelope_problem(ENVELOPE) is None
    assert decode_gate.envelope_problem(_without(ENVELOPE, ("headers",))) is None


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ([[{"q": 1}], {}, {"callbacks": None}], None),
        (([1], {"a": 1}, None), None),
        ({"task": "x", "args": [1], "kwargs": {}}, None),  # protocol 1
        ("raw text", "content_type"),
        (b"raw bytes", "content_type"),
        ([[1], {}], "invalid"),
        (["args", "kwargs", None], "invalid"),
        ([[1], "kwargs", None], "invalid"),
        ([[1], {}, "embed"], "invalid"),
        ({"args": "x"}, "invalid"),
        (None, "invalid"),
        (7, "invalid"),
        ([[json.loads("[" * 40 + "]" * 40)], {}, None], "invalid"),
        ([[{"q": [[[1]]]}], {"k": {"v": [1, {"w": 2}]}}, {"callbacks": None}], None),
    ],
)
def test_only_a_task_body_celery_can_run_passes(payload, problem):
    assert decode_gate.body_problem(payload) == problem


class _Channel:
    """What kombu's ``Channel._brpop_read`` touches, with ``item`` as the one ``BRPOP`` reply."""

    sep = "\x06\x16"
    connection_errors = ()

    def __init__(self, item: bytes) -> None:
        from types import SimpleNamespace

        self.delivered: list[object] = []
        self._in_poll = None
        self.item = item
        self.client = SimpleNamespace(connection=None, parse_response=lambda *a, **k: (b"query", self.item))
        self._queue_cycle = SimpleNamespace(rotate=lambda queue: None)
        self.connection = SimpleNamespace(_deliver=self._deliver)

    def _deliver(self, payload, queue) -> None:
        """What kombu's consumer callback does first: build its message of the payload."""
        from kombu.transport.virtual.base import Message

        Message(payload, channel=self)
        self.delivered.append(payload)

    def decode_body(self, body, encoding=None):
        import base64

        return base64.b64decode(body) if encoding == "base64" else body

    def _flush_brpop_reauth(self) -> None:
        pass


JUNK = [b"\x00not json \xff\xfe!!", b'["not", "a", "message"]', b'{"body": 5}', b"null", b"[" * 100_000]


@pytest.mark.parametrize("item", JUNK)
def test_upstream_brpop_read_still_fails_on_junk(item):
    """Pins upstream's shape: kombu's own ``_brpop_read`` raises on an item that is not a message
    (out of the worker's event loop: "Unrecoverable error"). When this fails, kombu guards it itself
    and ``kombu_redis.gate_deliveries`` can go."""
    from kombu.transport import redis as kombu_redis

    upstream = getattr(kombu_redis.Channel._brpop_read, "__wrapped__", kombu_redis.Channel._brpop_read)
    with pytest.raises((ValueError, TypeError, KeyError, AttributeError, RecursionError)):
        upstream(_Channel(item))


@pytest.mark.parametrize("item", JUNK)
def test_the_gated_read_drops_junk_and_delivers_the_next_message(item, monkeypatch):
    """The gate wraps kombu's own read (no copy of it): a junk item is dropped, logged with its
    queue and size and counted, kombu's read sees an empty reply (as after a ``BRPOP`` timeout),
    and the next message on the same channel is delivered. This also pins the shape the wrap
    relies on: kombu reads its reply through ``self.client.parse_response(.., "BRPOP")`` and takes
    an empty one for "nothing to deliver"."""
    from kombu.transport import redis as upstream_redis
    from structlog.testing import capture_logs

    from ragline.shared.sdk import signing
    from ragline.shared.worker import kombu_redis

    upstream = getattr(upstream_redis.Channel._brpop_read, "__wrapped__", upstream_redis.Channel._brpop_read)
    monkeypatch.setattr(kombu_redis._brpop_read, "__wrapped__", upstream, raising=False)
    reason = "not_json" if item in (JUNK[0], JUNK[-1]) else "envelope"
    counted = signing._refused_counter().labels(task="-", role=signing.NO_ROLE, reason=reason)._value
    before = counted.get()
    channel = _Channel(item)
    with capture_logs() as logs, pytest.raises(upstream_redis.Empty):
        kombu_redis._brpop_read(channel)
    assert channel.delivered == [] and counted.get() == before + 1
    assert [(e["event"], e["queue"], e["reason"], e["size"]) for e in logs] == [
        ("broker item dropped", "query", reason, len(item))
    ]
    channel.item = json.dumps(ENVELOPE).encode()  # the next reply
    assert kombu_redis._brpop_read(channel) is True and channel.delivered == [ENVELOPE]
