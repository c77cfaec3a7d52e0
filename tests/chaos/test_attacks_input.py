"""Attacks through task payloads on a real prefork ingest pool (started like ``ragline up``, one task
per child, so each case's peak RSS is its own): local paths outside the tenant's roots, symlinks and a
symlink swapped in while the worker reads, ``/dev/zero`` and a FIFO, URLs that point at internal
addresses directly or through a redirect, and PDF bombs. Every attack must end as a clear per-document
error (or the allowed content, never a secret), with no internal server reached and the worker alive.
Results: the ``attacks_input`` section of ``bench/results/chaos.json``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ragline.ingest.roots import grant_roots
from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT
from tests.chaos import harness
from tests.integration.test_input_trust import pdf_flate_bomb, pdf_pages
from tests.loopback import LoopbackServer
from tests.pools import start_pool, wait_ready

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

SECRET = "SECRET-MARKER-7f3a"
RSS_LIMIT_MB = 1200


class _Internal(BaseHTTPRequestHandler):
    """An "internal service" (metadata endpoint, admin API) that must never be reached."""

    hits: list[str] = []

    def log_message(self, *a):
        pass

    def do_GET(self):  # noqa: N802
        _Internal.hits.append(self.path)
        body = f"# Internal\n\n{SECRET}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _redirector(target: str):
    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Redirect


def _serve(host: str, handler) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer((host, 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class _Flipper(threading.Thread):
    """Swaps ``path`` between a regular file and a symlink to ``secret`` as fast as it can, each
    swap one atomic rename: the race a tenant with write access to its folder would run."""

    def __init__(self, path: Path, secret: Path, content: str) -> None:
        super().__init__(daemon=True)
        self.path, self.secret, self.content = path, secret, content
        self.stop = threading.Event()
        self.flips = 0

    def run(self) -> None:
        tmp = self.path.with_name(".swap")
        while not self.stop.is_set():
            if self.flips % 2:
                tmp.write_text(self.content)
            else:
                tmp.symlink_to(self.secret)
            os.replace(tmp, self.path)
            self.flips += 1
            time.sleep(0.0005)


def test_input_attacks_on_prefork_pool(stack, tmp_path, tenant):
    from ragline.shared.worker import db
    from ragline.shared.worker.celery_app import app

    granted, other, outside = tmp_path / "granted", tmp_path / "other-tenant", tmp_path / "outside"
    for d in (granted, other, outside):
        d.mkdir()
    (outside / "secret.md").write_text(f"# Secret\n\n{SECRET}\n")
    (other / "hr.md").write_text(f"# HR\n\n{SECRET}\n")
    (granted / "leak.md").symlink_to(outside / "secret.md")
    (granted / "linked").symlink_to(outside, target_is_directory=True)
    os.mkfifo(granted / "pipe.md")
    (granted / "race.md").write_text("# Open\n\nPublic text of the race document.\n")
    (granted / "pages.pdf").write_bytes(pdf_pages(2001))
    (granted / "bomb.pdf").write_bytes(pdf_flate_bomb(1 << 30))
    (granted / "good.md").write_text("# Good\n\nThe worker is still alive after every attack.\n")
    grant_roots(tenant, [granted])
    grant_roots(f"{tenant}-other", [other])
    grant_roots(f"{tenant}-dev", ["/dev/zero"])  # an operator's mistake: still never read

    internal = _serve("127.0.0.1", _Internal)
    inside = f"http://127.0.0.1:{internal.server_address[1]}"
    redirector = _serve("127.0.0.2", _redirector(f"{inside}/latest/meta-data/"))
    _Internal.hits.clear()

    attacks: dict[str, tuple[dict, str]] = {
        "path outside roots: /etc/passwd": ({"uri": "/etc/passwd", "fmt": "text"}, "outside the allowed"),
        "path outside roots: ~/.ssh/id_rsa": (
            {"uri": str(Path.home() / ".ssh" / "id_rsa"), "fmt": "text"},
            "outside the allowed",
        ),
        "path outside roots: Kubernetes service-account token": (
            {"uri": "/var/run/secrets/kubernetes.io/serviceaccount/token", "fmt": "text"},
            "outside the allowed",
        ),
        "another tenant's granted folder": ({"uri": str(other / "hr.md")}, "outside the allowed"),
        "traversal out of a granted folder": (
            {"uri": f"{granted}/../outside/secret.md"},
            "outside the allowed",
        ),
        "symlink in a granted folder to a file outside": (
            {"uri": str(granted / "leak.md")},
            "outside the allowed",
        ),
        "symlinked folder in a granted folder": (
            {"uri": str(granted / "linked" / "secret.md")},
            "outside the allowed",
        ),
        "/dev/zero as a task path": ({"uri": "/dev/zero", "fmt": "text"}, "outside the allowed"),
        "/dev/zero granted by mistake": (
            {"uri": "/dev/zero", "fmt": "text", "tenant": f"{tenant}-dev"},
            "character device",
        ),
        "FIFO in a granted folder": ({"uri": str(granted / "pipe.md")}, "a FIFO"),
        "SSRF to 127.0.0.1": ({"uri": f"{inside}/admin.md"}, "loopback"),
        "SSRF to localhost by name": (
            {"uri": f"{inside.replace('127.0.0.1', 'localhost')}/admin.md"},
            "loopback",
        ),
        "SSRF to IPv4-mapped IPv6 loopback": (
            {"uri": f"{inside.replace('127.0.0.1', '[::ffff:127.0.0.1]')}/a.md"},
            "loopback",
        ),
        "SSRF to cloud metadata 169.254.169.254": (
            {"uri": "http://169.254.169.254/latest/meta-data/x.md"},
            "link-local",
        ),
        "SSRF with user:pass@ to 127.0.0.1": (
            {"uri": inside.replace("://", "://admin:hunter2@") + "/a.md"},
            "loopback",
        ),
        "SSRF through a redirecting server": (
            {"uri": f"http://127.0.0.2:{redirector.server_address[1]}/doc.md"},
            "127.0.0.1: loopback",
        ),
        "PDF of 2,001 pages": ({"uri": str(granted / "pages.pdf")}, "more than 2000 pages"),
        "PDF flate bomb (1 GiB stream)": ({"uri": str(granted / "bomb.pdf")}, "a stream inflates past"),
    }
    with LoopbackServer() as voyage:
        env = {
            "RAGLINE_EMBED_PROVIDER": "voyage",
            "RAGLINE_PROVIDERS_VOYAGE_BASE_URL": voyage.url,
            "RAGLINE_PROVIDERS_VOYAGE_API_KEY": "pa-attacks-key",
            # the redirecting server stands for an allowed intranet host; 127.0.0.1 stays internal
            "RAGLINE_INGEST_FETCH_ALLOWED_NETWORKS": '["127.0.0.2/32"]',
        }
        pool = start_pool(stack, "ingest", concurrency=1, env=env, extra_args=["--max-tasks-per-child", "1"])
        try:
            wait_ready(app, pool)
            ids = {}
            for i, (name, (payload, _)) in enumerate(attacks.items()):
                body = {"tenant": tenant, "doc_id": f"attack-{i}", "acl": ["g"], "version": 1, **payload}
                ids[name] = app.send_task(TASK_INGEST_DOCUMENT, args=[body], queue=pool.queue).id
            results = {name: app.AsyncResult(tid).get(timeout=300) for name, tid in ids.items()}

            # the swap race: the worker reads race.md while it flips between a file and a symlink out
            flipper = _Flipper(
                granted / "race.md", outside / "secret.md", "# Open\n\nPublic text of the race.\n"
            )
            flipper.start()
            race = [
                app.send_task(
                    TASK_INGEST_DOCUMENT,
                    args=[
                        {
                            "tenant": tenant,
                            "doc_id": f"race-{i}",
                            "uri": str(granted / "race.md"),
                            "acl": ["g"],
                        }
                    ],
                    queue=pool.queue,
                )
                for i in range(12)
            ]
            race_results = [r.get(timeout=300) for r in race]
            flipper.stop.set()
            flipper.join(5)

            good = app.send_task(
                TASK_INGEST_DOCUMENT,
                args=[{"tenant": tenant, "doc_id": "good", "uri": str(granted / "good.md"), "acl": ["g"]}],
                queue=pool.queue,
            ).get(timeout=300)
            alive = pool.proc.poll() is None
            deadline = time.monotonic() + 10
            while len(harness.task_resources(pool.log_text())) < len(ids) and time.monotonic() < deadline:
                time.sleep(0.2)
            resources = harness.task_resources(pool.log_text())
            log = pool.log_text()
        finally:
            pool.stop()
            internal.shutdown()
            redirector.shutdown()

    with db.connection() as c:
        leaked = c.execute(
            "SELECT count(*) AS n FROM chunks WHERE content LIKE %s", (f"%{SECRET}%",)
        ).fetchone()["n"]
    rows = []
    for name, (_, fragment) in attacks.items():
        res, rss = results[name], resources.get(ids[name], {})
        assert res["status"] == "failed" and fragment in res["error"], (name, res)
        assert "hunter2" not in res["error"]
        assert rss.get("peak_rss_mb", 0) < RSS_LIMIT_MB, (name, rss)
        rows.append(
            {
                "attack": name,
                "status": res["status"],
                "error": res["error"],
                "wall_ms": rss.get("wall_ms"),
                "peak_rss_mb": rss.get("peak_rss_mb"),
            }
        )
    outcomes: dict[str, int] = {}
    for r in race_results:
        key = r["status"] if r["status"] != "failed" else r["error"].split(":", 1)[0]
        outcomes[key] = outcomes.get(key, 0) + 1
        assert r["status"] in ("stored", "skipped_unchanged", "failed"), r
        if r["status"] == "failed":
            assert "outside the allowed" in r["error"] or "changed to a symlink" in r["error"], r
    assert _Internal.hits == [], "an internal address was reached"
    assert leaked == 0, "a secret was stored"
    assert alive and good["status"] == "stored"
    assert "hunter2" not in log
    rows.append(
        {
            "attack": f"symlink swapped in while the worker reads ({flipper.flips} swaps, 12 tasks)",
            "status": "no secret stored",
            "error": json.dumps(outcomes, ensure_ascii=False),
            "wall_ms": None,
            "peak_rss_mb": None,
        }
    )
    rows.append({"attack": "internal server requests", "status": str(len(_Internal.hits)), "error": None})
    rows.append(
        {"attack": "worker alive, good document stored after all", "status": str(alive), "error": None}
    )
    harness.record("attacks_input", rows)
