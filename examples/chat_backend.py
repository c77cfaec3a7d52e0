"""A minimal chat backend on top of ragline: one HTTP endpoint, answers from the query pool.

Run the stack (``ragline up``), ingest something (``ragline ingest docs --tenant demo --acl public``),
then::

    python examples/chat_backend.py --port 8080
    curl -s localhost:8080/ask -d '{"question": "Как ragline изолирует арендаторов?"}'

The backend decides who the caller is (here: a fixed tenant and group list; in a real service,
from the session) and passes the groups to ragline, which filters by them in SQL. The backend
never filters documents itself and never puts permissions into a prompt.

It uses only ``ragline.RaglineClient`` (Celery ``send_task`` by stable task names) and the
standard library; none of the worker code is imported. ragline's typed errors become HTTP
statuses: ``RaglineTimeout`` (no query worker answered in time) 504, ``RaglineUnavailable`` (Redis
unreachable) 503, ``RaglineRateLimited`` (the tenant's admission refused the question) 429 with
``Retry-After``, any other ``RaglineError`` (a refused request) 422.
"""

from __future__ import annotations

import argparse
import json
import math
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ragline import RaglineClient, RaglineError, RaglineRateLimited, RaglineTimeout, RaglineUnavailable


def make_handler(client: RaglineClient, tenant: str, groups: list[str]):
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, code: int, body: dict, retry_after: int | None = None) -> None:
            data = json.dumps(body, ensure_ascii=False).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            if retry_after is not None:
                self.send_header("Retry-After", str(retry_after))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/ask":
                self._reply(404, {"error": "POST /ask"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                question = str(body["question"])
            except (ValueError, KeyError):
                self._reply(400, {"error": 'body must be {"question": "...", "history": [...]}'})
                return
            try:
                res = client.ask(question, tenant=tenant, groups=groups, history=body.get("history") or [])
            except RaglineTimeout:  # before RaglineError: every typed error is one
                self._reply(504, {"error": "the query pool did not answer in time"})
                return
            except RaglineUnavailable:
                self._reply(503, {"error": "ragline is unavailable, try again later"}, retry_after=5)
                return
            except RaglineRateLimited as exc:
                wait = max(1, math.ceil(exc.retry_after_s or 1))
                self._reply(429, {"error": "too many questions, try again later"}, retry_after=wait)
                return
            except RaglineError as exc:
                self._reply(422, {"error": exc.error, "detail": exc.detail})
                return
            self._reply(
                200,
                {
                    "answer": res.answer,
                    "sources": [
                        {"n": c.n, "doc_id": c.doc_id, "heading": c.heading, "path": c.path}
                        for c in res.citations
                    ],
                    "no_answer": res.no_answer,
                    "reason": res.reason,
                    "degraded": res.degraded,
                },
            )

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument(
        "--broker",
        default=None,
        help="Redis URL (default: REDIS_URL, or the embedded one as RAGLINE_SERVICES_REDIS_ROLE, e.g. chat)",
    )
    ap.add_argument("--tenant", default="demo")
    ap.add_argument("--groups", default="public")
    ap.add_argument("--ask", help="ask one question, print the JSON answer and exit")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for an answer (then 504)")
    args = ap.parse_args()
    client = RaglineClient(args.broker, timeout=args.timeout)
    groups = [g for g in args.groups.split(",") if g]
    if args.ask:
        print(client.ask(args.ask, tenant=args.tenant, groups=groups).model_dump_json(indent=2))
        return
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(client, args.tenant, groups))
    print(f"chat backend on http://127.0.0.1:{args.port}/ask")
    server.serve_forever()


if __name__ == "__main__":
    main()
