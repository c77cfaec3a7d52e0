"""The vector fill of a code evaluation's stored snapshots, one snapshot at a time, in this process.

The stack's fill (:func:`ragline.ingest.reembed.run_fill`) embeds every tenant's rows together,
shortest first: right for a service, but an evaluation stopped by the clock then has every
snapshot partly embedded, and its vector and hybrid numbers describe no real index. This embeds
the awaiting rows tenant by tenant (those of ``--tenants``, a LIKE pattern, fewest awaiting first)
through the fill's own functions (its row selection, row claims, embedding cache and guarded
write: :mod:`ragline.ingest.reembed`), holding one of the fill's runner slots so the stack's fill
tasks step aside. Start one process per core: they claim disjoint rows of the same tenant. Each
tenant's embedded rows are printed as it goes (``--status`` prints them and exits), so a run cut
short says exactly how much of each snapshot was embedded.

    RAGLINE_SERVICES_HOME=/tmp/rl-code OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m bench.code_fill \\
        --tenants 'code-%-1f977a04'
"""

from __future__ import annotations

import argparse
import os
import time

from bench.code_eval_inprocess import vectors
from ragline.ingest import reembed
from ragline.shared.worker import db, pending_vectors

#: rows per batch, each claimed, embedded and written at once (32 rows take 10-60 s on a shared CPU)
BATCH_ROWS = 32


def tenants_like(conn, like: str) -> list[str]:
    rows = conn.execute("SELECT DISTINCT tenant FROM documents WHERE tenant LIKE %s", (like,)).fetchall()
    return sorted(r["tenant"] for r in rows)


def fill_tenant(conn, embedder, tenant: str, batch_rows: int) -> int:
    """Embed ``tenant``'s awaiting rows until none is left unclaimed; the rows written."""
    written = 0
    while layers := pending_vectors.fill_layers(conn):
        window = reembed.next_rows(
            conn, reembed.FILL_ROWS, embedder.model, batch_rows * 2 + 1, tenant, {"fill_layers": layers}
        )
        rows = reembed.claim(conn, window, batch_rows)
        if not rows:
            break
        try:
            written += reembed.embed_rows(conn, embedder, rows)[0]
        finally:
            reembed.release(conn, [r["id"] for r in rows])
    return written


def show(counts: dict[str, dict[str, int]]) -> None:
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    stamp = time.strftime("%H:%M:%S", time.gmtime())
    for tenant, v in sorted(counts.items(), key=lambda kv: kv[1]["rows"] - kv[1]["embedded"]):
        print(f"{stamp} {tenant}: {v['embedded']} / {v['rows']} embedded (load {load})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tenants", default="code-%", help="a LIKE pattern of the tenants to fill")
    ap.add_argument("--batch-rows", type=int, default=BATCH_ROWS)
    ap.add_argument("--status", action="store_true", help="print each tenant's embedded rows and exit")
    args = ap.parse_args()

    from ragline.shared.config.settings import get_settings
    from ragline.shared.worker.providers import get_embedder

    with db.connection() as conn:
        conn.autocommit = True  # claims are session locks; embed_rows writes in a transaction of its own
        names = tenants_like(conn, args.tenants)
        counts = vectors(names)
        show(counts)
        if args.status:
            return
        slot = reembed.take_slot(conn, reembed.fill_runners(get_settings()), extra=True)
        embedder = get_embedder()
        try:
            awaiting = {t: v["rows"] - v["embedded"] for t, v in counts.items()}
            for tenant in sorted(awaiting, key=awaiting.__getitem__):
                t0 = time.monotonic()
                n = fill_tenant(conn, embedder, tenant, args.batch_rows)
                if n:
                    print(f"{tenant}: {n} rows written in {time.monotonic() - t0:.0f} s", flush=True)
                    show({tenant: vectors([tenant])[tenant]})
        finally:
            if slot is not None:
                conn.execute(reembed.SLOT_UNLOCK_SQL, {"key": reembed.FILL_LOCK_KEY, "slot": slot})


if __name__ == "__main__":
    main()
