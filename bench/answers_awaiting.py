"""The answers over scopes of which a share of the rows awaits its vectors: what the confidence is
fitted on for the scopes an ingest leaves behind it while the fill runs (``bench/answer_calibration.py``
reads the ``awaiting`` feature the answers record).

    python -m bench.answers_awaiting --from /tmp/rl-answers --home /tmp/rl-aw25 --share 0.25 \
        QUESTIONS.jsonl TENANT GROUPS CACHE.json OUT.jsonl [QUESTIONS2.jsonl ...] [--vectors V.pickle]

Copies the stopped stack home ``--from`` to ``--home`` (the original is never written), starts the
copy's Postgres and Redis alone (no worker, so no fill gives the rows their vectors back), sets the
vector of ``--share`` of each tenant's embeddable rows to NULL, as the deferred ingest leaves them
(the rows picked by a seeded hash of their id: the rows of a smaller share are among those of a
larger one), then answers each set in process (``bench/answers_inprocess.py``, every question
answered: minimum confidence 0) and stops the copy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: the seed of the rows picked to await their vectors
SEED = "awaiting-1"

NULL_SQL = """
UPDATE chunks SET embedding = NULL WHERE id IN (
    SELECT id FROM chunks WHERE tenant = %(tenant)s AND NOT (layer = ANY(%(lexical_only)s::text[]))
    ORDER BY md5(id::text || %(seed)s) LIMIT %(n)s)
"""


def await_share(url: str, share: float, lexical_only: list[str]) -> dict[str, list[int]]:
    """Each tenant's embeddable rows and how many now await their vectors."""
    import psycopg

    out: dict[str, list[int]] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        counts = conn.execute(
            "SELECT tenant, count(*) FROM chunks WHERE NOT (layer = ANY(%s::text[])) GROUP BY tenant",
            (lexical_only,),
        ).fetchall()
        for tenant, n in counts:
            k = round(share * n)
            params = {"tenant": tenant, "lexical_only": lexical_only, "seed": f":{SEED}", "n": k}
            conn.execute(NULL_SQL, params)
            out[tenant] = [n, k]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("sets", nargs="+", help="QUESTIONS.jsonl TENANT GROUPS CACHE.json OUT.jsonl, per set")
    ap.add_argument("--from", dest="source", type=Path, required=True, help="a stopped stack's home")
    ap.add_argument("--home", type=Path, required=True, help="where the copy goes (must not exist)")
    ap.add_argument("--share", type=float, required=True)
    ap.add_argument("--vectors", type=Path, help="passed to answers_inprocess (sentence vectors)")
    args = ap.parse_args()
    if len(args.sets) % 5:
        ap.error("each set is QUESTIONS.jsonl TENANT GROUPS CACHE.json OUT.jsonl")
    shutil.copytree(args.source, args.home, symlinks=True)
    for sub in args.source.rglob("*"):  # the data directory stays the database server's own
        st = sub.lstat()
        os.lchown(args.home / sub.relative_to(args.source), st.st_uid, st.st_gid)
    os.environ["RAGLINE_SERVICES_HOME"] = str(args.home)
    from ragline.shared.config.settings import get_settings
    from ragline.shared.stack import services
    from ragline.shared.worker.migrate import apply_migrations

    settings = get_settings()
    started = services.start_embedded(settings)
    try:
        apply_migrations()
        rows = await_share(started["postgres"], args.share, sorted(settings.ingest.lexical_only_layers))
        print(f"awaiting share {args.share}: {rows}", flush=True)
        env = {**os.environ, "RAGLINE_ANSWER_MIN_CONFIDENCE": "0"}
        for i in range(0, len(args.sets), 5):
            questions, tenant, groups, cache, out = args.sets[i : i + 5]
            cmd = [sys.executable, "-m", "bench.answers_inprocess", questions, "--tenant", tenant]
            cmd += ["--groups", groups, "--cache", cache, "--out", out]
            cmd += ["--vectors", str(args.vectors)] if args.vectors else []
            subprocess.run(cmd, env=env, check=True)
    finally:
        services.stop_embedded(settings)


if __name__ == "__main__":
    main()
